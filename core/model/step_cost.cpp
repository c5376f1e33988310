// StepCostModel: FLOPs and bytes of a forward pass from the model's shapes. See step_cost.h.
#include "model/step_cost.h"

#include <utility>

namespace servelab {

StepCost& StepCost::operator+=(const StepCost& other) {
  flops += other.flops;
  weight_bytes += other.weight_bytes;
  kv_read_bytes += other.kv_read_bytes;
  kv_write_bytes += other.kv_write_bytes;
  activation_bytes += other.activation_bytes;
  return *this;
}

StepCostModel::StepCostModel(ModelShape shape, std::vector<MatrixShape> projections, QuantSpec weights,
                             int64_t dtype_bytes, int64_t kv_dtype_bytes)
    : shape_(std::move(shape)),
      projections_(std::move(projections)),
      weights_(weights),
      dtype_bytes_(dtype_bytes),
      kv_dtype_bytes_(kv_dtype_bytes) {}

double StepCostModel::matrix_bytes(const QuantSpec& weights, int64_t dtype_bytes, const MatrixShape& m) {
  const double n = static_cast<double>(m.in) * static_cast<double>(m.out);
  const double rows = static_cast<double>(m.out);
  const double groups = weights.group_size > 0
                            ? rows * static_cast<double>((m.in + weights.group_size - 1) / weights.group_size)
                            : 0;
  // Dequantized once, the weights run as plain tensors in the model's dtype.
  if (weights.exec == QuantExec::DequantOnce) return n * static_cast<double>(dtype_bytes);
  // The stored layouts of quant/quantizer.h: scales and minimums are fp32.
  switch (weights.scheme) {
    case QuantScheme::None:
      return n * static_cast<double>(dtype_bytes);
    case QuantScheme::ZeroPointUint8:
      return n + 8;  // one scale and one zero point per tensor
    case QuantScheme::PerChannelInt8:
      return n + 4 * rows;
    case QuantScheme::Int4Group:
      return n / 2 + 8 * groups;  // two weights a byte; a scale and a minimum per group
    case QuantScheme::Int8Group:
      return n + 4 * groups;
    case QuantScheme::Fp16:
    case QuantScheme::Bf16:
      return 2 * n;
  }
  return n * static_cast<double>(dtype_bytes);
}

double StepCostModel::bytes_of(const MatrixShape& m) const {
  if (stored_bytes_per_weight_ > 0)
    return stored_bytes_per_weight_ * static_cast<double>(m.in) * static_cast<double>(m.out);
  return matrix_bytes(weights_, dtype_bytes_, m);
}

StepCost StepCostModel::forward(const std::vector<CostRow>& rows) const {
  StepCost c;
  double positions = 0, logit_rows = 0, context = 0, cached = 0;
  for (const CostRow& r : rows) {
    const double start = static_cast<double>(r.start);
    const double count = static_cast<double>(r.count);
    positions += count;
    logit_rows += static_cast<double>(r.logits);
    cached += start;
    // New position start + i sees start + i + 1 keys: summed over i < count.
    context += count * start + count * (count + 1) / 2;
  }
  if (positions <= 0) return c;
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  const double layers = d(shape_.n_layer);
  const double width = d(shape_.n_embd);
  const double vocab = d(shape_.vocab_size);
  double macs_per_position = 0, block_bytes = 0, projection_io = 0;
  for (const MatrixShape& m : projections_) {
    macs_per_position += d(m.in) * d(m.out);
    block_bytes += bytes_of(m);
    projection_io += d(m.in) + d(m.out);
  }
  const MatrixShape head{shape_.n_embd, shape_.vocab_size};
  const double attention_width = d(shape_.n_head) * d(shape_.head_dim);
  c.flops = 2 * positions * layers * macs_per_position + 2 * logit_rows * width * vocab +
            layers * 4 * attention_width * context;

  // Token embedding rows; GPT-2 adds a learned position embedding row per position.
  const double embedding_tables = shape_.architecture == "gpt2" ? 2 : 1;
  c.weight_bytes = layers * block_bytes + (logit_rows > 0 ? bytes_of(head) : 0) +
                   embedding_tables * positions * width * d(dtype_bytes_);

  const double kv_per_position = layers * 2 * d(shape_.n_kv_head) * d(shape_.head_dim) * d(kv_dtype_bytes_);
  c.kv_read_bytes = cached * kv_per_position;
  c.kv_write_bytes = positions * kv_per_position;

  c.activation_bytes = (positions * layers * projection_io + logit_rows * (width + vocab)) * d(dtype_bytes_);
  return c;
}

}  // namespace servelab

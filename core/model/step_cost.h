#pragma once
// FLOPs and bytes moved by a forward pass, computed from the model's shapes and the pass's rows and
// positions (the roofline's points). Torch-free: the GUI, the CLI and the tests use it directly.
//
// What is counted, per forward pass (docs/guide/roofline.md explains why):
//   FLOPs: 2 per multiply-add of every block projection for every new position, of the LM head for
//     every position that produces logits, and of attention (q k^T and the weighted sum of v) over
//     each new position's context (the cached positions and the new ones up to itself). Norms,
//     activations and softmax are O(positions x width) and left out.
//   Weight bytes: every block projection and the LM head read once (the head only when some row
//     produces logits), at the bytes per weight the quantization stores them in (scales included),
//     plus the embedding rows looked up (and GPT-2's position rows).
//   KV bytes: each row reads the keys and values of the positions cached before the pass and writes
//     those of its new positions, in every layer.
//   Activation bytes: every projection reads its input and writes its output once per new position;
//     each row producing logits writes them (vocabulary wide) from one final hidden state.
#include <cstdint>
#include <vector>

#include "model/model_shape.h"
#include "quant/quant_spec.h"

namespace servelab {

struct StepCost {
  double flops = 0;
  double weight_bytes = 0;
  double kv_read_bytes = 0;
  double kv_write_bytes = 0;
  double activation_bytes = 0;

  double bytes() const { return weight_bytes + kv_read_bytes + kv_write_bytes + activation_bytes; }
  // FLOPs per byte moved (the roofline's x); 0 when nothing moved.
  double intensity() const { return bytes() > 0 ? flops / bytes() : 0; }
  StepCost& operator+=(const StepCost& other);
};

// One row of a forward pass: a sequence computing `count` new positions after `start` cached ones,
// `logits` of which produce logits (a prompt's last chunk and a decode: 1; a chunk mid-prompt: 0).
struct CostRow {
  int64_t start = 0;
  int64_t count = 1;
  int64_t logits = 1;
};

// A weight matrix of a block: x [rows, in] -> [rows, out].
struct MatrixShape {
  int64_t in = 0, out = 0;
};

class StepCostModel {
 public:
  StepCostModel() = default;
  // projections: one block's matrices (every layer has the same); dtype_bytes: the activations' and
  // the unquantized weights' element size; kv_dtype_bytes: the KV cache's.
  StepCostModel(ModelShape shape, std::vector<MatrixShape> projections, QuantSpec weights,
                int64_t dtype_bytes, int64_t kv_dtype_bytes);

  // The cost of one forward pass over rows (empty rows cost nothing).
  StepCost forward(const std::vector<CostRow>& rows) const;
  // Bytes of a [out, in] matrix stored as weights says (an unquantized or dequantized-once one at
  // dtype_bytes).
  static double matrix_bytes(const QuantSpec& weights, int64_t dtype_bytes, const MatrixShape& m);

  // Weights kept in a layout of a file's own (a GGUF file's quantized blocks run as stored): their
  // bytes per weight as held in memory, for every matrix, instead of the quantization's.
  void set_stored_bytes_per_weight(double bytes) { stored_bytes_per_weight_ = bytes; }
  double stored_bytes_per_weight() const { return stored_bytes_per_weight_; }

  bool valid() const { return shape_.n_layer > 0; }
  const ModelShape& shape() const { return shape_; }
  const QuantSpec& weights() const { return weights_; }

 private:
  ModelShape shape_;
  std::vector<MatrixShape> projections_;
  QuantSpec weights_;
  int64_t dtype_bytes_ = 4;
  int64_t kv_dtype_bytes_ = 4;
  double stored_bytes_per_weight_ = 0;  // 0: from weights_
  double bytes_of(const MatrixShape& m) const;
};

}  // namespace servelab

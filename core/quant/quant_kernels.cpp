#include "quant/quant_kernels.h"

#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <array>

#include "model/packed_linear.h"
#include "quant/dequant_cpu.h"
#include "quant/int8_activations.h"
#include "util/errors.h"

namespace servelab {

namespace {

// The operators below are looked up by name at run time, so that the engine still builds
// against a libtorch that lacks them (the GPU machine's may be older); native_quant_available
// says beforehand whether they are there.
c10::OperatorHandle op(const char* name) { return c10::Dispatcher::singleton().findSchemaOrThrow(name, ""); }

at::Tensor call_tensor(const c10::OperatorHandle& h, std::vector<c10::IValue> stack) {
  h.callBoxed(&stack);
  return stack.at(0).toTensor();
}

int64_t bytes_of(const QuantizedTensor& t) { return t.defined() ? t.value_bytes() + t.state_bytes() : 0; }

// Shared by both kinds: the matrices by layer and slot, and the embeddings gathered row by row
// from their quantized form (only the rows a step needs are dequantized).
class QuantKernelsBase : public LinearKernels {
 public:
  QuantKernelsBase(const QuantizedMatrices& q, at::ScalarType act)
      : act_(act),
        scheme_(q.spec.scheme),
        wte_(q.token_embedding),
        wpe_(q.position_embedding),
        head_(q.head_tied ? q.token_embedding : q.head),
        tied_(q.head_tied),
        matrices_(q.layers) {
    if (!wte_.defined() || !head_.defined())
      throw InputError("quantized kernels need the embedding and the head");
  }

  at::Tensor embed(const at::Tensor& ids, const at::Tensor& positions) const override {
    at::Tensor x = wte_.gather_rows(ids, act_);
    return wpe_.defined() ? x + wpe_.gather_rows(positions, act_) : x;
  }

 protected:
  const QuantizedTensor& matrix(int64_t layer, LinearSlot s) const {
    return matrices_.at(static_cast<size_t>(layer))[static_cast<size_t>(s)];
  }
  int64_t embedding_bytes() const { return bytes_of(wte_) + bytes_of(wpe_); }
  at::Tensor flat(const at::Tensor& h) const { return h.reshape({-1, h.size(-1)}); }
  at::Tensor unflat(const at::Tensor& y, const at::Tensor& h) const {
    std::vector<int64_t> s = h.sizes().vec();
    s.back() = y.size(1);
    return y.view(s);
  }

  at::ScalarType act_;
  QuantScheme scheme_;
  QuantizedTensor wte_, wpe_, head_;
  bool tied_ = true;
  std::vector<std::array<QuantizedTensor, kLinearSlotCount>> matrices_;
};

// Just-in-time dequantization. A whole fp32 matrix per call would read the quantized bytes and
// then write and read four bytes per weight again: slower than fp32 and, for the LM head, a
// 150 MB temporary. So the weights are dequantized a few output channels at a time, into buffers
// the cache holds, right before they are multiplied: memory traffic stays at the quantized size.
// - 1 to 7 rows (decode) with AVX-512 or AVX2 active: fused_gemv_cpu, each weight dequantized in registers
//   and multiplied at once: only the quantized bytes are read, nothing is written but the output;
// - 8 to 128 rows (a batch, a short prefill) with AVX-512 or AVX2 active: fused_linear_cpu, each intra-op
//   thread dequantizing 8 channels into an L1 buffer and multiplying them by all rows with a
//   register-blocked kernel (as fast as oneDNN on its prepacked fp32 weights here);
// - otherwise blocks of channels: dequantized (in parallel) into a scratch block, then a GEMM:
//   at::mm_out on blocks of block_bytes below 8 rows (decode), oneDNN on blocks the last-level cache
//   holds for more rows.
// For per-channel int8 the scale is applied to the output instead of the weights (one conversion
// per weight, no multiply).
class JitKernels final : public QuantKernelsBase {
 public:
  JitKernels(const QuantizedMatrices& q, at::ScalarType act, int64_t block_bytes, bool int8_activations)
      : QuantKernelsBase(q, act),
        block_bytes_(block_bytes),
        int8_activations_(int8_activations && act == at::kFloat),
        onednn_(packed_linear_available(q.token_embedding.values.device(), act)) {
    if (block_bytes_ < 1) throw InputError("JIT block size must be positive");
    fuse({LinearSlot::Q, LinearSlot::K, LinearSlot::V});
    fuse({LinearSlot::Gate, LinearSlot::Up});
  }

  at::Tensor linear(int64_t layer, LinearSlot slot, const at::Tensor& x,
                    const at::Tensor& bias) const override {
    return product(matrix(layer, slot), x, bias);
  }
  at::Tensor linear_fused(int64_t layer, const std::vector<LinearSlot>& slots,
                          const at::Tensor& x) const override {
    for (const auto& [which, w] : fused_.at(static_cast<size_t>(layer)))
      if (which == slots) return product(w, x, {});
    return {};
  }
  at::Tensor lm_head(const at::Tensor& h) const override { return unflat(product(head_, flat(h), {}), h); }
  std::shared_ptr<const DecodeGemv> decode_gemv(int64_t layer,
                                                const std::vector<LinearSlot>& slots) const override {
    if (act_ != at::kFloat) return nullptr;
    // The kernel product() runs for a few rows: the integer-activation one where it takes the matrix.
    auto gemv = [&](const QuantizedTensor& w) {
      return int8_activations_ && int8_activation_supported(w) ? int8_activation_decode_gemv(w)
                                                               : DecodeGemv::of(w);
    };
    if (slots.size() == 1) return gemv(matrix(layer, slots.front()));
    for (const auto& [which, w] : fused_.at(static_cast<size_t>(layer)))
      if (which == slots) return gemv(w);
    return nullptr;
  }

  int64_t resident_bytes() const override {
    int64_t n = embedding_bytes() + (tied_ ? 0 : bytes_of(head_));
    for (const auto& m : matrices_)
      for (const auto& t : m) n += bytes_of(t);
    return n;
  }
  std::string description() const override {
    // What the bulk of the weights runs: the first quantized projection (a GGUF file may keep its
    // head in a type no kernel reads), else the head.
    const QuantizedTensor* w = &head_;
    for (const auto& m : matrices_)
      for (const auto& t : m)
        if (w->scheme == QuantScheme::None && t.defined() && t.scheme != QuantScheme::None) w = &t;
    if (w->scheme == QuantScheme::None)
      return act_ == at::kFloat && fp32_gemv_supported(w->values)
                 ? "fp32: " + std::string(isa_name(active_isa())) + " GEMV for 1-" +
                       std::to_string(kFusedGemvMaxRows) + " rows, else aten linear"
                 : "aten linear";
    const std::string blocks = std::to_string(block_bytes_ >> 10) + " KiB blocks, then a GEMM";
    if (int8_activations_ && int8_activation_supported(*w))
      return int8_activation_kernel(active_isa()) + " for int4/int8 groups of 32 at every row count, else " +
             "fused JIT dequantization";
    if (act_ != at::kFloat || !fused_dequant_supported(*w)) return "JIT dequantization in " + blocks;
    if (!fused_linear_supported(*w)) return "fused JIT dequantization in " + blocks;
    return "fused JIT dequantization (" + std::string(isa_name(active_isa())) + "): " +
           (fused_gemv_supported(*w) ? "1-" + std::to_string(kFusedGemvMaxRows) + " rows in registers, "
                                     : "") +
           (tiled_max_rows(active_isa()) >= kFusedRows
                ? std::to_string(kFusedRows) + "-" + std::to_string(tiled_max_rows(active_isa())) +
                      " rows 8 channels at a time into a GEMM kernel, "
                : std::string()) +
           "else " + blocks;
  }

 private:
  // With many rows (a batch, a prefill) the GEMM dominates. Up to tiled_max_rows (per ISA; see
  // its comment) the fused kernel runs; past it the blocks grow to what the last-level cache holds
  // and run through oneDNN, which is twice as fast as addmm on wide matrices here.
  static constexpr int64_t kBatchedRows = 8;
  static constexpr int64_t kBatchedBlockBytes = int64_t{24} << 20;
  static constexpr int64_t kFusedRows = kBatchedRows;

  at::Tensor product(const QuantizedTensor& w, const at::Tensor& x, const at::Tensor& bias) const {
    if (w.scheme == QuantScheme::None) {
      // A matrix kept in the activations' dtype (a GGUF's F32 tensors, or a block type no kernel of
      // ours reads, dequantized at load).
      if (act_ == at::kFloat && x.size(0) <= kFusedGemvMaxRows && fp32_gemv_supported(w.values)) {
        at::Tensor y = fp32_gemv_cpu(w.values, x);
        return bias.defined() ? y.add_(bias) : y;
      }
      return at::linear(x, w.values, bias);
    }
    if (int8_activations_ && int8_activation_supported(w)) {
      at::Tensor y = int8_activation_linear_cpu(w, x);
      return bias.defined() ? y.add_(bias) : y;
    }
    if (act_ == at::kFloat && x.size(0) <= kFusedGemvMaxRows && fused_gemv_supported(w)) {
      at::Tensor y = fused_gemv_cpu(w, x);
      return bias.defined() ? y.add_(bias) : y;
    }
    if (act_ == at::kFloat && x.size(0) >= kFusedRows && x.size(0) <= tiled_max_rows(active_isa()) &&
        fused_linear_supported(w)) {
      at::Tensor y = fused_linear_cpu(w, x);
      return bias.defined() ? y.add_(bias) : y;
    }
    const int64_t out = w.rows(), in = w.cols();
    const int64_t elem = static_cast<int64_t>(c10::elementSize(act_));
    const bool batched = onednn_ && x.size(0) >= kBatchedRows;
    const int64_t block_bytes = batched ? std::max(block_bytes_, kBatchedBlockBytes) : block_bytes_;
    const int64_t rows = std::max<int64_t>(16, block_bytes / (in * elem) / 16 * 16);
    const bool scale_after = w.scheme == QuantScheme::PerChannelInt8;
    const bool fused = act_ == at::kFloat && fused_dequant_supported(w);
    at::Tensor y = at::empty({x.size(0), out}, x.options());
    at::Tensor scratch = fused ? at::empty({std::min(rows, out), in}, x.options()) : at::Tensor();
    for (int64_t r0 = 0; r0 < out; r0 += rows) {
      const int64_t n = std::min(rows, out - r0);
      at::Tensor block;
      if (fused) {
        block = scratch.narrow(0, 0, n);
        dequantize_rows_cpu(w, r0, block);
      } else {
        block = scale_after ? w.values.narrow(0, r0, n).to(act_) : w.dequantize_rows(r0, r0 + n, act_);
      }
      at::Tensor dst = y.narrow(1, r0, n);
      if (batched) {
        dst.copy_(onednn_linear(x, block, {}));
      } else {
        at::mm_out(dst, x, block.t());
      }
    }
    if (scale_after) y.mul_(w.scale.to(act_));
    if (bias.defined()) y.add_(bias);
    return y;
  }

  // Matrices that read the same input, stored one after another as one matrix (the slots' own
  // matrices become row ranges of it, no copy kept): a decode step then makes one pass and one
  // parallel region for q, k and v instead of three. Only where they share a scheme, a width and
  // per-row states (the course's per-tensor uint8 has one scale per matrix).
  void fuse(const std::vector<LinearSlot>& slots) {
    fused_.resize(matrices_.size());
    for (size_t l = 0; l < matrices_.size(); ++l) {
      std::vector<const QuantizedTensor*> parts;
      for (LinearSlot slot : slots) parts.push_back(&matrices_[l][static_cast<size_t>(slot)]);
      const QuantizedTensor& first = *parts.front();
      bool same = first.scheme != QuantScheme::ZeroPointUint8;
      for (const QuantizedTensor* p : parts)
        same = same && p->defined() && p->scheme == first.scheme && p->shape.size() == 2 && !p->transposed &&
               p->cols() == first.cols() && p->group_size == first.group_size &&
               p->values.scalar_type() == first.values.scalar_type() &&
               p->values.device() == first.values.device();
      if (!same) continue;
      auto cat_rows = [&](at::Tensor QuantizedTensor::*field) {
        if (!(first.*field).defined()) return at::Tensor();
        std::vector<at::Tensor> t;
        for (const QuantizedTensor* p : parts) t.push_back(p->*field);
        return at::cat(t, 0);
      };
      QuantizedTensor all = first;
      all.values = cat_rows(&QuantizedTensor::values);
      all.scale = cat_rows(&QuantizedTensor::scale);
      all.offset = cat_rows(&QuantizedTensor::offset);
      all.shape = {0, first.cols()};
      for (LinearSlot slot : slots) {
        QuantizedTensor& m = matrices_[l][static_cast<size_t>(slot)];
        const int64_t row = all.shape[0], n = m.rows();
        m.values = all.values.narrow(0, row, n);
        if (m.scale.defined()) m.scale = all.scale.narrow(0, row, n);
        if (m.offset.defined()) m.offset = all.offset.narrow(0, row, n);
        all.shape[0] += n;
      }
      fused_[l].emplace_back(slots, std::move(all));
    }
  }

  int64_t block_bytes_;
  bool int8_activations_;  // int4/int8 groups of 32 through int8_activation_linear_cpu
  bool onednn_;            // fp32 on a CPU with oneDNN: batched products go through it
  std::vector<std::vector<std::pair<std::vector<LinearSlot>, QuantizedTensor>>> fused_;
};

// libtorch's weight-only int8 GEMM (_weight_int8pack_mm: int8 weights, a scale per channel) on the
// CPU and CUDA, torch's int4 CPU kernel, and plain half-precision GEMMs for fp16 / bf16. On the CPU
// the int8 GEMM takes bf16 activations (its fp32 path is a reference loop, about 20x slower at
// batch 1 here), so each call casts them. The CPU's int8 once ran fbgemm's dynamic linear, which
// needs quantized tensors, an API libtorch has deprecated.
class NativeKernels final : public QuantKernelsBase {
 public:
  NativeKernels(const QuantizedMatrices& q, at::ScalarType act, at::Device device)
      : QuantKernelsBase(q, act), device_(device) {
    std::string why;
    if (!native_quant_available(q.spec, device, &why))
      throw InputError("native " + q.spec.mode_name() + ": " + why);
    // Every kernel adds the model's own bias after the product.
    for (size_t l = 0; l < matrices_.size(); ++l) {
      std::array<Prepared, kLinearSlotCount> p;
      for (size_t i = 0; i < kLinearSlotCount; ++i) {
        if (!matrices_[l][i].defined()) continue;
        if (matrices_[l][i].scheme != scheme_)
          throw InputError("native " + q.spec.mode_name() + " kernels run one scheme; a matrix is " +
                           QuantSpec{matrices_[l][i].scheme}.mode_name());
        p[i] = prepare(matrices_[l][i]);
      }
      prepared_.push_back(std::move(p));
    }
    head_prepared_ = prepare(head_);
    // The prepared forms replace the matrices; only the embeddings' rows stay as they were.
    for (auto& m : matrices_)
      for (auto& t : m) t = QuantizedTensor{};
    if (!tied_) head_ = QuantizedTensor{};
  }

  at::Tensor linear(int64_t layer, LinearSlot slot, const at::Tensor& x,
                    const at::Tensor& bias) const override {
    at::Tensor y = run(prepared_.at(static_cast<size_t>(layer))[static_cast<size_t>(slot)], x);
    return bias.defined() ? y.add_(bias) : y;
  }
  at::Tensor lm_head(const at::Tensor& h) const override { return unflat(run(head_prepared_, flat(h)), h); }

  int64_t resident_bytes() const override {
    int64_t n = embedding_bytes() + head_prepared_.bytes;
    for (const auto& p : prepared_)
      for (const auto& x : p) n += x.bytes;
    return n;
  }
  std::string description() const override {
    switch (scheme_) {
      case QuantScheme::PerChannelInt8:
        return device_.is_cpu()
                   ? "weight-only int8 GEMM (aten::_weight_int8pack_mm, activations cast to bf16 "
                     "per call)"
                   : "weight-only int8 GEMM (aten::_weight_int8pack_mm)";
      case QuantScheme::Int4Group:
        return "int4 CPU kernel (aten::_weight_int4pack_mm_for_cpu)";
      case QuantScheme::Fp16:
        return "fp16 GEMM (activations cast to fp16 per call)";
      case QuantScheme::Bf16:
        return "bf16 GEMM (activations cast to bf16 per call)";
      default:
        return "?";
    }
  }

 private:
  // The activations' dtype of the int8 GEMM: bf16 on the CPU (see above), else the model's.
  at::ScalarType int8_activations_dtype() const { return device_.is_cpu() ? at::kBFloat16 : act_; }

  struct Prepared {
    at::Tensor weight;  // int8 [out, in], int4 packed, or half [out, in]
    at::Tensor scale;   // int8: [out]; int4: scales and zeros [in / g, out, 2]
    int64_t group_size = 0;
    int64_t out = 0;  // output features (int4 pads them to a multiple of 16)
    int64_t bytes = 0;
  };

  Prepared prepare(const QuantizedTensor& w) const {
    Prepared p;
    const int64_t out = w.rows(), in = w.cols();
    switch (scheme_) {
      case QuantScheme::PerChannelInt8: {
        // Our int8 values as they are (no second rounding), the scales in the activations' dtype.
        p.weight = w.values;
        p.scale = w.scale.to(int8_activations_dtype());
        p.bytes = out * in + out * static_cast<int64_t>(c10::elementSize(p.scale.scalar_type()));
        break;
      }
      case QuantScheme::Int4Group: {
        // torch's packing wants a multiple of 16 output rows (GPT-2's LM head has 50257): pad
        // with zero rows (code 0, scale 0, zero 0) and drop their outputs after the product.
        const int64_t padded = (out + 15) / 16 * 16;
        at::Tensor codes = unpack_int4(w.values).to(at::kInt);
        at::Tensor scale = w.scale, zero = w.offset + 8 * w.scale;
        if (padded != out) {
          codes = at::constant_pad_nd(codes, {0, 0, 0, padded - out});
          scale = at::constant_pad_nd(scale, {0, 0, 0, padded - out});
          zero = at::constant_pad_nd(zero, {0, 0, 0, padded - out});
        }
        p.out = out;
        p.weight = call_tensor(op("aten::_convert_weight_to_int4pack_for_cpu"), {codes, int64_t{1}});
        // torch's kernel computes (q - 8) * scale + zero; ours q * scale + min.
        p.scale = at::stack({scale.t(), zero.t()}, -1).to(act_).contiguous();
        p.group_size = w.group_size;
        p.bytes = p.weight.numel() * static_cast<int64_t>(p.weight.element_size()) +
                  p.scale.numel() * static_cast<int64_t>(p.scale.element_size());
        break;
      }
      case QuantScheme::Fp16:
      case QuantScheme::Bf16: {
        p.weight = w.values;
        p.bytes = w.value_bytes();
        break;
      }
      default:
        throw InputError("no native kernel for " + QuantSpec{scheme_}.mode_name());
    }
    return p;
  }

  at::Tensor run(const Prepared& p, const at::Tensor& x) const {
    switch (scheme_) {
      case QuantScheme::PerChannelInt8: {
        static const c10::OperatorHandle int8mm = op("aten::_weight_int8pack_mm");
        const at::ScalarType dt = int8_activations_dtype();
        return call_tensor(int8mm, {x.to(dt).contiguous(), p.weight, p.scale}).to(act_);
      }
      case QuantScheme::Int4Group: {
        static const c10::OperatorHandle int4mm = op("aten::_weight_int4pack_mm_for_cpu");
        at::Tensor y = call_tensor(int4mm, {x.contiguous(), p.weight, p.group_size, p.scale});
        return y.size(1) == p.out ? y : y.narrow(1, 0, p.out).contiguous();
      }
      default: {
        return at::mm(x.to(p.weight.scalar_type()), p.weight.t()).to(act_);
      }
    }
  }

  at::Device device_;
  std::vector<std::array<Prepared, kLinearSlotCount>> prepared_;
  Prepared head_prepared_;
};

}  // namespace

std::shared_ptr<const LinearKernels> make_jit_kernels(const QuantizedMatrices& q, at::ScalarType act,
                                                      int64_t block_bytes, bool int8_activations) {
  return std::make_shared<JitKernels>(q, act, block_bytes, int8_activations);
}

std::shared_ptr<const LinearKernels> make_native_kernels(const QuantizedMatrices& q, at::ScalarType act,
                                                         at::Device device) {
  return std::make_shared<NativeKernels>(q, act, device);
}

}  // namespace servelab

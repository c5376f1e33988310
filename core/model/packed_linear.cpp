#include "model/packed_linear.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <array>

#include "model/blocked_linear.h"
#include "util/errors.h"

namespace servelab {

namespace {

// By name, so the engine still builds against a libtorch without them (CUDA builds, old ones).
std::optional<c10::OperatorHandle> find_op(const char* name) {
  return c10::Dispatcher::singleton().findSchema({name, ""});
}

at::Tensor call_linear(const c10::OperatorHandle& op, const at::Tensor& x, const at::Tensor& w,
                       const at::Tensor& bias) {
  std::vector<c10::IValue> stack{x.contiguous(),
                                 w,
                                 bias.defined() ? c10::IValue(bias) : c10::IValue(),
                                 std::string("none"),
                                 c10::List<std::optional<at::Scalar>>(),
                                 std::optional<std::string>("")};
  op.callBoxed(&stack);
  return stack.at(0).toTensor();
}

class PackedLinearKernels final : public LinearKernels {
 public:
  explicit PackedLinearKernels(LinearMatrices& matrices)
      : reorder_(*find_op("mkldnn::_reorder_linear_weight")), linear_(*find_op("mkldnn::_linear_pointwise")) {
    for (const LinearMatrix& m : matrices.projections) {
      if (static_cast<size_t>(m.layer) >= layers_.size()) layers_.resize(static_cast<size_t>(m.layer) + 1);
      // [out, in], as oneDNN's linear takes it.
      layers_[static_cast<size_t>(m.layer)][static_cast<size_t>(m.slot)] =
          pack(m.in_out ? m.weight->t().contiguous() : m.weight->contiguous());
      *m.weight = at::Tensor();
    }
    head_ = pack(matrices.lm_head->contiguous());
    if (!matrices.lm_head_tied) *matrices.lm_head = at::Tensor();
  }

  at::Tensor linear(int64_t layer, LinearSlot slot, const at::Tensor& x,
                    const at::Tensor& bias) const override {
    return run(layers_.at(static_cast<size_t>(layer))[static_cast<size_t>(slot)], x, bias);
  }
  at::Tensor embed(const at::Tensor&, const at::Tensor&) const override {
    throw InputError("packed linear kernels leave the embeddings to the model");
  }
  bool handles_embeddings() const override { return false; }
  at::Tensor lm_head(const at::Tensor& h) const override {
    at::Tensor y = run(head_, h.reshape({-1, h.size(-1)}), at::Tensor());
    std::vector<int64_t> s = h.sizes().vec();
    s.back() = y.size(1);
    return y.view(s);
  }
  int64_t resident_bytes() const override {
    int64_t n = head_.bytes;  // when tied, a second (packed) copy of wte: the embedding keeps the plain one
    for (const auto& l : layers_)
      for (const auto& p : l) n += p.bytes;
    return n;
  }
  std::string description() const override { return "oneDNN GEMM over prepacked fp32 weights"; }
  bool holds_dense_weights() const override { return true; }
  at::Tensor dense_weight(int64_t layer, LinearSlot slot) const override {
    return layers_.at(static_cast<size_t>(layer))[static_cast<size_t>(slot)]
        .packed.to_dense()
        .t()
        .contiguous();
  }
  at::Tensor dense_lm_head() const override { return head_.packed.to_dense(); }

 private:
  struct Packed {
    at::Tensor packed;  // [out, in] in oneDNN's blocked layout
    int64_t bytes = 0;
  };

  Packed pack(const at::Tensor& out_in) const {
    std::vector<c10::IValue> stack{out_in, c10::IValue()};
    reorder_.callBoxed(&stack);
    Packed p;
    p.packed = stack.at(0).toTensor();
    p.bytes = out_in.numel() * static_cast<int64_t>(out_in.element_size());
    return p;
  }

  at::Tensor run(const Packed& p, const at::Tensor& x, const at::Tensor& bias) const {
    std::vector<c10::IValue> stack{x.contiguous(),
                                   p.packed,
                                   bias.defined() ? c10::IValue(bias) : c10::IValue(),
                                   std::string("none"),
                                   c10::List<std::optional<at::Scalar>>(),
                                   std::optional<std::string>("")};
    linear_.callBoxed(&stack);
    return stack.at(0).toTensor();
  }

  c10::OperatorHandle reorder_, linear_;
  std::vector<std::array<Packed, kLinearSlotCount>> layers_;  // by LinearSlot
  Packed head_;
};

}  // namespace

bool packed_linear_available(at::Device device, at::ScalarType dtype, std::string* why_not) {
  auto no = [&](const std::string& why) {
    if (why_not) *why_not = why;
    return false;
  };
  if (!device.is_cpu()) return no("prepacked oneDNN GEMMs are a CPU path");
  if (dtype != at::kFloat) return no("prepacked oneDNN GEMMs are wired for fp32 weights");
  if (!at::hasMKLDNN()) return no("this libtorch was built without oneDNN");
  if (!find_op("mkldnn::_reorder_linear_weight") || !find_op("mkldnn::_linear_pointwise"))
    return no("this libtorch lacks mkldnn::_reorder_linear_weight / _linear_pointwise");
  return true;
}

std::unique_ptr<Model> pack_linears_model(const Model& model) {
  std::string why;
  if (!packed_linear_available(model.device(), model.dtype(), &why)) throw InputError("onednn GEMM: " + why);
  if (model.kernels()) throw InputError("onednn GEMM: the model's matrices are already run by other kernels");
  return model.with_kernels(
      [](LinearMatrices& matrices) { return std::make_shared<PackedLinearKernels>(matrices); });
}

at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  static const c10::OperatorHandle linear = *find_op("mkldnn::_linear_pointwise");
  return call_linear(linear, x, weight, bias);
}

GemmBackend parse_gemm_backend(const std::string& name) {
  if (name == "aten") return GemmBackend::Aten;
  if (name == "onednn") return GemmBackend::OneDnn;
  if (name == "blocked") return GemmBackend::Blocked;
  if (name == "auto") return GemmBackend::Auto;
  throw InputError("unknown GEMM backend '" + name + "' (choose one of aten, onednn, blocked, auto)");
}

const char* gemm_backend_name(GemmBackend backend) {
  switch (backend) {
    case GemmBackend::Aten:
      return "aten";
    case GemmBackend::OneDnn:
      return "onednn";
    case GemmBackend::Blocked:
      return "blocked";
    case GemmBackend::Auto:
      return "auto";
  }
  return "?";
}

GemmBackend resolve_gemm_backend(GemmBackend requested, at::Device device, at::ScalarType dtype) {
  std::string why;
  switch (requested) {
    case GemmBackend::Aten:
      return GemmBackend::Aten;
    case GemmBackend::OneDnn:
      if (!packed_linear_available(device, dtype, &why)) throw InputError("--gemm onednn: " + why);
      return GemmBackend::OneDnn;
    case GemmBackend::Blocked:
      if (!blocked_linear_available(device, dtype, &why)) throw InputError("--gemm blocked: " + why);
      return GemmBackend::Blocked;
    case GemmBackend::Auto:
      break;
  }
  // Chosen at load: our kernels where the active ISA has vector kernels of ours, oneDNN's elsewhere
  // (its own JIT beats our portable loops).
  if (blocked_linear_available(device, dtype) && active_isa() != Isa::Generic) return GemmBackend::Blocked;
  if (packed_linear_available(device, dtype)) return GemmBackend::OneDnn;
  return GemmBackend::Aten;
}

std::unique_ptr<Model> with_gemm_backend(const Model& model, GemmBackend backend) {
  switch (backend) {
    case GemmBackend::OneDnn:
      return pack_linears_model(model);
    case GemmBackend::Blocked:
      return pack_blocked_model(model);
    case GemmBackend::Aten:
      break;
    case GemmBackend::Auto:
      throw InputError("apply_gemm_backend needs a resolved backend, not auto");
  }
  return model.with_kernels([](LinearMatrices&) { return nullptr; });
}

GemmBackend gemm_backend_of(const Model& model) {
  const LinearKernels* k = model.kernels();
  if (dynamic_cast<const BlockedLinearKernels*>(k)) return GemmBackend::Blocked;
  if (dynamic_cast<const PackedLinearKernels*>(k)) return GemmBackend::OneDnn;
  return GemmBackend::Aten;
}

}  // namespace servelab

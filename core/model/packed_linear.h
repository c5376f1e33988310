#pragma once
// fp32 projections and LM head as oneDNN GEMMs over weights reordered once into oneDNN's blocked
// layout (libtorch's mkldnn::_reorder_linear_weight / _linear_pointwise, what its own compiler
// uses for frozen CPU models). Batched steps gain most (bench/batching.py, bench/compare_hf.py
// with --gemm aten against --gemm onednn); the README has the figures. The default where the CPU
// has no vector ISA of ours (active_isa() generic); elsewhere our blocked layout runs (blocked_linear.h).
#include <memory>
#include <string>

#include "model/model.h"

namespace servelab {

// Whether the prepacked oneDNN linear exists in this libtorch for the model's device and dtype
// (CPU fp32 only); why not, when it does not.
bool packed_linear_available(at::Device device, at::ScalarType dtype, std::string* why_not = nullptr);

// The same model with its projections and LM head prepacked, any architecture (Model::with_kernels);
// the plain matrices are released (the embeddings stay, and dense_weights() rebuilds the rest).
// Throws InputError when packed_linear_available says no.
std::unique_ptr<Model> pack_linears_model(const Model& model);
// The same, typed as the model's own class.
template <class M>
std::unique_ptr<M> pack_linears(const M& model) {
  return std::unique_ptr<M>(static_cast<M*>(pack_linears_model(model).release()));
}

// x [rows, in] times weight [out, in] (plain, or packed by _reorder_linear_weight) plus bias,
// through oneDNN. Only where packed_linear_available says yes.
at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// GEMM backends an engine can be asked for: "aten" (addmm over the Conv1D layout), "onednn"
// (prepacked), "blocked" (our kernels over 16-channel blocks, blocked_linear.h), "auto"
// (blocked where active_isa() is avx512 or avx2, else onednn where available, else aten).
enum class GemmBackend { Aten, OneDnn, Blocked, Auto };
GemmBackend parse_gemm_backend(const std::string& name);
const char* gemm_backend_name(GemmBackend backend);
// The backend that runs for a request on this device and dtype (never Auto). An explicit onednn or
// blocked that cannot run here throws InputError saying why.
GemmBackend resolve_gemm_backend(GemmBackend requested, at::Device device, at::ScalarType dtype);
// The model with its fp32 matrices run by a resolved backend: pack_linears, pack_blocked_linears,
// or (Aten) the model over plain tensors (dense_weights()); any architecture.
std::unique_ptr<Model> with_gemm_backend(const Model& model, GemmBackend backend);
// The same, typed as the model's own class.
template <class M>
std::unique_ptr<M> apply_gemm_backend(const M& model, GemmBackend backend) {
  return std::unique_ptr<M>(static_cast<M*>(with_gemm_backend(model, backend).release()));
}
// Which backend runs a model's matrices: OneDnn or Blocked for models those packed, else Aten
// (plain tensors, or quantized kernels).
GemmBackend gemm_backend_of(const Model& model);

}  // namespace servelab

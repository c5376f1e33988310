#pragma once
// fp32 projections and LM head as oneDNN GEMMs over weights reordered once into oneDNN's blocked
// layout (libtorch's mkldnn::_reorder_linear_weight / _linear_pointwise, what its own compiler
// uses for frozen CPU models). Batched steps gain most (bench/batching.py, bench/compare_hf.py
// with --gemm aten against the default); the README has the figures.
#include <array>
#include <memory>

#include "model/gpt2_model.h"

namespace servelab {

// The four projections of a block, and the Conv1D matrix [in, out] of one of them in w.
constexpr std::array<LinearSlot, 4> kLinearSlots = {LinearSlot::Attn, LinearSlot::AttnProj, LinearSlot::Fc,
                                                    LinearSlot::MlpProj};
at::Tensor& slot_weight(Gpt2LayerWeights& w, LinearSlot slot);

// Whether the prepacked oneDNN linear exists in this libtorch for the model's device and dtype
// (CPU fp32 only); why not, when it does not.
bool packed_linear_available(at::Device device, at::ScalarType dtype, std::string* why_not = nullptr);

// The same model with its projections and LM head prepacked; the plain matrices are released
// (the embeddings stay, and dense_weights() rebuilds the rest). Throws InputError when
// packed_linear_available says no.
std::unique_ptr<Gpt2Model> pack_linears(const Gpt2Model& model);

// x [rows, in] times weight [out, in] (plain, or packed by _reorder_linear_weight) plus bias,
// through oneDNN. Only where packed_linear_available says yes.
at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);

// GEMM backends an engine can be asked for: "aten" (addmm over the Conv1D layout), "onednn"
// (prepacked), "auto" (onednn where available).
enum class GemmBackend { Aten, OneDnn, Auto };
GemmBackend parse_gemm_backend(const std::string& name);

}  // namespace servelab

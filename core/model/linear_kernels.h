#pragma once
// What runs GPT-2's weight matrices when they are not plain fp32 tensors (quantized weights,
// later adapters): the four projections of every block, the token and position embeddings and
// the LM head. Gpt2Model calls these instead of addmm / embedding when a model has them.
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace servelab {

// The weight matrices of a block, over every architecture; each architecture's projection table
// (Model::projections()) says which of them it has and what they are called.
//   GPT-2: Attn (q, k and v in one), AttnProj, Fc, MlpProj
//   Llama: Q, K, V, O, Gate, Up, Down
enum class LinearSlot { Attn, AttnProj, Fc, MlpProj, Q, K, V, O, Gate, Up, Down };
inline constexpr int kLinearSlotCount = 11;

class LinearKernels;
class DecodeGemv;  // quant/dequant_cpu.h

// A model's weight matrix handed to kernels that take it over (Model::with_kernels): kernels that
// keep it in a layout of their own reset *weight, releasing the plain copy.
struct LinearMatrix {
  int64_t layer = 0;
  LinearSlot slot{};
  at::Tensor* weight = nullptr;
  bool in_out = false;  // Conv1D's [in, out] (GPT-2's) rather than nn.Linear's [out, in]
};
// Every projection of every block, and the LM head [vocab, n_embd] (the embedding itself when tied).
struct LinearMatrices {
  std::vector<LinearMatrix> projections;
  at::Tensor* lm_head = nullptr;
  bool lm_head_tied = false;
};
// Builds kernels over a model's matrices; null leaves the model on its plain tensors.
using LinearKernelFactory = std::function<std::shared_ptr<const LinearKernels>(LinearMatrices& matrices)>;

class LinearKernels {
 public:
  virtual ~LinearKernels() = default;
  // x [rows, in] -> x W + bias, [rows, out], in the activations' dtype.
  virtual at::Tensor linear(int64_t layer, LinearSlot slot, const at::Tensor& x,
                            const at::Tensor& bias) const = 0;
  // The products of several slots of one layer that read the same input (Llama's Q, K, V; Gate,
  // Up) in one pass, side by side: [rows, the slots' outs summed], no bias. Undefined when these
  // kernels do not hold those matrices as one; the caller then runs linear() per slot.
  virtual at::Tensor linear_fused(int64_t /*layer*/, const std::vector<LinearSlot>& /*slots*/,
                                  const at::Tensor& /*x*/) const {
    return {};
  }
  // The decode product of slots of a layer (one slot, or several held as one matrix as in
  // linear_fused) for a caller that runs its own threads (model/llama_decode_program.h): the kernel
  // linear() would run for 1 to kFusedGemvMaxRows rows, so the results are the same. Null where
  // these kernels have none.
  virtual std::shared_ptr<const DecodeGemv> decode_gemv(int64_t /*layer*/,
                                                        const std::vector<LinearSlot>& /*slots*/) const {
    return nullptr;
  }
  // Whether embed() is used; false leaves the embeddings to the model's own wte / wpe tensors.
  virtual bool handles_embeddings() const { return true; }
  // Token plus position embeddings for ids and positions of the same shape: [..., n_embd].
  virtual at::Tensor embed(const at::Tensor& ids, const at::Tensor& positions) const = 0;
  // h [..., n_embd] -> logits [..., vocab].
  virtual at::Tensor lm_head(const at::Tensor& h) const = 0;
  // Bytes of weight data these kernels keep in memory.
  virtual int64_t resident_bytes() const = 0;
  // One line for reports: what computes the products.
  virtual std::string description() const = 0;
  // Kernels over the model's own fp32 weights in another layout can give them back
  // (Gpt2Model::dense_weights); quantized kernels cannot and return false.
  virtual bool holds_dense_weights() const { return false; }
  // A matrix in Conv1D layout [in, out]; the LM head [vocab, n_embd]. Only when holds_dense_weights().
  virtual at::Tensor dense_weight(int64_t layer, LinearSlot slot) const;
  virtual at::Tensor dense_lm_head() const;
};

}  // namespace servelab

#pragma once
// What runs GPT-2's weight matrices when they are not plain fp32 tensors (quantized weights,
// later adapters): the four projections of every block, the token and position embeddings and
// the LM head. Gpt2Model calls these instead of addmm / embedding when a model has them.
#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace servelab {

enum class LinearSlot { Attn, AttnProj, Fc, MlpProj };  // c_attn, attn.c_proj, c_fc, mlp.c_proj

// The module's name inside a GPT-2 block, as Hugging Face and PEFT spell it.
inline const char* linear_slot_name(LinearSlot slot) {
  switch (slot) {
    case LinearSlot::Attn:
      return "attn.c_attn";
    case LinearSlot::AttnProj:
      return "attn.c_proj";
    case LinearSlot::Fc:
      return "mlp.c_fc";
    case LinearSlot::MlpProj:
      return "mlp.c_proj";
  }
  return "?";
}

class LinearKernels {
 public:
  virtual ~LinearKernels() = default;
  // x [rows, in] -> x W + bias, [rows, out], in the activations' dtype.
  virtual at::Tensor linear(int64_t layer, LinearSlot slot, const at::Tensor& x,
                            const at::Tensor& bias) const = 0;
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

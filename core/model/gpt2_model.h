#pragma once
// GPT-2 (llama.cpp's gpt2.cpp, nanoGPT's model.py): learned position embeddings, LayerNorm with
// biases, one fused qkv projection, GELU MLP. Conv1D weights are used as [in, out] with addmm,
// exactly as Hugging Face computes them.
#include <ATen/ATen.h>

#include <memory>

#include "model/gpt2_config.h"
#include "model/gpt2_weights.h"
#include "model/model.h"

namespace servelab {

// GPT-2's projection table for a config (HF names inside "transformer.h.N.", GGUF names inside
// "blk.N."; in/out of the Conv1D matrix).
std::vector<Projection> gpt2_projections(const Gpt2Config& config);
// The module's name inside a GPT-2 block ("attn.c_attn"), as Hugging Face and PEFT spell it.
const char* gpt2_slot_name(LinearSlot slot);
ModelShape gpt2_shape(const Gpt2Config& config);

class Gpt2Model final : public Model {
 public:
  Gpt2Model(Gpt2Config config, Gpt2Weights weights);
  // A model whose matrices (embeddings, projections, LM head) are run by kernels; weights then
  // holds the LayerNorms and biases, and its matrices may be left undefined.
  Gpt2Model(Gpt2Config config, Gpt2Weights weights, std::shared_ptr<const LinearKernels> kernels);

  at::Tensor forward(const ForwardInput& in, KvCache* cache = nullptr) const override;

  const Gpt2Config& config() const { return config_; }
  // The tensors the model holds; with kernels, the matrices may be undefined here.
  const Gpt2Weights& weights() const { return weights_; }
  // Every parameter as a plain tensor, rebuilt from the kernels' layout where needed. Throws
  // InputError for a quantized model (its fp32 weights are gone).
  Gpt2Weights dense_weights() const;
  at::Device device() const override { return weights_.ln_f_weight.device(); }
  at::ScalarType dtype() const override { return weights_.ln_f_weight.scalar_type(); }
  int64_t resident_bytes() const override;
  int64_t parameter_count() const override { return weights_.parameter_count(); }
  bool lm_head_tied() const override { return weights_.lm_head_tied; }
  std::vector<std::pair<std::string, at::Tensor>> named_tensors() const override {
    return weights_.named_tensors();
  }
  nlohmann::json config_json() const override { return config_.to_json(); }
  std::unique_ptr<Model> with_kernels(const LinearKernelFactory& make) const override;

 private:
  at::Tensor attention(int64_t layer, const Gpt2LayerWeights& w, const at::Tensor& x,
                       const AttentionMask& mask, KvCache* cache, const ForwardInput& in) const;
  at::Tensor mlp(int64_t layer, const Gpt2LayerWeights& w, const at::Tensor& x, const LoraBatch* lora) const;
  at::Tensor conv1d(int64_t layer, LinearSlot slot, const at::Tensor& x, const at::Tensor& weight,
                    const at::Tensor& bias, const LoraBatch* lora) const;

  enum class Activation { GeluTanh, Gelu, Relu };
  Gpt2Config config_;
  Gpt2Weights weights_;
  Activation activation_;
};

}  // namespace servelab

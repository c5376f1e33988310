#pragma once
// The Llama family (llama.cpp's llama.cpp, gpt-fast's model.py): RMSNorm, rotary position
// embeddings, grouped-query attention, a SwiGLU MLP; matrices in nn.Linear's [out, in] layout.
#include <ATen/ATen.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/layers.h"
#include "model/llama_config.h"
#include "model/llama_decode_program.h"
#include "model/model.h"

namespace servelab {

// The projection table: HF names inside "model.layers.N.", GGUF names inside "blk.N.".
std::vector<Projection> llama_projections(const LlamaConfig& config);
inline constexpr size_t kLlamaProjections = 7;  // q, k, v, o, gate, up, down (table order)
ModelShape llama_shape(const LlamaConfig& config);
// Hugging Face's inverse frequencies for the config (rope_theta, then linear or llama3 scaling) over
// its rotary dimensions; `local`: the sliding layers' (local_rope_theta, unscaled).
at::Tensor llama_inv_freq(const LlamaConfig& config, bool local = false);

struct LlamaLayerWeights {
  at::Tensor attn_norm, mlp_norm;               // [E]
  std::array<at::Tensor, kLlamaProjections> w;  // [out, in], in projection-table order
  std::array<at::Tensor, kLlamaProjections> b;  // [out] or undefined
  at::Tensor q_norm, k_norm;                    // [head_dim] with QK-norm (Qwen3), else undefined
  // Gemma's norms after attention and after the MLP ([E]; mlp_norm is then its
  // pre_feedforward_layernorm), else undefined.
  at::Tensor post_attn_norm, post_mlp_norm;
};

struct LlamaWeights {
  at::Tensor embed;  // [vocab, E]
  std::vector<LlamaLayerWeights> layers;
  at::Tensor norm;     // [E]
  at::Tensor lm_head;  // [vocab, E]; the same storage as embed when tied
  bool lm_head_tied = false;

  // Every parameter once, with Hugging Face's names (lm_head only when untied).
  std::vector<std::pair<std::string, at::Tensor>> named_tensors() const;
  // The projections of every block ([out, in], by the table's slots) and the LM head, pointing
  // into these weights (Model::with_kernels, merge_lora).
  LinearMatrices linear_matrices();
  int64_t parameter_count() const;
  int64_t bytes() const;
};

// A tensor by its Hugging Face name, converted to the model's device and dtype, checked against
// the shape the config implies; null when the file lacks it and `optional` is set.
using LlamaTensorFetch =
    std::function<at::Tensor(const std::string& hf_name, const std::vector<int64_t>& shape, bool optional)>;
// Assembles the weights the config asks for, iterating the projection table.
LlamaWeights assemble_llama_weights(const LlamaConfig& config, const LlamaTensorFetch& fetch);

// An architecture's weight fix-ups at load (gpt-fast's load_hook): the fetch assemble_llama_weights
// calls, made from the one that reads the file (Phi-3 splits its fused qkv_proj and gate_up_proj).
using LlamaFetchHook =
    std::function<LlamaTensorFetch(const LlamaConfig& config, const LlamaTensorFetch& file)>;

// A Hugging Face folder's model.safetensors, or the shards model.safetensors.index.json lists.
LlamaWeights load_llama_safetensors(const std::string& folder, const LlamaConfig& config, at::Device device,
                                    at::ScalarType dtype, const LlamaFetchHook& hook = {});

class LlamaModel final : public Model {
 public:
  LlamaModel(LlamaConfig config, LlamaWeights weights,
             std::shared_ptr<const LinearKernels> kernels = nullptr);

  at::Tensor forward(const ForwardInput& in, KvCache* cache = nullptr) const override;

  const LlamaConfig& config() const { return config_; }
  // The model's own tensors: without the matrices that kernels hold (quantized or blocked).
  const LlamaWeights& weights() const { return weights_; }
  // Every weight as a plain tensor, the matrices given back by kernels that hold them in another
  // layout (the blocked fp32 GEMMs); InputError where the kernels hold quantized weights.
  LlamaWeights dense_weights() const;
  at::Device device() const override { return weights_.norm.device(); }
  at::ScalarType dtype() const override { return weights_.norm.scalar_type(); }
  int64_t resident_bytes() const override;
  int64_t parameter_count() const override { return config_.num_parameters(); }
  bool lm_head_tied() const override { return weights_.lm_head_tied; }
  std::vector<std::pair<std::string, at::Tensor>> named_tensors() const override {
    return weights_.named_tensors();
  }
  nlohmann::json config_json() const override { return config_.to_json(); }
  std::unique_ptr<Model> with_kernels(const LinearKernelFactory& make) const override;
  std::string fused_decode_unavailable() const override;
  int64_t fused_decode_steps() const override { return program_ ? program_->steps() : 0; }

 private:
  at::Tensor proj(int64_t layer, size_t index, const at::Tensor& x, const LoraBatch* lora) const;
  // Projections k0 .. k0 + n - 1 of the table over the same x (q, k, v; gate, up).
  std::vector<at::Tensor> projs(int64_t layer, size_t k0, size_t n, const at::Tensor& x,
                                const LoraBatch* lora) const;
  at::Tensor attention(int64_t layer, const at::Tensor& x, const AttentionMask& mask, KvCache* cache,
                       const ForwardInput& in, const at::Tensor& positions) const;
  at::Tensor mlp(int64_t layer, const at::Tensor& x, const LoraBatch* lora) const;
  // RMSNorm with the config's weight convention (Gemma's 1 + w).
  at::Tensor norm(const at::Tensor& x, const at::Tensor& weight) const;

  LlamaConfig config_;
  LlamaWeights weights_;
  RotaryEmbedding rope_;
  // The decode step as one program on the CPU, or null with the reason.
  std::shared_ptr<const LlamaDecodeProgram> program_;
  std::string program_why_not_;
  RotaryEmbedding local_rope_;  // the sliding layers' (Gemma 3's rope_local_base_freq), if another
};

}  // namespace servelab

#pragma once
// GPT-2 parameters as libtorch tensors, in Hugging Face's Conv1D layout (weights are [in, out]).
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "model/gpt2_config.h"
#include "model/linear_kernels.h"

namespace servelab {

struct Gpt2LayerWeights {
  at::Tensor ln_1_weight, ln_1_bias;
  at::Tensor c_attn_weight, c_attn_bias;  // [n_embd, 3 n_embd], [3 n_embd]
  at::Tensor c_proj_weight, c_proj_bias;  // [n_embd, n_embd]
  at::Tensor ln_2_weight, ln_2_bias;
  at::Tensor c_fc_weight, c_fc_bias;          // [n_embd, inner]
  at::Tensor mlp_proj_weight, mlp_proj_bias;  // [inner, n_embd]
};

struct Gpt2Weights {
  at::Tensor wte;  // [vocab, n_embd]
  at::Tensor wpe;  // [n_positions, n_embd]
  std::vector<Gpt2LayerWeights> layers;
  at::Tensor ln_f_weight, ln_f_bias;
  at::Tensor lm_head;  // [vocab, n_embd]; the same storage as wte when tied
  bool lm_head_tied = true;

  // Every named parameter once (lm_head only when untied), HF names with "transformer." prefix.
  std::vector<std::pair<std::string, at::Tensor>> named_tensors() const;
  // Of the tensors held (a quantized model leaves its matrices undefined here).
  std::int64_t parameter_count() const;
  std::int64_t bytes() const;
  // The projections of every block (Conv1D [in, out]) and the LM head, pointing into these weights
  // (Model::with_kernels, merge_lora).
  LinearMatrices linear_matrices();
};

// Reads model.safetensors of a Hugging Face GPT-2 folder. Both key layouts are accepted: with the
// "transformer." prefix (save_pretrained today) and without it, with attn.bias/attn.masked_bias
// buffers (the original gpt2 upload). Shapes are checked against the config.
Gpt2Weights load_gpt2_weights(const std::string& safetensors_path, const Gpt2Config& config,
                              at::Device device, at::ScalarType dtype);

// The built-in demo model: seeded N(0, 0.02) init as HF does (residual projections scaled by
// 1/sqrt(2 n_layer)), LayerNorms at identity. Deterministic for a given seed and libtorch.
Gpt2Weights make_random_gpt2_weights(const Gpt2Config& config, std::uint64_t seed, at::Device device,
                                     at::ScalarType dtype);

// Writes the weights as an HF-loadable model.safetensors (fp32 or the weights' dtype).
void save_gpt2_weights(const Gpt2Weights& weights, const std::string& safetensors_path);

}  // namespace servelab

#pragma once
// The hyperparameters of a GPT-2 family model, as Hugging Face's config.json gives them.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace servelab {

struct Gpt2Config {
  int64_t vocab_size = 50257;
  int64_t n_positions = 1024;
  int64_t n_embd = 768;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_inner = 0;  // 0 => 4 * n_embd (config.json says null)
  double layer_norm_epsilon = 1e-5;
  std::string activation_function = "gelu_new";
  int64_t bos_token_id = 50256;  // -1 when config.json says null
  int64_t eos_token_id = 50256;  // -1 when config.json says null
  bool scale_attn_weights = true;
  bool scale_attn_by_inverse_layer_idx = false;
  bool reorder_and_upcast_attn = false;
  std::string model_type = "gpt2";

  int64_t inner_dim() const;  // width of the MLP's hidden layer
  int64_t head_dim() const;   // n_embd / n_head
  // Parameters of GPT2LMHeadModel with lm_head tied to wte, counted as Hugging Face's
  // model.num_parameters() does (gpt2 small = 124,439,808); attention mask buffers are not parameters.
  int64_t num_parameters() const;

  static Gpt2Config gpt2_small();
  // HF-style config.json content; gpt2_config_from_json(to_json()) gives back the same config.
  nlohmann::json to_json() const;

  bool operator==(const Gpt2Config&) const = default;
};

// Reads an HF config.json of the GPT-2 family (PATH may also be the folder that holds it).
// Throws ModelFormatError naming the path and the key or value at fault.
Gpt2Config parse_gpt2_config(const std::string& path);
// The same checks on JSON already in memory; `source_name` names it in error messages.
Gpt2Config gpt2_config_from_json(const nlohmann::json& json, const std::string& source_name);

}  // namespace servelab

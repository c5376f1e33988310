#pragma once
// The hyperparameters of a model that runs on LlamaModel (Hugging Face model_type llama, mistral,
// qwen2, qwen3, gemma2, gemma3_text, phi3), from config.json or from a GGUF file's metadata.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace servelab {

struct RopeScaling {
  std::string type;  // "" (none), "linear" or "llama3"
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_context = 8192;                       // llama3: original_max_position_embeddings
  // Per-frequency divisors llama.cpp stores as rope_freqs.weight (its form of llama3 scaling);
  // empty when none.
  std::vector<double> freq_factors;
};

struct LlamaConfig {
  std::string model_type = "llama";
  // The registry's record that reads it (ModelShape::architecture): "llama", "qwen3".
  std::string architecture = "llama";
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t n_layer = 32;
  int64_t n_head = 32;
  int64_t n_kv_head = 32;
  int64_t head_dim = 128;
  int64_t context = 2048;  // max_position_embeddings
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q, k, v (and o unless qwen2) carry biases
  bool o_bias = false;
  bool mlp_bias = false;
  // Qwen3's QK-norm: an RMSNorm over each head's head_dim on q and k before the rotary embedding.
  bool qk_norm = false;
  // Sliding-window attention (Mistral's sliding_window, Qwen2's use_sliding_window, Phi-3, Gemma's
  // local layers): a query at position i sees keys at positions j with i - j < sliding_window
  // (itself included), as transformers' sliding_window_overlay; 0: every earlier position.
  int64_t sliding_window = 0;
  // Per layer, whether it slides (Gemma's layer_types); empty: every layer when sliding_window is set.
  std::vector<bool> sliding_layers;
  // The rotary base of the sliding layers (Gemma 3's rope_local_base_freq); 0: rope_theta.
  double local_rope_theta = 0;
  // Leading dimensions of each head the rotary embedding turns (Phi's partial_rotary_factor);
  // 0: all of head_dim.
  int64_t rotary_dim = 0;
  // Gemma: RMSNorm as x * (1 + w) (Hugging Face stores w, zero-centred), norms after attention and
  // after the MLP as well as before (post_attention_layernorm, pre_ and post_feedforward_layernorm),
  // the embedding scaled by sqrt(hidden_size).
  bool gemma_norms = false;
  // "silu" (SwiGLU) or "gelu_pytorch_tanh" (Gemma's GeGLU), on the gate.
  std::string hidden_act = "silu";
  // Attention scores scaled by query_pre_attn_scalar^-0.5 (Gemma); 0: head_dim^-0.5.
  double query_pre_attn_scalar = 0;
  // Gemma 2's soft-capping: cap * tanh(x / cap) of the attention scores and of the final logits;
  // 0: none.
  double attn_logit_softcap = 0, final_logit_softcap = 0;
  // Whether a GGUF file of this architecture stores Q and K rows permuted per head (llama.cpp's
  // converter does so for llama, whose rope it runs interleaved; not for qwen2/qwen3).
  bool gguf_qk_permuted = true;
  // Whether a GGUF file of this architecture stores its (1 + w) norms' weights as 1 + w (llama.cpp's
  // Gemma converters do, for its plain x * w RMSNorm): the loaders subtract the 1 again.
  bool gguf_norms_plus_one = false;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  int64_t eos_token_id() const { return eos_token_ids.empty() ? -1 : eos_token_ids.front(); }
  // The window of a layer's attention (0: none).
  int64_t window_of(int64_t layer) const {
    if (sliding_window <= 0) return 0;
    if (sliding_layers.empty()) return sliding_window;
    return sliding_layers[static_cast<size_t>(layer)] ? sliding_window : 0;
  }
  // Parameters as Hugging Face's num_parameters() counts them (a tied head once).
  int64_t num_parameters() const;
  // HF-style config.json content (model_type "llama").
  nlohmann::json to_json() const;
};

// Reads an HF config.json of the Llama family (PATH may be its folder). ModelFormatError naming the
// path and the key or value at fault, and naming unsupported features (rope scaling types other
// than linear and llama3, activations other than silu).
LlamaConfig parse_llama_config(const std::string& path);
LlamaConfig llama_config_from_json(const nlohmann::json& json, const std::string& source_name);
// The same without the check of model_type (an architecture's own reader calls it for the keys it
// shares with Llama, then sets what differs); read_llama_family_json reads the file.
LlamaConfig llama_family_config_from_json(const nlohmann::json& json, const std::string& source_name);
nlohmann::json read_llama_family_json(const std::string& path, std::string* file);
// config.json at `path` read by the shared reader, refused unless its model_type is `model_type`,
// its record named `architecture` (Qwen3's and Phi-3's readers, which then set what differs).
LlamaConfig llama_family_config_of_type(const std::string& path, const std::string& model_type,
                                        const std::string& architecture);

// The model_type of a config.json ("gpt2", "llama", ...), ModelFormatError when unreadable.
std::string read_model_type(const std::string& folder);

}  // namespace servelab

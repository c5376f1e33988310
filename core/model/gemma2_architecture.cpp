// Gemma 2 (transformers' Gemma2ForCausalLM, llama.cpp's src/models/gemma2-iswa.cpp): the Llama block
// with Gemma's RMSNorm, x * (1 + w), a norm before and after attention and before and after the MLP
// (input_layernorm, post_attention_layernorm, pre_feedforward_layernorm,
// post_feedforward_layernorm), the embedding scaled by sqrt(hidden_size), a GeGLU MLP
// (gelu_pytorch_tanh on the gate), scores scaled by query_pre_attn_scalar^-0.5, attention and final
// logit soft-capping, and sliding-window layers alternating with global ones (layer_types; the even
// layers slide). It runs on LlamaModel: this file is its config readers (config.json and GGUF), the
// parts of them Gemma 3 shares, and its registration.
#include "model/gguf_file.h"
#include "model/llama_family.h"
#include "model/llama_gguf.h"
#include "util/errors.h"

namespace servelab {

namespace {

using nlohmann::json;

double optional_positive(const json& j, const char* key, double fallback, const std::string& file) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number() || !(it->get<double>() > 0))
    throw ModelFormatError("config.json at " + file + ": key \"" + key +
                           "\" must be a positive number, got " + it->dump());
  return it->get<double>();
}

LlamaConfig gemma2_config(const std::string& path) {
  std::string file;
  json j = read_llama_family_json(path, &file);
  if (read_model_type(path) != "gemma2")
    throw ModelFormatError("config.json at " + file + ": model_type is not gemma2");
  if (!j.contains("layer_types") || j["layer_types"].is_null()) {
    // transformers' Gemma2Config default: even layers slide, odd ones are global.
    json types = json::array();
    for (int64_t l = 0; l < json_int_or(j, "num_hidden_layers", 0); ++l)
      types.push_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
  LlamaConfig c = gemma_family_config(j, file);
  c.architecture = "gemma2";
  return c;
}

}  // namespace

int64_t json_int_or(const json& j, const char* key, int64_t fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

LlamaConfig gemma_family_config(const json& source, const std::string& file) {
  json j = source;
  if (const auto b = j.find("use_bidirectional_attention"); b != j.end() && b->is_boolean() && b->get<bool>())
    throw ModelFormatError("config.json at " + file +
                           ": use_bidirectional_attention (an encoder's attention) is not supported");
  // Gemma names its activation hidden_activation (transformers ignores hidden_act for it).
  if (j.contains("hidden_activation") && !j["hidden_activation"].is_null())
    j["hidden_act"] = j["hidden_activation"];
  else
    j["hidden_act"] = "gelu_pytorch_tanh";
  if (!j.contains("tie_word_embeddings")) j["tie_word_embeddings"] = true;
  LlamaConfig c = llama_family_config_from_json(j, file);
  c.gemma_norms = true;
  c.query_pre_attn_scalar = optional_positive(j, "query_pre_attn_scalar", 256.0, file);
  c.attn_logit_softcap = optional_positive(j, "attn_logit_softcapping", 0.0, file);
  c.final_logit_softcap = optional_positive(j, "final_logit_softcapping", 0.0, file);
  return c;
}

LlamaConfig gemma_family_config_from_gguf(const GgufFile& f, const std::string& arch, int64_t pattern,
                                          int64_t layers_27b) {
  LlamaConfig c = llama_family_config_from_gguf(f, arch);
  c.gemma_norms = true;
  c.gguf_norms_plus_one = true;
  c.gguf_qk_permuted = false;
  c.hidden_act = "gelu_pytorch_tanh";
  c.query_pre_attn_scalar =
      static_cast<double>(c.n_layer == layers_27b ? c.hidden_size / c.n_head : c.head_dim);
  const auto non_negative = [&](const std::string& key) {
    const double v = f.find_float(key).value_or(0.0);
    if (!(v >= 0)) throw ModelFormatError(f.path() + ": " + key + " must not be negative");
    return v;
  };
  c.attn_logit_softcap = non_negative(arch + ".attn_logit_softcapping");
  c.final_logit_softcap = non_negative(arch + ".final_logit_softcapping");
  const int64_t window = f.find_int(arch + ".attention.sliding_window").value_or(0);
  if (window < 0) throw ModelFormatError(f.path() + ": " + arch + ".attention.sliding_window is negative");
  if (window > 0) {
    if (const auto p = f.find_int(arch + ".attention.sliding_window_pattern")) pattern = *p;
    if (pattern < 1)
      throw ModelFormatError(f.path() + ": " + arch + ".attention.sliding_window_pattern must be positive");
    c.sliding_window = window;
    for (int64_t l = 0; l < c.n_layer; ++l) c.sliding_layers.push_back((l + 1) % pattern != 0);
  }
  return c;
}

Architecture gemma2_architecture() {
  // Gemma 2 alternates sliding and global layers; its 27B model has 46 layers.
  Architecture a = llama_family_architecture(
      gemma2_config, [](const GgufFile& f) { return gemma_family_config_from_gguf(f, "gemma2", 2, 46); });
  a.name = "gemma2";
  a.display = "Gemma 2";
  a.model_types = {"gemma2"};
  a.gguf_architectures = {"gemma2"};
  return a;
}

}  // namespace servelab

// Gemma 3's text model (transformers' Gemma3ForCausalLM, model_type gemma3_text; llama.cpp's
// src/models/gemma3-iswa.cpp): Gemma 2's block (gemma2_architecture.cpp) with QK-norm (Gemma's
// 1 + w RMSNorm over each head's q and k before the rotary embedding), no soft-capping by default,
// one global layer in every sliding_window_pattern (6) and the others sliding, and two rotary bases:
// rope_theta (with any rope scaling) for the global layers, rope_local_base_freq for the sliding
// ones. It runs on LlamaModel: this file is its config readers (config.json and GGUF) and its
// registration.
#include "model/gguf_file.h"
#include "model/llama_family.h"
#include "util/errors.h"

namespace servelab {

namespace {

using nlohmann::json;

LlamaConfig gemma3_config(const std::string& path) {
  std::string file;
  json j = read_llama_family_json(path, &file);
  if (read_model_type(path) != "gemma3_text")
    throw ModelFormatError("config.json at " + file + ": model_type is not gemma3_text");
  auto fail = [&](const std::string& what) -> void {
    throw ModelFormatError("config.json at " + file + ": " + what);
  };
  if (!j.contains("layer_types") || j["layer_types"].is_null()) {
    // transformers' Gemma3TextConfig default: every sliding_window_pattern-th layer is global.
    const int64_t pattern = json_int_or(j, "sliding_window_pattern", 6);
    if (pattern < 1) fail("sliding_window_pattern must be a positive integer");
    json types = json::array();
    for (int64_t l = 0; l < json_int_or(j, "num_hidden_layers", 0); ++l)
      types.push_back((l + 1) % pattern != 0 ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
  // transformers 5 writes rope_parameters per layer type; older configs rope_theta, rope_scaling and
  // rope_local_base_freq.
  double local_theta = 10000.0;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
      j["rope_parameters"].contains("full_attention")) {
    const json rope = j["rope_parameters"];
    j["rope_parameters"] = rope["full_attention"];
    if (const auto s = rope.find("sliding_attention"); s != rope.end() && s->is_object()) {
      const auto t = s->find("rope_type");
      const std::string type = t != s->end() && t->is_string() ? t->get<std::string>() : "default";
      if (type != "default")
        fail("rope type \"" + type + "\" of the sliding layers is not supported (supported: default)");
      if (const auto theta = s->find("rope_theta"); theta != s->end() && theta->is_number())
        local_theta = theta->get<double>();
    }
  } else if (j.contains("rope_local_base_freq") && j["rope_local_base_freq"].is_number()) {
    local_theta = j["rope_local_base_freq"].get<double>();
  }
  if (!(local_theta > 0)) fail("the sliding layers' rope_theta must be positive");
  LlamaConfig c = gemma_family_config(j, file);
  c.architecture = "gemma3";
  c.qk_norm = true;
  c.local_rope_theta = local_theta;
  return c;
}

// llama.cpp's reading of a gemma3 file: Gemma 2's (gemma_family_config_from_gguf), one global layer
// in six, QK-norm, and the sliding layers' rotary base 10000 unless the file names another.
LlamaConfig gemma3_gguf_config(const GgufFile& f) {
  LlamaConfig c = gemma_family_config_from_gguf(f, "gemma3", 6, 62);  // 27B: 62 layers
  c.qk_norm = true;
  c.local_rope_theta = f.find_float("gemma3.rope.freq_base_swa").value_or(10000.0);
  if (!(c.local_rope_theta > 0))
    throw ModelFormatError(f.path() + ": gemma3.rope.freq_base_swa must be positive");
  return c;
}

}  // namespace

Architecture gemma3_architecture() {
  Architecture a = llama_family_architecture(gemma3_config, gemma3_gguf_config);
  a.name = "gemma3";
  a.display = "Gemma 3";
  a.model_types = {"gemma3_text"};
  a.gguf_architectures = {"gemma3"};
  return a;
}

}  // namespace servelab

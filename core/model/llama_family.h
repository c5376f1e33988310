#pragma once
// The hooks every architecture that runs on LlamaModel shares (Llama, Mistral, Qwen2, Qwen3): a
// record filled from its config readers, which its own file then names (llama_architecture.cpp,
// qwen3_architecture.cpp).
#include <functional>
#include <string>

#include "model/architecture.h"
#include "model/llama_config.h"
#include "model/llama_model.h"

namespace servelab {

class GgufFile;

// read_config: config.json (its path) to a LlamaConfig; read_gguf_config: a GGUF file's metadata to
// one, empty when the architecture has no GGUF loader yet; hook: its weight fix-ups when a folder
// loads (llama_model.h), empty for none.
Architecture llama_family_architecture(std::function<LlamaConfig(const std::string& config_json)> read_config,
                                       std::function<LlamaConfig(const GgufFile& file)> read_gguf_config,
                                       LlamaFetchHook hook = {});

// Gemma 2 and Gemma 3's shared config.json keys (gemma2_architecture.cpp): a Llama-family config with
// Gemma's norms, activation, attention scale and soft-capping; `j` as the architecture's own reader
// prepared it (its layer_types filled in, its rope entries in Llama's form).
LlamaConfig gemma_family_config(const nlohmann::json& j, const std::string& file);
// Gemma 2 and Gemma 3's shared GGUF metadata (gemma2_architecture.cpp), read as llama.cpp reads it:
// norms stored as 1 + w, Q and K not permuted, scores scaled by head_dim^-0.5 (the file keeps no
// query_pre_attn_scalar; llama.cpp uses hidden_size / heads for the 27B models, which it knows by
// their layer count, `layers_27b`), soft-capping and the window from `arch.*`, and every
// `pattern`-th layer global (`arch.attention.sliding_window_pattern` where the file has it).
LlamaConfig gemma_family_config_from_gguf(const GgufFile& file, const std::string& arch, int64_t pattern,
                                          int64_t layers_27b);
// An integer key of a config.json object, `fallback` when absent, null or not an integer (the
// readers that fill in defaults before the shared reader checks the keys).
int64_t json_int_or(const nlohmann::json& j, const char* key, int64_t fallback);

}  // namespace servelab

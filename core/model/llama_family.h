#pragma once
// The hooks every architecture that runs on LlamaModel shares (Llama, Mistral, Qwen2, Qwen3): a
// record filled from its config readers, which its own file then names (llama_architecture.cpp,
// qwen3_architecture.cpp).
#include <functional>
#include <string>

#include "model/architecture.h"
#include "model/llama_config.h"

namespace servelab {

class GgufFile;

// read_config: config.json (its path) to a LlamaConfig; read_gguf_config: a GGUF file's metadata to
// one, empty when the architecture has no GGUF loader yet.
Architecture llama_family_architecture(std::function<LlamaConfig(const std::string& config_json)> read_config,
                                       std::function<LlamaConfig(const GgufFile& file)> read_gguf_config);

}  // namespace servelab

#pragma once
// The tokenizer a GGUF file carries in its tokenizer.ggml.* metadata.
#include <memory>

#include "model/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace servelab {

// Byte-level BPE vocabularies (tokenizer.ggml.model "gpt2": GPT-2, Llama 3, SmolLM, Qwen 2) with
// the pre-tokenizer tokenizer.ggml.pre names, and SentencePiece vocabularies (model "llama":
// Llama 2, TinyLlama, Mistral v0.1) run by libsentencepiece; TokenizerError naming the file and the
// key for anything else.
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufFile& file);

}  // namespace servelab

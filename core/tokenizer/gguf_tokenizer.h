#pragma once
// The tokenizer a GGUF file carries in its tokenizer.ggml.* metadata.
#include <memory>

#include "model/gguf_file.h"
#include "tokenizer/tokenizer.h"

namespace servelab {

// Byte-level BPE vocabularies (tokenizer.ggml.model "gpt2": GPT-2, Llama 3, SmolLM, Qwen 2) with
// the pre-tokenizer tokenizer.ggml.pre names; TokenizerError naming the file and the key for
// anything else (SentencePiece vocabularies, model "llama", are not read from GGUF yet).
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufFile& file);

}  // namespace servelab

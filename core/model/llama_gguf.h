#pragma once
// A Llama-family model out of a GGUF file (llama.cpp's "llama" architecture): the config from the
// llama.* metadata, the weights dequantized from any block type the reader knows, with llama.cpp's
// Q/K row permutation undone so that Hugging Face's rotate-half RoPE applies.
#include <ATen/ATen.h>

#include <map>
#include <string>

#include "model/gguf_file.h"
#include "model/llama_config.h"
#include "model/llama_model.h"

namespace servelab {

// ModelFormatError naming the file and key for a missing or inconsistent value.
LlamaConfig llama_config_from_gguf(const GgufFile& file);
// The same for another architecture on LlamaModel whose file has general.architecture `arch` and
// keys under "arch." (its record then sets what differs, e.g. Qwen3's qk_norm).
// partial_rotary: a rope.dimension_count below the head's is Phi's partial rotary embedding
// (rotary_dim); otherwise it is refused.
LlamaConfig llama_family_config_from_gguf(const GgufFile& file, const std::string& arch,
                                          bool partial_rotary = false);

// hook: the architecture's fix-ups of the weights as read (llama_model.h), e.g. Phi-3's fused
// matrices split into Llama's; empty for none.
LlamaWeights load_llama_gguf(const GgufFile& file, const LlamaConfig& config, at::Device device,
                             at::ScalarType dtype, const LlamaFetchHook& hook = {});
// A plain (1-D) tensor of a GGUF file as the model wants it: the norms of a file that stores 1 + w
// (LlamaConfig::gguf_norms_plus_one) given back as w.
at::Tensor llama_gguf_plain_tensor(const GgufTensor& tensor, const LlamaConfig& config, at::Tensor w);

// The GGUF tensor that holds a Hugging Face name, checked against the shape the config implies;
// nullptr when absent and optional, ModelFormatError naming the file and tensor otherwise.
const GgufTensor* find_llama_gguf_tensor(const GgufFile& file, const LlamaConfig& config,
                                         const std::string& hf_name, const std::vector<int64_t>& shape,
                                         bool optional);
// The heads of an attention Q or K matrix, whose rows llama.cpp permuted; 0 for any other tensor.
int64_t llama_gguf_rope_heads(const GgufTensor& tensor, const LlamaConfig& config);

// llama.cpp's converter stores Q and K with the two halves of every head interleaved (rows 2i and
// 2i+1 hold Hugging Face's rows i and i + head_dim / 2); this puts them back. w: [heads * head_dim, ...].
at::Tensor unpermute_rope_rows(const at::Tensor& w, int64_t heads);

}  // namespace servelab

// Qwen3 (transformers' Qwen3ForCausalLM, llama.cpp's src/models/qwen3.cpp): the Llama block with
// QK-norm, an RMSNorm over each head's head_dim on q and k before the rotary embedding
// (self_attn.q_norm / self_attn.k_norm; attn_q_norm / attn_k_norm in llama.cpp's names), no q/k/v
// biases unless attention_bias says so, head_dim given by the config. It runs on LlamaModel: this
// file is its config reader and its registration.
#include "model/gguf_file.h"
#include "model/llama_family.h"
#include "model/llama_gguf.h"
#include "util/errors.h"

namespace servelab {

namespace {

LlamaConfig qwen3_config(const std::string& path) {
  LlamaConfig c = llama_family_config_of_type(path, "qwen3", "qwen3");
  c.qk_norm = true;
  return c;
}

// llama.cpp's qwen3: qwen3.* keys, attn_q_norm / attn_k_norm, Q and K rows as Hugging Face stores
// them (llama.cpp runs Qwen's rope in the NeoX order, so its converter does not permute them).
LlamaConfig qwen3_gguf_config(const GgufFile& file) {
  LlamaConfig c = llama_family_config_from_gguf(file, "qwen3");
  c.qk_norm = true;
  c.gguf_qk_permuted = false;
  return c;
}

}  // namespace

Architecture qwen3_architecture() {
  Architecture a = llama_family_architecture(qwen3_config, qwen3_gguf_config);
  a.name = "qwen3";
  a.display = "Qwen3";
  a.model_types = {"qwen3"};
  a.gguf_architectures = {"qwen3"};
  return a;
}

}  // namespace servelab

#include "model/llama_gguf.h"

#include "model/tensor_from_file.h"
#include "util/errors.h"

namespace servelab {

LlamaConfig llama_config_from_gguf(const GgufFile& f) { return llama_family_config_from_gguf(f, "llama"); }

LlamaConfig llama_family_config_from_gguf(const GgufFile& f, const std::string& expected,
                                          bool partial_rotary) {
  const std::string arch = f.get_string("general.architecture");
  if (arch != expected)
    throw ModelFormatError(f.path() + ": general.architecture is \"" + arch + "\", not " + expected);
  auto key = [&](const char* k) { return arch + "." + k; };
  auto positive = [&](const std::string& k, std::optional<int64_t> fallback = std::nullopt) {
    std::optional<int64_t> v = f.find_int(k);
    if (!v) {
      if (!fallback) throw ModelFormatError(f.path() + ": missing key " + k);
      return *fallback;
    }
    if (*v <= 0 || *v > (int64_t{1} << 40))
      throw ModelFormatError(f.path() + ": " + k + " must be positive, got " + std::to_string(*v));
    return *v;
  };
  LlamaConfig c;
  c.model_type = arch;
  c.architecture = arch;
  c.n_layer = positive(key("block_count"));
  c.hidden_size = positive(key("embedding_length"));
  c.intermediate_size = positive(key("feed_forward_length"));
  c.n_head = positive(key("attention.head_count"));
  c.n_kv_head = positive(key("attention.head_count_kv"), c.n_head);
  if (c.n_head % c.n_kv_head != 0)
    throw ModelFormatError(f.path() + ": " + std::to_string(c.n_head) + " heads are not a multiple of " +
                           std::to_string(c.n_kv_head) + " KV heads");
  c.head_dim = positive(key("attention.key_length"), c.hidden_size / c.n_head);
  if (const auto rot = f.find_int(key("rope.dimension_count")); rot && *rot != c.head_dim) {
    if (!partial_rotary || *rot <= 0 || *rot > c.head_dim || *rot % 2 != 0)
      throw ModelFormatError(f.path() + ": rope over " + std::to_string(*rot) + " of " +
                             std::to_string(c.head_dim) + " head dimensions" +
                             (partial_rotary ? " (it must be even and at most the head's)"
                                             : " (partial rotary embeddings) is not supported for " + arch));
    c.rotary_dim = *rot;
  }
  c.context = positive(key("context_length"), 2048);
  c.rms_norm_eps = f.find_float(key("attention.layer_norm_rms_epsilon")).value_or(1e-5);
  c.rope_theta = f.find_float(key("rope.freq_base")).value_or(10000.0);
  if (const auto type = f.find_string(key("rope.scaling.type")); type && *type != "none") {
    if (*type != "linear")
      throw ModelFormatError(f.path() + ": " + key("rope.scaling.type") + " \"" + *type +
                             "\" is not supported (supported: none, linear)");
    c.rope_scaling.type = "linear";
    c.rope_scaling.factor = f.find_float(key("rope.scaling.factor")).value_or(1.0);
  }
  if (const GgufTensor* freqs = f.find("rope_freqs.weight")) {
    const std::vector<float> v = gguf_dequantize(*freqs);
    if (static_cast<int64_t>(v.size()) != c.head_dim / 2)
      throw ModelFormatError(f.path() + ": rope_freqs.weight has " + std::to_string(v.size()) +
                             " values, expected " + std::to_string(c.head_dim / 2));
    c.rope_scaling.freq_factors.assign(v.begin(), v.end());
  }
  const GgufTensor& embd = f.at("token_embd.weight");
  c.vocab_size = embd.shape().front();
  if (const auto v = f.find_int(key("vocab_size")); v && *v != c.vocab_size)
    throw ModelFormatError(f.path() + ": " + key("vocab_size") + " is " + std::to_string(*v) +
                           " but token_embd.weight has " + std::to_string(c.vocab_size) + " rows");
  c.tie_word_embeddings = f.find("output.weight") == nullptr;
  c.attention_bias = f.find("blk.0.attn_q.bias") != nullptr;
  c.o_bias = f.find("blk.0.attn_output.bias") != nullptr;
  c.mlp_bias = f.find("blk.0.ffn_up.bias") != nullptr;
  if (const auto b = f.find_int("tokenizer.ggml.bos_token_id")) c.bos_token_id = *b;
  if (const auto e = f.find_int("tokenizer.ggml.eos_token_id")) c.eos_token_ids = {*e};
  // llama.cpp's end-of-turn token ends generation too.
  if (const auto e = f.find_int("tokenizer.ggml.eot_token_id"); e && *e != c.eos_token_id())
    c.eos_token_ids.push_back(*e);
  return c;
}

at::Tensor unpermute_rope_rows(const at::Tensor& w, int64_t heads) {
  const int64_t rows = w.size(0), half = rows / heads / 2;
  std::vector<int64_t> shape = {heads, half, 2};
  for (int64_t d = 1; d < w.dim(); ++d) shape.push_back(w.size(d));
  return w.reshape(shape).transpose(1, 2).reshape(w.sizes()).contiguous();
}

namespace {

// llama.cpp's name of a tensor the weights ask for by Hugging Face's name (Gemma's four norms under
// their own names; Phi-3's fused matrices as its hook asks for them).
std::string gguf_name_of(const std::string& hf, const std::vector<Projection>& table, bool gemma_norms) {
  if (hf == "model.embed_tokens.weight") return "token_embd.weight";
  if (hf == "model.norm.weight") return "output_norm.weight";
  if (hf == "lm_head.weight") return "output.weight";
  const std::string layers = "model.layers.";
  if (hf.rfind(layers, 0) == 0) {
    const size_t dot = hf.find('.', layers.size());
    const std::string block = "blk." + hf.substr(layers.size(), dot - layers.size()) + ".";
    const std::string rest = hf.substr(dot + 1);
    if (rest == "input_layernorm.weight") return block + "attn_norm.weight";
    if (gemma_norms) {
      if (rest == "post_attention_layernorm.weight") return block + "post_attention_norm.weight";
      if (rest == "pre_feedforward_layernorm.weight") return block + "ffn_norm.weight";
      if (rest == "post_feedforward_layernorm.weight") return block + "post_ffw_norm.weight";
    }
    if (rest == "post_attention_layernorm.weight") return block + "ffn_norm.weight";
    if (rest == "self_attn.qkv_proj.weight") return block + "attn_qkv.weight";
    if (rest == "mlp.gate_up_proj.weight") return block + "ffn_up.weight";
    if (rest == "self_attn.q_norm.weight") return block + "attn_q_norm.weight";
    if (rest == "self_attn.k_norm.weight") return block + "attn_k_norm.weight";
    for (const Projection& p : table)
      if (rest.rfind(p.hf_name + ".", 0) == 0) return block + p.gguf_name + rest.substr(p.hf_name.size());
  }
  throw ModelFormatError("no GGUF name for tensor \"" + hf + "\"");
}

}  // namespace

const GgufTensor* find_llama_gguf_tensor(const GgufFile& f, const LlamaConfig& c, const std::string& hf,
                                         const std::vector<int64_t>& shape, bool optional) {
  const std::string name = gguf_name_of(hf, llama_projections(c), c.gemma_norms);
  const GgufTensor* t = f.find(name);
  if (!t) {
    if (optional) return nullptr;
    throw ModelFormatError(f.path() + ": missing tensor \"" + name + "\"");
  }
  if (t->shape() != shape)
    throw ModelFormatError(f.path() + ": tensor \"" + name + "\" has shape " + shape_string(t->shape()) +
                           ", expected " + shape_string(shape) + " from the llama.* metadata");
  return t;
}

int64_t llama_gguf_rope_heads(const GgufTensor& t, const LlamaConfig& c) {
  if (!c.gguf_qk_permuted) return 0;
  if (t.name.find(".attn_q.") != std::string::npos) return c.n_head;
  if (t.name.find(".attn_k.") != std::string::npos) return c.n_kv_head;
  return 0;
}

at::Tensor llama_gguf_plain_tensor(const GgufTensor& t, const LlamaConfig& c, at::Tensor w) {
  const std::string suffix = "norm.weight";
  const bool norm = t.name.size() >= suffix.size() &&
                    t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0;
  return c.gguf_norms_plus_one && norm ? w - 1.0 : w;
}

LlamaWeights load_llama_gguf(const GgufFile& f, const LlamaConfig& c, at::Device device, at::ScalarType dtype,
                             const LlamaFetchHook& hook) {
  const LlamaTensorFetch read = [&](const std::string& hf, const std::vector<int64_t>& shape,
                                    bool optional) -> at::Tensor {
    const GgufTensor* t = find_llama_gguf_tensor(f, c, hf, shape, optional);
    if (!t) return {};
    std::vector<float> values = gguf_dequantize(*t);
    at::Tensor w = at::from_blob(values.data(), shape, at::kFloat);
    if (const int64_t heads = llama_gguf_rope_heads(*t, c)) w = unpermute_rope_rows(w, heads);
    if (shape.size() == 1) w = llama_gguf_plain_tensor(*t, c, w);
    return w.to(at::TensorOptions().dtype(dtype).device(device), false, /*copy=*/true);
  };
  return assemble_llama_weights(c, hook ? hook(c, read) : read);
}

}  // namespace servelab

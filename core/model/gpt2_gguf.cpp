#include "model/gpt2_gguf.h"

#include "model/tensor_from_file.h"
#include "util/errors.h"

namespace servelab {

Gpt2Config gpt2_config_from_gguf(const GgufFile& f) {
  const std::string arch = f.get_string("general.architecture");
  if (arch != "gpt2")
    throw ModelFormatError(f.path() + ": general.architecture is \"" + arch + "\", not gpt2");
  auto positive = [&](const char* k) {
    const std::string key = std::string("gpt2.") + k;
    const std::optional<int64_t> v = f.find_int(key);
    if (!v) throw ModelFormatError(f.path() + ": missing key " + key);
    if (*v <= 0 || *v > (int64_t{1} << 40))
      throw ModelFormatError(f.path() + ": " + key + " must be positive, got " + std::to_string(*v));
    return *v;
  };
  Gpt2Config c;
  c.n_layer = positive("block_count");
  c.n_embd = positive("embedding_length");
  c.n_inner = positive("feed_forward_length");
  c.n_head = positive("attention.head_count");
  c.n_positions = positive("context_length");
  if (c.n_embd % c.n_head != 0)
    throw ModelFormatError(f.path() + ": gpt2.embedding_length " + std::to_string(c.n_embd) +
                           " is not a multiple of gpt2.attention.head_count " + std::to_string(c.n_head));
  c.layer_norm_epsilon = f.find_float("gpt2.attention.layer_norm_epsilon").value_or(1e-5);
  // GGUF does not say; every GPT-2 checkpoint llama.cpp converts uses the tanh approximation.
  c.activation_function = "gelu_new";
  c.vocab_size = f.at("token_embd.weight").shape().front();
  c.bos_token_id = f.find_int("tokenizer.ggml.bos_token_id").value_or(-1);
  c.eos_token_id = f.find_int("tokenizer.ggml.eos_token_id").value_or(-1);
  return c;
}

Gpt2Weights load_gpt2_gguf(const GgufFile& f, const Gpt2Config& c, at::Device device, at::ScalarType dtype) {
  const int64_t E = c.n_embd, I = c.inner_dim();
  // A tensor as stored ([out, in] for matrices), checked against the shape the metadata implies.
  auto get = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const GgufTensor* t = f.find(name);
    if (!t) throw ModelFormatError(f.path() + ": missing tensor \"" + name + "\"");
    if (t->shape() != shape)
      throw ModelFormatError(f.path() + ": tensor \"" + name + "\" has shape " + shape_string(t->shape()) +
                             ", expected " + shape_string(shape) + " from the gpt2.* metadata");
    std::vector<float> values = gguf_dequantize(*t);
    return at::from_blob(values.data(), shape, at::kFloat)
        .to(at::TensorOptions().dtype(dtype).device(device), false, /*copy=*/true);
  };
  // Matrices back to Conv1D's [in, out].
  auto conv1d = [&](const std::string& name, int64_t in, int64_t out) {
    return get(name, {out, in}).t().contiguous();
  };
  Gpt2Weights w;
  w.wte = get("token_embd.weight", {c.vocab_size, E});
  w.wpe = get("position_embd.weight", {c.n_positions, E});
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    Gpt2LayerWeights l;
    l.ln_1_weight = get(b + "attn_norm.weight", {E});
    l.ln_1_bias = get(b + "attn_norm.bias", {E});
    l.c_attn_weight = conv1d(b + "attn_qkv.weight", E, 3 * E);
    l.c_attn_bias = get(b + "attn_qkv.bias", {3 * E});
    l.c_proj_weight = conv1d(b + "attn_output.weight", E, E);
    l.c_proj_bias = get(b + "attn_output.bias", {E});
    l.ln_2_weight = get(b + "ffn_norm.weight", {E});
    l.ln_2_bias = get(b + "ffn_norm.bias", {E});
    l.c_fc_weight = conv1d(b + "ffn_up.weight", E, I);
    l.c_fc_bias = get(b + "ffn_up.bias", {I});
    l.mlp_proj_weight = conv1d(b + "ffn_down.weight", I, E);
    l.mlp_proj_bias = get(b + "ffn_down.bias", {E});
    w.layers.push_back(std::move(l));
  }
  w.ln_f_weight = get("output_norm.weight", {E});
  w.ln_f_bias = get("output_norm.bias", {E});
  // llama.cpp's converter writes GPT-2's tied head as its own output.weight: share the storage
  // when it is that copy.
  w.lm_head = w.wte;
  w.lm_head_tied = true;
  if (f.find("output.weight")) {
    at::Tensor head = get("output.weight", {c.vocab_size, E});
    if (!at::equal(head, w.wte)) {
      w.lm_head = head;
      w.lm_head_tied = false;
    }
  }
  return w;
}

}  // namespace servelab

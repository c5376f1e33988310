#include "model/llama_model.h"

#include <cmath>

#include "util/device.h"
#include "util/errors.h"

namespace servelab {

std::vector<Projection> llama_projections(const LlamaConfig& c) {
  const int64_t E = c.hidden_size, F = c.intermediate_size, Q = c.n_head * c.head_dim,
                KV = c.n_kv_head * c.head_dim;
  return {{LinearSlot::Q, "self_attn.q_proj", "attn_q", E, Q},
          {LinearSlot::K, "self_attn.k_proj", "attn_k", E, KV},
          {LinearSlot::V, "self_attn.v_proj", "attn_v", E, KV},
          {LinearSlot::O, "self_attn.o_proj", "attn_output", Q, E},
          {LinearSlot::Gate, "mlp.gate_proj", "ffn_gate", E, F},
          {LinearSlot::Up, "mlp.up_proj", "ffn_up", E, F},
          {LinearSlot::Down, "mlp.down_proj", "ffn_down", F, E}};
}

ModelShape llama_shape(const LlamaConfig& c) {
  ModelShape s;
  s.architecture = c.architecture;
  s.n_layer = c.n_layer;
  s.n_embd = c.hidden_size;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_kv_head;
  s.head_dim = c.head_dim;
  s.n_inner = c.intermediate_size;
  s.vocab_size = c.vocab_size;
  s.context = c.context;
  s.bos_token_id = c.bos_token_id;
  s.eos_token_id = c.eos_token_id();
  s.eos_token_ids = c.eos_token_ids;
  return s;
}

at::Tensor llama_inv_freq(const LlamaConfig& c, bool local) {
  // As transformers' _compute_default_rope_parameters: 1 / theta^(arange(0, D, 2) / D) in fp32,
  // D the rotary dimensions (Phi's partial_rotary_factor of head_dim).
  const int64_t D = c.rotary_dim > 0 ? c.rotary_dim : c.head_dim;
  at::Tensor exponents = at::arange(0, D, 2, at::kLong).to(at::kFloat) / static_cast<double>(D);
  if (local) return 1.0 / at::pow(c.local_rope_theta > 0 ? c.local_rope_theta : c.rope_theta, exponents);
  at::Tensor inv_freq = 1.0 / at::pow(c.rope_theta, exponents);
  const RopeScaling& s = c.rope_scaling;
  if (!s.freq_factors.empty()) inv_freq = inv_freq / at::tensor(s.freq_factors, at::kDouble).to(at::kFloat);
  if (s.type == "linear") return inv_freq / s.factor;
  if (s.type == "llama3") {
    // transformers' _compute_llama3_parameters: long wavelengths slowed by `factor`, short ones
    // kept, those between blended smoothly.
    const double low_wavelen = static_cast<double>(s.original_context) / s.low_freq_factor;
    const double high_wavelen = static_cast<double>(s.original_context) / s.high_freq_factor;
    at::Tensor wavelen = 2 * M_PI / inv_freq;
    at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq);
    at::Tensor smooth = (static_cast<double>(s.original_context) / wavelen - s.low_freq_factor) /
                        (s.high_freq_factor - s.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
    at::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
    return at::where(medium, smoothed, scaled);
  }
  return inv_freq;
}

std::vector<std::pair<std::string, at::Tensor>> LlamaWeights::named_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back("model.embed_tokens.weight", embed);
  static const char* kNames[kLlamaProjections] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                  "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                  "mlp.down_proj"};
  for (size_t i = 0; i < layers.size(); ++i) {
    const LlamaLayerWeights& l = layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    out.emplace_back(p + "input_layernorm.weight", l.attn_norm);
    if (l.post_attn_norm.defined()) {  // Gemma's four norms
      out.emplace_back(p + "post_attention_layernorm.weight", l.post_attn_norm);
      out.emplace_back(p + "pre_feedforward_layernorm.weight", l.mlp_norm);
      out.emplace_back(p + "post_feedforward_layernorm.weight", l.post_mlp_norm);
    }
    for (size_t k = 0; k < kLlamaProjections; ++k) {
      out.emplace_back(p + kNames[k] + ".weight", l.w[k]);
      if (l.b[k].defined()) out.emplace_back(p + kNames[k] + ".bias", l.b[k]);
    }
    if (l.q_norm.defined()) out.emplace_back(p + "self_attn.q_norm.weight", l.q_norm);
    if (l.k_norm.defined()) out.emplace_back(p + "self_attn.k_norm.weight", l.k_norm);
    if (!l.post_attn_norm.defined()) out.emplace_back(p + "post_attention_layernorm.weight", l.mlp_norm);
  }
  out.emplace_back("model.norm.weight", norm);
  if (!lm_head_tied) out.emplace_back("lm_head.weight", lm_head);
  return out;
}

LinearMatrices LlamaWeights::linear_matrices() {
  // The slots do not depend on the config's sizes.
  static const std::vector<Projection> table = llama_projections(LlamaConfig{});
  LinearMatrices m;
  for (size_t l = 0; l < layers.size(); ++l)
    for (size_t k = 0; k < table.size(); ++k)
      m.projections.push_back({static_cast<int64_t>(l), table[k].slot, &layers[l].w[k], false});
  m.lm_head = &lm_head;
  m.lm_head_tied = lm_head_tied;
  return m;
}

int64_t LlamaWeights::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_tensors())
    if (t.defined()) n += t.numel();
  return n;
}

int64_t LlamaWeights::bytes() const {
  int64_t n = 0;
  for (const auto& [name, t] : named_tensors())
    if (t.defined()) n += t.numel() * static_cast<int64_t>(t.element_size());
  return n;
}

LlamaWeights assemble_llama_weights(const LlamaConfig& c, const LlamaTensorFetch& fetch) {
  const int64_t E = c.hidden_size;
  LlamaWeights w;
  w.embed = fetch("model.embed_tokens.weight", {c.vocab_size, E}, false);
  const std::vector<Projection> table = llama_projections(c);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LlamaLayerWeights lw;
    lw.attn_norm = fetch(p + "input_layernorm.weight", {E}, false);
    if (c.gemma_norms) {
      lw.post_attn_norm = fetch(p + "post_attention_layernorm.weight", {E}, false);
      lw.mlp_norm = fetch(p + "pre_feedforward_layernorm.weight", {E}, false);
      lw.post_mlp_norm = fetch(p + "post_feedforward_layernorm.weight", {E}, false);
    } else {
      lw.mlp_norm = fetch(p + "post_attention_layernorm.weight", {E}, false);
    }
    for (size_t k = 0; k < table.size(); ++k) {
      const Projection& pr = table[k];
      lw.w[k] = fetch(p + pr.hf_name + ".weight", {pr.out, pr.in}, false);
      const bool attn = k < 4;
      const bool biased = attn ? (pr.slot == LinearSlot::O ? c.o_bias : c.attention_bias) : c.mlp_bias;
      if (biased) lw.b[k] = fetch(p + pr.hf_name + ".bias", {pr.out}, false);
    }
    if (c.qk_norm) {
      lw.q_norm = fetch(p + "self_attn.q_norm.weight", {c.head_dim}, false);
      lw.k_norm = fetch(p + "self_attn.k_norm.weight", {c.head_dim}, false);
    }
    w.layers.push_back(std::move(lw));
  }
  w.norm = fetch("model.norm.weight", {E}, false);
  w.lm_head_tied = c.tie_word_embeddings;
  if (!w.lm_head_tied) {
    w.lm_head = fetch("lm_head.weight", {c.vocab_size, E}, true);
    // Some checkpoints that tie their head say nothing about it and simply omit lm_head.
    if (!w.lm_head.defined()) w.lm_head_tied = true;
  }
  if (w.lm_head_tied) w.lm_head = w.embed;
  return w;
}

LlamaModel::LlamaModel(LlamaConfig config, LlamaWeights weights, std::shared_ptr<const LinearKernels> kernels)
    : Model(llama_shape(config), llama_projections(config), std::move(kernels)),
      config_(std::move(config)),
      weights_(std::move(weights)) {
  rope_ = RotaryEmbedding(llama_inv_freq(config_), config_.context, device(), dtype());
  if (config_.local_rope_theta > 0)
    local_rope_ = RotaryEmbedding(llama_inv_freq(config_, true), config_.context, device(), dtype());
  if (device().is_cuda()) prefer_length_independent_attention();
  program_ = LlamaDecodeProgram::make(config_, weights_, kernels_.get(), rope_.cos(), rope_.sin(),
                                      local_rope_.cos(), local_rope_.sin(), &program_why_not_);
}

std::string LlamaModel::fused_decode_unavailable() const {
  if (!fused_decode()) return "switched off (--fused-decode off)";
  return program_ ? std::string() : program_why_not_;
}

LlamaWeights LlamaModel::dense_weights() const {
  if (!kernels_) return weights_;
  if (!kernels_->holds_dense_weights())
    throw InputError("this model's matrices are quantized; its dense weights are not kept");
  LlamaWeights w = weights_;
  for (size_t l = 0; l < w.layers.size(); ++l)
    for (size_t k = 0; k < projections_.size(); ++k)
      w.layers[l].w[k] =
          kernels_->dense_weight(static_cast<int64_t>(l), projections_[k].slot).t().contiguous();
  w.lm_head = w.lm_head_tied ? w.embed : kernels_->dense_lm_head();
  return w;
}

int64_t LlamaModel::resident_bytes() const {
  return weights_.bytes() + (kernels_ ? kernels_->resident_bytes() : 0);
}

at::Tensor LlamaModel::proj(int64_t layer, size_t k, const at::Tensor& x, const LoraBatch* lora) const {
  const LlamaLayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  return linear(layer, projections_[k].slot, x, w.b[k], lora, [&] { return at::linear(x, w.w[k], w.b[k]); });
}

std::vector<at::Tensor> LlamaModel::projs(int64_t layer, size_t k0, size_t n, const at::Tensor& x,
                                          const LoraBatch* lora) const {
  const LlamaLayerWeights& w = weights_.layers[static_cast<size_t>(layer)];
  std::vector<LinearSlot> slots;
  std::vector<at::Tensor> biases;
  for (size_t k = k0; k < k0 + n; ++k) {
    slots.push_back(projections_[k].slot);
    biases.push_back(w.b[k]);
  }
  return linear_same_input(layer, slots, x, biases, lora,
                           [&](size_t i) { return at::linear(x, w.w[k0 + i], w.b[k0 + i]); });
}

at::Tensor LlamaModel::attention(int64_t layer, const at::Tensor& x, const AttentionMask& mask,
                                 KvCache* cache, const ForwardInput& in, const at::Tensor& positions) const {
  const int64_t B = x.size(0), T = x.size(1), E = config_.hidden_size, H = config_.n_head,
                H_kv = config_.n_kv_head, D = config_.head_dim;
  const std::vector<at::Tensor> qkv = projs(layer, 0, 3, x.reshape({B * T, E}), in.lora);
  at::Tensor q = qkv[0].view({B, T, H, D}).transpose(1, 2);
  at::Tensor k = qkv[1].view({B, T, H_kv, D}).transpose(1, 2);
  at::Tensor v = qkv[2].view({B, T, H_kv, D}).transpose(1, 2);
  if (config_.qk_norm) {
    // Qwen3: each head's q and k RMS-normalised over head_dim before the rotation. On the CPU the
    // heads are made contiguous first, so that the one-pass loop runs (the fused decode program's
    // arithmetic, fused_cpu's) rather than libtorch's chain.
    const LlamaLayerWeights& lw = weights_.layers[static_cast<size_t>(layer)];
    q = norm(q.device().is_cpu() ? q.contiguous() : q, lw.q_norm);
    k = norm(k.device().is_cpu() ? k.contiguous() : k, lw.k_norm);
  }
  // Keys are rotated before they are cached: the cache holds them at their absolute positions.
  const int64_t window = config_.window_of(layer);
  const RotaryEmbedding& rope = window > 0 && config_.local_rope_theta > 0 ? local_rope_ : rope_;
  q = rope.apply(q, positions);
  k = rope.apply(k, positions);
  AttentionParams p;
  p.scale = 1.0 / std::sqrt(config_.query_pre_attn_scalar > 0 ? config_.query_pre_attn_scalar
                                                              : static_cast<double>(D));
  p.backend = backend_;
  p.window = window;
  p.softcap = config_.attn_logit_softcap;
  at::Tensor y = cached_attention(layer, q, k, v, cache, in, mask, p).transpose(1, 2).reshape({B * T, H * D});
  return proj(layer, 3, y, in.lora).view({B, T, E});
}

at::Tensor LlamaModel::mlp(int64_t layer, const at::Tensor& x, const LoraBatch* lora) const {
  const int64_t B = x.size(0), T = x.size(1), E = config_.hidden_size;
  const std::vector<at::Tensor> gate_up = projs(layer, 4, 2, x.reshape({B * T, E}), lora);
  const at::Tensor act = config_.hidden_act == "silu" ? at::silu(gate_up[0]) : at::gelu(gate_up[0], "tanh");
  return proj(layer, 6, act * gate_up[1], lora).view({B, T, E});
}

at::Tensor LlamaModel::norm(const at::Tensor& x, const at::Tensor& weight) const {
  // Gemma stores its RMSNorm weights zero-centred: x * (1 + w).
  return rms_norm(x, config_.gemma_norms ? weight + 1.0 : weight, config_.rms_norm_eps);
}

at::Tensor LlamaModel::forward(const ForwardInput& in, KvCache* cache) const {
  const at::Device dev = device();
  // Checks the input against the cache and the context before anything runs.
  const AttentionMask mask = make_attention_mask(in, cache, config_.context, dev);
  const at::Tensor& ids = in.input_ids;
  const int64_t T = ids.size(1);
  const at::Tensor positions = in.position_ids.to(dev);

  at::Tensor x = kernels_ && kernels_->handles_embeddings() ? kernels_->embed(ids.to(dev), positions)
                                                            : at::embedding(weights_.embed, ids.to(dev));
  // Gemma scales the embedding by sqrt(hidden_size), rounded to the model's dtype as HF does.
  if (config_.gemma_norms)
    x = x * at::scalar_tensor(std::sqrt(static_cast<double>(config_.hidden_size)), x.options());
  // A KvStore's forward runs in the program where the store says where its keys live.
  KvPlaces places;
  const bool program = program_ && fused_decode();
  const bool placed = program && in.kv_store && in.kv_store->places(places);
  const bool fused = program && (cache || placed) &&
                     !program_->refuses(in, cache, placed ? &places : nullptr, mask, backend_);
  if (fused) program_->run(x, in, cache, placed ? &places : nullptr, mask);
  for (int64_t l = 0; l < config_.n_layer && !fused; ++l) {
    const LlamaLayerWeights& lw = weights_.layers[static_cast<size_t>(l)];
    if (lw.post_attn_norm.defined()) {  // Gemma: a norm before and after each block
      x = x + norm(attention(l, norm(x, lw.attn_norm), mask, cache, in, positions), lw.post_attn_norm);
      x = x + norm(mlp(l, norm(x, lw.mlp_norm), in.lora), lw.post_mlp_norm);
    } else {
      x = x + attention(l, norm(x, lw.attn_norm), mask, cache, in, positions);
      x = x + mlp(l, norm(x, lw.mlp_norm), in.lora);
    }
  }
  if (cache && !mask.per_row) cache->advance(T);
  if (in.logit_positions.defined()) {
    x = x.reshape({-1, x.size(2)}).index_select(0, in.logit_positions.to(dev));
  } else if (!in.all_logits) {
    x = x.select(1, T - 1);
  }
  x = norm(x, weights_.norm);
  at::Tensor logits = kernels_ ? kernels_->lm_head(x) : at::linear(x, weights_.lm_head);
  const double cap = config_.final_logit_softcap;
  return cap > 0 ? at::tanh(logits / cap) * cap : logits;
}

std::unique_ptr<Model> LlamaModel::with_kernels(const LinearKernelFactory& make) const {
  LlamaWeights w = kernels_ ? dense_weights() : weights_;
  LinearMatrices matrices = w.linear_matrices();
  std::shared_ptr<const LinearKernels> kernels = make(matrices);
  auto m = std::make_unique<LlamaModel>(config_, std::move(w), std::move(kernels));
  m->inherit_run_settings(*this);
  return m;
}

}  // namespace servelab

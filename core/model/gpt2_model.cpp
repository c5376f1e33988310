#include "model/gpt2_model.h"

#include <cmath>

#include "model/layers.h"
#include "util/device.h"
#include "util/errors.h"

namespace servelab {

const char* gpt2_slot_name(LinearSlot slot) {
  switch (slot) {
    case LinearSlot::Attn:
      return "attn.c_attn";
    case LinearSlot::AttnProj:
      return "attn.c_proj";
    case LinearSlot::Fc:
      return "mlp.c_fc";
    case LinearSlot::MlpProj:
      return "mlp.c_proj";
    default:
      throw InputError("a GPT-2 block has no projection number " + std::to_string(static_cast<int>(slot)));
  }
}

std::vector<Projection> gpt2_projections(const Gpt2Config& c) {
  const int64_t E = c.n_embd, F = c.inner_dim();
  return {{LinearSlot::Attn, gpt2_slot_name(LinearSlot::Attn), "attn_qkv", E, 3 * E},
          {LinearSlot::AttnProj, gpt2_slot_name(LinearSlot::AttnProj), "attn_output", E, E},
          {LinearSlot::Fc, gpt2_slot_name(LinearSlot::Fc), "ffn_up", E, F},
          {LinearSlot::MlpProj, gpt2_slot_name(LinearSlot::MlpProj), "ffn_down", F, E}};
}

ModelShape gpt2_shape(const Gpt2Config& c) {
  ModelShape s;
  s.architecture = "gpt2";
  s.n_layer = c.n_layer;
  s.n_embd = c.n_embd;
  s.n_head = c.n_head;
  s.n_kv_head = c.n_head;
  s.head_dim = c.head_dim();
  s.n_inner = c.inner_dim();
  s.vocab_size = c.vocab_size;
  s.context = c.n_positions;
  s.bos_token_id = c.bos_token_id;
  s.eos_token_id = c.eos_token_id;
  if (c.eos_token_id >= 0) s.eos_token_ids = {c.eos_token_id};
  return s;
}

Gpt2Model::Gpt2Model(Gpt2Config config, Gpt2Weights weights)
    : Gpt2Model(std::move(config), std::move(weights), nullptr) {}

Gpt2Model::Gpt2Model(Gpt2Config config, Gpt2Weights weights, std::shared_ptr<const LinearKernels> kernels)
    : Model(gpt2_shape(config), gpt2_projections(config), std::move(kernels)),
      config_(std::move(config)),
      weights_(std::move(weights)) {
  const std::string& act = config_.activation_function;
  activation_ = act == "gelu_new" || act == "gelu_pytorch_tanh" ? Activation::GeluTanh
                : act == "gelu"                                 ? Activation::Gelu
                                                                : Activation::Relu;
  if (weights_.ln_f_weight.defined() && device().is_cuda()) prefer_length_independent_attention();
}

at::Tensor LinearKernels::dense_weight(int64_t, LinearSlot) const {
  throw InputError("the model's weights are quantized: its fp32 matrices are not kept");
}

at::Tensor LinearKernels::dense_lm_head() const {
  throw InputError("the model's weights are quantized: its fp32 matrices are not kept");
}

Gpt2Weights Gpt2Model::dense_weights() const {
  Gpt2Weights w = weights_;
  if (!kernels_) return w;
  auto fill = [&](at::Tensor& t, int64_t layer, LinearSlot slot) {
    if (!t.defined()) t = kernels_->dense_weight(layer, slot);
  };
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const auto layer = static_cast<int64_t>(l);
    fill(w.layers[l].c_attn_weight, layer, LinearSlot::Attn);
    fill(w.layers[l].c_proj_weight, layer, LinearSlot::AttnProj);
    fill(w.layers[l].c_fc_weight, layer, LinearSlot::Fc);
    fill(w.layers[l].mlp_proj_weight, layer, LinearSlot::MlpProj);
  }
  if (!w.wte.defined() || !w.wpe.defined())
    throw InputError("the model's embeddings are quantized: its fp32 matrices are not kept");
  if (w.lm_head_tied) {
    w.lm_head = w.wte;
  } else if (!w.lm_head.defined()) {
    w.lm_head = kernels_->dense_lm_head();
  }
  return w;
}

int64_t Gpt2Model::resident_bytes() const {
  return weights_.bytes() + (kernels_ ? kernels_->resident_bytes() : 0);
}

at::Tensor Gpt2Model::conv1d(int64_t layer, LinearSlot slot, const at::Tensor& x, const at::Tensor& weight,
                             const at::Tensor& bias, const LoraBatch* lora) const {
  return linear(layer, slot, x, bias, lora, [&] { return at::addmm(bias, x, weight); });
}

at::Tensor Gpt2Model::attention(int64_t layer, const Gpt2LayerWeights& w, const at::Tensor& x,
                                const AttentionMask& mask, KvCache* cache, const ForwardInput& in) const {
  const int64_t B = x.size(0), T = x.size(1), E = config_.n_embd, H = config_.n_head, D = config_.head_dim();
  at::Tensor qkv =
      conv1d(layer, LinearSlot::Attn, x.reshape({B * T, E}), w.c_attn_weight, w.c_attn_bias, in.lora)
          .view({B, T, 3, H, D});
  AttentionParams p;
  p.scale = config_.scale_attn_weights ? 1.0 / std::sqrt(static_cast<double>(D)) : 1.0;
  if (config_.scale_attn_by_inverse_layer_idx) p.scale /= static_cast<double>(layer + 1);
  p.upcast = config_.reorder_and_upcast_attn && x.scalar_type() != at::kFloat;
  p.backend = backend_;
  at::Tensor y = cached_attention(layer, qkv.select(2, 0).transpose(1, 2), qkv.select(2, 1).transpose(1, 2),
                                  qkv.select(2, 2).transpose(1, 2), cache, in, mask, p);
  y = y.transpose(1, 2).reshape({B * T, E});
  return conv1d(layer, LinearSlot::AttnProj, y, w.c_proj_weight, w.c_proj_bias, in.lora).view({B, T, E});
}

at::Tensor Gpt2Model::mlp(int64_t layer, const Gpt2LayerWeights& w, const at::Tensor& x,
                          const LoraBatch* lora) const {
  const int64_t B = x.size(0), T = x.size(1), E = config_.n_embd;
  at::Tensor h = conv1d(layer, LinearSlot::Fc, x.reshape({B * T, E}), w.c_fc_weight, w.c_fc_bias, lora);
  h = activation_ == Activation::GeluTanh ? at::gelu(h, "tanh")
      : activation_ == Activation::Gelu   ? at::gelu(h)
                                          : at::relu(h);
  return conv1d(layer, LinearSlot::MlpProj, h, w.mlp_proj_weight, w.mlp_proj_bias, lora).view({B, T, E});
}

at::Tensor Gpt2Model::forward(const ForwardInput& in, KvCache* cache) const {
  const at::Device dev = device();
  // Checks the input against the cache and the context before anything runs.
  const AttentionMask mask = make_attention_mask(in, cache, config_.n_positions, dev);
  const at::Tensor& ids = in.input_ids;
  const int64_t T = ids.size(1);

  const Gpt2Weights& w = weights_;
  at::Tensor x = kernels_ && kernels_->handles_embeddings()
                     ? kernels_->embed(ids.to(dev), in.position_ids.to(dev))
                     : at::embedding(w.wte, ids.to(dev)) + at::embedding(w.wpe, in.position_ids.to(dev));
  const double eps = config_.layer_norm_epsilon;
  const int64_t E = config_.n_embd;
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    const Gpt2LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    x = x + attention(l, lw, at::layer_norm(x, {E}, lw.ln_1_weight, lw.ln_1_bias, eps), mask, cache, in);
    x = x + mlp(l, lw, at::layer_norm(x, {E}, lw.ln_2_weight, lw.ln_2_bias, eps), in.lora);
  }
  if (cache && !mask.per_row) cache->advance(T);
  if (in.logit_positions.defined()) {
    x = x.reshape({-1, x.size(2)}).index_select(0, in.logit_positions.to(dev));
  } else if (!in.all_logits) {
    x = x.select(1, T - 1);
  }
  x = at::layer_norm(x, {E}, w.ln_f_weight, w.ln_f_bias, eps);
  return kernels_ ? kernels_->lm_head(x) : at::matmul(x, w.lm_head.t());
}

std::unique_ptr<Model> Gpt2Model::with_kernels(const LinearKernelFactory& make) const {
  Gpt2Weights w = kernels_ ? dense_weights() : weights_;
  LinearMatrices matrices = w.linear_matrices();
  std::shared_ptr<const LinearKernels> kernels = make(matrices);
  auto m = std::make_unique<Gpt2Model>(config_, std::move(w), std::move(kernels));
  m->inherit_run_settings(*this);
  return m;
}

}  // namespace servelab

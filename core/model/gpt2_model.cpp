#include "model/gpt2_model.h"

#include <cmath>
#include <limits>

#include "lora/multi_lora.h"
#include "util/device.h"
#include "util/errors.h"

namespace servelab {

Gpt2Model::Gpt2Model(Gpt2Config config, Gpt2Weights weights)
    : config_(std::move(config)), weights_(std::move(weights)) {
  if (weights_.ln_f_weight.defined() && device().is_cuda()) prefer_length_independent_attention();
}

Gpt2Model::Gpt2Model(Gpt2Config config, Gpt2Weights weights, std::shared_ptr<const LinearKernels> kernels)
    : config_(std::move(config)), weights_(std::move(weights)), kernels_(std::move(kernels)) {
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

at::Tensor Gpt2Model::linear(int64_t layer, LinearSlot slot, const at::Tensor& x, const at::Tensor& weight,
                             const at::Tensor& bias, const LoraBatch* lora) const {
  at::Tensor y = kernels_ ? kernels_->linear(layer, slot, x, bias) : at::addmm(bias, x, weight);
  return lora ? lora->apply(layer, slot, x, std::move(y)) : y;
}

KvCache Gpt2Model::make_cache(int64_t batch, int64_t capacity) const {
  return KvCache(config_.n_layer, batch, config_.n_head, capacity, config_.head_dim(),
                 at::TensorOptions().dtype(dtype()).device(device()));
}

at::Tensor Gpt2Model::attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                             const at::Tensor& mask, bool causal) const {
  double scale = config_.scale_attn_weights ? 1.0 / std::sqrt(static_cast<double>(config_.head_dim())) : 1.0;
  if (config_.scale_attn_by_inverse_layer_idx) scale /= static_cast<double>(layer + 1);
  const bool upcast = config_.reorder_and_upcast_attn && q.scalar_type() != at::kFloat;
  if (backend_ == AttentionBackend::Sdpa && !upcast) {
    return at::scaled_dot_product_attention(
        q, k, v, mask.defined() ? c10::optional<at::Tensor>(mask) : c10::nullopt, 0.0, causal, scale);
  }
  at::Tensor qf = upcast ? q.to(at::kFloat) : q;
  at::Tensor kf = upcast ? k.to(at::kFloat) : k;
  at::Tensor scores = at::matmul(qf, kf.transpose(-2, -1)) * scale;
  at::Tensor allowed = mask;
  if (causal) {
    const int64_t t = q.size(2), s = k.size(2);
    allowed = at::ones({t, s}, at::TensorOptions().dtype(at::kBool).device(q.device())).tril(s - t);
  }
  if (allowed.defined())
    scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor probs = at::softmax(scores, -1);
  if (upcast) probs = probs.to(v.scalar_type());
  return at::matmul(probs, v);
}

at::Tensor Gpt2Model::attention(int64_t layer, const Gpt2LayerWeights& w, const at::Tensor& x,
                                const at::Tensor& mask, bool causal, KvCache* cache,
                                const ForwardInput& in) const {
  const int64_t B = x.size(0), T = x.size(1), E = config_.n_embd, H = config_.n_head, D = config_.head_dim();
  at::Tensor qkv =
      linear(layer, LinearSlot::Attn, x.reshape({B * T, E}), w.c_attn_weight, w.c_attn_bias, in.lora)
          .view({B, T, 3, H, D});
  at::Tensor q = qkv.select(2, 0).transpose(1, 2);
  at::Tensor k = qkv.select(2, 1).transpose(1, 2);
  at::Tensor v = qkv.select(2, 2).transpose(1, 2);
  at::Tensor y;
  if (cache && in.cache_positions.defined()) {
    // Continuous batching: the running rows' new keys land in their own cache rows; attention
    // runs over the cache's rows with the running rows' queries in place, and only their outputs
    // are kept.
    std::tie(k, v) = cache->write_at(layer, k, v, in.cache_rows, in.cache_positions, mask.size(-1));
    at::Tensor q_rows = at::zeros({cache->batch(), H, 1, D}, q.options()).index_copy_(0, in.cache_rows, q);
    y = attend(layer, q_rows, k, v, mask, false).index_select(0, in.cache_rows);
  } else {
    if (cache) std::tie(k, v) = cache->append(layer, k, v);
    y = attend(layer, q, k, v, mask, causal);
  }
  y = y.transpose(1, 2).reshape({B * T, E});
  return linear(layer, LinearSlot::AttnProj, y, w.c_proj_weight, w.c_proj_bias, in.lora).view({B, T, E});
}

at::Tensor Gpt2Model::mlp(int64_t layer, const Gpt2LayerWeights& w, const at::Tensor& x,
                          const LoraBatch* lora) const {
  const int64_t B = x.size(0), T = x.size(1), E = config_.n_embd;
  at::Tensor h = linear(layer, LinearSlot::Fc, x.reshape({B * T, E}), w.c_fc_weight, w.c_fc_bias, lora);
  const std::string& act = config_.activation_function;
  if (act == "gelu_new" || act == "gelu_pytorch_tanh") {
    h = at::gelu(h, "tanh");
  } else if (act == "gelu") {
    h = at::gelu(h);
  } else {
    h = at::relu(h);
  }
  return linear(layer, LinearSlot::MlpProj, h, w.mlp_proj_weight, w.mlp_proj_bias, lora).view({B, T, E});
}

at::Tensor Gpt2Model::forward(const ForwardInput& in, KvCache* cache) const {
  const at::Tensor& ids = in.input_ids;
  if (ids.dim() != 2) throw InputError("input_ids must be [batch, tokens]");
  const int64_t B = ids.size(0), T = ids.size(1);
  if (T == 0) throw InputError("forward called with zero tokens");
  if (in.lora && in.lora->rows() != B)
    throw InputError("LoRA rows (" + std::to_string(in.lora->rows()) + ") do not match the batch (" +
                     std::to_string(B) + ")");
  const bool per_row = in.cache_positions.defined();
  if (per_row && (!cache || T != 1 || !in.cache_rows.defined() || in.cache_rows.numel() != B ||
                  in.cache_positions.numel() != B || !in.key_mask.defined() || in.key_mask.dim() != 2 ||
                  in.key_mask.size(0) != cache->batch()))
    throw InputError(
        "per-row cache positions need a cache, one token per row, cache_rows and cache_positions with one "
        "entry "
        "per row and a [cache rows, width] key mask");
  const int64_t past = cache && !per_row ? cache->length() : 0;
  const int64_t S = per_row ? in.key_mask.size(1) : past + T;
  if (cache && !per_row && cache->batch() != B)
    throw InputError("KV cache was made for batch " + std::to_string(cache->batch()) + ", input has batch " +
                     std::to_string(B));
  if (S > config_.n_positions)
    throw InputError(std::to_string(S) + " positions exceed the model's context of " +
                     std::to_string(config_.n_positions));

  const at::Device dev = device();
  const auto bool_opts = at::TensorOptions().dtype(at::kBool).device(dev);
  at::Tensor mask;  // [B or 1, 1, T, S] bool: true where a query may look at a key
  bool causal = false;
  if (per_row) {
    // Each row's keys are its own cached prefix plus the position it writes now; the caller's
    // mask says which, so rows of different lengths share one forward.
    mask = in.key_mask.to(dev).to(at::kBool).view({in.key_mask.size(0), 1, 1, S});
  } else if (!in.key_mask.defined()) {
    if (T > 1 && past == 0) {
      causal = true;
    } else if (T > 1) {
      mask = at::ones({T, S}, bool_opts).tril(past).view({1, 1, T, S});
    }
  } else {
    if (in.key_mask.size(0) != B || in.key_mask.size(1) != S)
      throw InputError("key_mask must be [batch, past + tokens] = [" + std::to_string(B) + ", " +
                       std::to_string(S) + "]");
    at::Tensor keys = in.key_mask.to(dev).to(at::kBool).view({B, 1, 1, S});
    at::Tensor tri = at::ones({T, S}, bool_opts).tril(past);
    // A padding query would see no key at all (softmax of nothing = NaN, which then leaks into
    // the cache). Letting every query see itself keeps padding rows finite; real tokens never
    // attend to padding keys, so their results are unchanged.
    at::Tensor self = at::eye(T, bool_opts);
    if (past > 0) self = at::cat({at::zeros({T, past}, bool_opts), self}, 1);
    mask = (keys & tri.view({1, 1, T, S})) | self.view({1, 1, T, S});
  }

  const Gpt2Weights& w = weights_;
  at::Tensor x = kernels_ && kernels_->handles_embeddings()
                     ? kernels_->embed(ids.to(dev), in.position_ids.to(dev))
                     : at::embedding(w.wte, ids.to(dev)) + at::embedding(w.wpe, in.position_ids.to(dev));
  const double eps = config_.layer_norm_epsilon;
  const int64_t E = config_.n_embd;
  for (int64_t l = 0; l < config_.n_layer; ++l) {
    const Gpt2LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    x = x +
        attention(l, lw, at::layer_norm(x, {E}, lw.ln_1_weight, lw.ln_1_bias, eps), mask, causal, cache, in);
    x = x + mlp(l, lw, at::layer_norm(x, {E}, lw.ln_2_weight, lw.ln_2_bias, eps), in.lora);
  }
  if (cache && !per_row) cache->advance(T);
  if (!in.all_logits) x = x.select(1, T - 1);
  x = at::layer_norm(x, {E}, w.ln_f_weight, w.ln_f_bias, eps);
  return kernels_ ? kernels_->lm_head(x) : at::matmul(x, w.lm_head.t());
}

}  // namespace servelab

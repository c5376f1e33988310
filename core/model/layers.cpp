#include "model/layers.h"

#include <limits>

#include "lora/multi_lora.h"
#include "model/decode_attention.h"
#include "model/fused_cpu.h"
#include "util/errors.h"

namespace servelab {

AttentionMask make_attention_mask(const ForwardInput& in, const KvCache* cache, int64_t context,
                                  at::Device device) {
  const at::Tensor& ids = in.input_ids;
  if (ids.dim() != 2) throw InputError("input_ids must be [batch, tokens]");
  const int64_t B = ids.size(0), T = ids.size(1);
  if (T == 0) throw InputError("forward called with zero tokens");
  if (in.lora && in.lora->rows() != B)
    throw InputError("LoRA rows (" + std::to_string(in.lora->rows()) + ") do not match the batch (" +
                     std::to_string(B) + ")");
  if (in.logit_positions.defined() &&
      (in.all_logits || in.logit_positions.dim() != 1 || in.logit_positions.scalar_type() != at::kLong))
    throw InputError(
        "logit positions must be one int64 index list into [batch * tokens], without all_logits");
  if (in.kv_store && (cache || in.cache_positions.defined()))
    throw InputError("a forward through a KV store takes no KV cache and no per-row cache positions");
  AttentionMask m;
  m.per_row = in.cache_positions.defined();
  if (m.per_row && (!cache || T != 1 || !in.cache_rows.defined() || in.cache_rows.numel() != B ||
                    in.cache_positions.numel() != B || !in.key_mask.defined() || in.key_mask.dim() != 2 ||
                    in.key_mask.size(0) != cache->batch()))
    throw InputError(
        "per-row cache positions need a cache, one token per row, cache_rows and cache_positions with one "
        "entry per row and a [cache rows, width] key mask");
  m.past = cache && !m.per_row ? cache->length() : 0;
  m.keys = m.per_row ? in.key_mask.size(1) : m.past + T;
  if (cache && !m.per_row && cache->batch() != B)
    throw InputError("KV cache was made for batch " + std::to_string(cache->batch()) + ", input has batch " +
                     std::to_string(B));
  if (m.keys > context)
    throw InputError(std::to_string(m.keys) + " positions exceed the model's context of " +
                     std::to_string(context));

  const int64_t S = m.keys, past = m.past;
  const auto bool_opts = at::TensorOptions().dtype(at::kBool).device(device);
  if (m.per_row) {
    // Each row's keys are its own cached prefix plus the position it writes now; the caller's
    // mask says which, so rows of different lengths share one forward.
    m.mask = in.key_mask.to(device).to(at::kBool).view({in.key_mask.size(0), 1, 1, S});
  } else if (!in.key_mask.defined()) {
    if (T > 1 && past == 0) {
      m.causal = true;
    } else if (T > 1) {
      m.mask = at::ones({T, S}, bool_opts).tril(past).view({1, 1, T, S});
    }
  } else {
    if (in.key_mask.size(0) != B || in.key_mask.size(1) != S)
      throw InputError("key_mask must be [batch, past + tokens] = [" + std::to_string(B) + ", " +
                       std::to_string(S) + "]");
    at::Tensor keys = in.key_mask.to(device).to(at::kBool).view({B, 1, 1, S});
    at::Tensor tri = at::ones({T, S}, bool_opts).tril(past);
    // A padding query would see no key at all (softmax of nothing = NaN, which then leaks into
    // the cache). Letting every query see itself keeps padding rows finite; real tokens never
    // attend to padding keys, so their results are unchanged.
    at::Tensor self = at::eye(T, bool_opts);
    if (past > 0) self = at::cat({at::zeros({T, past}, bool_opts), self}, 1);
    m.mask = (keys & tri.view({1, 1, T, S})) | self.view({1, 1, T, S});
  }
  return m;
}

namespace {

// A decode step on the CPU under SDPA's rules (not the manual reference) that our in-place kernel
// takes.
bool decode_kernel_takes(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const AttentionMask& m, const AttentionParams& p) {
  return p.decode_kernel && p.backend == AttentionBackend::Sdpa && p.softcap <= 0 && !m.causal &&
         q.dim() == 4 && q.size(2) == 1 &&
         (!m.mask.defined() || (m.mask.dim() == 4 && m.mask.size(1) == 1 && m.mask.size(2) == 1)) &&
         dense_decode_attention_applies(q, k, v, m.mask);
}

at::Tensor attend_heads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionMask& m,
                        const AttentionParams& p) {
  const int64_t H = q.size(1), H_kv = k.size(1);
  if (p.backend == AttentionBackend::Sdpa && !p.upcast && p.softcap <= 0) {
    return at::scaled_dot_product_attention(
        q, k, v, m.mask.defined() ? std::optional<at::Tensor>(m.mask) : std::nullopt, 0.0, m.causal, p.scale,
        /*enable_gqa=*/H != H_kv);
  }
  at::Tensor kf = H != H_kv ? k.repeat_interleave(H / H_kv, 1) : k;
  at::Tensor vf = H != H_kv ? v.repeat_interleave(H / H_kv, 1) : v;
  at::Tensor qf = p.upcast ? q.to(at::kFloat) : q;
  if (p.upcast) kf = kf.to(at::kFloat);
  at::Tensor scores = at::matmul(qf, kf.transpose(-2, -1)) * p.scale;
  if (p.softcap > 0) scores = at::tanh(scores / p.softcap) * p.softcap;
  at::Tensor allowed = m.mask;
  if (m.causal) {
    const int64_t t = q.size(2), s = k.size(2);
    allowed = at::ones({t, s}, at::TensorOptions().dtype(at::kBool).device(q.device())).tril(s - t);
  }
  if (allowed.defined())
    scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor probs = at::softmax(scores, -1);
  if (p.upcast) probs = probs.to(v.scalar_type());
  return at::matmul(probs, vf);
}

// keys [S] visible to queries at key indices `query_index` ([R, T] or [T]) under a window:
// query_index - j < window, as bool [R or 1, 1, T, S].
at::Tensor window_band(const at::Tensor& query_index, int64_t S, int64_t window) {
  const at::Tensor qi = query_index.dim() == 1 ? query_index.unsqueeze(0) : query_index;
  const at::Tensor j = at::arange(S, qi.options()).view({1, 1, 1, S});
  return j > qi.view({qi.size(0), 1, qi.size(1), 1}) - window;
}

// The mask with the window's band added: the same keys, less those `window` or more positions
// before their query.
AttentionMask windowed(const AttentionMask& m, const at::Tensor& query_index, int64_t S, int64_t window) {
  const at::Tensor band = window_band(query_index, S, window);
  AttentionMask w = m;
  const int64_t T = band.size(2);
  if (m.causal) {
    w.causal = false;
    w.mask = band & at::ones({T, S}, band.options()).tril(S - T).view({1, 1, T, S});
  } else {
    w.mask = m.mask.defined() ? m.mask & band : band;
  }
  return w;
}

}  // namespace

at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask,
                  const AttentionParams& params) {
  if (params.window > 0 && k.size(2) > params.window) {
    // The queries are the last T of the S keys; nothing is cut before S exceeds the window.
    const int64_t T = q.size(2), S = k.size(2);
    AttentionParams p = params;
    p.window = 0;
    const at::Tensor query_index =
        at::arange(S - T, S, at::TensorOptions().dtype(at::kLong).device(q.device()));
    return attend(q, k, v, windowed(mask, query_index, S, params.window), p);
  }
  const AttentionMask& m = mask;
  const AttentionParams& p = params;
  if (decode_kernel_takes(q, k, v, m, p) && q.size(0) == k.size(0))
    return dense_decode_attention_cpu(q, k, v, m.mask, at::Tensor(), p.scale);
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3), H_kv = k.size(1);
  if (H % H_kv != 0)
    throw InputError(std::to_string(H) + " query heads are not a multiple of " + std::to_string(H_kv) +
                     " key/value heads");
  // A single query per row with grouped KV heads: the group's queries become rows of one query
  // block per KV head, so the keys are read once per group and never repeated in memory. The mask
  // ([B or 1, 1, 1, S]) broadcasts over them unchanged.
  if (T == 1 && H != H_kv && !m.causal)
    // reshape, not view: the rotated q and CUDA's SDPA output need not be contiguous.
    return attend_heads(q.reshape({B, H_kv, H / H_kv, D}), k, v, m, p).reshape({B, H, 1, D});
  return attend_heads(q, k, v, m, p);
}

at::Tensor cached_attention(int64_t layer, const at::Tensor& q, at::Tensor k, at::Tensor v, KvCache* cache,
                            const ForwardInput& in, const AttentionMask& m, const AttentionParams& p) {
  if (in.kv_store) return in.kv_store->attend(layer, q, k, v, p);
  if (!cache) return attend(q, k, v, m, p);
  if (m.per_row) {
    // Continuous batching: the running rows' new keys land in their own cache rows; attention
    // runs over the cache's rows with the running rows' queries in place, and only their outputs
    // are kept.
    std::tie(k, v) = cache->write_at(layer, k, v, in.cache_rows, in.cache_positions, m.keys);
    AttentionMask rows_mask = m;
    AttentionParams rows_params = p;
    if (p.window > 0 && m.keys > p.window) {
      // Each cache row's query sits at its own position (rows not running: at 0, seeing key 0).
      const at::Tensor at_row =
          at::zeros({cache->batch()}, at::TensorOptions().dtype(at::kLong).device(q.device()))
              .index_copy_(0, in.cache_rows, in.cache_positions.to(at::kLong));
      rows_mask = windowed(m, at_row.view({-1, 1}), m.keys, p.window);
      rows_params.window = 0;
    }
    // On the CPU each running row reads its own cache row in place; rows not running cost nothing.
    if (decode_kernel_takes(q, k, v, rows_mask, rows_params))
      return dense_decode_attention_cpu(q, k, v, rows_mask.mask, in.cache_rows, p.scale);
    at::Tensor q_rows =
        at::zeros({cache->batch(), q.size(1), 1, q.size(3)}, q.options()).index_copy_(0, in.cache_rows, q);
    return attend(q_rows, k, v, rows_mask, rows_params).index_select(0, in.cache_rows);
  }
  std::tie(k, v) = cache->append(layer, k, v);
  return attend(q, k, v, m, p);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (fused_cpu::eligible(x) && fused_cpu::eligible(weight)) return fused_cpu::rms_norm(x, weight, eps);
  at::Tensor xf = x.to(at::kFloat);
  xf = xf * at::rsqrt(xf.pow(2).mean(-1, true) + eps);
  return weight * xf.to(x.scalar_type());
}

RotaryEmbedding::RotaryEmbedding(const at::Tensor& inv_freq, int64_t context, at::Device device,
                                 at::ScalarType dtype) {
  // The same fp32 products as Hugging Face (positions times inverse frequencies, then cos and sin),
  // tabulated once for every position.
  at::Tensor positions = at::arange(context, at::kLong).to(at::kFloat);
  at::Tensor freqs = positions.unsqueeze(1) * inv_freq.to(at::kFloat).unsqueeze(0);  // [context, D/2]
  at::Tensor emb = at::cat({freqs, freqs}, -1);
  cos_ = emb.cos().to(dtype).to(device);
  sin_ = emb.sin().to(dtype).to(device);
}

at::Tensor RotaryEmbedding::apply(const at::Tensor& x, const at::Tensor& positions) const {
  if (cos_.size(1) == x.size(-1) && x.device().is_cpu() && x.scalar_type() == at::kFloat &&
      x.stride(-1) == 1 && cos_.scalar_type() == at::kFloat)
    return fused_cpu::rotary(x, cos_, sin_, positions);
  if (cos_.size(1) < x.size(-1)) {
    // Partial rotary (Phi): the leading dimensions turn, the rest pass as they are.
    const int64_t r = cos_.size(1);
    return at::cat({apply(x.narrow(-1, 0, r), positions), x.narrow(-1, r, x.size(-1) - r)}, -1);
  }
  const int64_t half = x.size(-1) / 2;
  at::Tensor cos =
      cos_.index_select(0, positions.reshape({-1})).view({positions.size(0), 1, positions.size(1), -1});
  at::Tensor sin =
      sin_.index_select(0, positions.reshape({-1})).view({positions.size(0), 1, positions.size(1), -1});
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

}  // namespace servelab

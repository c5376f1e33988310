#pragma once
// The building blocks every architecture wires: the attention mask of a forward (padding, cache,
// continuous batching), attention over a KV cache (grouped-query too), RMSNorm and rotary position
// embeddings. An architecture file (gpt2_model.cpp, llama_model.cpp) only says which, in what order.
#include <ATen/ATen.h>

#include "model/kv_cache.h"
#include "model/model.h"

namespace servelab {

// Which keys each query of a forward may see: either `causal` (no padding, no past), or `mask`
// [B or 1, 1, T, S] bool, or neither (a single query over all keys).
struct AttentionMask {
  at::Tensor mask;
  bool causal = false;
  int64_t past = 0;      // positions already in the cache before this forward
  int64_t keys = 0;      // S: keys each query sees (past + T, or the per-row width)
  bool per_row = false;  // continuous batching: every row writes at its own position
};
// Throws InputError for an input that is not [batch, tokens] with tokens > 0, whose LoRA rows do
// not match the batch, or that does not fit the cache or the context.
AttentionMask make_attention_mask(const ForwardInput& in, const KvCache* cache, int64_t context,
                                  at::Device device);

struct AttentionParams {
  double scale = 1.0;
  AttentionBackend backend = AttentionBackend::Sdpa;
  // GPT-2's reorder_and_upcast_attn: scores in fp32 for half-precision models.
  bool upcast = false;
  // A CPU decode step (one query per row) reads the cache in place with our kernel
  // (decode_attention.h); false keeps libtorch's SDPA, the baseline paged KV's gather mode measures.
  bool decode_kernel = true;
  // Sliding-window attention: a query sees only the keys fewer than `window` positions before it
  // (itself included); 0: every key the mask allows. Every KV layout keeps all positions and
  // masks the ones outside the window (memory is not freed as the window moves on).
  int64_t window = 0;
  // Gemma 2's attention logit soft-capping, softcap * tanh(scores / softcap) before the mask; 0:
  // none. Runs the manual attention (SDPA has no such hook).
  double softcap = 0;
};

// softmax(q k^T * scale + mask) v for q [B, H, T, D] and k, v [B, H_kv, S, D] (H a multiple of H_kv).
// With params.window, the T queries are taken to sit at key indices S - T .. S - 1 (a prefill, a
// chunk, a padded batch: each row's keys up to its queries, contiguous).
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const AttentionMask& mask,
                  const AttentionParams& params);

// Writes this forward's k and v into the cache (when there is one) and attends q over everything
// the mask lets each row see: the one place that knows the cache's write patterns. Returns
// [B, H, T, D].
at::Tensor cached_attention(int64_t layer, const at::Tensor& q, at::Tensor k, at::Tensor v, KvCache* cache,
                            const ForwardInput& in, const AttentionMask& mask, const AttentionParams& params);

// x * rsqrt(mean(x^2) + eps) * w in fp32, back in x's dtype (Hugging Face's LlamaRMSNorm).
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// Rotary position embeddings as Hugging Face computes them (rotate-half over head_dim), with the
// inverse frequencies fixed at load (rope_theta and any scaling folded in) and cos/sin tables over
// the whole context, so a step only gathers rows by position.
class RotaryEmbedding {
 public:
  RotaryEmbedding() = default;
  // inv_freq: [head_dim / 2] fp32.
  RotaryEmbedding(const at::Tensor& inv_freq, int64_t context, at::Device device, at::ScalarType dtype);
  // q or k [B, H, T, D] at positions [B, T] -> rotated, same shape and dtype. Where inv_freq covers
  // fewer than D / 2 pairs (partial rotary), the dimensions after them pass unrotated.
  at::Tensor apply(const at::Tensor& x, const at::Tensor& positions) const;
  // The tables by position: [context, rotary dimensions] (model/llama_decode_program.h reads them).
  const at::Tensor& cos() const { return cos_; }
  const at::Tensor& sin() const { return sin_; }

 private:
  at::Tensor cos_, sin_;  // [context, head_dim]
};

}  // namespace servelab

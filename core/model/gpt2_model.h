#pragma once
// The GPT-2 forward pass in plain libtorch, in the spirit of gpt-fast: one function per block,
// Conv1D weights used as [in, out] with addmm, explicit position ids and key masks so that a
// left-padded batch computes exactly what each prompt computes alone.
#include <ATen/ATen.h>

#include <memory>

#include "model/gpt2_config.h"
#include "model/gpt2_weights.h"
#include "model/kv_cache.h"
#include "model/linear_kernels.h"

namespace servelab {

class LoraBatch;  // lora/multi_lora.h

enum class AttentionBackend {
  Sdpa,    // at::scaled_dot_product_attention (fused kernels where libtorch has them)
  Manual,  // softmax(q k^T * scale + mask) v: the reference, and the path for old libtorch builds
};

struct ForwardInput {
  at::Tensor input_ids;     // [batch, T] int64
  at::Tensor position_ids;  // [batch, T] int64
  // [batch, past + T] with 1 where a key position holds a real token, 0 for padding.
  // Undefined means every position is real (no padding anywhere).
  at::Tensor key_mask;
  // Logits for every position ([batch, T, vocab]) instead of the last one only ([batch, vocab]).
  bool all_logits = false;
  // Continuous batching over a cache whose rows have different lengths (one new token per row).
  // cache_rows: [batch] int64, the cache row each input row owns (the cache may have more rows
  // than run: free slots or requests sitting the step out); cache_positions: [batch] int64, where
  // each input row writes its new key and value. key_mask is then [cache rows, width] over the
  // cache's first width positions (the new one included): the keys each cache row's query sees;
  // a row that does not run needs some visible key and its output is dropped. The linear layers
  // run over the input rows only; the cache's own length is neither used nor advanced.
  at::Tensor cache_rows = {};
  at::Tensor cache_positions = {};
  // LoRA adapters per input row (lessons 5 and 6): every projection adds its rows' deltas.
  const LoraBatch* lora = nullptr;
};

class Gpt2Model {
 public:
  Gpt2Model(Gpt2Config config, Gpt2Weights weights);
  // A model whose matrices (embeddings, projections, LM head) are run by kernels; weights then
  // holds the LayerNorms and biases, and its matrices may be left undefined.
  Gpt2Model(Gpt2Config config, Gpt2Weights weights, std::shared_ptr<const LinearKernels> kernels);

  // With a cache, T new positions are appended to it and attend to everything cached before;
  // without one, the input is the whole sequence (the teaching contrast: no reuse at all).
  at::Tensor forward(const ForwardInput& in, KvCache* cache = nullptr) const;

  KvCache make_cache(int64_t batch, int64_t capacity) const;

  const Gpt2Config& config() const { return config_; }
  // The tensors the model holds; with kernels, the matrices may be undefined here.
  const Gpt2Weights& weights() const { return weights_; }
  // Every parameter as a plain tensor, rebuilt from the kernels' layout where needed. Throws
  // InputError for a quantized model (its fp32 weights are gone).
  Gpt2Weights dense_weights() const;
  // Of the activations and the KV cache (the LayerNorms' dtype; quantized matrices differ).
  at::Device device() const { return weights_.ln_f_weight.device(); }
  at::ScalarType dtype() const { return weights_.ln_f_weight.scalar_type(); }
  const LinearKernels* kernels() const { return kernels_.get(); }
  // Bytes of weights held while running: the kernels' data plus the plain tensors.
  int64_t resident_bytes() const;

  void set_attention_backend(AttentionBackend b) { backend_ = b; }
  AttentionBackend attention_backend() const { return backend_; }

 private:
  at::Tensor attention(int64_t layer, const Gpt2LayerWeights& w, const at::Tensor& x, const at::Tensor& mask,
                       bool causal, KvCache* cache, const ForwardInput& in) const;
  at::Tensor mlp(int64_t layer, const Gpt2LayerWeights& w, const at::Tensor& x, const LoraBatch* lora) const;
  at::Tensor linear(int64_t layer, LinearSlot slot, const at::Tensor& x, const at::Tensor& weight,
                    const at::Tensor& bias, const LoraBatch* lora) const;
  at::Tensor attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const at::Tensor& mask, bool causal) const;

  Gpt2Config config_;
  Gpt2Weights weights_;
  AttentionBackend backend_ = AttentionBackend::Sdpa;
  std::shared_ptr<const LinearKernels> kernels_;
};

}  // namespace servelab

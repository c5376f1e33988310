#pragma once
// The interface generation, the schedulers, the KV memories and the experiments run a model
// through, whatever its architecture. An architecture (gpt2_model.h, llama_model.h) wires the
// shared layers of layers.h and declares its projections in a table that the loaders, LoRA,
// quantization and the GEMM backends iterate; its record in the registry (architecture.h) says how
// its files load and how it is quantized.
#include <ATen/ATen.h>

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "model/linear_kernels.h"
#include "model/model_shape.h"
#include "model/step_cost.h"
#include "quant/quant_spec.h"

namespace servelab {

class LoraBatch;         // lora/multi_lora.h
struct GraphedKvCache;   // model/decode_graphs.h
struct AttentionMask;    // model/layers.h
struct AttentionParams;  // model/layers.h

// Where one forward's keys and values live in a KvStore, for a caller that reads and writes them
// in place instead of calling attend() per layer (the CPU decode program,
// model/llama_decode_program.h). fp32; layer l's keys start at keys + l * layer_stride (values the
// same in their buffer), and head h of a position at its offset + h * head_stride.
struct KvPlaces {
  // The forward's requests: the packed input's row and first column, the first new position, the
  // new tokens. Positions 0 .. start + count - 1 sit at offsets[first[i] + p]; each new token sees
  // the positions up to its own.
  struct Segment {
    int64_t row = 0, column = 0, start = 0, count = 0;
  };
  float* keys = nullptr;
  float* values = nullptr;
  int64_t layer_stride = 0, head_stride = 0;
  std::vector<Segment> segments;
  std::vector<int64_t> offsets, first;  // first: one per segment, then the end
  void clear() {
    segments.clear();
    offsets.clear();
    first.clear();
  }
};

// KV memory whose layout the model does not know (paged KV): each layer's attention hands it the
// forward's new keys and values and gets the attention output back. q [B, H, T, D], k and v
// [B, H_kv, T, D] -> [B, H, T, D].
class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual at::Tensor attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const AttentionParams& params) = 0;
  // The forward in flight's places into `out`, or false where only attend() can serve it (keys
  // in another dtype or on a GPU, a kernel under comparison that attend() must run). A caller that
  // takes them does attend()'s work itself: writes every new position, then attends causally.
  virtual bool places(KvPlaces& out) const {
    (void)out;
    return false;
  }
};

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
  // Logits at these positions only: [n] int64 indices into the flattened [batch * T] positions,
  // giving [n, vocab]. A packed prefill's requests end mid-row, so "the last of each row" does not
  // name them, and every position's logits would cost the vocabulary projection for each token.
  at::Tensor logit_positions = {};
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
  // Attention through a KV store instead of a KvCache (forward is then called without a cache):
  // the store knows which positions each row holds, so the model's own mask is not used.
  KvStore* kv_store = nullptr;
};

// One weight matrix of a block, as the architecture names it in each file format.
struct Projection {
  LinearSlot slot;
  std::string hf_name;    // inside a block, as Hugging Face and PEFT spell it: "self_attn.q_proj"
  std::string gguf_name;  // llama.cpp's tensor name inside "blk.N.": "attn_q"
  int64_t in = 0, out = 0;
};

// A matrix Hugging Face keeps fused and the record splits at load (Phi-3's self_attn.qkv_proj into
// q, k and v; mlp.gate_up_proj into gate and up): a PEFT adapter names the fused module, and its
// lora_B's rows split the same way, each part keeping lora_A (B A x's rows are each part's).
struct FusedModule {
  std::string hf_name;            // inside a block: "self_attn.qkv_proj"
  std::vector<LinearSlot> parts;  // in row order; each part's rows are its projection's outputs
};

// ModelFormatError naming `source` and the first tensor that holds a NaN or an infinity: a model
// or adapter with such weights would generate garbage from non-finite logits. One pass over the
// weights: one fp32 sum per tensor (its cost: docs/benchmarks.md, "The cost of checking for NaN and
// infinity"), the tensor examined only when the sum is not finite.
void check_finite_tensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                          const std::string& source);

class Model {
 public:
  virtual ~Model() = default;

  // With a cache, T new positions are appended to it and attend to everything cached before;
  // without one, the input is the whole sequence (the teaching contrast: no reuse at all).
  virtual at::Tensor forward(const ForwardInput& in, KvCache* cache = nullptr) const = 0;

  const ModelShape& shape() const { return shape_; }
  // The projections of every block, in the order the architecture computes them.
  const std::vector<Projection>& projections() const { return projections_; }
  const Projection& projection(LinearSlot slot) const;

  // Of the activations and the KV cache.
  virtual at::Device device() const = 0;
  virtual at::ScalarType dtype() const = 0;
  // Bytes of weights held while running: the kernels' data plus the plain tensors.
  virtual int64_t resident_bytes() const = 0;
  // Parameters as the checkpoint counts them (a tied head once).
  virtual int64_t parameter_count() const = 0;
  virtual bool lm_head_tied() const = 0;
  // The tensors the model holds, with Hugging Face's names (matrices that kernels hold in another
  // layout are left out or undefined): what the non-finite check at load reads.
  virtual std::vector<std::pair<std::string, at::Tensor>> named_tensors() const = 0;
  // Its hyperparameters as an HF-style config.json (`info`).
  virtual nlohmann::json config_json() const = 0;
  // The same model (its class, config and attention backend) with its matrices run by the kernels
  // `make` builds over a copy of its plain weights (rebuilt by dense_weights() where kernels hold
  // them now): how the packed GEMMs take any architecture's projections.
  virtual std::unique_ptr<Model> with_kernels(const LinearKernelFactory& make) const = 0;

  // A cache for `batch` rows of `capacity` positions: key/value heads, not query heads.
  KvCache make_cache(int64_t batch, int64_t capacity) const;
  int64_t kv_cache_bytes(int64_t batch, int64_t capacity) const;

  // FLOPs and bytes of a forward pass over this model (model/step_cost.h): its shapes, its
  // projections, its dtype and its weights as quantized.
  StepCostModel cost_model() const;
  // How the weights are stored, when quantized after loading (Engine::quantize says so). A GGUF
  // file's blocks run as stored are counted at the bytes per parameter the kernels hold.
  void set_weight_quantization(const QuantSpec& spec) { weight_quant_ = spec; }

  const LinearKernels* kernels() const { return kernels_.get(); }
  void set_attention_backend(AttentionBackend b) { backend_ = b; }
  AttentionBackend attention_backend() const { return backend_; }
  // CUDA graphs for decode steps on a GPU (model/decode_graphs.h), captured for batch buckets up
  // to max_batch: on unless switched off.
  void set_cuda_graphs(bool on, int64_t max_batch) {
    cuda_graphs_ = on;
    cuda_graph_max_batch_ = max_batch;
  }
  bool cuda_graphs() const { return cuda_graphs_; }
  int64_t cuda_graph_max_batch() const { return cuda_graph_max_batch_; }
  // generate()'s KV caches with their CUDA graphs, kept between runs: one of this batch and
  // capacity kept from an earlier run, else a new one (nullptr when graphs do not run here).
  // Given back with keep_graphed_cache(); the two most recent shapes are kept.
  std::unique_ptr<GraphedKvCache> take_graphed_cache(int64_t batch, int64_t capacity) const;
  void keep_graphed_cache(std::unique_ptr<GraphedKvCache> cache) const;
  // A CPU decode step as one fused program (model/llama_decode_program.h) where the architecture
  // has one: on unless switched off.
  void set_fused_decode(bool on) { fused_decode_ = on; }
  bool fused_decode() const { return fused_decode_; }
  // Why decode steps run op by op rather than as the fused program, or empty when they run fused
  // (a step can still fall back: more rows than it takes, LoRA, paged KV; the docs list them).
  virtual std::string fused_decode_unavailable() const;
  // Decode steps this model has run as the fused program since it was made.
  virtual int64_t fused_decode_steps() const { return 0; }
  // How `other` runs (its attention backend, its CUDA graph and fused decode settings), for a copy.
  void inherit_run_settings(const Model& other) {
    fused_decode_ = other.fused_decode_;
    backend_ = other.backend_;
    cuda_graphs_ = other.cuda_graphs_;
    cuda_graph_max_batch_ = other.cuda_graph_max_batch_;
  }

 protected:
  Model(ModelShape shape, std::vector<Projection> projections, std::shared_ptr<const LinearKernels> kernels)
      : shape_(std::move(shape)), projections_(std::move(projections)), kernels_(std::move(kernels)) {}
  // x [rows, in] through a projection: the kernels when the model has them, else dense() (the
  // architecture's product over its plain weights); plus the rows' LoRA deltas.
  template <typename Dense>
  at::Tensor linear(int64_t layer, LinearSlot slot, const at::Tensor& x, const at::Tensor& bias,
                    const LoraBatch* lora, Dense&& dense) const {
    at::Tensor y = kernels_ ? kernels_->linear(layer, slot, x, bias) : dense();
    return lora ? add_lora(layer, slot, x, std::move(y), *lora) : y;
  }
  // x through several projections of one layer that read it (slots), each with its bias and its
  // rows' LoRA deltas: one product over their matrices side by side when the kernels hold them so
  // (one pass over x and one parallel region instead of one per slot), else linear() per slot.
  // dense(i) is the architecture's product for slots[i].
  template <typename Dense>
  std::vector<at::Tensor> linear_same_input(int64_t layer, const std::vector<LinearSlot>& slots,
                                            const at::Tensor& x, const std::vector<at::Tensor>& biases,
                                            const LoraBatch* lora, Dense&& dense) const {
    const at::Tensor fused = kernels_ ? kernels_->linear_fused(layer, slots, x) : at::Tensor();
    std::vector<at::Tensor> out;
    out.reserve(slots.size());
    int64_t column = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
      at::Tensor y;
      if (fused.defined()) {
        const int64_t n = projection(slots[i]).out;
        y = fused.narrow(1, column, n);
        column += n;
        if (biases[i].defined()) y = y + biases[i];
      } else {
        y = kernels_ ? kernels_->linear(layer, slots[i], x, biases[i]) : dense(i);
      }
      out.push_back(lora ? add_lora(layer, slots[i], x, std::move(y), *lora) : std::move(y));
    }
    return out;
  }
  static at::Tensor add_lora(int64_t layer, LinearSlot slot, const at::Tensor& x, at::Tensor y,
                             const LoraBatch& lora);

  ModelShape shape_;
  std::vector<Projection> projections_;
  std::shared_ptr<const LinearKernels> kernels_;
  AttentionBackend backend_ = AttentionBackend::Sdpa;
  bool cuda_graphs_ = true;
  int64_t cuda_graph_max_batch_ = 128;
  bool fused_decode_ = true;
  struct GraphedKvCaches;  // model.cpp: the kept caches and their lock, made at the first take
  mutable std::once_flag graphed_once_;
  mutable std::shared_ptr<GraphedKvCaches> graphed_;
  QuantSpec weight_quant_;
};

}  // namespace servelab

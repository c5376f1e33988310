#pragma once
// A Llama-family decode step as one program on the CPU. Op by op, a layer is about 25 libtorch
// calls and five parallel regions (norm, q/k/v, rotary, the KV write, attention, the output
// product, residual, norm, gate/up, activation, down, residual), and at batch 1 the host time
// between them is a third of the step. Here every layer runs inside one OpenMP parallel region
// per step: each thread takes its share of every product's output channels and of the
// attention's (row, KV head) items, with a barrier between stages that depend on each other, and
// the element-wise stages run on one thread between them.
//
// It runs the same kernels and loops as the op-by-op forward (DecodeGemv, fused_cpu's rows,
// decode_attention_item_f32, libtorch's own activation), so its logits equal that forward's bit
// for bit; test_decode_program holds it to that.
#include <ATen/ATen.h>

#include <array>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "model/kv_cache.h"
#include "model/layers.h"
#include "model/llama_config.h"
#include "model/model.h"

namespace servelab {

class DecodeGemv;
struct LlamaWeights;

class LlamaDecodeProgram {
 public:
  // The most rows a step may have: the JIT kernels' tiled products end there (kDecodeGemvMaxRows).
  static int64_t max_rows();
  // The program over this model's weights and kernels, or null with the reason in *why_not.
  // cos, sin: the rotary tables [context, head_dim]; local_cos, local_sin: the sliding layers'
  // own tables (Gemma 3's local_rope_theta), undefined where they share the others.
  static std::unique_ptr<LlamaDecodeProgram> make(const LlamaConfig& config, const LlamaWeights& weights,
                                                  const LinearKernels* kernels, const at::Tensor& cos,
                                                  const at::Tensor& sin, const at::Tensor& local_cos,
                                                  const at::Tensor& local_sin, std::string* why_not);
  ~LlamaDecodeProgram();

  // The most new tokens of one request a step through a KvStore's places may hold: a speculative
  // verification's (16 proposals at most, after the token they follow), not a long chunk's, whose
  // many queries libtorch's SDPA serves better.
  static constexpr int64_t kMaxNewTokens = 17;
  // Why this step runs op by op instead, or null when the program takes it: no more rows (input
  // rows times tokens) than its products take; either a KvCache (dense, or slot KV's per-row
  // positions) with one new token per row, or a KvStore's places (paged or slot KV) with requests
  // already past their prompt's first chunk and at most kMaxNewTokens new tokens each; no LoRA, no
  // window cutting into the keys, SDPA's rules, a vector ISA active. Asked every step: plain checks
  // against what make() worked out.
  const char* refuses(const ForwardInput& in, const KvCache* cache, const KvPlaces* places,
                      const AttentionMask& mask, AttentionBackend backend) const;
  // Every layer over x ([B, T, E] fp32, the embedded tokens; replaced by the last layer's output),
  // writing this step's keys and values into the cache, or where places says. Call only when
  // refuses() is null.
  void run(at::Tensor& x, const ForwardInput& in, KvCache* cache, const KvPlaces* places,
           const AttentionMask& mask) const;
  // Steps run so far.
  int64_t steps() const { return steps_.load(std::memory_order_relaxed); }

 private:
  // Products that read one input, their outputs side by side in one buffer (q, k, v; gate, up):
  // one matrix where the kernels hold them as one, else one per slot.
  struct Group {
    std::vector<std::shared_ptr<const DecodeGemv>> parts;
    int64_t width = 0;      // the outputs summed
    size_t kind = 0;        // 0 q/k/v, 1 output, 2 gate/up, 3 down: which operand buffers it uses
    int64_t align() const;  // the column step its operands are prepared in
  };
  struct Layer {
    // Gemma's norms are stored zero-centred and run as 1 + w: these point at 1 + w, computed once.
    const float* attn_norm = nullptr;
    const float* mlp_norm = nullptr;
    const float* q_norm = nullptr;  // Qwen3's and Gemma 3's per-head norms, else null
    const float* k_norm = nullptr;
    // Gemma's norms of each block's output before the residual adds it, else null.
    const float* post_attn_norm = nullptr;
    const float* post_mlp_norm = nullptr;
    const float* cos = nullptr;  // the rotary tables this layer's positions read
    const float* sin = nullptr;
    std::array<const float*, 7> bias{};  // q, k, v, o, gate, up, down: null where none
    Group qkv, o, gate_up, down;
  };
  struct Step;  // llama_decode_program.cpp: one step's buffers and pointers

  LlamaDecodeProgram() = default;
  // One layer on thread tid of threads; previous: the layer whose down product is still to be
  // added to the residual stream, whose buffer `cur` names.
  // scores: this thread's scratch for the attention.
  void run_layer(const Layer& layer, const Layer* previous, int64_t index, int& cur, Step& s,
                 std::vector<float>& scores, int tid, int threads) const;
  // This thread's columns of: the residual (x + add + bias, when add is given; x + post_norm(add)
  // with a post norm, Gemma's) into the other buffer, its RMS norm with `norm` into h (when
  // given), and next's operands from h.
  void residual_norm(const float* add, const float* bias, const float* post, const float* norm,
                     const Group* next, int& cur, Step& s, int tid, int threads) const;
  // g's operands from rows [row0, row1) and columns [col0, col1) of x.
  static void prepare(const Group& g, const float* x, Step& s, int64_t row0, int64_t row1, int64_t col0,
                      int64_t col1);
  // This thread's share of g's output channels, from input x (or the operands prepared from it).
  static void run_group(const Group& g, const float* x, const Step& s, float* y, int tid, int threads);
  // Output channels [begin, end) of g (its parts side by side).
  static void run_channels(const Group& g, const float* x, const Step& s, float* y, int64_t begin,
                           int64_t end);

  LlamaConfig config_;
  std::vector<Layer> layers_;
  std::vector<at::Tensor> kept_;  // the tensors the pointers above read
  double scale_ = 1.0;
  int64_t rows_limit_ = max_rows();  // the fewest rows any of its products takes (DecodeGemv::max_rows)
  bool tiles_follow_isa_ = false;    // some products' rows end at tiled_max_rows(active_isa()) too
  int64_t narrowest_window_ = 0;     // the smallest sliding window of any layer, 0: none
  mutable std::atomic<int64_t> steps_{0};
};

}  // namespace servelab

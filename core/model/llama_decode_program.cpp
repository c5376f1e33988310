#include "model/llama_decode_program.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "model/decode_attention.h"
#include "model/fused_cpu.h"
#include "model/llama_model.h"
#include "quant/dequant_cpu.h"
#include "util/cpu_features.h"

namespace servelab {

namespace {

constexpr int64_t kMaxHeadDim = 512;  // a head normed on the stack
constexpr size_t kGroups = 4;         // q/k/v, output, gate/up, down
constexpr size_t kQ = 0, kK = 1, kV = 2, kO = 3, kGate = 4, kUp = 5, kDown = 6;

const float* fp32_pointer(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous()
             ? t.const_data_ptr<float>()
             : nullptr;
}

// [begin, end) of n items for thread tid of threads, in whole multiples of `align`.
std::pair<int64_t, int64_t> share(int64_t n, int tid, int threads, int64_t align) {
  const int64_t per = ((n + threads - 1) / threads + align - 1) / align * align;
  return {std::min(n, tid * per), std::min(n, (tid + 1) * per)};
}

}  // namespace

// One step's sizes, buffers and the cache's pointers, shared by the threads of the region.
struct LlamaDecodeProgram::Step {
  int64_t B = 0, E = 0, H = 0, H_kv = 0, D = 0, F = 0, qkv_width = 0, keys = 0;
  // The residual stream in two buffers: a stage reads one whole (every thread needs a row's sum
  // of squares) while each thread writes its columns of the other.
  at::Tensor x[2];
  std::vector<float> h, qkv, q, attn, o, gate_up, act, down;
  // Each product's prepared operand, by group and part: a group's own buffers, because a thread
  // prepares the next product's operand while another may still be reading this one's (the down
  // operand after gate/up).
  std::array<std::vector<std::vector<float>>, kGroups> scratch;
  // The keys and values: element strides of layers and heads, the same for K and V.
  float* k_cache = nullptr;
  float* v_cache = nullptr;
  int64_t s_layer = 0, s_head = 0;
  // Per input row (a token: rows times tokens of the input): its position, and where its key and
  // value go within a layer (-1: a packed input's padding, which writes nothing and attends to
  // nothing).
  std::vector<int64_t> position, write;
  // A KvCache: the rows' cache rows, read with strides s_row and s_pos under the mask.
  std::vector<int64_t> row;
  int64_t s_row = 0, s_pos = 0;
  const bool* mask = nullptr;  // by cache row, or null: every key visible
  int64_t mask_row = 0, mask_col = 0;
  // A KvStore's places: the rows' positions' offsets, and how many of them each row sees.
  std::vector<const int64_t*> table;
  std::vector<int64_t> seen;
  at::Tensor gate_up_t, act_t;  // libtorch views of gate_up and act, for the activation
  std::exception_ptr error;     // the first a thread met (the others go on to the barriers)
};

int64_t LlamaDecodeProgram::max_rows() { return kDecodeGemvMaxRows; }

LlamaDecodeProgram::~LlamaDecodeProgram() = default;

std::unique_ptr<LlamaDecodeProgram> LlamaDecodeProgram::make(
    const LlamaConfig& c, const LlamaWeights& w, const LinearKernels* kernels, const at::Tensor& cos,
    const at::Tensor& sin, const at::Tensor& local_cos, const at::Tensor& local_sin, std::string* why_not) {
  auto refuse = [&](const std::string& why) {
    *why_not = why;
    return std::unique_ptr<LlamaDecodeProgram>();
  };
  if (!w.norm.device().is_cpu()) return refuse("the model runs on " + w.norm.device().str());
  if (w.norm.scalar_type() != at::kFloat) return refuse("the activations are not fp32");
  // The final soft-capping is the logits', after the program; the attention's is inside it.
  if (c.attn_logit_softcap > 0) return refuse("Gemma 2's attention soft-capping runs op by op");
  if (!fp32_pointer(cos) || !fp32_pointer(sin) || cos.size(1) != c.head_dim)
    return refuse("partial rotary embeddings run op by op");
  const bool local_tables = c.local_rope_theta > 0;
  if (local_tables &&
      (!fp32_pointer(local_cos) || !fp32_pointer(local_sin) || local_cos.size(1) != c.head_dim))
    return refuse("the sliding layers' rotary tables are not contiguous fp32");
  if (c.head_dim > kMaxHeadDim)
    return refuse("heads wider than " + std::to_string(kMaxHeadDim) + " run op by op");
  if (!kernels) return refuse("the matrices run as plain libtorch tensors (no CPU kernels of ours)");

  auto program = std::unique_ptr<LlamaDecodeProgram>(new LlamaDecodeProgram());
  program->config_ = c;
  program->kept_ = {cos, sin, local_cos, local_sin};
  // A norm's weights as the op-by-op forward applies them: Gemma's 1 + w (the same fp32 sum
  // LlamaModel::norm makes at every call), kept alive by the program.
  auto norm_weights = [&](const at::Tensor& t) -> const float* {
    if (!t.defined()) return nullptr;
    const at::Tensor applied = c.gemma_norms ? t + 1.0 : t;
    program->kept_.push_back(applied);
    return fp32_pointer(applied);
  };
  program->scale_ = 1.0 / std::sqrt(c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar
                                                                : static_cast<double>(c.head_dim));
  static const LinearSlot kSlots[7] = {LinearSlot::Q,    LinearSlot::K,  LinearSlot::V,   LinearSlot::O,
                                       LinearSlot::Gate, LinearSlot::Up, LinearSlot::Down};
  static const char* kNames[4] = {"q/k/v", "output", "gate/up", "down"};
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LlamaLayerWeights& lw = w.layers[static_cast<size_t>(l)];
    Layer layer;
    layer.attn_norm = norm_weights(lw.attn_norm);
    layer.mlp_norm = norm_weights(lw.mlp_norm);
    if (!layer.attn_norm || !layer.mlp_norm) return refuse("the norms' weights are not contiguous fp32");
    if (c.qk_norm) {
      layer.q_norm = norm_weights(lw.q_norm);
      layer.k_norm = norm_weights(lw.k_norm);
      if (!layer.q_norm || !layer.k_norm) return refuse("the QK norms' weights are not contiguous fp32");
    }
    if (lw.post_attn_norm.defined() || lw.post_mlp_norm.defined()) {
      layer.post_attn_norm = norm_weights(lw.post_attn_norm);
      layer.post_mlp_norm = norm_weights(lw.post_mlp_norm);
      if (!layer.post_attn_norm || !layer.post_mlp_norm)
        return refuse("the post norms' weights are not contiguous fp32");
    }
    for (size_t k = 0; k < 7; ++k) {
      if (!lw.b[k].defined()) continue;
      // A biased product under a post norm: none of the families has one, so no loop for it.
      if (layer.post_attn_norm) return refuse("biases beside post norms run op by op");
      layer.bias[k] = fp32_pointer(lw.b[k]);
      if (!layer.bias[k]) return refuse("a bias is not contiguous fp32");
      program->kept_.push_back(lw.b[k]);
    }
    // The sliding layers' own rotary tables where the model has them (LlamaModel::attention).
    const bool local = local_tables && c.window_of(l) > 0;
    layer.cos = fp32_pointer(local ? local_cos : cos);
    layer.sin = fp32_pointer(local ? local_sin : sin);
    // Each group: the kernels' one matrix for the slots together, else one per slot.
    auto group = [&](size_t k0, size_t n, Group& g) {
      g.kind = k0 == kQ ? 0 : k0 == kO ? 1 : k0 == kGate ? 2 : 3;
      std::vector<LinearSlot> slots(kSlots + k0, kSlots + k0 + n);
      if (auto all = kernels->decode_gemv(l, slots)) {
        g.parts.push_back(std::move(all));
      } else {
        for (LinearSlot s : slots) {
          auto one = kernels->decode_gemv(l, {s});
          if (!one) return false;
          g.parts.push_back(std::move(one));
        }
      }
      for (const auto& p : g.parts) g.width += p->out();
      return true;
    };
    const bool ok[4] = {group(kQ, 3, layer.qkv), group(kO, 1, layer.o), group(kGate, 2, layer.gate_up),
                        group(kDown, 1, layer.down)};
    for (int i = 0; i < 4; ++i)
      if (!ok[i])
        return refuse("the kernels (" + kernels->description() + ") have no decode GEMV for the " +
                      kNames[i] + " products");
    for (const Group* g : {&layer.qkv, &layer.o, &layer.gate_up, &layer.down})
      for (const auto& p : g->parts) {
        if (p->rows_follow_isa())
          program->tiles_follow_isa_ = true;  // checked against the ISA of each step
        else
          program->rows_limit_ = std::min(program->rows_limit_, p->max_rows());
      }
    const int64_t window = c.window_of(l);
    if (window > 0 && (program->narrowest_window_ == 0 || window < program->narrowest_window_))
      program->narrowest_window_ = window;
    program->layers_.push_back(std::move(layer));
  }
  return program;
}

const char* LlamaDecodeProgram::refuses(const ForwardInput& in, const KvCache* cache, const KvPlaces* places,
                                        const AttentionMask& m, AttentionBackend backend) const {
  if (in.lora) return "LoRA adapters run op by op";
  const int64_t T = in.input_ids.size(1);
  int64_t widest = m.keys;  // the most keys a query sees
  if (in.kv_store) {
    if (!places) return "the KV store keeps its keys where only its own attention reads them";
    widest = 0;
    for (const KvPlaces::Segment& sg : places->segments) {
      if (sg.start == 0) return "a prompt's first chunk runs op by op";
      if (sg.count > kMaxNewTokens) return "a chunk of many new tokens runs op by op";
      widest = std::max(widest, sg.start + sg.count);
    }
  } else {
    if (!cache) return "no KV cache";
    if (T != 1) return "several new tokens per row of a KV cache (a prompt or a chunk)";
  }
  const int64_t rows = in.input_ids.size(0) * T;
  if (rows > rows_limit_)
    return rows_limit_ < max_rows() ? "a plain fp32 matrix past the register GEMV's rows (libtorch's GEMM)"
                                    : "more rows than the tiled products take";
  const Isa isa = active_isa();
  if (isa != Isa::Avx512 && isa != Isa::Avx2) return "the portable ISA runs op by op";
  if (tiles_follow_isa_ && rows > std::max(kFusedGemvMaxRows, tiled_max_rows(isa)))
    return "more rows than the tiled products beat dequantize-once at under this ISA";
  if (backend != AttentionBackend::Sdpa) return "the manual attention backend runs op by op";
  if (narrowest_window_ > 0 && widest > narrowest_window_) return "the sliding window cuts into the keys";
  if (places) return nullptr;
  const at::Tensor& k = cache->keys();
  const at::Tensor& v = cache->values();
  if (k.scalar_type() != at::kFloat || v.scalar_type() != at::kFloat || k.strides() != v.strides() ||
      k.stride(4) != 1)
    return "a KV cache in another dtype or layout";
  if (m.mask.defined() && (m.mask.scalar_type() != at::kBool || m.mask.dim() != 4 || m.mask.size(1) != 1 ||
                           m.mask.size(2) != 1 || m.mask.size(3) != m.keys))
    return "an attention mask of another shape";
  return nullptr;
}

void LlamaDecodeProgram::run_channels(const Group& g, const float* x, const Step& s, float* y, int64_t begin,
                                      int64_t end) {
  int64_t offset = 0;
  for (size_t i = 0; i < g.parts.size(); ++i) {
    const DecodeGemv& p = *g.parts[i];
    const int64_t lo = std::max(begin, offset), hi = std::min(end, offset + p.out());
    if (lo < hi)
      p.run(p.prepares(s.B) ? s.scratch[g.kind][i].data() : x, s.B, lo - offset, hi - offset, y + offset,
            g.width);
    offset += p.out();
  }
}

void LlamaDecodeProgram::run_group(const Group& g, const float* x, const Step& s, float* y, int tid,
                                   int threads) {
  const auto [begin, end] = share(g.width, tid, threads, 16);
  run_channels(g, x, s, y, begin, end);
}

int64_t LlamaDecodeProgram::Group::align() const {
  int64_t a = 1;
  for (const auto& p : parts) a = std::max(a, p->operand_align());
  return a;
}

void LlamaDecodeProgram::prepare(const Group& g, const float* x, Step& s, int64_t row0, int64_t row1,
                                 int64_t col0, int64_t col1) {
  for (size_t i = 0; i < g.parts.size(); ++i)
    g.parts[i]->prepare(x, s.B, s.scratch[g.kind][i].data(), row0, row1, col0, col1);
}

void LlamaDecodeProgram::residual_norm(const float* add, const float* bias, const float* post,
                                       const float* norm, const Group* next, int& cur, Step& s, int tid,
                                       int threads) const {
  const int64_t E = s.E;
  const float* x = s.x[cur].const_data_ptr<float>();
  float* y = s.x[1 - cur].mutable_data_ptr<float>();
  const auto [c0, c1] = share(E, tid, threads, next ? std::max<int64_t>(16, next->align()) : 16);
  // A post-normed block output (Gemma), whole on every thread: the residual's norm needs the
  // row's every value. One buffer per thread, kept between calls.
  thread_local std::vector<float> normed;
  if (post && add) normed.resize(static_cast<size_t>(E));
  for (int64_t b = 0; b < s.B; ++b) {
    const float* xb = x + b * E;
    const float* ab = add ? add + b * E : nullptr;
    float* yb = add ? y + b * E : nullptr;
    if (post && ab) {
      // The op-by-op forward's norm(block output, post) as a tensor, then x + it.
      fused_cpu::rms_norm_apply(ab, post,
                                fused_cpu::rms_norm_scale(ab, nullptr, nullptr, E, config_.rms_norm_eps), 0,
                                E, normed.data());
      ab = normed.data();
    }
    // Every thread sums the whole row (the same sums in the same order, so the same scale), then
    // writes its own columns.
    const float scale = norm ? fused_cpu::rms_norm_scale(xb, ab, bias, E, config_.rms_norm_eps) : 0.0f;
    if (add)
      for (int64_t i = c0; i < c1; ++i) yb[i] = xb[i] + (bias ? ab[i] + bias[i] : ab[i]);
    if (norm) fused_cpu::rms_norm_apply(add ? yb : xb, norm, scale, c0, c1, s.h.data() + b * E);
  }
  if (next) prepare(*next, s.h.data(), s, 0, s.B, c0, c1);
  if (add) cur = 1 - cur;
}

void LlamaDecodeProgram::run_layer(const Layer& L, const Layer* previous, int64_t index, int& cur, Step& s,
                                   std::vector<float>& scores, int tid, int threads) const {
  const int64_t B = s.B, H = s.H, H_kv = s.H_kv, D = s.D, F = s.F, G = H / H_kv;
  const double eps = config_.rms_norm_eps;

  // The previous layer's residual (none before the first), the input norm, the q/k/v operands.
  residual_norm(previous ? s.down.data() : nullptr, previous ? previous->bias[kDown] : nullptr,
                previous ? previous->post_mlp_norm : nullptr, L.attn_norm, &L.qkv, cur, s, tid, threads);
#pragma omp barrier
  // The q/k/v product in whole heads, then, for the heads this thread computed, without waiting
  // for the others: the bias, QK-norm and rotation of q and k; k and v written into the cache.
  {
    const int64_t Q = H * D, K = H_kv * D;
    const auto [begin, end] = share(s.qkv_width, tid, threads, D);
    run_channels(L.qkv, s.h.data(), s, s.qkv.data(), begin, end);
    float normed[kMaxHeadDim];
    for (int64_t b = 0; b < B; ++b) {
      if (s.write[static_cast<size_t>(b)] < 0) continue;  // padding
      const float* position_cos = L.cos + s.position[static_cast<size_t>(b)] * D;
      const float* position_sin = L.sin + s.position[static_cast<size_t>(b)] * D;
      const int64_t cached = index * s.s_layer + s.write[static_cast<size_t>(b)];
      for (int64_t head = begin / D; head < end / D; ++head) {
        float* src = s.qkv.data() + b * s.qkv_width + head * D;
        const int64_t column = head * D;
        const bool is_q = column < Q, is_k = !is_q && column < Q + K;
        const float* bias = is_q ? L.bias[kQ] : is_k ? L.bias[kK] : L.bias[kV];
        const int64_t h = is_q ? head : is_k ? head - H : head - H - H_kv;
        if (bias)
          for (int64_t i = 0; i < D; ++i) src[i] += bias[h * D + i];
        if (!is_q && !is_k) {
          std::memcpy(s.v_cache + cached + h * s.s_head, src, static_cast<size_t>(D) * sizeof(float));
          continue;
        }
        const float* norm = is_q ? L.q_norm : L.k_norm;
        if (norm) {
          fused_cpu::rms_norm_row(src, norm, D, eps, normed);
          std::memcpy(src, normed, static_cast<size_t>(D) * sizeof(float));
        }
        float* dst = is_q ? s.q.data() + (b * H + h) * D : s.k_cache + cached + h * s.s_head;
        fused_cpu::rotary_row(src, position_cos, position_sin, D, dst);
      }
    }
  }
#pragma omp barrier
  // Attention per (row, KV head), each reading its cache row in place; a thread that holds all of
  // a row's heads, or the heads of whole operand groups, prepares the output product's operand
  // for them itself, else after a barrier.
  {
    const int64_t align = L.o.align();
    const bool own_columns = (G * D) % align == 0;
    const auto [begin, end] = share(B * H_kv, tid, threads, 1);
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / H_kv, h = item % H_kv;
      const float* q = s.q.data() + (b * H + h * G) * D;
      float* out = s.attn.data() + (b * H + h * G) * D;
      if (!s.table.empty()) {
        // A KvStore's places: the row's positions wherever they are, up to its own.
        const int64_t* table = s.table[static_cast<size_t>(b)];
        if (table)
          decode_attention_item_f32_at(q, G, D, s.k_cache + index * s.s_layer, s.v_cache + index * s.s_layer,
                                       table, h * s.s_head, s.seen[static_cast<size_t>(b)],
                                       static_cast<float>(scale_), scores.data(), out);
        else
          std::fill(out, out + G * D, 0.0f);  // padding attends to nothing
        continue;
      }
      const int64_t r = s.row[static_cast<size_t>(b)];
      decode_attention_item_f32(q, G, D, s.k_cache, s.v_cache, index * s.s_layer + r * s.s_row + h * s.s_head,
                                s.s_pos, s.mask ? s.mask + r * s.mask_row : nullptr, s.mask_col, s.keys,
                                static_cast<float>(scale_), scores.data(), out);
    }
    if (own_columns) {
      // The items are (row, head) in order: this thread's columns of each row it touched.
      for (int64_t item = begin; item < end;) {
        const int64_t b = item / H_kv, h0 = item % H_kv, h1 = std::min(H_kv, h0 + (end - item));
        prepare(L.o, s.attn.data(), s, b, b + 1, h0 * G * D, h1 * G * D);
        item += h1 - h0;
      }
    }
#pragma omp barrier
    if (!own_columns) {
      const auto [c0, c1] = share(H * D, tid, threads, align);
      prepare(L.o, s.attn.data(), s, 0, B, c0, c1);
#pragma omp barrier
    }
  }
  run_group(L.o, s.attn.data(), s, s.o.data(), tid, threads);
#pragma omp barrier
  // The residual, the MLP's norm and the gate/up operands.
  residual_norm(s.o.data(), L.bias[kO], L.post_attn_norm, L.mlp_norm, &L.gate_up, cur, s, tid, threads);
#pragma omp barrier
  // Gate and up for the same columns on one thread, then their activation through libtorch's own
  // kernel (its vectorized exp), so the bits are the op-by-op forward's: the columns start at
  // multiples of 64, so each element takes the vector or the scalar path it takes there. Then the
  // down operand of those columns.
  {
    const auto [c0, c1] = share(F, tid, threads, std::max<int64_t>(64, L.down.align()));
    if (c0 < c1) {
      run_channels(L.gate_up, s.h.data(), s, s.gate_up.data(), c0, c1);
      run_channels(L.gate_up, s.h.data(), s, s.gate_up.data(), F + c0, F + c1);
      for (int64_t b = 0; b < B; ++b) {
        float* gu = s.gate_up.data() + b * 2 * F;
        if (L.bias[kGate])
          for (int64_t i = c0; i < c1; ++i) gu[i] += L.bias[kGate][i];
        if (L.bias[kUp])
          for (int64_t i = c0; i < c1; ++i) gu[F + i] += L.bias[kUp][i];
      }
      try {
        const at::Tensor gate = s.gate_up_t.narrow(1, c0, c1 - c0),
                         up = s.gate_up_t.narrow(1, F + c0, c1 - c0);
        at::Tensor act = s.act_t.narrow(1, c0, c1 - c0);
        if (config_.hidden_act == "silu")
          at::silu_out(act, gate);
        else
          at::gelu_out(act, gate, "tanh");
        act.mul_(up);
      } catch (...) {
#pragma omp critical(servelab_decode_program_error)
        if (!s.error) s.error = std::current_exception();
      }
      prepare(L.down, s.act.data(), s, 0, B, c0, c1);
    }
  }
#pragma omp barrier
  run_group(L.down, s.act.data(), s, s.down.data(), tid, threads);
#pragma omp barrier
}

void LlamaDecodeProgram::run(at::Tensor& x, const ForwardInput& in, KvCache* cache, const KvPlaces* places,
                             const AttentionMask& m) const {
  Step s;
  const int64_t T = in.input_ids.size(1);
  s.B = in.input_ids.size(0) * T;  // every token is a row of the products
  s.E = config_.hidden_size;
  s.H = config_.n_head;
  s.H_kv = config_.n_kv_head;
  s.D = config_.head_dim;
  s.F = config_.intermediate_size;
  s.qkv_width = layers_.front().qkv.width;
  const int64_t B = s.B;
  s.x[0] = x.clone(at::MemoryFormat::Contiguous);  // written in place from the second layer on
  s.x[1] = at::empty_like(s.x[0]);
  s.h.resize(static_cast<size_t>(B * s.E));
  s.qkv.resize(static_cast<size_t>(B * s.qkv_width));
  s.q.resize(static_cast<size_t>(B * s.H * s.D));
  s.attn.resize(static_cast<size_t>(B * s.H * s.D));
  s.o.resize(static_cast<size_t>(B * s.E));
  s.gate_up.resize(static_cast<size_t>(B * 2 * s.F));
  s.act.resize(static_cast<size_t>(B * s.F));
  s.down.resize(static_cast<size_t>(B * s.E));
  for (const Layer& l : layers_)
    for (const Group* g : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      auto& scratch = s.scratch[g->kind];
      for (size_t i = 0; i < g->parts.size(); ++i) {
        if (scratch.size() <= i) scratch.resize(i + 1);
        scratch[i].resize(std::max(scratch[i].size(), static_cast<size_t>(g->parts[i]->operand_floats(B))));
      }
    }
  const auto options = at::TensorOptions().dtype(at::kFloat);
  s.gate_up_t = at::from_blob(s.gate_up.data(), {B, 2 * s.F}, options);
  s.act_t = at::from_blob(s.act.data(), {B, s.F}, options);

  const at::Tensor positions = in.position_ids.to(at::kLong).contiguous();
  s.position.assign(positions.const_data_ptr<int64_t>(), positions.const_data_ptr<int64_t>() + B);
  at::Tensor mask;
  if (places) {
    // Each request's tokens sit at (row, column + t) of the packed input and see its positions up
    // to their own; the columns no request holds are padding.
    s.k_cache = places->keys;
    s.v_cache = places->values;
    s.s_layer = places->layer_stride;
    s.s_head = places->head_stride;
    s.write.assign(static_cast<size_t>(B), -1);
    s.table.assign(static_cast<size_t>(B), nullptr);
    s.seen.assign(static_cast<size_t>(B), 0);
    for (size_t i = 0; i < places->segments.size(); ++i) {
      const KvPlaces::Segment& sg = places->segments[i];
      const int64_t* table = places->offsets.data() + places->first[i];
      for (int64_t t = 0; t < sg.count; ++t) {
        const size_t r = static_cast<size_t>(sg.row * T + sg.column + t);
        s.write[r] = table[sg.start + t];
        s.table[r] = table;
        s.seen[r] = sg.start + t + 1;
        s.keys = std::max(s.keys, sg.start + t + 1);
      }
    }
    for (size_t r = 0; r < s.position.size(); ++r)
      if (!s.table[r]) s.position[r] = 0;  // padding's position may be anything; it is not rotated
  } else {
    s.keys = m.keys;
    s.k_cache = cache->keys().mutable_data_ptr<float>();
    s.v_cache = cache->values().mutable_data_ptr<float>();
    s.s_layer = cache->keys().stride(0);
    s.s_row = cache->keys().stride(1);
    s.s_head = cache->keys().stride(2);
    s.s_pos = cache->keys().stride(3);
    std::vector<int64_t> write(static_cast<size_t>(B));
    if (m.per_row) {
      // Slot KV: each row writes its cache row at its own position and reads the first `keys`.
      const at::Tensor rows = in.cache_rows.to(at::kLong).contiguous();
      const at::Tensor at = in.cache_positions.to(at::kLong).contiguous();
      s.row.assign(rows.const_data_ptr<int64_t>(), rows.const_data_ptr<int64_t>() + B);
      write.assign(at.const_data_ptr<int64_t>(), at.const_data_ptr<int64_t>() + B);
    } else {
      // The dense cache: row b writes after the positions every row holds.
      s.row.resize(static_cast<size_t>(B));
      for (int64_t b = 0; b < B; ++b) s.row[static_cast<size_t>(b)] = b;
      write.assign(static_cast<size_t>(B), cache->length());
    }
    s.write.resize(static_cast<size_t>(B));
    for (size_t b = 0; b < s.write.size(); ++b) s.write[b] = s.row[b] * s.s_row + write[b] * s.s_pos;
    if (m.mask.defined()) {
      mask = m.mask.contiguous();
      s.mask = mask.const_data_ptr<bool>();
      s.mask_row = mask.size(0) > 1 ? mask.stride(0) : 0;
      s.mask_col = mask.stride(3);
    }
  }

  const int threads = std::max(1, at::get_num_threads());
  int last = 0;  // which buffer holds the residual stream at the end (the same on every thread)
  // InferenceMode is per thread: the region's threads take the caller's, so that the activation's
  // libtorch call may write the step's (inference) tensors.
  const bool inference = c10::InferenceMode::is_enabled();
#pragma omp parallel num_threads(threads)
  {
    c10::InferenceMode guard(inference);
    const int tid = omp_get_thread_num(), team = omp_get_num_threads();
    int cur = 0;
    // This thread's attention scores for every layer (their size depends on the step only).
    std::vector<float> scores(static_cast<size_t>(s.H / s.H_kv * (s.keys + 16)));
    for (size_t l = 0; l < layers_.size(); ++l)
      run_layer(layers_[l], l > 0 ? &layers_[l - 1] : nullptr, static_cast<int64_t>(l), cur, s, scores, tid,
                team);
    residual_norm(s.down.data(), layers_.back().bias[kDown], layers_.back().post_mlp_norm, nullptr, nullptr,
                  cur, s, tid, team);
    if (tid == 0) last = cur;
  }
  if (s.error) std::rethrow_exception(s.error);
  x = s.x[last];
  steps_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace servelab

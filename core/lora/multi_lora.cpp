#include "lora/multi_lora.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <map>

#include "util/cpu_features.h"
#include "util/errors.h"

namespace servelab {

namespace {

// Every slot of every architecture: an adapter holds the ones its model's table has.
constexpr std::array<LinearSlot, kLinearSlotCount> kSlots = {
    LinearSlot::Attn, LinearSlot::AttnProj, LinearSlot::Fc,  LinearSlot::MlpProj,
    LinearSlot::Q,    LinearSlot::K,        LinearSlot::V,   LinearSlot::O,
    LinearSlot::Gate, LinearSlot::Up,       LinearSlot::Down};
static_assert(static_cast<int>(LinearSlot::Down) + 1 == kLinearSlotCount, "kSlots lists every LinearSlot");

// The loops below are written once and inlined into one wrapper per ISA (compiled for that
// target), the wrapper picked by active_isa() at each call.
#define SERVELAB_CLONES inline __attribute__((always_inline))

// Segmented LoRA on the CPU in fp32 for the token rows `rows` of one segment: t = x A (r values),
// y += scale * t B. A [in, r] and B [r, out] are read once per segment and stay in cache across its
// rows; x and y rows are addressed in place, so the batch is neither gathered nor scattered. With
// the rank known at compile time the r accumulators live in registers, x A vectorizes across r and
// t B across the outputs, and y is read and written once.
template <int R>
SERVELAB_CLONES void lora_rows_fixed(const float* __restrict x, int64_t in, float* __restrict y, int64_t out,
                                     const int64_t* __restrict rows, int64_t n, const float* __restrict A,
                                     const float* __restrict B, float scale) {
  for (int64_t i = 0; i < n; ++i) {
    const float* __restrict xr = x + rows[i] * in;
    float* __restrict yr = y + rows[i] * out;
    // Four independent accumulator sets: one chain of dependent FMAs would wait on each other.
    float t0[R] = {}, t1[R] = {}, t2[R] = {}, t3[R] = {};
    int64_t k = 0;
    for (; k + 4 <= in; k += 4) {
      const float* __restrict a = A + k * R;
      for (int j = 0; j < R; ++j) {
        t0[j] += xr[k] * a[j];
        t1[j] += xr[k + 1] * a[R + j];
        t2[j] += xr[k + 2] * a[2 * R + j];
        t3[j] += xr[k + 3] * a[3 * R + j];
      }
    }
    for (; k < in; ++k)
      for (int j = 0; j < R; ++j) t0[j] += xr[k] * A[k * R + j];
    float t[R];
    for (int j = 0; j < R; ++j) t[j] = ((t0[j] + t1[j]) + (t2[j] + t3[j])) * scale;
    for (int64_t o = 0; o < out; ++o) {
      float s = 0.f;
      for (int j = 0; j < R; ++j) s += t[j] * B[j * out + o];
      yr[o] += s;
    }
  }
}

SERVELAB_CLONES
void lora_rows_any(const float* __restrict x, int64_t in, float* __restrict y, int64_t out,
                   const int64_t* __restrict rows, int64_t n, const float* __restrict A,
                   const float* __restrict B, int64_t r, float scale, float* __restrict t) {
  for (int64_t i = 0; i < n; ++i) {
    const float* __restrict xr = x + rows[i] * in;
    float* __restrict yr = y + rows[i] * out;
    for (int64_t j = 0; j < r; ++j) t[j] = 0.f;
    for (int64_t k = 0; k < in; ++k) {
      const float xv = xr[k];
      const float* __restrict a = A + k * r;
      for (int64_t j = 0; j < r; ++j) t[j] += xv * a[j];
    }
    for (int64_t j = 0; j < r; ++j) {
      const float tj = t[j] * scale;
      const float* __restrict b = B + j * out;
      for (int64_t o = 0; o < out; ++o) yr[o] += tj * b[o];
    }
  }
}

SERVELAB_CLONES void lora_segment_rows_any_isa(const float* x, int64_t in, float* y, int64_t out,
                                               const int64_t* rows, int64_t n, const float* A, const float* B,
                                               int64_t r, float scale, float* t) {
  switch (r) {
    case 1:
      return lora_rows_fixed<1>(x, in, y, out, rows, n, A, B, scale);
    case 2:
      return lora_rows_fixed<2>(x, in, y, out, rows, n, A, B, scale);
    case 4:
      return lora_rows_fixed<4>(x, in, y, out, rows, n, A, B, scale);
    case 8:
      return lora_rows_fixed<8>(x, in, y, out, rows, n, A, B, scale);
    case 16:
      return lora_rows_fixed<16>(x, in, y, out, rows, n, A, B, scale);
    case 32:
      return lora_rows_fixed<32>(x, in, y, out, rows, n, A, B, scale);
    default:
      return lora_rows_any(x, in, y, out, rows, n, A, B, r, scale, t);
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) void lora_segment_rows_avx512(const float* x, int64_t in, float* y,
                                                                 int64_t out, const int64_t* rows, int64_t n,
                                                                 const float* A, const float* B, int64_t r,
                                                                 float scale, float* t) {
  lora_segment_rows_any_isa(x, in, y, out, rows, n, A, B, r, scale, t);
}
__attribute__((target("avx2,fma,f16c"))) void lora_segment_rows_avx2(const float* x, int64_t in, float* y,
                                                                     int64_t out, const int64_t* rows,
                                                                     int64_t n, const float* A,
                                                                     const float* B, int64_t r, float scale,
                                                                     float* t) {
  lora_segment_rows_any_isa(x, in, y, out, rows, n, A, B, r, scale, t);
}
#endif

void lora_segment_rows(Isa isa, const float* x, int64_t in, float* y, int64_t out, const int64_t* rows,
                       int64_t n, const float* A, const float* B, int64_t r, float scale, float* t) {
#if defined(__x86_64__) && defined(__GNUC__)
  switch (isa) {
    case Isa::Avx512:
      return lora_segment_rows_avx512(x, in, y, out, rows, n, A, B, r, scale, t);
    case Isa::Avx2:
      return lora_segment_rows_avx2(x, in, y, out, rows, n, A, B, r, scale, t);
    case Isa::Generic:
      break;
  }
#endif
  lora_segment_rows_any_isa(x, in, y, out, rows, n, A, B, r, scale, t);
}

}  // namespace

LoraStack::LoraStack(const std::vector<const LoraAdapter*>& adapters) : adapters_(adapters) {
  if (adapters.empty()) return;
  const int64_t n_layer = adapters.front()->n_layer();
  a_.resize(static_cast<size_t>(n_layer) * kLinearSlotCount);
  b_.resize(a_.size());
  const int64_t n = static_cast<int64_t>(adapters.size());
  for (int64_t l = 0; l < n_layer; ++l) {
    for (LinearSlot s : kSlots) {
      int64_t r_max = 0, in = 0, out = 0;
      at::TensorOptions opts;
      for (const LoraAdapter* ad : adapters) {
        if (ad->n_layer() != n_layer) throw InputError("adapters of different models cannot share a batch");
        const LoraWeights& w = ad->weights(l, s);
        if (!w.defined()) continue;
        r_max = std::max(r_max, w.rank());
        in = w.a.size(0);
        out = w.b.size(1);
        opts = w.a.options();
      }
      if (r_max == 0) continue;
      at::Tensor A = at::zeros({n + 1, in, r_max}, opts);
      at::Tensor B = at::zeros({n + 1, r_max, out}, opts);
      for (int64_t i = 0; i < n; ++i) {
        const LoraWeights& w = adapters[static_cast<size_t>(i)]->weights(l, s);
        if (!w.defined()) continue;
        A[i + 1].narrow(1, 0, w.rank()).copy_(w.a);
        B[i + 1].narrow(0, 0, w.rank()).copy_(w.b * w.scale);
      }
      a_[key(l, s)] = A;
      b_[key(l, s)] = B;
    }
  }
}

int64_t LoraStack::index_of(const LoraAdapter* adapter) const {
  if (!adapter) return 0;
  auto it = std::find(adapters_.begin(), adapters_.end(), adapter);
  if (it == adapters_.end())
    throw InputError("adapter '" + adapter->name() + "' is not in the gathered stack");
  return 1 + (it - adapters_.begin());
}

int64_t LoraStack::bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < a_.size(); ++i)
    if (a_[i].defined()) n += a_[i].numel() * a_[i].element_size() + b_[i].numel() * b_[i].element_size();
  return n;
}

LoraBatch::LoraBatch(std::vector<const LoraAdapter*> rows, MultiLoraStrategy strategy,
                     std::shared_ptr<const LoraStack> stack)
    : rows_(std::move(rows)), strategy_(strategy), stack_(std::move(stack)) {
  std::map<const LoraAdapter*, size_t> seg_of;
  for (size_t b = 0; b < rows_.size(); ++b) {
    const LoraAdapter* a = rows_[b];
    if (!a) continue;
    auto [it, inserted] = seg_of.emplace(a, segments_.size());
    if (inserted) segments_.push_back({a, {}});
    segments_[it->second].rows.push_back(static_cast<int64_t>(b));
  }
  if (segments_.empty()) return;
  const int64_t n_layer = segments_.front().adapter->n_layer();
  for (const Segment& s : segments_)
    if (s.adapter->n_layer() != n_layer)
      throw InputError("adapter '" + s.adapter->name() +
                       "' has a different number of layers than the batch's others");
  if (strategy_ == MultiLoraStrategy::Gathered) {
    if (!stack_) {
      std::vector<const LoraAdapter*> distinct;
      for (const Segment& s : segments_) distinct.push_back(s.adapter);
      stack_ = std::make_shared<LoraStack>(distinct);
    }
    std::vector<int64_t> idx;
    for (const LoraAdapter* a : rows_) idx.push_back(stack_->index_of(a));
    at::Device dev = at::kCPU;
    for (LinearSlot s : kSlots)
      for (int64_t l = 0; l < n_layer; ++l)
        if (segments_.front().adapter->weights(l, s).defined())
          dev = segments_.front().adapter->weights(l, s).a.device();
    stack_index_ = at::tensor(idx, at::TensorOptions().dtype(at::kLong)).to(dev);
  }
}

at::Tensor LoraBatch::apply(int64_t layer, LinearSlot slot, const at::Tensor& x, at::Tensor y) const {
  if (segments_.empty()) return y;
  const int64_t B = rows();
  if (x.dim() != 2 || x.size(0) % B != 0)
    throw InputError("LoRA batch of " + std::to_string(B) + " rows applied to an input of " +
                     std::to_string(x.size(0)) + " positions");
  const int64_t T = x.size(0) / B;
  switch (strategy_) {
    case MultiLoraStrategy::Loop:
      return loop(layer, slot, x, std::move(y), T);
    case MultiLoraStrategy::Gathered:
      return gathered(layer, slot, x, std::move(y), T);
    case MultiLoraStrategy::Segmented:
      return segmented(layer, slot, x, std::move(y), T);
  }
  return y;
}

at::Tensor LoraBatch::loop(int64_t layer, LinearSlot slot, const at::Tensor& x, at::Tensor y,
                           int64_t T) const {
  // The course's loop: y[i] += x[i] @ A_i @ B_i, one batch row at a time.
  for (int64_t b = 0; b < rows(); ++b) {
    const LoraAdapter* a = rows_[static_cast<size_t>(b)];
    if (!a) continue;
    const LoraWeights& w = a->weights(layer, slot);
    if (!w.defined()) continue;
    y.narrow(0, b * T, T).add_(at::matmul(at::matmul(x.narrow(0, b * T, T), w.a), w.b), w.scale);
  }
  return y;
}

at::Tensor LoraBatch::gathered(int64_t layer, LinearSlot slot, const at::Tensor& x, at::Tensor y,
                               int64_t T) const {
  const at::Tensor& As = stack_->a(layer, slot);
  if (!As.defined()) return y;
  const at::Tensor& Bs = stack_->b(layer, slot);
  // The course's: lora_a = index_select(loras_a, 0, idx); y += x @ lora_a @ lora_b.
  at::Tensor a = at::index_select(As, 0, stack_index_);  // [rows, in, r]
  at::Tensor b = at::index_select(Bs, 0, stack_index_);  // [rows, r, out]
  const int64_t B = rows();
  at::Tensor delta = at::bmm(at::bmm(x.view({B, T, x.size(1)}), a), b);
  y.view({B, T, y.size(1)}).add_(delta);
  return y;
}

at::Tensor LoraBatch::segmented(int64_t layer, LinearSlot slot, const at::Tensor& x_in, at::Tensor y,
                                int64_t T) const {
  const bool fast =
      x_in.device().is_cpu() && x_in.scalar_type() == at::kFloat && y.scalar_type() == at::kFloat;
  if (!y.is_contiguous()) y = y.contiguous();
  const at::Tensor x = x_in.contiguous();
  const int64_t in = x.size(1), out = y.size(1);

  // Segments large enough for a GEMM (prefill) go through libtorch's; short ones (decode) through
  // the fused kernel, split into work items for the intra-op threads.
  struct Item {
    const LoraWeights* w;
    std::vector<int64_t> rows;  // token rows
  };
  std::vector<Item> items;
  for (const Segment& s : segments_) {
    const LoraWeights& w = s.adapter->weights(layer, slot);
    if (!w.defined()) continue;
    std::vector<int64_t> tok;
    tok.reserve(s.rows.size() * static_cast<size_t>(T));
    for (int64_t b : s.rows)
      for (int64_t t = 0; t < T; ++t) tok.push_back(b * T + t);
    const int64_t n = static_cast<int64_t>(tok.size());
    if (!fast || n >= 32) {
      // One GEMM pair for the whole segment. Its rows are contiguous when it is one batch row.
      const bool contiguous = s.rows.size() == 1;
      if (contiguous) {
        y.narrow(0, tok.front(), n).add_(at::mm(at::mm(x.narrow(0, tok.front(), n), w.a), w.b), w.scale);
      } else {
        at::Tensor idx = at::tensor(tok, at::TensorOptions().dtype(at::kLong)).to(x.device());
        y.index_add_(0, idx, at::mm(at::mm(x.index_select(0, idx), w.a), w.b), w.scale);
      }
      continue;
    }
    constexpr int64_t kChunk = 8;  // token rows per work item: A and B stay hot across them
    for (int64_t i = 0; i < n; i += kChunk)
      items.push_back({&w, std::vector<int64_t>(tok.begin() + i, tok.begin() + std::min(n, i + kChunk))});
  }
  if (items.empty()) return y;
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // Threads only where each gets real work (a decode row of GPT-2 is ~30k multiply-adds per matrix;
  // the course's toy model's are ~300, where waking a thread costs more than the work).
  const int64_t work = static_cast<int64_t>(items.front().rows.size()) * items.front().w->rank() * (in + out);
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, work));
  const Isa isa = active_isa();  // asked outside the threads: it may throw (a bad SERVELAB_ISA)
  at::parallel_for(0, static_cast<int64_t>(items.size()), grain, [&](int64_t begin, int64_t end) {
    std::vector<float> t;
    for (int64_t i = begin; i < end; ++i) {
      const Item& it = items[static_cast<size_t>(i)];
      const int64_t r = it.w->rank();
      t.resize(static_cast<size_t>(r));
      lora_segment_rows(isa, xp, in, yp, out, it.rows.data(), static_cast<int64_t>(it.rows.size()),
                        it.w->a.data_ptr<float>(), it.w->b.data_ptr<float>(), r,
                        static_cast<float>(it.w->scale), t.data());
    }
  });
  return y;
}

}  // namespace servelab

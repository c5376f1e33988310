#include "generate/paged_attention.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "util/cpu_features.h"
#include "util/errors.h"

namespace servelab {

namespace {

// The loops are written once and inlined into one wrapper per ISA (compiled for that target), the
// wrapper picked by active_isa() at each call: built for the x86-64 baseline alone they ran 4 lanes
// wide and cost several times what SDPA over a gathered copy does.
#define SERVELAB_CLONES inline __attribute__((always_inline))

// Sixteen independent partial sums, then a tree: without -ffast-math the compiler may not reorder
// one running sum, but it vectorizes lanes that are separate in the source, and a tree of halves
// stays in vector registers where a chain of sixteen scalar adds would not.
template <typename T>
SERVELAB_CLONES float dot(const float* q, const T* k, int64_t d) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= d; i += 16)
    for (int64_t j = 0; j < 16; ++j) acc[j] += q[i + j] * static_cast<float>(k[i + j]);
  for (int64_t w = 8; w >= 1; w /= 2)
    for (int64_t j = 0; j < w; ++j) acc[j] += acc[j + w];
  float s = acc[0];
  for (; i < d; ++i) s += q[i] * static_cast<float>(k[i]);
  return s;
}

template <typename T>
SERVELAB_CLONES void axpy(float a, const T* v, float* out, int64_t d) {
  for (int64_t i = 0; i < d; ++i) out[i] += a * static_cast<float>(v[i]);
}

struct DecodeArgs {
  const float* q;
  float* out;
  int64_t H, H_kv, D, block_size;
  const std::vector<const std::vector<int64_t>*>* tables;
  const std::vector<int64_t>* lengths;
  float scale;
};

// Work items [begin, end) of (row, KV head): the group's G queries read each key and value once.
template <typename T>
SERVELAB_CLONES void decode_items_any_isa(const DecodeArgs& a, const T* keys, const T* values, int64_t begin,
                                          int64_t end) {
  const int64_t H = a.H, H_kv = a.H_kv, D = a.D, G = H / H_kv, bs = a.block_size;
  std::vector<float> scores;
  for (int64_t item = begin; item < end; ++item) {
    const int64_t b = item / H_kv, h = item % H_kv, L = (*a.lengths)[static_cast<size_t>(b)];
    const std::vector<int64_t>& table = *(*a.tables)[static_cast<size_t>(b)];
    scores.assign(static_cast<size_t>(G * L), 0.0f);
    const float* qg = a.q + (b * H + h * G) * D;
    for (int64_t p = 0; p < L; ++p) {
      const int64_t slot = table[static_cast<size_t>(p / bs)] * bs + p % bs;
      const T* k = keys + (slot * H_kv + h) * D;
      for (int64_t g = 0; g < G; ++g)
        scores[static_cast<size_t>(g * L + p)] = dot(qg + g * D, k, D) * a.scale;
    }
    for (int64_t g = 0; g < G; ++g) {
      float* s = scores.data() + g * L;
      const float top = *std::max_element(s, s + L);
      float sum = 0;
      for (int64_t p = 0; p < L; ++p) sum += (s[p] = std::exp(s[p] - top));
      const float inv = 1.0f / sum;
      for (int64_t p = 0; p < L; ++p) s[p] *= inv;
    }
    float* o = a.out + (b * H + h * G) * D;
    std::fill(o, o + G * D, 0.0f);
    for (int64_t p = 0; p < L; ++p) {
      const int64_t slot = table[static_cast<size_t>(p / bs)] * bs + p % bs;
      const T* v = values + (slot * H_kv + h) * D;
      for (int64_t g = 0; g < G; ++g) axpy(scores[static_cast<size_t>(g * L + p)], v, o + g * D, D);
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
template <typename T>
__attribute__((target("avx512f"))) void decode_items_avx512(const DecodeArgs& a, const T* keys,
                                                            const T* values, int64_t begin, int64_t end) {
  decode_items_any_isa(a, keys, values, begin, end);
}
template <typename T>
__attribute__((target("avx2,fma,f16c"))) void decode_items_avx2(const DecodeArgs& a, const T* keys,
                                                                const T* values, int64_t begin, int64_t end) {
  decode_items_any_isa(a, keys, values, begin, end);
}
#endif
template <typename T>
void decode_items_generic(const DecodeArgs& a, const T* keys, const T* values, int64_t begin, int64_t end) {
  decode_items_any_isa(a, keys, values, begin, end);
}

template <typename T>
void decode_kernel(const DecodeArgs& a, const T* keys, const T* values, int64_t B) {
  const Isa isa = active_isa();
  at::parallel_for(0, B * a.H_kv, 1, [&](int64_t begin, int64_t end) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa == Isa::Avx512) return decode_items_avx512(a, keys, values, begin, end);
    if (isa == Isa::Avx2) return decode_items_avx2(a, keys, values, begin, end);
#else
    (void)isa;
#endif
    decode_items_generic(a, keys, values, begin, end);
  });
}

}  // namespace

at::Tensor paged_decode_attention_cpu(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                                      const std::vector<const std::vector<int64_t>*>& tables,
                                      const std::vector<int64_t>& lengths, int64_t block_size, double scale) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3), H_kv = keys.size(1);
  if (!q.device().is_cpu() || !keys.device().is_cpu())
    throw InputError("the in-place paged attention kernel runs on the CPU only, got " + q.device().str());
  if (q.size(2) != 1 || H % H_kv != 0 || keys.size(2) != D || !keys.is_contiguous() ||
      !values.is_contiguous() || static_cast<int64_t>(tables.size()) != B ||
      static_cast<int64_t>(lengths.size()) != B)
    throw InputError(
        "paged decode attention needs one query per row, whole KV head groups and a table per row");
  const at::Tensor qf = q.to(at::kFloat).reshape({B, H, D}).contiguous();
  at::Tensor out = at::empty({B, H, D}, qf.options());
  const DecodeArgs args{
      qf.data_ptr<float>(),     out.data_ptr<float>(), H, H_kv, D, block_size, &tables, &lengths,
      static_cast<float>(scale)};
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, keys.scalar_type(), "paged_decode_attention",
      [&] { decode_kernel<scalar_t>(args, keys.data_ptr<scalar_t>(), values.data_ptr<scalar_t>(), B); });
  return out.view({B, H, 1, D}).to(q.scalar_type());
}

}  // namespace servelab

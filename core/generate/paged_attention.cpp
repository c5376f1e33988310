#include "generate/paged_attention.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "util/errors.h"

namespace servelab {

namespace {

// Sixteen independent partial sums: without -ffast-math the compiler may not reorder one running
// sum, but it vectorizes lanes that are separate in the source.
template <typename T>
inline float dot(const float* q, const T* k, int64_t d) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= d; i += 16)
    for (int64_t j = 0; j < 16; ++j) acc[j] += q[i + j] * static_cast<float>(k[i + j]);
  float s = 0;
  for (; i < d; ++i) s += q[i] * static_cast<float>(k[i]);
  for (float a : acc) s += a;
  return s;
}

template <typename T>
inline void axpy(float a, const T* v, float* out, int64_t d) {
  for (int64_t i = 0; i < d; ++i) out[i] += a * static_cast<float>(v[i]);
}

template <typename T>
void decode_kernel(const float* q, const T* keys, const T* values, float* out, int64_t B, int64_t H,
                   int64_t H_kv, int64_t D, const std::vector<const std::vector<int64_t>*>& tables,
                   const std::vector<int64_t>& lengths, int64_t block_size, float scale) {
  const int64_t G = H / H_kv;
  // One work item per (row, KV head): the group's G queries read each key and value once.
  at::parallel_for(0, B * H_kv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / H_kv, h = item % H_kv, L = lengths[static_cast<size_t>(b)];
      const std::vector<int64_t>& table = *tables[static_cast<size_t>(b)];
      scores.assign(static_cast<size_t>(G * L), 0.0f);
      const float* qg = q + (b * H + h * G) * D;
      for (int64_t p = 0; p < L; ++p) {
        const int64_t slot = table[static_cast<size_t>(p / block_size)] * block_size + p % block_size;
        const T* k = keys + (slot * H_kv + h) * D;
        for (int64_t g = 0; g < G; ++g)
          scores[static_cast<size_t>(g * L + p)] = dot(qg + g * D, k, D) * scale;
      }
      for (int64_t g = 0; g < G; ++g) {
        float* s = scores.data() + g * L;
        const float top = *std::max_element(s, s + L);
        float sum = 0;
        for (int64_t p = 0; p < L; ++p) sum += (s[p] = std::exp(s[p] - top));
        const float inv = 1.0f / sum;
        for (int64_t p = 0; p < L; ++p) s[p] *= inv;
      }
      float* o = out + (b * H + h * G) * D;
      std::fill(o, o + G * D, 0.0f);
      for (int64_t p = 0; p < L; ++p) {
        const int64_t slot = table[static_cast<size_t>(p / block_size)] * block_size + p % block_size;
        const T* v = values + (slot * H_kv + h) * D;
        for (int64_t g = 0; g < G; ++g) axpy(scores[static_cast<size_t>(g * L + p)], v, o + g * D, D);
      }
    }
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
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, keys.scalar_type(), "paged_decode_attention", [&] {
        decode_kernel<scalar_t>(qf.data_ptr<float>(), keys.data_ptr<scalar_t>(), values.data_ptr<scalar_t>(),
                                out.data_ptr<float>(), B, H, H_kv, D, tables, lengths, block_size,
                                static_cast<float>(scale));
      });
  return out.view({B, H, 1, D}).to(q.scalar_type());
}

}  // namespace servelab

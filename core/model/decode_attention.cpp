#include "model/decode_attention.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

#include "util/cpu_features.h"
#include "util/errors.h"
#include "util/x86_simd.h"

namespace servelab {

namespace {

// Where (row, KV head)'s position p lives in the K and V buffers (the same offset in both), and
// whether that row may see it.
struct PagedLayout {  // paged KV: [blocks * block_size, H_kv, D]; slot[p]: the row's position p
  const int64_t* slot;
  int64_t H_kv, D, h;
  int64_t offset(int64_t p) const { return (slot[p] * H_kv + h) * D; }
  static bool visible(int64_t) { return true; }
};
struct OffsetLayout {  // any memory: position p at table[p] + head (a KvStore's places)
  const int64_t* table;
  int64_t head;
  int64_t offset(int64_t p) const { return table[p] + head; }
  static bool visible(int64_t) { return true; }
};
struct StridedLayout {  // the dense cache and slot KV: [R, H_kv, S, D] with any strides but D's
  int64_t base, position_stride;
  const bool* mask;  // the row's S flags (stride mask_stride), or null: every key visible
  int64_t mask_stride;
  int64_t offset(int64_t p) const { return base + p * position_stride; }
  bool visible(int64_t p) const { return mask == nullptr || mask[p * mask_stride]; }
};

// ---- Portable loops for any key dtype and head size, inlined into one wrapper per ISA (compiled
// for that target) so that the compiler vectorizes them as wide as the target allows.
#define SERVELAB_CLONES inline __attribute__((always_inline))

// Sixteen independent partial sums, then a tree: without -ffast-math the compiler may not reorder
// one running sum, but it vectorizes lanes that are separate in the source.
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

template <typename T, class Layout>
SERVELAB_CLONES void portable_item(const float* qg, int64_t G, int64_t D, const T* keys, const T* values,
                                   const Layout& kv, int64_t L, float scale, float* scores, float* out) {
  bool any = false;
  for (int64_t p = 0; p < L; ++p) {
    const bool seen = kv.visible(p);
    any = any || seen;
    const T* k = keys + kv.offset(p);
    for (int64_t g = 0; g < G; ++g)
      scores[g * L + p] = seen ? dot(qg + g * D, k, D) * scale : -std::numeric_limits<float>::infinity();
  }
  std::fill(out, out + G * D, 0.0f);
  if (!any) return;
  for (int64_t g = 0; g < G; ++g) {
    float* s = scores + g * L;
    const float top = *std::max_element(s, s + L);
    float sum = 0;
    for (int64_t p = 0; p < L; ++p) sum += (s[p] = std::exp(s[p] - top));
    const float inv = 1.0f / sum;
    for (int64_t p = 0; p < L; ++p) s[p] *= inv;
  }
  for (int64_t p = 0; p < L; ++p) {
    if (!kv.visible(p)) continue;
    const T* v = values + kv.offset(p);
    for (int64_t g = 0; g < G; ++g) {
      const float a = scores[g * L + p];
      float* o = out + g * D;
      for (int64_t i = 0; i < D; ++i) o[i] += a * static_cast<float>(v[i]);
    }
  }
}

#if SERVELAB_X86
// ---- Explicit vectors for fp32 keys whose head size is a whole number of vectors: the portable
// loops leave the dot products' horizontal sums, the scalar exp and the value sums' loads and
// stores of `out` per position on the table, about half the memory bandwidth (the K/V reads of a
// batch's decode step outweigh its weights).
namespace avx512 {
#define SERVELAB_SIMD __attribute__((target("avx512f,avx512dq,avx2,fma")))
struct Vec {
  using R = __m512;
  static constexpr int64_t kLanes = 16;
  SERVELAB_SIMD static R zero() { return _mm512_setzero_ps(); }
  SERVELAB_SIMD static R set1(float a) { return _mm512_set1_ps(a); }
  SERVELAB_SIMD static R load(const float* p) { return _mm512_loadu_ps(p); }
  SERVELAB_SIMD static void store(float* p, R a) { _mm512_storeu_ps(p, a); }
  SERVELAB_SIMD static R add(R a, R b) { return _mm512_add_ps(a, b); }
  SERVELAB_SIMD static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  SERVELAB_SIMD static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  SERVELAB_SIMD static R max(R a, R b) { return _mm512_max_ps(a, b); }
  SERVELAB_SIMD static R fmadd(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  SERVELAB_SIMD static float reduce_add(R a) { return _mm512_reduce_add_ps(a); }
  SERVELAB_SIMD static float reduce_max(R a) { return _mm512_reduce_max_ps(a); }
  SERVELAB_SIMD static R fnmadd(R a, R b, R c) { return _mm512_fnmadd_ps(a, b, c); }
  SERVELAB_SIMD static R round(R a) {
    return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  SERVELAB_SIMD static R times_pow2(R y, R n) { return _mm512_scalef_ps(y, n); }  // y * 2^n, n whole
  SERVELAB_SIMD static R zero_where_below(R y, R x, R lo) {
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ)), y);
  }
};
#include "model/decode_attention_simd.inc"
#undef SERVELAB_SIMD
}  // namespace avx512

namespace avx2 {
#define SERVELAB_SIMD __attribute__((target("avx2,fma")))
struct Vec {
  using R = __m256;
  static constexpr int64_t kLanes = 8;
  SERVELAB_SIMD static R zero() { return _mm256_setzero_ps(); }
  SERVELAB_SIMD static R set1(float a) { return _mm256_set1_ps(a); }
  SERVELAB_SIMD static R load(const float* p) { return _mm256_loadu_ps(p); }
  SERVELAB_SIMD static void store(float* p, R a) { _mm256_storeu_ps(p, a); }
  SERVELAB_SIMD static R add(R a, R b) { return _mm256_add_ps(a, b); }
  SERVELAB_SIMD static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  SERVELAB_SIMD static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  SERVELAB_SIMD static R max(R a, R b) { return _mm256_max_ps(a, b); }
  SERVELAB_SIMD static R fmadd(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  SERVELAB_SIMD static float reduce_add(R a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  SERVELAB_SIMD static float reduce_max(R a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
  }
  SERVELAB_SIMD static R fnmadd(R a, R b, R c) { return _mm256_fnmadd_ps(a, b, c); }
  SERVELAB_SIMD static R round(R a) {
    return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  // y * 2^n for whole n >= -126, 2^n built in the exponent field.
  SERVELAB_SIMD static R times_pow2(R y, R n) {
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  }
  SERVELAB_SIMD static R zero_where_below(R y, R x, R lo) {
    return _mm256_andnot_ps(_mm256_cmp_ps(x, lo, _CMP_LT_OQ), y);
  }
};
#include "model/decode_attention_simd.inc"
#undef SERVELAB_SIMD
}  // namespace avx2

template <typename T, class Layout>
__attribute__((target("avx512f"))) void portable_item_avx512(const float* qg, int64_t G, int64_t D,
                                                             const T* keys, const T* values, const Layout& kv,
                                                             int64_t L, float scale, float* scores,
                                                             float* out) {
  portable_item(qg, G, D, keys, values, kv, L, scale, scores, out);
}
template <typename T, class Layout>
__attribute__((target("avx2,fma,f16c"))) void portable_item_avx2(const float* qg, int64_t G, int64_t D,
                                                                 const T* keys, const T* values,
                                                                 const Layout& kv, int64_t L, float scale,
                                                                 float* scores, float* out) {
  portable_item(qg, G, D, keys, values, kv, L, scale, scores, out);
}
#endif
template <typename T, class Layout>
void portable_item_generic(const float* qg, int64_t G, int64_t D, const T* keys, const T* values,
                           const Layout& kv, int64_t L, float scale, float* scores, float* out) {
  portable_item(qg, G, D, keys, values, kv, L, scale, scores, out);
}

// Which loops a call runs: the explicit vectors where the keys are fp32 and D a whole number of
// the ISA's vectors, else the portable loops compiled for the ISA.
enum class Loops { Avx512, Avx2, PortableAvx512, PortableAvx2, PortableGeneric };
Loops pick_loops(at::ScalarType dtype, int64_t D) {
  const Isa isa = active_isa();
#if SERVELAB_X86
  const bool fp32 = dtype == at::kFloat;
  if (isa == Isa::Avx512) return fp32 && D % 16 == 0 ? Loops::Avx512 : Loops::PortableAvx512;
  if (isa == Isa::Avx2) return fp32 && D % 8 == 0 ? Loops::Avx2 : Loops::PortableAvx2;
#else
  (void)isa;
  (void)dtype;
  (void)D;
#endif
  return Loops::PortableGeneric;
}

// One item under the chosen loops (T other than float never takes the explicit vectors).
template <typename T, class Layout>
void run_item(Loops loops, const float* qg, int64_t G, int64_t D, const T* keys, const T* values,
              const Layout& kv, int64_t L, float scale, float* scores, float* out) {
#if SERVELAB_X86
  if constexpr (std::is_same_v<T, float>) {
    if (loops == Loops::Avx512) return avx512::simd_item(qg, G, D, keys, values, kv, L, scale, scores, out);
    if (loops == Loops::Avx2) return avx2::simd_item(qg, G, D, keys, values, kv, L, scale, scores, out);
  }
  if (loops == Loops::Avx512 || loops == Loops::PortableAvx512)
    return portable_item_avx512(qg, G, D, keys, values, kv, L, scale, scores, out);
  if (loops == Loops::Avx2 || loops == Loops::PortableAvx2)
    return portable_item_avx2(qg, G, D, keys, values, kv, L, scale, scores, out);
#else
  (void)loops;
#endif
  portable_item_generic(qg, G, D, keys, values, kv, L, scale, scores, out);
}

// Runs every (row, KV head) item in parallel; layout(b, h) gives the item's Layout and length.
template <typename T, class MakeLayout>
void run_items(const float* q, float* out, int64_t B, int64_t H, int64_t H_kv, int64_t D, const T* keys,
               const T* values, float scale, const MakeLayout& layout) {
  const int64_t G = H / H_kv;
  const Loops loops = pick_loops(c10::CppTypeToScalarType<T>::value, D);
  at::parallel_for(0, B * H_kv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / H_kv, h = item % H_kv;
      const auto [kv, L] = layout(b, h);
      scores.resize(static_cast<size_t>(G * (L + 16)));
      run_item(loops, q + (b * H + h * G) * D, G, D, keys, values, kv, L, scale, scores.data(),
               out + (b * H + h * G) * D);
    }
  });
}

}  // namespace

bool dense_decode_attention_applies(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                                    const at::Tensor& mask) {
  if (q.dim() != 4 || keys.dim() != 4 || values.dim() != 4) return false;
  if (!q.device().is_cpu() || !keys.device().is_cpu() || !values.device().is_cpu()) return false;
  const auto dt = keys.scalar_type();
  if (dt != at::kFloat && dt != at::kHalf && dt != at::kBFloat16) return false;
  if (values.scalar_type() != dt || keys.sizes() != values.sizes() || keys.strides() != values.strides())
    return false;
  if (q.size(2) != 1 || keys.size(1) == 0 || q.size(1) % keys.size(1) != 0 || q.size(3) != keys.size(3) ||
      keys.stride(3) != 1)
    return false;
  if (mask.defined() && (mask.scalar_type() != at::kBool || mask.dim() != 4 ||
                         (mask.size(0) != 1 && mask.size(0) != keys.size(0)) || mask.size(3) != keys.size(2)))
    return false;
  return true;
}

at::Tensor dense_decode_attention_cpu(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                                      const at::Tensor& mask, const at::Tensor& kv_rows, double scale) {
  if (!dense_decode_attention_applies(q, keys, values, mask))
    throw InputError(
        "decode attention: operands this kernel does not take (see dense_decode_attention_applies)");
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3), R = keys.size(0), H_kv = keys.size(1),
                S = keys.size(2);
  const at::Tensor rows = kv_rows.defined() ? kv_rows.to(at::kLong).contiguous() : at::Tensor();
  if (rows.defined() ? rows.numel() != B : B != R)
    throw InputError("decode attention: one K/V row per query row");
  const int64_t* row_of = rows.defined() ? rows.data_ptr<int64_t>() : nullptr;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t r = row_of ? row_of[b] : b;
    if (r < 0 || r >= R) throw InputError("decode attention: K/V row " + std::to_string(r) + " out of range");
  }
  const at::Tensor qf = q.to(at::kFloat).reshape({B, H, D}).contiguous();
  at::Tensor out = at::empty({B, H, D}, qf.options());
  const bool* m = mask.defined() ? mask.data_ptr<bool>() : nullptr;
  const int64_t mask_row = mask.defined() && mask.size(0) > 1 ? mask.stride(0) : 0,
                mask_col = mask.defined() ? mask.stride(3) : 0;
  const int64_t sr = keys.stride(0), sh = keys.stride(1), sp = keys.stride(2);
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, keys.scalar_type(), "dense_decode_attention", [&] {
        run_items<scalar_t>(
            qf.data_ptr<float>(), out.data_ptr<float>(), B, H, H_kv, D, keys.data_ptr<scalar_t>(),
            values.data_ptr<scalar_t>(), static_cast<float>(scale), [&](int64_t b, int64_t h) {
              const int64_t r = row_of ? row_of[b] : b;
              return std::pair{StridedLayout{r * sr + h * sh, sp, m ? m + r * mask_row : nullptr, mask_col},
                               S};
            });
      });
  return out.view({B, H, 1, D}).to(q.scalar_type());
}

void decode_attention_item_f32(const float* q_group, int64_t G, int64_t D, const float* keys,
                               const float* values, int64_t base, int64_t position_stride, const bool* mask,
                               int64_t mask_stride, int64_t L, float scale, float* scores, float* out) {
  run_item(pick_loops(at::kFloat, D), q_group, G, D, keys, values,
           StridedLayout{base, position_stride, mask, mask_stride}, L, scale, scores, out);
}

void decode_attention_item_f32_at(const float* q_group, int64_t G, int64_t D, const float* keys,
                                  const float* values, const int64_t* offsets, int64_t head_offset, int64_t L,
                                  float scale, float* scores, float* out) {
  run_item(pick_loops(at::kFloat, D), q_group, G, D, keys, values, OffsetLayout{offsets, head_offset}, L,
           scale, scores, out);
}

PagedPositions paged_positions(const std::vector<const std::vector<int64_t>*>& tables,
                               const std::vector<int64_t>& lengths, int64_t block_size) {
  if (tables.size() != lengths.size() || block_size < 1)
    throw InputError("paged positions: a table and a length per row, blocks of at least one position");
  PagedPositions r;
  r.first.assign(tables.size() + 1, 0);
  for (size_t b = 0; b < tables.size(); ++b) {
    const int64_t L = lengths[b];
    if (L < 0 || (L + block_size - 1) / block_size > static_cast<int64_t>(tables[b]->size()))
      throw InputError("paged positions: row " + std::to_string(b) + "'s table is shorter than its length");
    r.first[b + 1] = r.first[b] + L;
  }
  // Block by block: no division by the block size per position.
  r.slots.resize(static_cast<size_t>(r.first.back()));
  for (size_t b = 0; b < tables.size(); ++b) {
    int64_t* slot = r.slots.data() + r.first[b];
    for (int64_t p = 0, block = 0; p < lengths[b]; ++block)
      for (int64_t j = 0; j < block_size && p < lengths[b]; ++j, ++p)
        slot[p] = (*tables[b])[static_cast<size_t>(block)] * block_size + j;
  }
  return r;
}

at::Tensor paged_decode_attention_cpu(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                                      const PagedPositions& positions, double scale) {
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3), H_kv = keys.size(1);
  if (!q.device().is_cpu() || !keys.device().is_cpu())
    throw InputError("the in-place paged attention kernel runs on the CPU only, got " + q.device().str());
  if (q.size(2) != 1 || H % H_kv != 0 || keys.size(2) != D || !keys.is_contiguous() ||
      !values.is_contiguous() || positions.rows() != B)
    throw InputError(
        "paged decode attention needs one query per row, whole KV head groups and a table per row");
  const at::Tensor qf = q.to(at::kFloat).reshape({B, H, D}).contiguous();
  at::Tensor out = at::empty({B, H, D}, qf.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, keys.scalar_type(), "paged_decode_attention", [&] {
        run_items<scalar_t>(
            qf.data_ptr<float>(), out.data_ptr<float>(), B, H, H_kv, D, keys.data_ptr<scalar_t>(),
            values.data_ptr<scalar_t>(), static_cast<float>(scale), [&](int64_t b, int64_t h) {
              return std::pair{
                  PagedLayout{positions.slots.data() + positions.first[static_cast<size_t>(b)], H_kv, D, h},
                  positions.length(b)};
            });
      });
  return out.view({B, H, 1, D}).to(q.scalar_type());
}

std::string decode_attention_kernel(at::ScalarType keys, int64_t head_dim) {
  switch (pick_loops(keys, head_dim)) {
    case Loops::Avx512:
      return "AVX-512 fp32 decode attention, K/V read in place";
    case Loops::Avx2:
      return "AVX2 fp32 decode attention, K/V read in place";
    case Loops::PortableAvx512:
      return "portable loops (avx512 target), K/V read in place";
    case Loops::PortableAvx2:
      return "portable loops (avx2 target), K/V read in place";
    case Loops::PortableGeneric:
      break;
  }
  return "portable loops, K/V read in place";
}

}  // namespace servelab

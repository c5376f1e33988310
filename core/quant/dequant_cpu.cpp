#include "quant/dequant_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "util/cpu_features.h"
#include "util/errors.h"
#include "util/x86_simd.h"

namespace servelab {

namespace {

#if SERVELAB_X86
#define SERVELAB_AVX512 __attribute__((target("avx512f")))
#define SERVELAB_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

// One stored matrix, row by row: pointers into a QuantizedTensor's contiguous CPU tensors.
struct Rows {
  QuantScheme scheme = QuantScheme::None;
  int64_t cols = 0;
  const uint8_t* values = nullptr;
  int64_t row_bytes = 0;  // bytes of values per row
  const float* scale = nullptr;
  const float* minimum = nullptr;
  float tensor_scale = 0, tensor_zero = 0;  // the course's per-tensor uint8
  int64_t group = 0, groups = 0;            // int4 and int8 groups

  explicit Rows(const QuantizedTensor& q) : scheme(q.scheme), cols(q.cols()) {
    values = static_cast<const uint8_t*>(q.values.data_ptr());
    row_bytes =
        scheme == QuantScheme::Int4Group ? cols / 2 : cols * static_cast<int64_t>(q.values.element_size());
    if (scheme == QuantScheme::Int4Group || scheme == QuantScheme::Int8Group) {
      group = q.group_size;
      groups = cols / group;
    }
    if (scheme == QuantScheme::ZeroPointUint8) {
      tensor_scale = q.scale.item<float>();
      tensor_zero = q.offset.item<float>();
    } else if (scheme == QuantScheme::PerChannelInt8) {
      scale = q.scale.data_ptr<float>();
    } else if (scheme == QuantScheme::Int4Group) {
      scale = q.scale.data_ptr<float>();
      minimum = q.offset.data_ptr<float>();
    } else if (scheme == QuantScheme::Int8Group) {
      scale = q.scale.data_ptr<float>();
    }
  }
  // A plain fp32 matrix ([rows, cols], contiguous): the GEMV reads it as it is.
  explicit Rows(const at::Tensor& fp32) : cols(fp32.size(1)) {
    values = static_cast<const uint8_t*>(fp32.data_ptr());
    row_bytes = cols * static_cast<int64_t>(sizeof(float));
  }
  const uint8_t* row(int64_t r) const { return values + r * row_bytes; }
};

// Row r as fp32 in portable C++, every scheme: the same arithmetic as QuantizedTensor::dequantize
// (a multiply, then an add; this file is compiled without FMA contraction), so every ISA's rows
// are equal bit for bit. The compiler vectorizes the loops for the baseline ISA.
void dequantize_row_generic(const Rows& s, int64_t r, float* out) {
  const uint8_t* v = s.row(r);
  const int64_t cols = s.cols;
  switch (s.scheme) {
    case QuantScheme::ZeroPointUint8:
      for (int64_t j = 0; j < cols; ++j) out[j] = static_cast<float>(v[j]) * s.tensor_scale + s.tensor_zero;
      return;
    case QuantScheme::PerChannelInt8: {
      const int8_t* q = reinterpret_cast<const int8_t*>(v);
      for (int64_t j = 0; j < cols; ++j) out[j] = static_cast<float>(q[j]);
      return;
    }
    case QuantScheme::Int4Group: {
      const int64_t half = s.group / 2;
      for (int64_t g = 0; g < s.groups; ++g) {
        const float sc = s.scale[r * s.groups + g], m = s.minimum[r * s.groups + g];
        const uint8_t* p = v + g * half;
        float* o = out + g * s.group;
        for (int64_t j = 0; j < half; ++j) {
          o[2 * j] = static_cast<float>(p[j] & 15) * sc + m;
          o[2 * j + 1] = static_cast<float>(p[j] >> 4) * sc + m;
        }
      }
      return;
    }
    case QuantScheme::Int8Group: {
      const int8_t* q = reinterpret_cast<const int8_t*>(v);
      for (int64_t g = 0; g < s.groups; ++g) {
        const float sc = s.scale[r * s.groups + g];
        for (int64_t j = 0; j < s.group; ++j)
          out[g * s.group + j] = static_cast<float>(q[g * s.group + j]) * sc;
      }
      return;
    }
    case QuantScheme::Fp16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(v);
      for (int64_t j = 0; j < cols; ++j) out[j] = static_cast<float>(c10::Half(h[j], c10::Half::from_bits()));
      return;
    }
    case QuantScheme::Bf16: {
      const uint16_t* h = reinterpret_cast<const uint16_t*>(v);
      for (int64_t j = 0; j < cols; ++j) {
        const uint32_t bits = static_cast<uint32_t>(h[j]) << 16;
        std::memcpy(out + j, &bits, sizeof(float));
      }
      return;
    }
    case QuantScheme::None:
      std::memcpy(out, v, static_cast<size_t>(cols) * sizeof(float));
      return;
  }
}

#if SERVELAB_X86
// The same arithmetic as dequantize_row_generic, 16 values per instruction.
SERVELAB_AVX512 void uint8_row_avx512(const uint8_t* q, float scale, float zero, int64_t cols, float* out) {
  const __m512 s = _mm512_set1_ps(scale), z = _mm512_set1_ps(zero);
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + j));
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(b));
    _mm512_storeu_ps(out + j, _mm512_add_ps(_mm512_mul_ps(f, s), z));
  }
  for (; j < cols; ++j) out[j] = static_cast<float>(q[j]) * scale + zero;
}

SERVELAB_AVX512 void int8_row_avx512(const int8_t* q, int64_t cols, float* out) {
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + j));
    _mm512_storeu_ps(out + j, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)));
  }
  for (; j < cols; ++j) out[j] = static_cast<float>(q[j]);
}

// Each group's integers times its scale (one rounding, as the ATen dequantization's product).
SERVELAB_AVX512 void int8_group_row_avx512(const int8_t* q, const float* scale, int64_t groups, int64_t group,
                                           float* out) {
  for (int64_t g = 0; g < groups; ++g) {
    const __m512 s = _mm512_set1_ps(scale[g]);
    int64_t j = 0;
    for (; j + 16 <= group; j += 16) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + j));
      _mm512_storeu_ps(out + j, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)), s));
    }
    for (; j < group; ++j) out[j] = static_cast<float>(q[j]) * scale[g];
    q += group;
    out += group;
  }
}

// Groups of a multiple of 32: 16 bytes give 32 values, the low nibbles (even columns) and the
// high ones (odd columns) interleaved back into column order by two permutes.
SERVELAB_AVX512 void int4_row_avx512(const uint8_t* packed, const float* scale, const float* minimum,
                                     int64_t groups, int64_t group, float* out) {
  const __m512i first = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i second = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  const __m512i low = _mm512_set1_epi32(15);
  for (int64_t g = 0; g < groups; ++g) {
    const __m512 s = _mm512_set1_ps(scale[g]), m = _mm512_set1_ps(minimum[g]);
    for (int64_t c = 0; c < group; c += 32) {
      const __m512i b =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed + c / 2)));
      const __m512i lo = _mm512_and_si512(b, low), hi = _mm512_srli_epi32(b, 4);
      const __m512 a = _mm512_cvtepi32_ps(_mm512_permutex2var_epi32(lo, first, hi));
      const __m512 d = _mm512_cvtepi32_ps(_mm512_permutex2var_epi32(lo, second, hi));
      _mm512_storeu_ps(out + c, _mm512_add_ps(_mm512_mul_ps(a, s), m));
      _mm512_storeu_ps(out + c + 16, _mm512_add_ps(_mm512_mul_ps(d, s), m));
    }
    packed += group / 2;
    out += group;
  }
}

SERVELAB_AVX512 void half_row_avx512(const uint16_t* h, int64_t cols, float* out) {
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16)
    _mm512_storeu_ps(out + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + j))));
  for (; j < cols; ++j) out[j] = static_cast<float>(c10::Half(h[j], c10::Half::from_bits()));
}

SERVELAB_AVX512 void bf16_row_avx512(const uint16_t* h, int64_t cols, float* out) {
  int64_t j = 0;
  for (; j + 16 <= cols; j += 16) {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + j)));
    _mm512_storeu_ps(out + j, _mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  }
  for (; j < cols; ++j) out[j] = static_cast<float>(c10::BFloat16(h[j], c10::BFloat16::from_bits()));
}

// Row r of the matrix as fp32 (per-channel int8: its integers; the scale comes after the product).
SERVELAB_AVX512 void dequantize_row_avx512(const Rows& s, int64_t r, float* out) {
  const uint8_t* v = s.row(r);
  switch (s.scheme) {
    case QuantScheme::ZeroPointUint8:
      uint8_row_avx512(v, s.tensor_scale, s.tensor_zero, s.cols, out);
      return;
    case QuantScheme::PerChannelInt8:
      int8_row_avx512(reinterpret_cast<const int8_t*>(v), s.cols, out);
      return;
    case QuantScheme::Int4Group:
      if (s.group % 32 == 0)
        int4_row_avx512(v, s.scale + r * s.groups, s.minimum + r * s.groups, s.groups, s.group, out);
      else
        dequantize_row_generic(s, r, out);
      return;
    case QuantScheme::Int8Group:
      int8_group_row_avx512(reinterpret_cast<const int8_t*>(v), s.scale + r * s.groups, s.groups, s.group,
                            out);
      return;
    case QuantScheme::Fp16:
      half_row_avx512(reinterpret_cast<const uint16_t*>(v), s.cols, out);
      return;
    case QuantScheme::Bf16:
      bf16_row_avx512(reinterpret_cast<const uint16_t*>(v), s.cols, out);
      return;
    case QuantScheme::None:
      std::memcpy(out, v, static_cast<size_t>(s.cols) * sizeof(float));  // a plain fp32 matrix
      return;
  }
}

// The GEMM kernel: kTile output channels (rows of w, fp32, row stride ldw) times 16 * V rows of x,
// given transposed (xt: [cols][ldx], the rows of x along a line). Each step over the inner dimension
// loads V vectors of x and broadcasts one weight per channel: kTile * V accumulators in registers
// (16 of AVX-512's 32), every weight read once per 16 * V rows. It also prefetches the next tile's
// quantized bytes, spread over the steps, so that their dequantization finds them in L1.
constexpr int kTile = 8;
constexpr int64_t kRowsPerPass = 32;  // rows of x per kernel call (V = 2)

template <int V>
SERVELAB_AVX512 void tile_kernel(const float* w, int64_t ldw, const float* xt, int64_t ldx, int64_t cols,
                                 float* acc_out, const char* prefetch, int64_t prefetch_step) {
  __m512 acc[kTile][V];
  for (int n = 0; n < kTile; ++n)
    for (int v = 0; v < V; ++v) acc[n][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < cols; ++k) {
    _mm_prefetch(prefetch + k * prefetch_step, _MM_HINT_T0);
    __m512 xv[V];
    for (int v = 0; v < V; ++v) xv[v] = _mm512_loadu_ps(xt + k * ldx + 16 * v);
    for (int n = 0; n < kTile; ++n) {
      const __m512 b = _mm512_set1_ps(w[n * ldw + k]);
      for (int v = 0; v < V; ++v) acc[n][v] = _mm512_fmadd_ps(b, xv[v], acc[n][v]);
    }
  }
  for (int n = 0; n < kTile; ++n)
    for (int v = 0; v < V; ++v) _mm512_storeu_ps(acc_out + n * kRowsPerPass + 16 * v, acc[n][v]);
}

// The decode product (a few rows of x, every weight used once per row): each output channel's
// row of weights is dequantized 32 values at a time in registers, exactly as dequantize_row_avx512
// does (a multiply, then an add), and multiplied into every row of x right away. Nothing is
// written but the outputs, so a thread streams its channels' quantized bytes once: the memory
// traffic of the quantized size, which is what makes weight-only quantization pay at batch 1.
template <QuantScheme S>
SERVELAB_AVX512 inline void load32(const Rows& s, int64_t r, int64_t j, __m512& a, __m512& b) {
  const uint8_t* v = s.row(r);
  if constexpr (S == QuantScheme::ZeroPointUint8) {
    const __m512 sc = _mm512_set1_ps(s.tensor_scale), z = _mm512_set1_ps(s.tensor_zero);
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j));
    a = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(q)));
    b = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(q, 1)));
    a = _mm512_add_ps(_mm512_mul_ps(a, sc), z);
    b = _mm512_add_ps(_mm512_mul_ps(b, sc), z);
  } else if constexpr (S == QuantScheme::PerChannelInt8) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j));
    a = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
    b = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
  } else if constexpr (S == QuantScheme::Int8Group) {
    // Each half's own scale: the same one for groups of 32 and more, two for groups of 16.
    const float* scale = s.scale + r * s.groups;
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j));
    a = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))),
                      _mm512_set1_ps(scale[j / s.group]));
    b = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))),
                      _mm512_set1_ps(scale[(j + 16) / s.group]));
  } else if constexpr (S == QuantScheme::Fp16) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(v) + j;
    a = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
    b = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 16)));
  } else if constexpr (S == QuantScheme::None) {
    const float* f = reinterpret_cast<const float*>(v) + j;
    a = _mm512_loadu_ps(f);
    b = _mm512_loadu_ps(f + 16);
  } else {
    static_assert(S == QuantScheme::Bf16);
    const uint16_t* h = reinterpret_cast<const uint16_t*>(v) + j;
    const __m512i p = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h)));
    const __m512i q = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + 16)));
    a = _mm512_castsi512_ps(_mm512_slli_epi32(p, 16));
    b = _mm512_castsi512_ps(_mm512_slli_epi32(q, 16));
  }
}

// One step of 32 columns of row c into each row's pair of accumulators (the two halves of the 32).
template <QuantScheme S, int M>
SERVELAB_AVX512 inline void gemv_step(const Rows& s, int64_t c, const float* x, int64_t cols, int64_t j,
                                      __m512 (&acc)[M][2]) {
  __m512 a, b;
  load32<S>(s, c, j, a, b);
  for (int m = 0; m < M; ++m) {
    acc[m][0] = _mm512_fmadd_ps(a, _mm512_loadu_ps(x + m * cols + j), acc[m][0]);
    acc[m][1] = _mm512_fmadd_ps(b, _mm512_loadu_ps(x + m * cols + j + 16), acc[m][1]);
  }
}

// Int8 groups for one row, where converting the weights is most of the work: a group's integers
// meet x unscaled and its scale multiplies the group's sum once (s sum_j q_j x_j), one FMA per
// group instead of a multiply per weight; groups in pairs into two accumulators, so that the FMA
// applying a scale does not wait on the previous group's.
SERVELAB_AVX512 inline __m512 int8_group_sum(const uint8_t* v, const float* x, int64_t j, int64_t chunks) {
  __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
  for (int64_t k = 0; k < chunks; ++k, j += 32) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + j));
    a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q))),
                        _mm512_loadu_ps(x + j), a);
    b = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1))),
                        _mm512_loadu_ps(x + j + 16), b);
  }
  return _mm512_add_ps(a, b);
}
SERVELAB_AVX512 void gemv_int8_group_channels_one(const Rows& s, const float* x, int64_t c0, int64_t c1,
                                                  float* y) {
  const int64_t groups = s.groups, group = s.group, chunks = group / 32;
  for (int64_t c = c0; c < c1; ++c) {
    const uint8_t* v = s.row(c);
    const float* scale = s.scale + c * groups;
    _mm_prefetch(reinterpret_cast<const char*>(scale + groups), _MM_HINT_T0);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t g = 0;
    for (; g + 1 < groups; g += 2) {
      acc0 = _mm512_fmadd_ps(_mm512_set1_ps(scale[g]), int8_group_sum(v, x, g * group, chunks), acc0);
      acc1 =
          _mm512_fmadd_ps(_mm512_set1_ps(scale[g + 1]), int8_group_sum(v, x, (g + 1) * group, chunks), acc1);
    }
    if (g < groups)
      acc0 = _mm512_fmadd_ps(_mm512_set1_ps(scale[g]), int8_group_sum(v, x, g * group, chunks), acc0);
    y[c] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  }
}

// Channels [c0, c1) for M rows of x ([M, cols], contiguous) into y ([M, out]); one horizontal sum
// per channel and row at the end.
template <QuantScheme S, int M>
SERVELAB_AVX512 void gemv_channels(const Rows& s, const float* x, int64_t c0, int64_t c1,
                                   const float* out_scale, float* y, int64_t out) {
  if constexpr (S == QuantScheme::Int8Group && M == 1) {
    if (s.group % 32 == 0) {
      gemv_int8_group_channels_one(s, x, c0, c1, y);
      return;
    }
  }
  const int64_t cols = s.cols;
  for (int64_t c = c0; c < c1; ++c) {
    __m512 acc[M][2], more[M][2];
    for (int m = 0; m < M; ++m) acc[m][0] = acc[m][1] = more[m][0] = more[m][1] = _mm512_setzero_ps();
    int64_t j = 0;
    if constexpr (M <= 2) {
      // Two pairs of accumulators for few rows: see gemv_int4_channels.
      for (; j + 64 <= cols; j += 64) {
        gemv_step<S, M>(s, c, x, cols, j, acc);
        gemv_step<S, M>(s, c, x, cols, j + 32, more);
      }
    }
    for (; j < cols; j += 32) gemv_step<S, M>(s, c, x, cols, j, acc);
    for (int m = 0; m < M; ++m) {
      acc[m][0] = _mm512_add_ps(acc[m][0], more[m][0]);
      acc[m][1] = _mm512_add_ps(acc[m][1], more[m][1]);
    }
    for (int m = 0; m < M; ++m) {
      const float v = _mm512_reduce_add_ps(_mm512_add_ps(acc[m][0], acc[m][1]));
      y[m * out + c] = out_scale ? v * out_scale[c] : v;
    }
  }
}

// gemv_channels for M = 1 .. kFusedGemvMaxRows, indexed by M - 1.
template <QuantScheme S, int... I>
constexpr auto gemv_table(std::integer_sequence<int, I...>) {
  return std::array{&gemv_channels<S, I + 1>...};
}

template <QuantScheme S>
SERVELAB_AVX512 void gemv_dispatch(int64_t rows, const Rows& s, const float* x, int64_t c0, int64_t c1,
                                   const float* out_scale, float* y, int64_t out) {
  static constexpr auto table = gemv_table<S>(std::make_integer_sequence<int, kFusedGemvMaxRows>());
  table[static_cast<size_t>(rows - 1)](s, x, c0, c1, out_scale, y, out);
}

// The int4 decode product with each group's scale and minimum taken out of the inner loop:
//   sum_j (q_j s + m) x_j = sum_j (q_j s) x_j + m sum_j x_j
// so the nibbles need only a conversion and a multiply before their FMA, and the minimums meet
// the groups' sums of x (computed once per call, not once per channel) in one short dot product.
// x comes permuted per 32 columns (Int4Operand): the 16 even columns, then the 16 odd ones, as the
// low and high nibbles of 16 bytes unpack, so no weight is shuffled back into column order.
struct Int4Operand {
  const float* x;    // [M, cols], each 32 columns reordered as described above
  const float* sum;  // [M, groups]: each group's sum of x
};
// Floats an Int4Operand of m rows takes: x, then the sums.
int64_t int4_operand_floats(const Rows& s, int64_t m) { return m * (s.cols + s.groups); }
// Writes columns [col0, col1) (whole groups and 32-column chunks) of rows [row0, row1) of x as the int4
// kernels read them into buffer (int4_operand_floats long).
Int4Operand make_int4_operand(const Rows& s, const float* x_rows, int64_t m, float* buffer, int64_t row0,
                              int64_t row1, int64_t col0, int64_t col1) {
  float* xs = buffer;
  float* sums = buffer + m * s.cols;
  for (int64_t r = row0; r < row1; ++r) {
    const float* src = x_rows + r * s.cols;
    float* dst = xs + r * s.cols;
    for (int64_t j = col0; j < col1; j += 32)
      for (int64_t k = 0; k < 16; ++k) {
        dst[j + k] = src[j + 2 * k];
        dst[j + 16 + k] = src[j + 2 * k + 1];
      }
    for (int64_t g = col0 / s.group; g < col1 / s.group; ++g) {
      float t = 0;
      for (int64_t j = 0; j < s.group; ++j) t += src[g * s.group + j];
      sums[r * s.groups + g] = t;
    }
  }
  return {xs, sums};
}
Int4Operand make_int4_operand(const Rows& s, const float* x_rows, int64_t m, float* buffer) {
  return make_int4_operand(s, x_rows, m, buffer, 0, m, 0, s.cols);
}

// One chunk of 32 columns of a row of the int4 matrix into each row's pair of accumulators.
template <int M>
SERVELAB_AVX512 inline void int4_chunk(const uint8_t* v, const float* x, int64_t cols, int64_t j, __m512 sc,
                                       __m512 (&acc)[M][2]) {
  const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + j / 2)));
  const __m512 even = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(b, _mm512_set1_epi32(15))), sc);
  const __m512 odd = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(b, 4)), sc);
  for (int m = 0; m < M; ++m) {
    acc[m][0] = _mm512_fmadd_ps(even, _mm512_loadu_ps(x + m * cols + j), acc[m][0]);
    acc[m][1] = _mm512_fmadd_ps(odd, _mm512_loadu_ps(x + m * cols + j + 16), acc[m][1]);
  }
}

template <int M>
SERVELAB_AVX512 void gemv_int4_channels(const Rows& s, const Int4Operand& op, int64_t c0, int64_t c1,
                                        float* y, int64_t out) {
  const int64_t cols = s.cols, groups = s.groups, chunks = s.group / 32, steps = cols / 32;
  const float* x = op.x;
  for (int64_t c = c0; c < c1; ++c) {
    const uint8_t* v = s.row(c);
    const float* scale = s.scale + c * groups;
    const float* minimum = s.minimum + c * groups;
    __m512 acc[M][2], more[M][2];
    for (int m = 0; m < M; ++m) acc[m][0] = acc[m][1] = more[m][0] = more[m][1] = _mm512_setzero_ps();
    int64_t t = 0;
    if constexpr (M <= 2) {
      // Few rows give few independent FMA chains: alternate chunks between two pairs of
      // accumulators, or a row's chain of FMAs (4 cycles each), not the conversions, bounds the loop.
      for (; t + 1 < steps; t += 2) {
        int4_chunk<M>(v, x, cols, 32 * t, _mm512_set1_ps(scale[chunks == 1 ? t : t / chunks]), acc);
        int4_chunk<M>(v, x, cols, 32 * (t + 1), _mm512_set1_ps(scale[chunks == 1 ? t + 1 : (t + 1) / chunks]),
                      more);
      }
    }
    for (; t < steps; ++t)
      int4_chunk<M>(v, x, cols, 32 * t, _mm512_set1_ps(scale[chunks == 1 ? t : t / chunks]), acc);
    for (int m = 0; m < M; ++m) {
      acc[m][0] = _mm512_add_ps(acc[m][0], more[m][0]);
      acc[m][1] = _mm512_add_ps(acc[m][1], more[m][1]);
    }
    // The minimums' term, 16 groups at a time, into the same accumulators before their one sum.
    for (int64_t g = 0; g < groups; g += 16) {
      const __mmask16 live = groups - g >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (groups - g)) - 1);
      const __m512 mn = _mm512_maskz_loadu_ps(live, minimum + g);
      for (int m = 0; m < M; ++m)
        acc[m][0] = _mm512_fmadd_ps(mn, _mm512_maskz_loadu_ps(live, op.sum + m * groups + g), acc[m][0]);
    }
    for (int m = 0; m < M; ++m) y[m * out + c] = _mm512_reduce_add_ps(_mm512_add_ps(acc[m][0], acc[m][1]));
  }
}

template <int... I>
constexpr auto gemv_int4_table(std::integer_sequence<int, I...>) {
  return std::array{&gemv_int4_channels<I + 1>...};
}

// ---- AVX2 + FMA + F16C: the same kernels in 8-float vectors. load32_avx2 gives 32 consecutive
// weights of row r from column j as four vectors, dequantized exactly as load32 does.
SERVELAB_AVX2 inline __m256 u8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
SERVELAB_AVX2 inline __m256 i8x8(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
SERVELAB_AVX2 inline __m256 bf16x8(const uint16_t* h) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

template <QuantScheme S>
SERVELAB_AVX2 inline void load32_avx2(const Rows& s, int64_t r, int64_t j, __m256 (&a)[4]) {
  const uint8_t* v = s.row(r);
  if constexpr (S == QuantScheme::ZeroPointUint8) {
    const __m256 sc = _mm256_set1_ps(s.tensor_scale), z = _mm256_set1_ps(s.tensor_zero);
    for (int i = 0; i < 4; ++i) a[i] = _mm256_add_ps(_mm256_mul_ps(u8x8(v + j + 8 * i), sc), z);
  } else if constexpr (S == QuantScheme::PerChannelInt8) {
    for (int i = 0; i < 4; ++i) a[i] = i8x8(v + j + 8 * i);
  } else if constexpr (S == QuantScheme::Int4Group) {
    // 16 bytes, 32 nibbles: low nibble = even column, high = odd; interleaved back into column
    // order as bytes, then widened 8 at a time.
    const int64_t g = r * s.groups + j / s.group;
    const __m256 sc = _mm256_set1_ps(s.scale[g]), m = _mm256_set1_ps(s.minimum[g]);
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(v + j / 2));
    const __m128i mask = _mm_set1_epi8(15);
    const __m128i lo = _mm_and_si128(b, mask), hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
    const __m128i c0 = _mm_unpacklo_epi8(lo, hi), c1 = _mm_unpackhi_epi8(lo, hi);
    const __m128i parts[4] = {c0, _mm_srli_si128(c0, 8), c1, _mm_srli_si128(c1, 8)};
    for (int i = 0; i < 4; ++i)
      a[i] = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[i])), sc), m);
  } else if constexpr (S == QuantScheme::Int8Group) {
    const float* scale = s.scale + r * s.groups;
    if (s.group >= 32) {
      const __m256 sc = _mm256_set1_ps(scale[j / s.group]);
      for (int i = 0; i < 4; ++i) a[i] = _mm256_mul_ps(i8x8(v + j + 8 * i), sc);
    } else {  // groups of 16: each half its own scale
      for (int i = 0; i < 4; ++i)
        a[i] = _mm256_mul_ps(i8x8(v + j + 8 * i), _mm256_set1_ps(scale[(j + 8 * i) / s.group]));
    }
  } else if constexpr (S == QuantScheme::Fp16) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(v) + j;
    for (int i = 0; i < 4; ++i)
      a[i] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 8 * i)));
  } else if constexpr (S == QuantScheme::None) {
    const float* f = reinterpret_cast<const float*>(v) + j;
    for (int i = 0; i < 4; ++i) a[i] = _mm256_loadu_ps(f + 8 * i);
  } else {
    static_assert(S == QuantScheme::Bf16);
    const uint16_t* h = reinterpret_cast<const uint16_t*>(v) + j;
    for (int i = 0; i < 4; ++i) a[i] = bf16x8(h + 8 * i);
  }
}

SERVELAB_AVX2 inline float hsum_avx2(__m256 v) {
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  x = _mm_add_ss(x, _mm_shuffle_ps(x, x, 1));
  return _mm_cvtss_f32(x);
}

// 32 weights of a row from column j as four vectors, in the order x is read: int8 codes in column
// order; int4 codes as Int4Operand lays x out, the low nibbles (even columns) then the high ones.
// Each 8 bytes widen to 32-bit lanes straight from memory; an int4 lane's low nibble is then one
// AND away and its high nibble one shift.
struct Int8Codes {
  SERVELAB_AVX2 void operator()(const uint8_t* v, int64_t j, __m256 (&w)[4]) const {
    for (int i = 0; i < 4; ++i) w[i] = i8x8(v + j + 8 * i);
  }
};
struct Int4Codes {
  SERVELAB_AVX2 void operator()(const uint8_t* v, int64_t j, __m256 (&w)[4]) const {
    const __m256i b0 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v + j / 2)));
    const __m256i b1 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(v + j / 2 + 8)));
    const __m256i mask = _mm256_set1_epi32(15);
    w[0] = _mm256_cvtepi32_ps(_mm256_and_si256(b0, mask));
    w[1] = _mm256_cvtepi32_ps(_mm256_and_si256(b1, mask));
    w[2] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b0, 4));
    w[3] = _mm256_cvtepi32_ps(_mm256_srli_epi32(b1, 4));
  }
};

// One group's sum_j q_j x_j for each of M rows (the group's chunks of 32 from column j), unscaled.
template <int M, class Codes>
SERVELAB_AVX2 inline void group_sums_avx2(const uint8_t* v, const float* x, int64_t cols, int64_t j,
                                          int64_t chunks, __m256 (&sum)[M]) {
  __m256 part[M][2];
  for (int64_t k = 0; k < chunks; ++k, j += 32) {
    __m256 w[4];
    Codes()(v, j, w);
    for (int m = 0; m < M; ++m) {
      const float* xm = x + m * cols + j;
      if (k == 0) {
        part[m][0] = _mm256_mul_ps(w[0], _mm256_loadu_ps(xm));
        part[m][1] = _mm256_mul_ps(w[2], _mm256_loadu_ps(xm + 16));
      } else {
        part[m][0] = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(xm), part[m][0]);
        part[m][1] = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xm + 16), part[m][1]);
      }
      part[m][0] = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xm + 8), part[m][0]);
      part[m][1] = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xm + 24), part[m][1]);
    }
  }
  for (int m = 0; m < M; ++m) sum[m] = _mm256_add_ps(part[m][0], part[m][1]);
}

// Channel c's groups for M rows of x, each group's sum scaled once (s sum_j q_j x_j: one FMA per
// row and group instead of a multiply per weight), into two accumulators per row that take the
// groups in turn, so that the FMA applying a scale does not wait on the previous group's.
template <int M, class Codes>
SERVELAB_AVX2 inline void scaled_groups_avx2(const Rows& s, int64_t c, const float* x, __m256 (&acc0)[M],
                                             __m256 (&acc1)[M]) {
  const int64_t cols = s.cols, groups = s.groups, group = s.group, chunks = group / 32;
  const uint8_t* v = s.row(c);
  const float* scale = s.scale + c * groups;
  for (int m = 0; m < M; ++m) acc0[m] = acc1[m] = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 1 < groups; g += 2) {
    __m256 a[M], b[M];
    group_sums_avx2<M, Codes>(v, x, cols, g * group, chunks, a);
    group_sums_avx2<M, Codes>(v, x, cols, (g + 1) * group, chunks, b);
    const __m256 sa = _mm256_set1_ps(scale[g]), sb = _mm256_set1_ps(scale[g + 1]);
    for (int m = 0; m < M; ++m) {
      acc0[m] = _mm256_fmadd_ps(sa, a[m], acc0[m]);
      acc1[m] = _mm256_fmadd_ps(sb, b[m], acc1[m]);
    }
  }
  if (g < groups) {
    __m256 a[M];
    group_sums_avx2<M, Codes>(v, x, cols, g * group, chunks, a);
    const __m256 sa = _mm256_set1_ps(scale[g]);
    for (int m = 0; m < M; ++m) acc0[m] = _mm256_fmadd_ps(sa, a[m], acc0[m]);
  }
}

// Int8 groups for one row, as gemv_int4_channels_few_avx2 (below) does int4: a group's integers
// meet x unscaled, its scale multiplies each row's sum of the group once, groups in pairs.
template <int M>
SERVELAB_AVX2 void gemv_int8_group_channels_few_avx2(const Rows& s, const float* x, int64_t c0, int64_t c1,
                                                     float* y, int64_t out) {
  for (int64_t c = c0; c < c1; ++c) {
    _mm_prefetch(reinterpret_cast<const char*>(s.scale + (c + 1) * s.groups), _MM_HINT_T0);
    __m256 acc0[M], acc1[M];
    scaled_groups_avx2<M, Int8Codes>(s, c, x, acc0, acc1);
    for (int m = 0; m < M; ++m) y[m * out + c] = hsum_avx2(_mm256_add_ps(acc0[m], acc1[m]));
  }
}

// Channels [c0, c1) for M rows: one accumulator per vector of a step for 1-2 rows, two per row
// up to 4 rows (8 chains hide the FMA latency), one beyond (M chains already do; 2 * 7 + 4
// weights would not fit in 16 registers).
template <QuantScheme S, int M>
SERVELAB_AVX2 void gemv_channels_avx2(const Rows& s, const float* x, int64_t c0, int64_t c1,
                                      const float* out_scale, float* y, int64_t out) {
  if constexpr (S == QuantScheme::Int8Group && M == 1) {
    if (s.group % 32 == 0) {
      gemv_int8_group_channels_few_avx2<M>(s, x, c0, c1, y, out);
      return;
    }
  }
  constexpr int A = M <= 2 ? 4 : M <= 4 ? 2 : 1;
  const int64_t cols = s.cols;
  for (int64_t c = c0; c < c1; ++c) {
    __m256 acc[M][A];
    for (int m = 0; m < M; ++m)
      for (int i = 0; i < A; ++i) acc[m][i] = _mm256_setzero_ps();
    for (int64_t j = 0; j < cols; j += 32) {
      __m256 w[4];
      load32_avx2<S>(s, c, j, w);
      for (int m = 0; m < M; ++m)
        for (int i = 0; i < 4; ++i)
          acc[m][i % A] = _mm256_fmadd_ps(w[i], _mm256_loadu_ps(x + m * cols + j + 8 * i), acc[m][i % A]);
    }
    for (int m = 0; m < M; ++m) {
      __m256 t = acc[m][0];
      for (int i = 1; i < A; ++i) t = _mm256_add_ps(t, acc[m][i]);
      const float v = hsum_avx2(t);
      y[m * out + c] = out_scale ? v * out_scale[c] : v;
    }
  }
}

template <QuantScheme S, int... I>
constexpr auto gemv_table_avx2(std::integer_sequence<int, I...>) {
  return std::array{&gemv_channels_avx2<S, I + 1>...};
}

template <QuantScheme S>
SERVELAB_AVX2 void gemv_dispatch_avx2(int64_t rows, const Rows& s, const float* x, int64_t c0, int64_t c1,
                                      const float* out_scale, float* y, int64_t out) {
  static constexpr auto table = gemv_table_avx2<S>(std::make_integer_sequence<int, kFusedGemvMaxRows>());
  table[static_cast<size_t>(rows - 1)](s, x, c0, c1, out_scale, y, out);
}

// gemv_int4_channels in 8-float vectors: the low nibbles of 16 bytes are x's even columns (two
// vectors), the high ones its odd columns (two more), as Int4Codes converts them.
// The minimums' term sum_g mn_g (sum of x over group g) into each row's accumulator, over whole
// vectors of 8 groups; returns the first group left for minimum_tail (masked loads, the obvious
// way to take the rest, are slow on AMD cores).
template <int M>
SERVELAB_AVX2 inline int64_t minimum_vectors_avx2(const float* minimum, const float* sums, int64_t groups,
                                                  __m256 (&acc)[M]) {
  int64_t h = 0;
  for (; h + 8 <= groups; h += 8) {
    const __m256 mn = _mm256_loadu_ps(minimum + h);
    for (int m = 0; m < M; ++m) acc[m] = _mm256_fmadd_ps(mn, _mm256_loadu_ps(sums + m * groups + h), acc[m]);
  }
  return h;
}
inline float minimum_tail(const float* minimum, const float* sums, int64_t h, int64_t groups) {
  float t = 0;
  for (; h < groups; ++h) t += minimum[h] * sums[h];
  return t;
}

// One or two rows, where converting the weights is most of the work: a group's integers meet x
// unscaled and its scale multiplies the group's sum once (s sum_j q_j x_j), one FMA per row and
// group instead of a multiply per weight. Groups go in pairs into two accumulators per row, so the
// FMA that applies a scale does not wait on the previous group's.
template <int M>
SERVELAB_AVX2 void gemv_int4_channels_few_avx2(const Rows& s, const Int4Operand& op, int64_t c0, int64_t c1,
                                               float* y, int64_t out) {
  const int64_t groups = s.groups;
  for (int64_t c = c0; c < c1; ++c) {
    const float* minimum = s.minimum + c * groups;
    // The next channel's scales and minimums, which its first and last instructions need.
    _mm_prefetch(reinterpret_cast<const char*>(s.scale + (c + 1) * groups), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(minimum + groups), _MM_HINT_T0);
    __m256 acc0[M], acc1[M];
    scaled_groups_avx2<M, Int4Codes>(s, c, op.x, acc0, acc1);
    const int64_t h = minimum_vectors_avx2<M>(minimum, op.sum, groups, acc1);
    for (int m = 0; m < M; ++m)
      y[m * out + c] =
          hsum_avx2(_mm256_add_ps(acc0[m], acc1[m])) + minimum_tail(minimum, op.sum + m * groups, h, groups);
  }
}

// 3 rows and more, where the conversion is shared by enough rows: each weight scaled once and
// used by every row, one accumulator per row (M chains hide the FMA latency).
template <int M>
SERVELAB_AVX2 void gemv_int4_channels_avx2(const Rows& s, const Int4Operand& op, int64_t c0, int64_t c1,
                                           float* y, int64_t out) {
  if constexpr (M <= 2) {
    gemv_int4_channels_few_avx2<M>(s, op, c0, c1, y, out);
  } else {
    constexpr int A = M <= 4 ? 2 : 1;
    const int64_t cols = s.cols, groups = s.groups, chunks = s.group / 32;
    const float* x = op.x;
    for (int64_t c = c0; c < c1; ++c) {
      const uint8_t* v = s.row(c);
      const float* scale = s.scale + c * groups;
      const float* minimum = s.minimum + c * groups;
      _mm_prefetch(reinterpret_cast<const char*>(scale + groups), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(minimum + groups), _MM_HINT_T0);
      __m256 acc[M][A];
      for (int m = 0; m < M; ++m)
        for (int i = 0; i < A; ++i) acc[m][i] = _mm256_setzero_ps();
      for (int64_t g = 0, j = 0; g < groups; ++g) {
        const __m256 sc = _mm256_set1_ps(scale[g]);
        for (int64_t k = 0; k < chunks; ++k, j += 32) {
          __m256 w[4];
          Int4Codes()(v, j, w);
          for (int i = 0; i < 4; ++i) w[i] = _mm256_mul_ps(w[i], sc);
          for (int m = 0; m < M; ++m)
            for (int i = 0; i < 4; ++i)
              acc[m][i % A] = _mm256_fmadd_ps(w[i], _mm256_loadu_ps(x + m * cols + j + 8 * i), acc[m][i % A]);
        }
      }
      __m256 total[M];
      for (int m = 0; m < M; ++m) {
        total[m] = acc[m][0];
        for (int i = 1; i < A; ++i) total[m] = _mm256_add_ps(total[m], acc[m][i]);
      }
      const int64_t h = minimum_vectors_avx2<M>(minimum, op.sum, groups, total);
      for (int m = 0; m < M; ++m)
        y[m * out + c] = hsum_avx2(total[m]) + minimum_tail(minimum, op.sum + m * groups, h, groups);
    }
  }
}

template <int... I>
constexpr auto gemv_int4_table_avx2(std::integer_sequence<int, I...>) {
  return std::array{&gemv_int4_channels_avx2<I + 1>...};
}

// Row r as fp32 32 values at a time where the row allows it (columns, and groups, in multiples of
// 32), else the portable loop: the same values either way.
template <QuantScheme S>
SERVELAB_AVX2 void dequantize_row_avx2_as(const Rows& s, int64_t r, float* out) {
  for (int64_t j = 0; j < s.cols; j += 32) {
    __m256 a[4];
    load32_avx2<S>(s, r, j, a);
    for (int i = 0; i < 4; ++i) _mm256_storeu_ps(out + j + 8 * i, a[i]);
  }
}

SERVELAB_AVX2 void dequantize_row_avx2(const Rows& s, int64_t r, float* out) {
  const bool grouped = s.scheme == QuantScheme::Int4Group || s.scheme == QuantScheme::Int8Group;
  if (s.cols % 32 != 0 || (grouped && s.group % 32 != 0)) return dequantize_row_generic(s, r, out);
  switch (s.scheme) {
    case QuantScheme::ZeroPointUint8:
      return dequantize_row_avx2_as<QuantScheme::ZeroPointUint8>(s, r, out);
    case QuantScheme::PerChannelInt8:
      return dequantize_row_avx2_as<QuantScheme::PerChannelInt8>(s, r, out);
    case QuantScheme::Int4Group:
      return dequantize_row_avx2_as<QuantScheme::Int4Group>(s, r, out);
    case QuantScheme::Int8Group:
      return dequantize_row_avx2_as<QuantScheme::Int8Group>(s, r, out);
    case QuantScheme::Fp16:
      return dequantize_row_avx2_as<QuantScheme::Fp16>(s, r, out);
    case QuantScheme::Bf16:
      return dequantize_row_avx2_as<QuantScheme::Bf16>(s, r, out);
    case QuantScheme::None:
      std::memcpy(out, s.row(r), static_cast<size_t>(s.cols) * sizeof(float));
      return;
  }
}

// The AVX2 GEMM kernel: 4 output channels (rows of w) times 8 * V rows of x (V <= 3): 4 * V
// accumulators, V vectors of x and one broadcast weight, 16 registers at V = 3. The 8-channel tile
// of tiled_linear runs it twice.
constexpr int kTileAvx2Channels = 4;
constexpr int64_t kRowsPerPassAvx2 = 24;

template <int V>
SERVELAB_AVX2 void tile_kernel_avx2(const float* w, int64_t ldw, const float* xt, int64_t ldx, int64_t cols,
                                    float* acc_out, const char* prefetch, int64_t prefetch_step) {
  __m256 acc[kTileAvx2Channels][V];
  for (int n = 0; n < kTileAvx2Channels; ++n)
    for (int v = 0; v < V; ++v) acc[n][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < cols; ++k) {
    _mm_prefetch(prefetch + k * prefetch_step, _MM_HINT_T0);
    __m256 xv[V];
    for (int v = 0; v < V; ++v) xv[v] = _mm256_loadu_ps(xt + k * ldx + 8 * v);
    for (int n = 0; n < kTileAvx2Channels; ++n) {
      const __m256 b = _mm256_broadcast_ss(w + n * ldw + k);
      for (int v = 0; v < V; ++v) acc[n][v] = _mm256_fmadd_ps(b, xv[v], acc[n][v]);
    }
  }
  for (int n = 0; n < kTileAvx2Channels; ++n)
    for (int v = 0; v < V; ++v) _mm256_storeu_ps(acc_out + n * kRowsPerPass + 8 * v, acc[n][v]);
}

// The decode GEMV's output channels [c0, c1) for m rows (1..kFusedGemvMaxRows) under the active
// ISA, into y[r * ldy + c]: operand is x itself, or Int4Operand's buffer (x, then the sums) for int4.
void gemv_range(const Rows& s, const float* operand, int64_t m, int64_t c0, int64_t c1,
                const float* out_scale, float* y, int64_t ldy) {
  const bool avx2 = active_isa() == Isa::Avx2;
  if (s.scheme == QuantScheme::Int4Group) {
    static constexpr auto table = gemv_int4_table(std::make_integer_sequence<int, kFusedGemvMaxRows>());
    static constexpr auto table_avx2 =
        gemv_int4_table_avx2(std::make_integer_sequence<int, kFusedGemvMaxRows>());
    const Int4Operand op{operand, operand + m * s.cols};
    (avx2 ? table_avx2 : table)[static_cast<size_t>(m - 1)](s, op, c0, c1, y, ldy);
    return;
  }
  switch (s.scheme) {
#define SERVELAB_GEMV(SCHEME)                                                                       \
  case QuantScheme::SCHEME:                                                                         \
    return avx2 ? gemv_dispatch_avx2<QuantScheme::SCHEME>(m, s, operand, c0, c1, out_scale, y, ldy) \
                : gemv_dispatch<QuantScheme::SCHEME>(m, s, operand, c0, c1, out_scale, y, ldy);
    SERVELAB_GEMV(None)
    SERVELAB_GEMV(ZeroPointUint8)
    SERVELAB_GEMV(PerChannelInt8)
    SERVELAB_GEMV(Int8Group)
    SERVELAB_GEMV(Fp16)
    SERVELAB_GEMV(Bf16)
#undef SERVELAB_GEMV
    case QuantScheme::Int4Group:  // above
      break;
  }
}
#endif

}  // namespace

namespace {

// The scheme's tensors as the row kernels read them (contiguous scales and minimums).
bool rows_readable(const QuantizedTensor& w) {
  if (!w.values.defined() || !w.values.device().is_cpu() || w.shape.size() != 2 || !w.values.is_contiguous())
    return false;
  switch (w.scheme) {
    case QuantScheme::ZeroPointUint8:
    case QuantScheme::Fp16:
    case QuantScheme::Bf16:
      return true;
    case QuantScheme::PerChannelInt8:
    case QuantScheme::Int8Group:
      return w.scale.is_contiguous();
    case QuantScheme::Int4Group:
      return w.scale.is_contiguous() && w.offset.is_contiguous();
    case QuantScheme::None:
      break;
  }
  return false;
}

// The ISA whose vector kernels run the fused paths now: Generic has none of ours (the callers
// dequantize rows and leave the product to ATen).
bool vector_isa() {
#if SERVELAB_X86
  return active_isa() != Isa::Generic;
#else
  return false;
#endif
}

}  // namespace

bool fused_dequant_supported(const QuantizedTensor& q) {
  // Every ISA converts every scheme (per-channel int8 to its integers: the JIT path scales the
  // product instead).
  return rows_readable(q);
}

void dequantize_rows_cpu(const QuantizedTensor& q, int64_t begin, at::Tensor& out) {
  if (!fused_dequant_supported(q) || out.scalar_type() != at::kFloat || !out.is_contiguous() ||
      out.dim() != 2 || out.size(1) != q.cols() || begin < 0 || begin + out.size(0) > q.rows())
    throw InputError("fused dequantization: unsupported tensor or output block");
  const int64_t cols = q.cols(), rows = out.size(0);
  float* dst = out.data_ptr<float>();
  const Rows s(q);
  void (*row_fn)(const Rows&, int64_t, float*) = dequantize_row_generic;
#if SERVELAB_X86
  if (active_isa() == Isa::Avx512) row_fn = dequantize_row_avx512;
  if (active_isa() == Isa::Avx2) row_fn = dequantize_row_avx2;
#endif
  at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) row_fn(s, begin + r, dst + r * cols);
  });
}

bool fused_linear_supported(const QuantizedTensor& w) { return vector_isa() && rows_readable(w); }

std::string fused_kernels(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return "AVX-512 GEMV in registers (1-7 rows), 8-channel x 32-row tiles";
    case Isa::Avx2:
      return "AVX2+FMA+F16C GEMV in registers (1-7 rows), 4-channel x 24-row tiles";
    case Isa::Generic:
      break;
  }
  return "portable C++ row dequantization, then ATen's GEMM";
}

#if SERVELAB_X86
namespace {
// x [rows, s.cols] times the matrix s ([out, s.cols]) transposed, 8 output channels at a time:
// each thread converts 8 rows of the matrix into an L1 buffer and runs tile_kernel over them.
// avx2: the AVX2 kernels (dequantize_row_avx2, tile_kernel_avx2 over each half of the 8 channels, 24
// rows a pass), else the AVX-512 ones.
// Rows [row0, row1) and columns [col0, col1) of x ([rows, cols]) into xt, column k at k * ldx
// with the rows padded with zeros to ldx, a multiple of 16 (the tile kernels' vectors; the padding
// is written with the last rows).
int64_t tile_ldx(int64_t rows) { return (rows + 15) / 16 * 16; }
void transpose_for_tiles(const float* x, int64_t rows, int64_t cols, int64_t row0, int64_t row1, int64_t col0,
                         int64_t col1, float* xt) {
  const int64_t ldx = tile_ldx(rows);
  for (int64_t k = col0; k < col1; ++k) {
    float* dst = xt + k * ldx;
    for (int64_t i = row0; i < row1; ++i) dst[i] = x[i * cols + k];
    if (row1 == rows)
      for (int64_t i = rows; i < ldx; ++i) dst[i] = 0.0f;
  }
}

// Tiles [t0, t1) of kTile output channels for all `rows` rows of the transposed x, into y (row
// stride ldy): each tile's channels dequantized into an L1 buffer, then multiplied by every pass of
// rows with a register-tiled kernel.
void tile_range(const Rows& s, int64_t out, const float* out_scale, const float* xt, int64_t rows, int64_t t0,
                int64_t t1, float* yp, int64_t ldy, bool avx2) {
  const int64_t cols = s.cols, ldx = tile_ldx(rows);
  // Rows of the weight buffer one cache line apart from a multiple of 4 KiB: 8 rows of 3072
  // columns would otherwise share one L1 set.
  const int64_t ldw = cols + 16;
  std::vector<float> wbuf(static_cast<size_t>(kTile * ldw), 0.0f);  // rows past a last partial tile: unused
  alignas(64) float acc[kTile * kRowsPerPass];
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t r0 = t * kTile, n = std::min<int64_t>(kTile, out - r0);
    for (int64_t r = 0; r < n; ++r)
      (avx2 ? dequantize_row_avx2 : dequantize_row_avx512)(s, r0 + r, wbuf.data() + r * ldw);
    // The next tile's bytes, prefetched during this one's products (its int4 scales and minimums
    // here, they are few).
    const int64_t next = t + 1 < t1 ? std::min<int64_t>(kTile, out - r0 - kTile) : 0;
    const char* prefetch = reinterpret_cast<const char*>(s.row(next > 0 ? r0 + kTile : r0));
    const int64_t step = next > 0 ? (next * s.row_bytes + cols - 1) / cols : 0;
    if (next > 0 && s.scheme == QuantScheme::Int4Group) {
      const int64_t bytes = next * s.groups * static_cast<int64_t>(sizeof(float));
      const char* sc = reinterpret_cast<const char*>(s.scale + (r0 + kTile) * s.groups);
      const char* mn = reinterpret_cast<const char*>(s.minimum + (r0 + kTile) * s.groups);
      for (int64_t b = 0; b < bytes; b += 64) {
        _mm_prefetch(sc + b, _MM_HINT_T0);
        _mm_prefetch(mn + b, _MM_HINT_T0);
      }
    }
    const int64_t pass = avx2 ? kRowsPerPassAvx2 : kRowsPerPass;
    for (int64_t m0 = 0; m0 < rows; m0 += pass) {
      const int64_t mw = std::min<int64_t>(pass, rows - m0);
      if (avx2) {
        // Each half of the tile takes half of the next tile's bytes to prefetch.
        const int64_t half_step = m0 == 0 ? (step + 1) / 2 : 0;
        for (int h = 0; h < 2; ++h) {
          const float* wh = wbuf.data() + h * kTileAvx2Channels * ldw;
          float* ah = acc + h * kTileAvx2Channels * kRowsPerPass;
          const char* ph = prefetch + h * cols * half_step;
          if (mw > 16)
            tile_kernel_avx2<3>(wh, ldw, xt + m0, ldx, cols, ah, ph, half_step);
          else if (mw > 8)
            tile_kernel_avx2<2>(wh, ldw, xt + m0, ldx, cols, ah, ph, half_step);
          else
            tile_kernel_avx2<1>(wh, ldw, xt + m0, ldx, cols, ah, ph, half_step);
        }
      } else if (mw > 16)
        tile_kernel<2>(wbuf.data(), ldw, xt + m0, ldx, cols, acc, prefetch, m0 == 0 ? step : 0);
      else
        tile_kernel<1>(wbuf.data(), ldw, xt + m0, ldx, cols, acc, prefetch, m0 == 0 ? step : 0);
      for (int64_t r = 0; r < n; ++r) {
        const float* a = acc + r * kRowsPerPass;
        float* o = yp + m0 * ldy + r0 + r;
        if (out_scale) {
          const float sc = out_scale[r0 + r];
          for (int64_t i = 0; i < mw; ++i) o[i * ldy] = a[i] * sc;
        } else {
          for (int64_t i = 0; i < mw; ++i) o[i * ldy] = a[i];
        }
      }
    }
  }
}

at::Tensor tiled_linear(const Rows& s, int64_t out, const float* out_scale, const at::Tensor& x, bool avx2) {
  const int64_t rows = x.size(0), cols = s.cols;
  at::Tensor y = at::empty({rows, out}, x.options());
  if (rows == 0 || out == 0) return y;
  std::vector<float> xt(static_cast<size_t>(cols * tile_ldx(rows)));
  const at::Tensor xc = x.contiguous();
  transpose_for_tiles(xc.data_ptr<float>(), rows, cols, 0, rows, 0, cols, xt.data());
  float* yp = y.data_ptr<float>();
  const int64_t tiles = (out + kTile - 1) / kTile;
  at::parallel_for(0, tiles, 4, [&](int64_t t0, int64_t t1) {
    tile_range(s, out, out_scale, xt.data(), rows, t0, t1, yp, out, avx2);
  });
  return y;
}
}  // namespace
#endif

at::Tensor fused_linear_cpu(const QuantizedTensor& w, const at::Tensor& x) {
  if (!fused_linear_supported(w) || x.dim() != 2 || x.scalar_type() != at::kFloat || !x.device().is_cpu() ||
      x.size(1) != w.cols())
    throw InputError("fused quantized linear: unsupported matrix or input");
#if SERVELAB_X86
  const Rows s(w);
  return tiled_linear(s, w.rows(), w.scheme == QuantScheme::PerChannelInt8 ? s.scale : nullptr, x,
                      active_isa() == Isa::Avx2);
#else
  throw InputError("fused quantized linear: an x86-64 CPU path");
#endif
}

bool fused_gemv_supported(const QuantizedTensor& w) {
  // Int8 groups of 16 (GGUF's Q6_K) take a scale per half of each 32-column step.
  return fused_linear_supported(w) && w.cols() % 32 == 0 &&
         (w.scheme == QuantScheme::Int4Group   ? w.group_size % 32 == 0
          : w.scheme == QuantScheme::Int8Group ? w.group_size % 32 == 0 || w.group_size == 16
                                               : true);
}

at::Tensor fused_gemv_cpu(const QuantizedTensor& w, const at::Tensor& x) {
  if (!fused_gemv_supported(w) || x.dim() != 2 || x.scalar_type() != at::kFloat || !x.device().is_cpu() ||
      x.size(1) != w.cols() || x.size(0) < 1 || x.size(0) > kFusedGemvMaxRows)
    throw InputError("fused quantized GEMV: unsupported matrix or input");
#if SERVELAB_X86
  const int64_t rows = x.size(0), out = w.rows();
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty({rows, out}, x.options());
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const Rows s(w);
  const float* out_scale = w.scheme == QuantScheme::PerChannelInt8 ? s.scale : nullptr;
  std::vector<float> buffer;
  const float* operand = xp;
  if (s.scheme == QuantScheme::Int4Group) {
    buffer.resize(static_cast<size_t>(int4_operand_floats(s, rows)));
    make_int4_operand(s, xp, rows, buffer.data());
    operand = buffer.data();
  }
  at::parallel_for(0, out, 64,
                   [&](int64_t c0, int64_t c1) { gemv_range(s, operand, rows, c0, c1, out_scale, yp, out); });
  return y;
#else
  throw InputError("fused quantized GEMV: an x86-64 CPU path");
#endif
}

at::Tensor fp32_linear_cpu(const at::Tensor& w, const at::Tensor& x) {
  if (x.dim() == 2 && x.size(0) >= 1 && x.size(0) <= kFusedGemvMaxRows) return fp32_gemv_cpu(w, x);
  if (!fp32_gemv_supported(w) || x.dim() != 2 || x.scalar_type() != at::kFloat || !x.device().is_cpu() ||
      x.size(1) != w.size(1))
    throw InputError("fp32 linear: unsupported matrix or input");
#if SERVELAB_X86
  return tiled_linear(Rows(w), w.size(0), nullptr, x, active_isa() == Isa::Avx2);
#else
  throw InputError("fp32 linear: an x86-64 CPU path");
#endif
}

bool fp32_gemv_supported(const at::Tensor& w) {
  return vector_isa() && w.defined() && w.device().is_cpu() && w.dim() == 2 &&
         w.scalar_type() == at::kFloat && w.is_contiguous() && w.size(1) % 32 == 0;
}

at::Tensor fp32_gemv_cpu(const at::Tensor& w, const at::Tensor& x) {
  if (!fp32_gemv_supported(w) || x.dim() != 2 || x.scalar_type() != at::kFloat || !x.device().is_cpu() ||
      x.size(1) != w.size(1) || x.size(0) < 1 || x.size(0) > kFusedGemvMaxRows)
    throw InputError("fp32 GEMV: unsupported matrix or input");
#if SERVELAB_X86
  const int64_t rows = x.size(0), out = w.size(0);
  const at::Tensor xc = x.contiguous();
  at::Tensor y = at::empty({rows, out}, x.options());
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const Rows s(w);
  at::parallel_for(0, out, 64,
                   [&](int64_t c0, int64_t c1) { gemv_range(s, xp, rows, c0, c1, nullptr, yp, out); });
  return y;
#else
  throw InputError("fp32 GEMV: an x86-64 CPU path");
#endif
}

namespace {

// DecodeGemv over fp32 activations: fused_gemv_cpu's and fp32_gemv_cpu's kernels.
class Fp32DecodeGemv final : public DecodeGemv {
 public:
  explicit Fp32DecodeGemv(const QuantizedTensor& w, int64_t out, int64_t in)
      : DecodeGemv(out, in),
        kept_(w),
        rows_(w.scheme == QuantScheme::None ? Rows(w.values) : Rows(w)),
        out_scale_(w.scheme == QuantScheme::PerChannelInt8 ? rows_.scale : nullptr) {}

  int64_t max_rows() const override {
    // libtorch's GEMM runs a plain fp32 matrix past the GEMV's rows.
    return rows_.scheme == QuantScheme::None ? kFusedGemvMaxRows : kDecodeGemvMaxRows;
  }
  int64_t operand_floats(int64_t m) const override {
#if SERVELAB_X86
    if (m > kFusedGemvMaxRows) return rows_.cols * tile_ldx(m);
    return rows_.scheme == QuantScheme::Int4Group ? int4_operand_floats(rows_, m) : 0;
#else
    (void)m;
    return 0;
#endif
  }
  bool prepares(int64_t m) const override {
    return m > kFusedGemvMaxRows || rows_.scheme == QuantScheme::Int4Group;
  }
  const float* prepare(const float* x, int64_t m, float* scratch, int64_t row0, int64_t row1, int64_t col0,
                       int64_t col1) const override {
    if (!prepares(m)) return x;
#if SERVELAB_X86
    if (m > kFusedGemvMaxRows)
      transpose_for_tiles(x, m, rows_.cols, row0, row1, col0, col1, scratch);
    else
      make_int4_operand(rows_, x, m, scratch, row0, row1, col0, col1);
#else
    (void)m, (void)row0, (void)row1, (void)col0, (void)col1;
#endif
    return scratch;
  }
  int64_t operand_align() const override {
    return rows_.scheme == QuantScheme::Int4Group ? std::max<int64_t>(32, rows_.group) : 1;
  }

  void run(const float* operand, int64_t m, int64_t c0, int64_t c1, float* y, int64_t ldy) const override {
#if SERVELAB_X86
    if (m > kFusedGemvMaxRows) {
      tile_range(rows_, out(), out_scale_, operand, m, c0 / kTile, (c1 + kTile - 1) / kTile, y, ldy,
                 active_isa() == Isa::Avx2);
      return;
    }
    gemv_range(rows_, operand, m, c0, c1, out_scale_, y, ldy);
#else
    (void)operand, (void)m, (void)c0, (void)c1, (void)y, (void)ldy;
#endif
  }

 private:
  QuantizedTensor kept_;  // the tensors rows_ points into
  Rows rows_;
  const float* out_scale_;
};

}  // namespace

std::shared_ptr<const DecodeGemv> DecodeGemv::of(const QuantizedTensor& w) {
  const bool plain = w.scheme == QuantScheme::None && fp32_gemv_supported(w.values);
  if (!plain && (w.scheme == QuantScheme::None || !fused_gemv_supported(w))) return nullptr;
  const int64_t out = plain ? w.values.size(0) : w.rows(), in = plain ? w.values.size(1) : w.cols();
  return std::make_shared<Fp32DecodeGemv>(w, out, in);
}

}  // namespace servelab

#include "quant/int8_activations.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "util/errors.h"
#include "util/x86_simd.h"

namespace servelab {

namespace {

constexpr int64_t kBlock = 32;  // columns per activation scale, and per weight group
// Rows of x per kernel call beyond the decode sizes: each call unpacks a channel's weights once
// for these rows, then the next rows read them again from L1.
// The rows of a batch go in near-equal passes of at most kMaxRowsPerCall (32 rows: 7, 7, 6, 6, 6):
// the more rows a pass, the fewer times a channel's weights are unpacked (batch 32 runs 12% faster
// in passes of 7 than of 4), and no pass is left with a row or two.
constexpr int kMaxRowsPerCall = 7;
constexpr int64_t kBatchChannels = 32;  // channels per L1-resident block in a batched product

// One matrix as the kernels read it.
struct Matrix {
  const uint8_t* values = nullptr;
  int64_t row_bytes = 0, groups = 0;
  const float* scale = nullptr;
  const float* minimum = nullptr;  // Int4Group only
  explicit Matrix(const QuantizedTensor& w)
      : values(static_cast<const uint8_t*>(w.values.data_ptr())),
        row_bytes(w.scheme == QuantScheme::Int4Group ? w.cols() / 2 : w.cols()),
        groups(w.cols() / kBlock),
        scale(w.scale.data_ptr<float>()),
        minimum(w.scheme == QuantScheme::Int4Group ? w.offset.data_ptr<float>() : nullptr) {}
  const uint8_t* row(int64_t c) const { return values + c * row_bytes; }
};

// One block of 32 values of x: q (in column order; with `split`, the 16 even columns then the 16
// odd ones), its scale d, and the block's sum. The same arithmetic in both versions (a multiply by
// 127 / max |x| in fp32, rounded to nearest even), so their q and d are equal bit for bit.
float quantize_block_generic(const float* x, int8_t* q, float* d, bool split) {
  float amax = 0, sum = 0;
  for (int64_t j = 0; j < kBlock; ++j) {
    amax = std::max(amax, std::fabs(x[j]));
    sum += x[j];
  }
  const float inv = amax > 0 ? 127.0f / amax : 0.0f;
  for (int64_t j = 0; j < kBlock; ++j) {
    const float r = std::nearbyint(x[j] * inv);
    // NaN as the vector conversion gives it (its saturated integer), not undefined behaviour.
    const int8_t v = r == r ? static_cast<int8_t>(r) : int8_t{-128};
    q[split ? (j % 2) * 16 + j / 2 : j] = v;
  }
  *d = amax / 127.0f;
  return sum;
}

#if SERVELAB_X86
__attribute__((target("avx2,fma"))) float quantize_block_avx2(const float* x, int8_t* q, float* d,
                                                              bool split) {
  const __m256 a0 = _mm256_loadu_ps(x), a1 = _mm256_loadu_ps(x + 8), a2 = _mm256_loadu_ps(x + 16),
               a3 = _mm256_loadu_ps(x + 24);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, a0), _mm256_andnot_ps(sign, a1)),
                           _mm256_max_ps(_mm256_andnot_ps(sign, a2), _mm256_andnot_ps(sign, a3)));
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  const float amax = _mm_cvtss_f32(h);
  const float inv = amax > 0 ? 127.0f / amax : 0.0f;
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(a0, vinv)),
                i1 = _mm256_cvtps_epi32(_mm256_mul_ps(a1, vinv)),
                i2 = _mm256_cvtps_epi32(_mm256_mul_ps(a2, vinv)),
                i3 = _mm256_cvtps_epi32(_mm256_mul_ps(a3, vinv));
  // The packs work per 128-bit lane: dwords come out as 0,2,4,6 (lane 0) and 1,3,5,7 (lane 1) of
  // the 4-value runs; one permutation restores column order.
  __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  if (split) {
    // Within each 16-byte lane, its 8 even bytes then its 8 odd ones; then the lanes' even halves
    // together and their odd halves together.
    b = _mm256_shuffle_epi8(b, _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4,
                                                6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    b = _mm256_permute4x64_epi64(b, 0xD8);  // quadwords 0, 2, 1, 3
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), b);
  *d = amax / 127.0f;
  const __m256 t = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#endif

using BlockQuantizer = float (*)(const float*, int8_t*, float*, bool);
BlockQuantizer block_quantizer() {
#if SERVELAB_X86
  if (active_isa() != Isa::Generic) return quantize_block_avx2;
#endif
  return quantize_block_generic;
}

// The rows of x in passes of at most kMaxRowsPerCall, near-equal (32 rows: 7, 7, 6, 6, 6): a
// kernel call takes one pass.
struct Passes {
  std::vector<int64_t> first, rows;
  explicit Passes(int64_t n) {
    const int64_t count = std::max<int64_t>(1, (n + kMaxRowsPerCall - 1) / kMaxRowsPerCall);
    for (int64_t p = 0, m = 0; p < count; ++p) {
      const int64_t k = n / count + (p < n % count ? 1 : 0);
      first.push_back(m);
      rows.push_back(k);
      m += k;
    }
  }
};

// x quantized and laid out for one scheme's kernels, shared by both ISAs. A step is 128 columns
// (int4) or 64 (int8); each pass keeps its rows' steps interleaved, step-major ([step][row]), so a
// kernel walks one pointer and finds each row at a fixed offset from it: per-row pointers, seven
// of them, spilled registers and cost an address computation per row and step.
// - int4: a row's step holds 64 bytes of the even columns of 4 groups (group g at bytes
//   16g..16g+15, as the low nibbles of a group's 16 weight bytes hold them) and 64 bytes of the odd
//   ones; a vector of weight bytes then meets x with no shuffle;
// - int8: the columns in order.
// Rows are padded with zeros to whole steps. lanes: per row and step, 16 floats, each block's d
// once per int32 lane its sums land in (4 lanes per group for int4, 8 for int8), so that the sums
// of a step scale with one multiply. sums: each block's sum of x in fp32 ([row][block]), the
// partner of int4's minimums.
// With `paired` (AVX2's kernels) a step's lanes are 8, where those kernels' horizontal adds leave
// each group's sums: A A C C B B D D for int4's groups A-D, A A B B A A B B for int8's A and B.
struct Operand {
  static constexpr int64_t kStepLanes = 16;
  int64_t step_bytes = 0, steps = 0, blocks = 0, cols = 0;
  bool int4 = false, paired = false;
  Passes passes;
  int8_t* q = nullptr;          // [rows * steps * step_bytes]
  float* lane_scale = nullptr;  // [rows * steps * kStepLanes]
  float* sums = nullptr;        // [rows * blocks]
  // The layout of `rows` rows; the storage is the caller's (OwnedOperand, or a decode program's
  // scratch: storage_floats long).
  Operand(QuantScheme scheme, int64_t rows, int64_t cols_, bool paired_)
      : blocks(cols_ / kBlock),
        cols(cols_),
        int4(scheme == QuantScheme::Int4Group),
        paired(paired_),
        passes(rows) {
    step_bytes = int4 ? 128 : 64;
    steps = (cols + step_bytes - 1) / step_bytes;
  }
  int64_t rows_total() const { return passes.first.back() + passes.rows.back(); }
  int64_t q_bytes() const { return rows_total() * steps * step_bytes; }
  int64_t lane_floats() const { return rows_total() * steps * kStepLanes; }
  int64_t sum_floats() const { return rows_total() * blocks; }
  // Floats of storage with q first (rounded up to whole floats), then the lanes, then the sums.
  int64_t storage_floats() const { return (q_bytes() + 3) / 4 + lane_floats() + sum_floats(); }
  void place(float* storage) {
    q = reinterpret_cast<int8_t*>(storage);
    lane_scale = storage + (q_bytes() + 3) / 4;
    sums = lane_scale + lane_floats();
  }
  // Row m's step s starts (first * steps + s * n + j) steps in, m being row j of a pass of n rows
  // that starts at `first`.
  int64_t step_of(int64_t pass, int64_t j, int64_t s) const {
    return passes.first[static_cast<size_t>(pass)] * steps + s * passes.rows[static_cast<size_t>(pass)] + j;
  }
  // Rows [row0, row1) of x, steps [s0, s1) of each: cleared, then their blocks quantized into them.
  void fill(const float* x, int64_t row0, int64_t row1, int64_t s0, int64_t s1) {
    const int64_t per_step = step_bytes / kBlock, lanes = kStepLanes / per_step;
    const BlockQuantizer quantize = block_quantizer();
    alignas(32) int8_t block[kBlock];
    for (int64_t p = 0; p < pass_count(); ++p) {
      const int64_t first = first_row(p), n = rows(p);
      for (int64_t j = std::max<int64_t>(0, row0 - first); j < n && first + j < row1; ++j) {
        const int64_t m = first + j;
        for (int64_t st = s0; st < s1; ++st) {
          const int64_t at_step = step_of(p, j, st);
          std::memset(q + at_step * step_bytes, 0, static_cast<size_t>(step_bytes));
          std::fill_n(lane_scale + at_step * kStepLanes, kStepLanes, 0.0f);
        }
        for (int64_t b = s0 * per_step; b < std::min(blocks, s1 * per_step); ++b) {
          float d = 0;
          const float sum = quantize(x + m * cols + b * kBlock, block, &d, int4);
          const int64_t at_step = step_of(p, j, b / per_step), within = b % per_step;
          int8_t* dst = q + at_step * step_bytes;
          if (int4) {
            std::memcpy(dst + within * 16, block, 16);
            std::memcpy(dst + 64 + within * 16, block + 16, 16);
          } else {
            std::memcpy(dst + within * kBlock, block, kBlock);
          }
          float* lane = lane_scale + at_step * kStepLanes;
          if (!paired) {
            std::fill_n(lane + within * lanes, lanes, d);
          } else if (int4) {
            std::fill_n(lane + within % 2 * 4 + within / 2 * 2, 2, d);
          } else {
            std::fill_n(lane + within * 2, 2, d);
            std::fill_n(lane + within * 2 + 4, 2, d);
          }
          sums[m * blocks + b] = sum;
        }
      }
    }
  }
  int64_t pass_count() const { return static_cast<int64_t>(passes.first.size()); }
  int64_t first_row(int64_t pass) const { return passes.first[static_cast<size_t>(pass)]; }
  int64_t rows(int64_t pass) const { return passes.rows[static_cast<size_t>(pass)]; }
  // One pass as a kernel walks it: step s of its rows (row j at j * step_bytes and j * kStepLanes
  // from these).
  struct PassSteps {
    const int8_t* q;
    const float* lanes;
    int64_t rows, step_bytes;
    const int8_t* q_at(int64_t s) const { return q + s * rows * step_bytes; }
    const float* lanes_at(int64_t s) const { return lanes + s * rows * kStepLanes; }
  };
  PassSteps pass_steps(int64_t pass) const {
    return {q + first_row(pass) * steps * step_bytes, lane_scale + first_row(pass) * steps * kStepLanes,
            rows(pass), step_bytes};
  }
  const float* sum(int64_t m) const { return sums + m * blocks; }
};

// An Operand with storage of its own, every row quantized (passes in parallel for a batch: one row
// is a few hundred nanoseconds).
struct OwnedOperand : Operand {
  std::vector<float> storage;
  OwnedOperand(QuantScheme scheme, const float* x, int64_t row_count, int64_t columns, bool paired_steps)
      : Operand(scheme, row_count, columns, paired_steps), storage(static_cast<size_t>(storage_floats())) {
    place(storage.data());
    at::parallel_for(0, pass_count(), 2, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) fill(x, first_row(p), first_row(p) + rows(p), 0, steps);
    });
  }
};

// One pass of x (its rows(pass) rows, the kernel's M) against channels [c0, c1) of w into y.
using Kernel = void (*)(const Matrix&, const Operand&, int64_t pass, int64_t c0, int64_t c1, float* y,
                        int64_t ldy);

#if SERVELAB_X86
#define SERVELAB_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))
#define SERVELAB_AVX2 __attribute__((target("avx2,fma,f16c")))

// ---- AVX-512 VNNI: 16 int32 lanes per vector.
// One int4 step (4 groups, 128 columns) of a channel for M rows of x into acc. `left`: the groups
// this step still has (a row's last step may hold 1-3); xq, xl: the pass's step s (row m at
// m * 128 bytes and m * 16 lanes).
template <int M>
SERVELAB_VNNI inline void int4_step_vnni(const uint8_t* v, const float* scale, int64_t left, const int8_t* xq,
                                         const float* xl, int64_t s, __m512 (&acc)[M]) {
  __m512i b;
  __m128 sc;
  if (left >= 4) {
    b = _mm512_loadu_si512(v + 64 * s);
    sc = _mm_loadu_ps(scale + 4 * s);
  } else {
    b = _mm512_maskz_loadu_epi8((__mmask64{1} << (16 * left)) - 1, v + 64 * s);
    sc = _mm_maskz_loadu_ps(static_cast<__mmask8>((1u << left) - 1), scale + 4 * s);
  }
  const __m512i nibble = _mm512_set1_epi8(15);
  const __m512i lo = _mm512_and_si512(b, nibble), hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), nibble);
  const __m512 ws = _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0),
                                          _mm512_castps128_ps512(sc));
  for (int m = 0; m < M; ++m) {
    const int8_t* q = xq + 128 * m;
    __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(q));
    sum = _mm512_dpbusd_epi32(sum, hi, _mm512_loadu_si512(q + 64));
    acc[m] =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws, _mm512_loadu_ps(xl + 16 * m)), acc[m]);
  }
}

// One int8 step (2 groups, 64 columns): |w| (unsigned) against x with w's signs, so that the
// unsigned-by-signed product gives w * x exactly.
template <int M>
SERVELAB_VNNI inline void int8_step_vnni(const uint8_t* v, const float* scale, int64_t left, const int8_t* xq,
                                         const float* xl, int64_t s, __m512 (&acc)[M]) {
  __m512i b;
  __m128 sc;
  if (left >= 2) {
    b = _mm512_loadu_si512(v + 64 * s);
    sc = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(scale + 2 * s)));
  } else {
    b = _mm512_maskz_loadu_epi8(0xFFFFFFFFull, v + 64 * s);
    sc = _mm_load_ss(scale + 2 * s);
  }
  const __m512i u = _mm512_abs_epi8(b);
  const __mmask64 negative = _mm512_movepi8_mask(b);
  const __m512 ws = _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                          _mm512_castps128_ps512(sc));
  for (int m = 0; m < M; ++m) {
    const __m512i q = _mm512_loadu_si512(xq + 64 * m);
    const __m512i signed_q = _mm512_mask_sub_epi8(q, negative, _mm512_setzero_si512(), q);
    const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, signed_q);
    acc[m] =
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(ws, _mm512_loadu_ps(xl + 16 * m)), acc[m]);
  }
}

template <QuantScheme S, int M>
SERVELAB_VNNI void channels_vnni(const Matrix& w, const Operand& x, int64_t pass, int64_t c0, int64_t c1,
                                 float* y, int64_t ldy) {
  constexpr bool int4 = S == QuantScheme::Int4Group;
  constexpr int64_t per_step = int4 ? 4 : 2;  // groups per step
  const int64_t groups = w.groups, steps = x.steps, m0 = x.first_row(pass);
  const Operand::PassSteps xs = x.pass_steps(pass);
  for (int64_t c = c0; c < c1; ++c) {
    const uint8_t* v = w.row(c);
    const float* scale = w.scale + c * groups;
    __m512 acc[M], more[M];
    for (int m = 0; m < M; ++m) acc[m] = more[m] = _mm512_setzero_ps();
    // Two sets of accumulators, steps alternating between them: one row's FMAs would otherwise
    // wait on each other.
    int64_t s = 0;
    for (; s + 1 < steps; s += 2) {
      if constexpr (int4) {
        int4_step_vnni<M>(v, scale, groups - per_step * s, xs.q_at(s), xs.lanes_at(s), s, acc);
        int4_step_vnni<M>(v, scale, groups - per_step * (s + 1), xs.q_at(s + 1), xs.lanes_at(s + 1), s + 1,
                          more);
      } else {
        int8_step_vnni<M>(v, scale, groups - per_step * s, xs.q_at(s), xs.lanes_at(s), s, acc);
        int8_step_vnni<M>(v, scale, groups - per_step * (s + 1), xs.q_at(s + 1), xs.lanes_at(s + 1), s + 1,
                          more);
      }
    }
    if (s < steps) {
      if constexpr (int4)
        int4_step_vnni<M>(v, scale, groups - per_step * s, xs.q_at(s), xs.lanes_at(s), s, acc);
      else
        int8_step_vnni<M>(v, scale, groups - per_step * s, xs.q_at(s), xs.lanes_at(s), s, acc);
    }
    for (int m = 0; m < M; ++m) acc[m] = _mm512_add_ps(acc[m], more[m]);
    if constexpr (int4) {
      // The minimums meet each block's sum of x: sum_j (n_j sc + mn) x_j = sc sum_j n_j x_j + mn sum_j x_j.
      const float* minimum = w.minimum + c * groups;
      for (int64_t g = 0; g < groups; g += 16) {
        const __mmask16 live = groups - g >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (groups - g)) - 1);
        const __m512 mn = _mm512_maskz_loadu_ps(live, minimum + g);
        for (int m = 0; m < M; ++m)
          acc[m] = _mm512_fmadd_ps(mn, _mm512_maskz_loadu_ps(live, x.sum(m0 + m) + g), acc[m]);
      }
    }
    for (int m = 0; m < M; ++m) y[(m0 + m) * ldy + c] = _mm512_reduce_add_ps(acc[m]);
  }
}

// ---- AVX2: 8 int32 lanes per vector; vpmaddubsw multiplies u8 by s8 into int16 pair sums and
// vpmaddwd adds the pairs into int32. Pair sums stay below int16's limit: int4 adds two of at most
// 2 x 15 x 127; int8 takes |w| <= 128 against |x| <= 127 (2 x 128 x 127 = 32512).
SERVELAB_AVX2 inline float hsum_avx2(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// 32 bytes of v holding `groups` (0-2) groups' 16 bytes each, zeros past them.
SERVELAB_AVX2 inline __m256i load_groups_avx2(const uint8_t* v, int64_t groups) {
  if (groups >= 2) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v));
  if (groups == 1)
    return _mm256_inserti128_si256(_mm256_setzero_si256(),
                                   _mm_loadu_si128(reinterpret_cast<const __m128i*>(v)), 0);
  return _mm256_setzero_si256();
}

// One int4 step (4 groups A-D, 128 columns; `left`: the groups it still has, 1-3 in a row's last
// step) of a channel for M rows of x into acc. xq, xl: the pass's step s (row m at m * 128 bytes
// and m * 16 lanes, paired). Per row the two groups of each 32 bytes of v meet x in int16 sums of 4
// products (even and odd columns added); a horizontal add joins A with C and B with D in one
// vector (sums of 8 products: at most 8 x 15 x 127 = 15240, inside int16), and one vpmaddwd, one
// conversion and one FMA then serve 4 groups where a vector per 2 groups took two of each.
template <int M>
SERVELAB_AVX2 inline void int4_step_avx2(const uint8_t* v, const float* scale, int64_t left, const int8_t* xq,
                                         const float* xl, int64_t s, __m256* acc) {
  __m256i ab, cd;
  __m128 sc;
  if (left >= 4) {
    ab = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 64 * s));
    cd = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 64 * s + 32));
    sc = _mm_loadu_ps(scale + 4 * s);
  } else {
    ab = load_groups_avx2(v + 64 * s, left);
    cd = load_groups_avx2(v + 64 * s + 32, left - 2);
    // A masked load: nothing past the row's last scale is read (a call to memcpy here made the
    // compiler save every accumulator around it).
    sc = _mm_maskload_ps(scale + 4 * s,
                         _mm_cmpgt_epi32(_mm_set1_epi32(static_cast<int>(left)), _mm_setr_epi32(0, 1, 2, 3)));
  }
  const __m256i nibble = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
  const __m256i lo_ab = _mm256_and_si256(ab, nibble),
                hi_ab = _mm256_and_si256(_mm256_srli_epi16(ab, 4), nibble);
  const __m256i lo_cd = _mm256_and_si256(cd, nibble),
                hi_cd = _mm256_and_si256(_mm256_srli_epi16(cd, 4), nibble);
  const __m256 ws =
      _mm256_permutevar8x32_ps(_mm256_castps128_ps256(sc), _mm256_set_epi32(3, 3, 1, 1, 2, 2, 0, 0));
  for (int m = 0; m < M; ++m) {
    // Row m's 128 bytes: the even columns of A B, of C D, then the odd ones of A B, of C D.
    const __m256i* x = reinterpret_cast<const __m256i*>(xq + 128 * m);
    const __m256i sums_ab = _mm256_add_epi16(_mm256_maddubs_epi16(lo_ab, _mm256_loadu_si256(x)),
                                             _mm256_maddubs_epi16(hi_ab, _mm256_loadu_si256(x + 2)));
    const __m256i sums_cd = _mm256_add_epi16(_mm256_maddubs_epi16(lo_cd, _mm256_loadu_si256(x + 1)),
                                             _mm256_maddubs_epi16(hi_cd, _mm256_loadu_si256(x + 3)));
    const __m256i sum = _mm256_madd_epi16(_mm256_hadd_epi16(sums_ab, sums_cd), ones);
    acc[m] =
        _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(ws, _mm256_loadu_ps(xl + 16 * m)), acc[m]);
  }
}

// One int8 step (2 groups, 64 columns; `left` 1 for a row's odd last group): |w| (unsigned)
// against x with w's signs, each group into int32 sums of 4 products, then a horizontal add joins
// the two groups (sums of 8) so that one conversion and one FMA serve both.
template <int M>
SERVELAB_AVX2 inline void int8_step_avx2(const uint8_t* v, const float* scale, int64_t left, const int8_t* xq,
                                         const float* xl, int64_t s, __m256* acc) {
  const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 64 * s));
  const __m256i b1 = left >= 2 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 64 * s + 32))
                               : _mm256_setzero_si256();
  const __m128 sc = left >= 2 ? _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(scale + 2 * s)))
                              : _mm_load_ss(scale + 2 * s);
  const __m256i u0 = _mm256_abs_epi8(b0), u1 = _mm256_abs_epi8(b1), ones = _mm256_set1_epi16(1);
  const __m256 ws =
      _mm256_permutevar8x32_ps(_mm256_castps128_ps256(sc), _mm256_set_epi32(1, 1, 0, 0, 1, 1, 0, 0));
  for (int m = 0; m < M; ++m) {
    const __m256i* x = reinterpret_cast<const __m256i*>(xq + 64 * m);
    const __m256i sum0 =
        _mm256_madd_epi16(_mm256_maddubs_epi16(u0, _mm256_sign_epi8(_mm256_loadu_si256(x), b0)), ones);
    const __m256i sum1 =
        _mm256_madd_epi16(_mm256_maddubs_epi16(u1, _mm256_sign_epi8(_mm256_loadu_si256(x + 1), b1)), ones);
    acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_hadd_epi32(sum0, sum1)),
                             _mm256_mul_ps(ws, _mm256_loadu_ps(xl + 16 * m)), acc[m]);
  }
}

template <QuantScheme S, int M>
SERVELAB_AVX2 void channels_avx2(const Matrix& w, const Operand& x, int64_t pass, int64_t c0, int64_t c1,
                                 float* y, int64_t ldy) {
  constexpr bool int4 = S == QuantScheme::Int4Group;
  constexpr int64_t per_step = int4 ? 4 : 2;  // groups per step
  const int64_t groups = w.groups, steps = x.steps, m0 = x.first_row(pass);
  const Operand::PassSteps xs = x.pass_steps(pass);
  // One accumulator per row, whatever M: 2 x M accumulators beside the step's vectors outnumber
  // AVX2's 16 registers (the compiler kept them on the stack, a store and a reload per row and
  // step), and a sum order that changed with M would make a row's result depend on its batch.
  for (int64_t c = c0; c < c1; ++c) {
    const uint8_t* v = w.row(c);
    const float* scale = w.scale + c * groups;
    __m256 acc[M];
    for (int m = 0; m < M; ++m) acc[m] = _mm256_setzero_ps();
    for (int64_t s = 0; s < steps; ++s) {
      if constexpr (int4)
        int4_step_avx2<M>(v, scale, groups - per_step * s, xs.q_at(s), xs.lanes_at(s), s, acc);
      else
        int8_step_avx2<M>(v, scale, groups - per_step * s, xs.q_at(s), xs.lanes_at(s), s, acc);
    }
    float minimums[M] = {};
    if constexpr (int4) {
      // The minimums meet each block's sum of x, 8 groups per vector into the accumulators (a
      // scalar sum per row was a chain of dependent adds as long as the row has groups: a quarter
      // of this kernel's time), the last groups % 8 one by one.
      const float* minimum = w.minimum + c * groups;
      int64_t g = 0;
      for (; g + 8 <= groups; g += 8) {
        const __m256 mn = _mm256_loadu_ps(minimum + g);
        for (int m = 0; m < M; ++m) acc[m] = _mm256_fmadd_ps(mn, _mm256_loadu_ps(x.sum(m0 + m) + g), acc[m]);
      }
      for (; g < groups; ++g)
        for (int m = 0; m < M; ++m) minimums[m] += minimum[g] * x.sum(m0 + m)[g];
    }
    for (int m = 0; m < M; ++m) y[(m0 + m) * ldy + c] = hsum_avx2(acc[m]) + minimums[m];
  }
}

template <QuantScheme S, int... I>
constexpr std::array<Kernel, sizeof...(I)> vnni_table(std::integer_sequence<int, I...>) {
  return {&channels_vnni<S, I + 1>...};
}
template <QuantScheme S, int... I>
constexpr std::array<Kernel, sizeof...(I)> avx2_table(std::integer_sequence<int, I...>) {
  return {&channels_avx2<S, I + 1>...};
}

bool vnni_cpu() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  return yes;
}

bool vnni_active() { return active_isa() == Isa::Avx512 && vnni_cpu(); }

// The kernels for 1..kMaxRowsPerCall rows of x under the active ISA; VNNI where AVX-512 is active
// and the CPU has it, else AVX2's (also on an AVX-512 CPU without VNNI).
const std::array<Kernel, kMaxRowsPerCall>& kernels(QuantScheme scheme) {
  using Rows = std::make_integer_sequence<int, kMaxRowsPerCall>;
  static const auto int4_vnni = vnni_table<QuantScheme::Int4Group>(Rows());
  static const auto int8_vnni = vnni_table<QuantScheme::Int8Group>(Rows());
  static const auto int4_avx2 = avx2_table<QuantScheme::Int4Group>(Rows());
  static const auto int8_avx2 = avx2_table<QuantScheme::Int8Group>(Rows());
  const bool vnni = vnni_active();
  if (scheme == QuantScheme::Int4Group) return vnni ? int4_vnni : int4_avx2;
  return vnni ? int8_vnni : int8_avx2;
}
#endif

}  // namespace

Int8Rows quantize_rows_int8(const float* x, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0 || cols % kBlock != 0)
    throw InputError("int8 activations: columns in whole blocks of 32");
  Int8Rows r;
  r.rows = rows;
  r.cols = cols;
  r.blocks = cols / kBlock;
  r.q.resize(static_cast<size_t>(rows * cols));
  r.d.resize(static_cast<size_t>(rows * r.blocks));
  const BlockQuantizer quantize = block_quantizer();
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t b = 0; b < r.blocks; ++b)
      quantize(x + m * cols + b * kBlock, r.q.data() + m * cols + b * kBlock, r.d.data() + m * r.blocks + b,
               false);
  return r;
}

bool int8_activation_supported(const QuantizedTensor& w) {
#if SERVELAB_X86
  const Isa isa = active_isa();
  return (isa == Isa::Avx512 || isa == Isa::Avx2) &&
         (w.scheme == QuantScheme::Int4Group || w.scheme == QuantScheme::Int8Group) &&
         w.group_size == kBlock && w.shape.size() == 2 && w.cols() % kBlock == 0 && w.values.defined() &&
         w.values.device().is_cpu() && w.values.is_contiguous() && w.scale.is_contiguous() &&
         (w.scheme != QuantScheme::Int4Group || w.offset.is_contiguous());
#else
  (void)w;
  return false;
#endif
}

at::Tensor int8_activation_linear_cpu(const QuantizedTensor& w, const at::Tensor& x) {
  if (!int8_activation_supported(w) || x.dim() != 2 || x.scalar_type() != at::kFloat ||
      !x.device().is_cpu() || x.size(1) != w.cols())
    throw InputError("int8-activation linear: unsupported matrix or input");
#if SERVELAB_X86
  const int64_t rows = x.size(0), out = w.rows();
  at::Tensor y = at::empty({rows, out}, x.options());
  if (rows == 0 || out == 0) return y;
  const at::Tensor xc = x.contiguous();
  const bool paired = !vnni_active();
  const OwnedOperand op(w.scheme, xc.data_ptr<float>(), rows, w.cols(), paired);
  const Matrix m(w);
  float* yp = y.data_ptr<float>();
  const auto& k = kernels(w.scheme);
  if (op.pass_count() == 1) {
    const Kernel kernel = k[static_cast<size_t>(rows - 1)];
    at::parallel_for(0, out, 64, [&](int64_t c0, int64_t c1) { kernel(m, op, 0, c0, c1, yp, out); });
    return y;
  }
  // More rows: a block of channels at a time (its weights stay in L1), a pass of rows at a time.
  at::parallel_for(0, out, kBatchChannels, [&](int64_t c0, int64_t c1) {
    for (int64_t b0 = c0; b0 < c1; b0 += kBatchChannels) {
      const int64_t b1 = std::min(c1, b0 + kBatchChannels);
      for (int64_t pass = 0; pass < op.pass_count(); ++pass)
        k[static_cast<size_t>(op.rows(pass) - 1)](m, op, pass, b0, b1, yp, out);
    }
  });
  return y;
#else
  throw InputError("int8-activation linear: an x86-64 CPU path");
#endif
}

#if SERVELAB_X86
namespace {

// DecodeGemv over int8 activations: int8_activation_linear_cpu's operand and kernels for one pass
// of rows, the operand prepared in whole steps of the layout (128 columns for int4, 64 for int8).
class Int8ActivationDecodeGemv final : public DecodeGemv {
 public:
  explicit Int8ActivationDecodeGemv(const QuantizedTensor& w)
      : DecodeGemv(w.rows(), w.cols()), kept_(w), matrix_(w) {}
  int64_t max_rows() const override { return kDecodeGemvMaxRows; }
  int64_t operand_floats(int64_t m) const override { return layout(m).storage_floats(); }
  bool prepares(int64_t) const override { return true; }
  const float* prepare(const float* x, int64_t m, float* scratch, int64_t row0, int64_t row1, int64_t col0,
                       int64_t col1) const override {
    Operand op = layout(m);
    op.place(scratch);
    op.fill(x, row0, row1, col0 / op.step_bytes, (col1 + op.step_bytes - 1) / op.step_bytes);
    return scratch;
  }
  int64_t operand_align() const override { return kept_.scheme == QuantScheme::Int4Group ? 128 : 64; }
  void run(const float* operand, int64_t m, int64_t c0, int64_t c1, float* y, int64_t ldy) const override {
    Operand op = layout(m);
    op.place(const_cast<float*>(operand));  // read only: the kernels take it as const
    const auto& k = kernels(kept_.scheme);
    if (op.pass_count() == 1) {
      k[static_cast<size_t>(m - 1)](matrix_, op, 0, c0, c1, y, ldy);
      return;
    }
    // More rows: a block of channels at a time (its weights stay in L1), a pass of rows at a time,
    // as int8_activation_linear_cpu runs them.
    for (int64_t b0 = c0; b0 < c1; b0 += kBatchChannels) {
      const int64_t b1 = std::min(c1, b0 + kBatchChannels);
      for (int64_t pass = 0; pass < op.pass_count(); ++pass)
        k[static_cast<size_t>(op.rows(pass) - 1)](matrix_, op, pass, b0, b1, y, ldy);
    }
  }

 private:
  // m rows in passes of at most kMaxRowsPerCall, as the active ISA's kernels read them.
  Operand layout(int64_t m) const { return Operand(kept_.scheme, m, in(), !vnni_active()); }
  QuantizedTensor kept_;  // the tensors matrix_ points into
  Matrix matrix_;
};

}  // namespace
#endif

std::shared_ptr<const DecodeGemv> int8_activation_decode_gemv(const QuantizedTensor& w) {
#if SERVELAB_X86
  if (!int8_activation_supported(w)) return nullptr;
  return std::make_shared<Int8ActivationDecodeGemv>(w);
#else
  (void)w;
  return nullptr;
#endif
}

std::string int8_activation_kernel(Isa isa) {
#if SERVELAB_X86
  if (isa == Isa::Avx512 && vnni_cpu()) return "int8 activations, AVX-512 VNNI integer dot products";
  if (isa == Isa::Avx512 || isa == Isa::Avx2) return "int8 activations, AVX2 vpmaddubsw integer dot products";
#else
  (void)isa;
#endif
  return "none (int8 activations need AVX2 or AVX-512)";
}

}  // namespace servelab

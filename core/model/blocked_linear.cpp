#include "model/blocked_linear.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/packed_linear.h"
#include "util/cpu_features.h"
#include "util/errors.h"
#include "util/x86_simd.h"

#if SERVELAB_X86
#define SERVELAB_AVX512 __attribute__((target("avx512f")))
#define SERVELAB_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace servelab {

namespace {

std::string dtype_name(at::ScalarType t) { return c10::toString(t); }

constexpr int64_t W = kBlockedWidth;

// The AVX2 tile: 6 rows x 16 outputs (12 accumulators, 2 weight vectors, 1 broadcast). Measured
// against 4x24, 8x8 and 3x32 (bench_linear_kernels, GPT-2 small, 1 thread, SERVELAB_ISA=avx2 on
// the Zen 5 box, two alternating rounds on a loaded machine; time over oneDNN's at 8 / 32 / 128
// rows): 6x16 0.62-0.72 / 0.88-0.90 / 0.97-1.05, 4x24 0.65-0.67 / 0.85-1.11 / 0.94-1.01, 3x32
// (spills) 0.64-0.70 / 0.84-0.90 / 0.98-1.03, 8x8 0.91-0.97 / 1.04-1.07 / 1.16-1.29
// (bench/results/avx2-tile-shapes-cpu1-2026-11-26.json). 6x16 and 4x24 are level within the noise;
// 6x16 keeps registers to spare.
constexpr int kMicroRowsAvx2 = 6;
constexpr int kMicroHalvesAvx2 = 2;

#if SERVELAB_X86

// Mask of the valid outputs of block b (all 16 but in a last, partial block).
inline __mmask16 block_mask(int64_t b, int64_t out) {
  const int64_t valid = std::min<int64_t>(W, out - b * W);
  return valid >= W ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << valid) - 1u);
}

// The GEMV's software prefetch: 4 KiB ahead of the line it reads, non-temporal (every weight is
// used once per call). Measured on the 2-core Zen 4 box: 3-7 rows gain up to a fifth, one row is
// unchanged (the hardware prefetcher alone keeps up with one stream of FMAs).
constexpr int64_t kGemvPrefetch = 1024;  // floats

// ---- GEMV: M rows of x (row stride ldx), blocks [b0, b1). For each block, U independent
// accumulators per row over k (k, k+1, ..., k+U-1), so that M * U FMA chains hide the FMA latency;
// summed at the end. Each thread's blocks are contiguous in memory: one sequential stream.
template <int M, int U>
SERVELAB_AVX512 void gemv_blocks(const float* x, int64_t ldx, int64_t K, const float* w, int64_t b0,
                                 int64_t b1, int64_t out, const float* bias, float* y) {
  for (int64_t b = b0; b < b1; ++b) {
    const float* wb = w + b * K * W;
    __m512 acc[M][U];
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) acc[m][u] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + U <= K; k += U) {
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) {
        _mm_prefetch(reinterpret_cast<const char*>(wb + (k + u) * W + kGemvPrefetch), _MM_HINT_NTA);
        const __m512 wv = _mm512_loadu_ps(wb + (k + u) * W);
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m)
          acc[m][u] = _mm512_fmadd_ps(_mm512_set1_ps(x[m * ldx + k + u]), wv, acc[m][u]);
      }
    }
    for (; k < K; ++k) {
      const __m512 wv = _mm512_loadu_ps(wb + k * W);
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) acc[m][0] = _mm512_fmadd_ps(_mm512_set1_ps(x[m * ldx + k]), wv, acc[m][0]);
    }
    const __mmask16 mask = block_mask(b, out);
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(mask, bias + b * W) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      __m512 s = acc[m][0];
#pragma GCC unroll 8
      for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, acc[m][u]);
      _mm512_mask_storeu_ps(y + m * out + b * W, mask, _mm512_add_ps(s, bv));
    }
  }
}

using GemvFn = void (*)(const float*, int64_t, int64_t, const float*, int64_t, int64_t, int64_t, const float*,
                        float*);
// Accumulators per row: 8 for one row, fewer as rows add chains of their own.
constexpr std::array<GemvFn, kBlockedGemvMaxRows + 1> kGemv = {
    nullptr,           gemv_blocks<1, 8>, gemv_blocks<2, 4>, gemv_blocks<3, 2>,
    gemv_blocks<4, 2>, gemv_blocks<5, 1>, gemv_blocks<6, 1>, gemv_blocks<7, 1>};

// ---- GEMM microkernel: MB rows x NB blocks (NB * 16 outputs) in MB * NB registers. x comes
// packed per row block, [K][MB] (the MB inputs of one step side by side); the NB blocks are
// bstride floats apart. Each step loads NB weight vectors and broadcasts MB inputs: MB * NB FMAs
// (8 x 3: 24 accumulators, 3 weight vectors, 1 broadcast of AVX-512's 32 registers). pf: a line
// to prefetch into L2 per step (the weights of the next group of blocks), or null.
template <int MB, int NB>
SERVELAB_AVX512 void gemm_tile(const float* xp, int64_t K, const float* w, int64_t bstride, const float* bias,
                               __mmask16 last_mask, float* y, int64_t ldy, const float* pf) {
  __m512 acc[MB][NB];
#pragma GCC unroll 16
  for (int m = 0; m < MB; ++m)
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) acc[m][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    if (pf) _mm_prefetch(reinterpret_cast<const char*>(pf + k * W), _MM_HINT_T1);
    __m512 b[NB];
#pragma GCC unroll 4
    for (int j = 0; j < NB; ++j) b[j] = _mm512_loadu_ps(w + j * bstride + k * W);
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) {
      const __m512 a = _mm512_set1_ps(xp[k * MB + m]);
#pragma GCC unroll 4
      for (int j = 0; j < NB; ++j) acc[m][j] = _mm512_fmadd_ps(a, b[j], acc[m][j]);
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < NB; ++j) {
    const __mmask16 mask = j == NB - 1 ? last_mask : static_cast<__mmask16>(0xFFFF);
    const __m512 bv = bias ? _mm512_maskz_loadu_ps(mask, bias + j * W) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m)
      _mm512_mask_storeu_ps(y + m * ldy + j * W, mask, _mm512_add_ps(acc[m][j], bv));
  }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, const float*, __mmask16, float*,
                        int64_t, const float*);

// Measured against 6 x 4, 12 x 2 and 14 x 2 (all within 3 % of each other at 128 rows, 8 x 3 the
// best at 8 rows, where one row block covers the batch); 4 x 6 spills. K blocking (64 to 256
// steps, so that a group's weights stay in L1) was no faster: L2 feeds 3 lines per 24 FMAs easily.
constexpr int kMicroRows = 8;
constexpr int kMicroBlocks = 3;
// Rows per parallel item: x of 128 rows of GPT-2's widest input (3072) is 1.5 MiB, L2-sized.
constexpr int64_t kChunkRows = 128;

template <int MB, int NB>
struct Tiles {
  template <int nb, size_t... I>
  static constexpr std::array<TileFn, MB + 1> row(std::index_sequence<I...>) {
    return {nullptr, gemm_tile<static_cast<int>(I) + 1, nb>...};
  }
  template <size_t... J>
  static constexpr std::array<std::array<TileFn, MB + 1>, NB + 1> all(std::index_sequence<J...>) {
    return {std::array<TileFn, MB + 1>{}, row<static_cast<int>(J) + 1>(std::make_index_sequence<MB>())...};
  }
  // fn[nb][mb]: the tile for mb rows (1..MB) and nb blocks (1..NB).
  static constexpr std::array<std::array<TileFn, MB + 1>, NB + 1> fn = all(std::make_index_sequence<NB>());
};

at::Tensor gemv(const std::array<GemvFn, kBlockedGemvMaxRows + 1>& kernels, const float* x, int64_t rows,
                int64_t K, const float* w, int64_t out, const float* bias, at::Tensor y) {
  const int64_t blocks = (out + W - 1) / W;
  float* yp = y.data_ptr<float>();
  // At least 64 KiB of weights per task (tiny matrices run on one thread).
  const int64_t grain = std::max<int64_t>(1, 1024 / K);
  const GemvFn fn = kernels[static_cast<size_t>(rows)];
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) { fn(x, K, K, w, b0, b1, out, bias, yp); });
  return y;
}

at::Tensor gemm(const float* x, int64_t rows, int64_t K, const float* w, int64_t out, const float* bias,
                at::Tensor y) {
  constexpr int64_t MB = kMicroRows, NB = kMicroBlocks;
  const int64_t blocks = (out + W - 1) / W;
  const int64_t groups = (blocks + NB - 1) / NB;
  // Row blocks of as even a size as MB allows (9 rows: 5 and 4, not 8 and a lone row whose tile
  // waits on its 3 FMA chains): block r holds rows [first(r), first(r + 1)).
  const int64_t row_blocks = (rows + MB - 1) / MB;
  auto first = [&](int64_t r) { return r * rows / row_blocks; };
  // x packed per row block, [K][its rows], at offset first(r) * K.
  std::unique_ptr<float[]> xbuf(new float[static_cast<size_t>(rows * K)]);
  float* xp = xbuf.get();
  at::parallel_for(0, row_blocks, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t m0 = first(r), mb = first(r + 1) - m0;
      const float* src = x + m0 * K;
      float* dst = xp + m0 * K;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t m = 0; m < mb; ++m) dst[k * mb + m] = src[m * K + k];
    }
  });
  // Items: (group of NB blocks, chunk of row blocks), group-major, so that a thread's consecutive
  // items share a group's weights, kept in L2 while the rows go past.
  const int64_t chunk_rb = kChunkRows / MB;
  const int64_t chunks = (row_blocks + chunk_rb - 1) / chunk_rb;
  float* yp = y.data_ptr<float>();
  const __mmask16 tail = block_mask(blocks - 1, out);
  at::parallel_for(0, groups * chunks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = i / chunks, c = i % chunks;
      const int64_t b0 = g * NB, nb = std::min<int64_t>(NB, blocks - b0);
      const __mmask16 mask = b0 + nb == blocks ? tail : static_cast<__mmask16>(0xFFFF);
      const auto& tiles = Tiles<MB, NB>::fn[static_cast<size_t>(nb)];
      const int64_t r0 = c * chunk_rb, r1 = std::min(row_blocks, r0 + chunk_rb);
      // While this group's last chunk runs, the thread's next group comes into L2: row block r0 + j
      // fetches block j of it, one line per step (a few percent at 32 rows, where the first row
      // block's pass would otherwise wait on memory alone).
      const bool next = i + 1 < i1 && c + 1 == chunks && g + 1 < groups;
      const int64_t next_b0 = (g + 1) * NB, next_nb = next ? std::min<int64_t>(NB, blocks - next_b0) : 0;
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t m0 = first(r), mb = first(r + 1) - m0;
        const float* pf = r - r0 < next_nb ? w + (next_b0 + r - r0) * K * W : nullptr;
        tiles[static_cast<size_t>(mb)](xp + m0 * K, K, w + b0 * K * W, K * W, bias ? bias + b0 * W : nullptr,
                                       mask, yp + m0 * out + b0 * W, out, pf);
      }
    }
  });
  return y;
}

// ---- AVX2 + FMA: a block of 16 outputs is two 8-float vectors (ymm), and there are 16 registers,
// not 32. The GEMV keeps the AVX-512 loop with U accumulators per row and half of a block each;
// U shrinks where 2 * M * U would not leave room for the weights and a broadcast.
template <int M, int U>
SERVELAB_AVX2 void gemv_blocks_avx2(const float* x, int64_t ldx, int64_t K, const float* w, int64_t b0,
                                    int64_t b1, int64_t out, const float* bias, float* y) {
  for (int64_t b = b0; b < b1; ++b) {
    const float* wb = w + b * K * W;
    __m256 lo[M][U], hi[M][U];
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m)
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) lo[m][u] = hi[m][u] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + U <= K; k += U) {
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) {
        _mm_prefetch(reinterpret_cast<const char*>(wb + (k + u) * W + kGemvPrefetch), _MM_HINT_NTA);
        const __m256 w0 = _mm256_loadu_ps(wb + (k + u) * W), w1 = _mm256_loadu_ps(wb + (k + u) * W + 8);
#pragma GCC unroll 8
        for (int m = 0; m < M; ++m) {
          const __m256 a = _mm256_broadcast_ss(x + m * ldx + k + u);
          lo[m][u] = _mm256_fmadd_ps(a, w0, lo[m][u]);
          hi[m][u] = _mm256_fmadd_ps(a, w1, hi[m][u]);
        }
      }
    }
    for (; k < K; ++k) {
      const __m256 w0 = _mm256_loadu_ps(wb + k * W), w1 = _mm256_loadu_ps(wb + k * W + 8);
#pragma GCC unroll 8
      for (int m = 0; m < M; ++m) {
        const __m256 a = _mm256_broadcast_ss(x + m * ldx + k);
        lo[m][0] = _mm256_fmadd_ps(a, w0, lo[m][0]);
        hi[m][0] = _mm256_fmadd_ps(a, w1, hi[m][0]);
      }
    }
    const int64_t valid = std::min<int64_t>(W, out - b * W);
    alignas(32) float bb[W] = {};
    if (bias)
      for (int64_t i = 0; i < valid; ++i) bb[i] = bias[b * W + i];
    const __m256 bl = _mm256_load_ps(bb), bh = _mm256_load_ps(bb + 8);
#pragma GCC unroll 8
    for (int m = 0; m < M; ++m) {
      __m256 sl = lo[m][0], sh = hi[m][0];
#pragma GCC unroll 8
      for (int u = 1; u < U; ++u) {
        sl = _mm256_add_ps(sl, lo[m][u]);
        sh = _mm256_add_ps(sh, hi[m][u]);
      }
      sl = _mm256_add_ps(sl, bl);
      sh = _mm256_add_ps(sh, bh);
      float* dst = y + m * out + b * W;
      if (valid == W) {
        _mm256_storeu_ps(dst, sl);
        _mm256_storeu_ps(dst + 8, sh);
      } else {
        alignas(32) float t[W];
        _mm256_store_ps(t, sl);
        _mm256_store_ps(t + 8, sh);
        std::copy(t, t + valid, dst);
      }
    }
  }
}

// Accumulators per row: 2 * M * U of the 16 ymm registers at most 8-14, leaving two for the
// weights and one for the broadcast (one row: 4, not AVX-512's 8, which would spill).
constexpr std::array<GemvFn, kBlockedGemvMaxRows + 1> kGemvAvx2 = {nullptr,
                                                                   gemv_blocks_avx2<1, 4>,
                                                                   gemv_blocks_avx2<2, 2>,
                                                                   gemv_blocks_avx2<3, 2>,
                                                                   gemv_blocks_avx2<4, 1>,
                                                                   gemv_blocks_avx2<5, 1>,
                                                                   gemv_blocks_avx2<6, 1>,
                                                                   gemv_blocks_avx2<7, 1>};

// ---- AVX2 GEMM tile: MB rows x NH halves of blocks (8 outputs each) in MB * NH ymm registers,
// NH weight vectors and one broadcast beside them. Half h of the tile is half h % 2 of block h / 2.
// x packed as for AVX-512 ([K][MB] per row block); y's valid outputs in the tile: `valid`.
template <int MB, int NH>
SERVELAB_AVX2 void gemm_tile_avx2(const float* xp, int64_t K, const float* w, int64_t first_half,
                                  int64_t bstride, const float* bias, int64_t valid, float* y, int64_t ldy,
                                  const float* pf) {
  __m256 acc[MB][NH];
#pragma GCC unroll 16
  for (int m = 0; m < MB; ++m)
#pragma GCC unroll 4
    for (int j = 0; j < NH; ++j) acc[m][j] = _mm256_setzero_ps();
  const float* wh[NH];
#pragma GCC unroll 4
  for (int j = 0; j < NH; ++j) wh[j] = w + ((j + first_half) / 2) * bstride + ((j + first_half) % 2) * 8;
  for (int64_t k = 0; k < K; ++k) {
    if (pf) _mm_prefetch(reinterpret_cast<const char*>(pf + k * W), _MM_HINT_T1);
    __m256 b[NH];
#pragma GCC unroll 4
    for (int j = 0; j < NH; ++j) b[j] = _mm256_loadu_ps(wh[j] + k * W);
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) {
      const __m256 a = _mm256_broadcast_ss(xp + k * MB + m);
#pragma GCC unroll 4
      for (int j = 0; j < NH; ++j) acc[m][j] = _mm256_fmadd_ps(a, b[j], acc[m][j]);
    }
  }
#pragma GCC unroll 4
  for (int j = 0; j < NH; ++j) {
    const int64_t n = std::min<int64_t>(8, valid - j * 8);
    if (n <= 0) break;
    alignas(32) float bb[8] = {};
    if (bias)
      for (int64_t i = 0; i < n; ++i) bb[i] = bias[j * 8 + i];
    const __m256 bv = _mm256_load_ps(bb);
#pragma GCC unroll 16
    for (int m = 0; m < MB; ++m) {
      const __m256 r = _mm256_add_ps(acc[m][j], bv);
      if (n == 8) {
        _mm256_storeu_ps(y + m * ldy + j * 8, r);
      } else {
        alignas(32) float t[8];
        _mm256_store_ps(t, r);
        std::copy(t, t + n, y + m * ldy + j * 8);
      }
    }
  }
}

using TileFnAvx2 = void (*)(const float*, int64_t, const float*, int64_t, int64_t, const float*, int64_t,
                            float*, int64_t, const float*);

template <int MB, int NH>
struct TilesAvx2 {
  template <int nh, size_t... I>
  static constexpr std::array<TileFnAvx2, MB + 1> row(std::index_sequence<I...>) {
    return {nullptr, gemm_tile_avx2<static_cast<int>(I) + 1, nh>...};
  }
  template <size_t... J>
  static constexpr std::array<std::array<TileFnAvx2, MB + 1>, NH + 1> all(std::index_sequence<J...>) {
    return {std::array<TileFnAvx2, MB + 1>{},
            row<static_cast<int>(J) + 1>(std::make_index_sequence<MB>())...};
  }
  // fn[nh][mb]: the tile for mb rows (1..MB) and nh halves (1..NH).
  static constexpr std::array<std::array<TileFnAvx2, MB + 1>, NH + 1> fn =
      all(std::make_index_sequence<NH>());
};

// The driver of gemm above with the AVX2 tile: halves of blocks instead of blocks.
template <int MB, int NH>
at::Tensor gemm_avx2(const float* x, int64_t rows, int64_t K, const float* w, int64_t out, const float* bias,
                     at::Tensor y) {
  const int64_t blocks = (out + W - 1) / W;
  const int64_t halves = (out + 7) / 8;  // halves holding an output: the zero-padded rest is skipped
  const int64_t groups = (halves + NH - 1) / NH;
  const int64_t row_blocks = (rows + MB - 1) / MB;
  auto first = [&](int64_t r) { return r * rows / row_blocks; };
  std::unique_ptr<float[]> xbuf(new float[static_cast<size_t>(rows * K)]);
  float* xp = xbuf.get();
  at::parallel_for(0, row_blocks, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t m0 = first(r), mb = first(r + 1) - m0;
      const float* src = x + m0 * K;
      float* dst = xp + m0 * K;
      for (int64_t k = 0; k < K; ++k)
        for (int64_t m = 0; m < mb; ++m) dst[k * mb + m] = src[m * K + k];
    }
  });
  const int64_t chunk_rb = std::max<int64_t>(1, kChunkRows / MB);
  const int64_t chunks = (row_blocks + chunk_rb - 1) / chunk_rb;
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, groups * chunks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t g = i / chunks, c = i % chunks;
      const int64_t h0 = g * NH, nh = std::min<int64_t>(NH, halves - h0);
      const int64_t valid = std::min<int64_t>(nh * 8, out - h0 * 8);
      const auto& tiles = TilesAvx2<MB, NH>::fn[static_cast<size_t>(nh)];
      const int64_t r0 = c * chunk_rb, r1 = std::min(row_blocks, r0 + chunk_rb);
      // The thread's next group of halves into L2 during this group's last chunk, one block per row
      // block (as the AVX-512 driver does).
      const bool next = i + 1 < i1 && c + 1 == chunks && g + 1 < groups;
      const int64_t next_b0 = (g + 1) * NH / 2;
      const int64_t next_nb = next ? std::min<int64_t>((NH + 1) / 2 + 1, blocks - next_b0) : 0;
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t m0 = first(r), mb = first(r + 1) - m0;
        const float* pf = r - r0 < next_nb ? w + (next_b0 + r - r0) * K * W : nullptr;
        tiles[static_cast<size_t>(mb)](xp + m0 * K, K, w + (h0 / 2) * K * W, h0 % 2, K * W,
                                       bias ? bias + h0 * 8 : nullptr, valid, yp + m0 * out + h0 * 8, out,
                                       pf);
      }
    }
  });
  return y;
}
#endif

// ---- Portable C++: the blocked layout walked block by block, 16 outputs per step in a plain
// loop the compiler vectorizes for the baseline ISA (SSE2 on x86-64). One accumulator per
// output and row, every weight read once per call.
void gemv_generic(const float* x, int64_t rows, int64_t K, const float* w, int64_t out, const float* bias,
                  float* y) {
  const int64_t blocks = (out + W - 1) / W;
  const int64_t grain = std::max<int64_t>(1, 1024 / std::max<int64_t>(K, 1));
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    std::vector<float> acc(static_cast<size_t>(rows * W));
    for (int64_t b = b0; b < b1; ++b) {
      const float* wb = w + b * K * W;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const float* wk = wb + k * W;
        for (int64_t m = 0; m < rows; ++m) {
          const float a = x[m * K + k];
          float* am = acc.data() + m * W;
          for (int64_t l = 0; l < W; ++l) am[l] += a * wk[l];
        }
      }
      const int64_t valid = std::min<int64_t>(W, out - b * W);
      for (int64_t m = 0; m < rows; ++m)
        for (int64_t l = 0; l < valid; ++l)
          y[m * out + b * W + l] = acc[static_cast<size_t>(m * W + l)] + (bias ? bias[b * W + l] : 0.0f);
    }
  });
}

void check_weight(const at::Tensor& w, int64_t dims, const char* what) {
  if (!w.defined()) throw InputError(std::string("blocked linear: ") + what + " is undefined");
  if (!w.device().is_cpu())
    throw InputError(std::string("blocked linear: ") + what + " must be on the CPU, got " + w.device().str());
  if (w.scalar_type() != at::kFloat)
    throw InputError(std::string("blocked linear: ") + what + " must be fp32, got " +
                     dtype_name(w.scalar_type()));
  if (w.dim() != dims)
    throw InputError(std::string("blocked linear: ") + what + " must have " + std::to_string(dims) +
                     " dimensions, got " + std::to_string(w.dim()));
}

}  // namespace

bool blocked_linear_available(at::Device device, at::ScalarType dtype, std::string* why_not) {
  auto no = [&](const std::string& why) {
    if (why_not) *why_not = why;
    return false;
  };
  if (!device.is_cpu()) return no("the blocked fp32 kernels are a CPU path");
  if (dtype != at::kFloat) return no("the blocked kernels are fp32 kernels");
  return true;
}

std::string blocked_linear_kernel(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return "AVX-512 GEMV (1-7 rows), 8x48 register tiles";
    case Isa::Avx2:
      return "AVX2+FMA GEMV (1-7 rows), " + std::to_string(kMicroRowsAvx2) + "x" +
             std::to_string(kMicroHalvesAvx2 * 8) + " register tiles";
    case Isa::Generic:
      break;
  }
  return "portable C++ loops over the 16-channel blocks";
}

BlockedMatrix BlockedMatrix::from_out_in(const at::Tensor& w) {
  check_weight(w, 2, "the weight matrix");
  const int64_t out = w.size(0), in = w.size(1), blocks = (out + W - 1) / W;
  at::Tensor padded = w;
  if (blocks * W != out) padded = at::cat({w, at::zeros({blocks * W - out, in}, w.options())}, 0);
  BlockedMatrix m;
  m.packed_ = padded.view({blocks, W, in}).transpose(1, 2).contiguous();
  m.out_ = out;
  return m;
}

BlockedMatrix BlockedMatrix::from_in_out(const at::Tensor& w) {
  check_weight(w, 2, "the weight matrix");
  const int64_t in = w.size(0), out = w.size(1), blocks = (out + W - 1) / W;
  at::Tensor padded = w;
  if (blocks * W != out) padded = at::cat({w, at::zeros({in, blocks * W - out}, w.options())}, 1);
  BlockedMatrix m;
  m.packed_ = padded.view({in, blocks, W}).permute({1, 0, 2}).contiguous();
  m.out_ = out;
  return m;
}

at::Tensor BlockedMatrix::to_out_in() const {
  if (!defined()) throw InputError("blocked linear: the matrix is empty");
  const int64_t blocks = packed_.size(0), in = packed_.size(1);
  return packed_.transpose(1, 2).reshape({blocks * W, in}).slice(0, 0, out_).contiguous();
}

at::Tensor blocked_linear(const at::Tensor& x, const BlockedMatrix& w, const at::Tensor& bias) {
  if (!w.defined()) throw InputError("blocked linear: the weight matrix is empty");
  check_weight(x, 2, "the input x");
  const int64_t K = w.in_features(), out = w.out_features();
  if (x.size(1) != K)
    throw InputError("blocked linear: x has " + std::to_string(x.size(1)) + " columns, the weight has " +
                     std::to_string(K) + " inputs");
  if (bias.defined()) {
    check_weight(bias, 1, "the bias");
    if (bias.size(0) != out)
      throw InputError("blocked linear: the bias has " + std::to_string(bias.size(0)) +
                       " entries, the weight " + std::to_string(out) + " outputs");
  }
  const int64_t rows = x.size(0);
  at::Tensor y = at::empty({rows, out}, x.options());
  if (rows == 0 || out == 0) return y;
  if (K == 0) return bias.defined() ? y.copy_(bias.expand({rows, out})) : y.zero_();
  const at::Tensor xc = x.contiguous();
  const at::Tensor bc = bias.defined() ? bias.contiguous() : at::Tensor();
  const float* bp = bc.defined() ? bc.data_ptr<float>() : nullptr;
  const float* wp = w.packed().data_ptr<float>();
  switch (active_isa()) {
#if SERVELAB_X86
    case Isa::Avx512:
      if (rows <= kBlockedGemvMaxRows) return gemv(kGemv, xc.data_ptr<float>(), rows, K, wp, out, bp, y);
      return gemm(xc.data_ptr<float>(), rows, K, wp, out, bp, y);
    case Isa::Avx2:
      if (rows <= kBlockedGemvMaxRows) return gemv(kGemvAvx2, xc.data_ptr<float>(), rows, K, wp, out, bp, y);
      return gemm_avx2<kMicroRowsAvx2, kMicroHalvesAvx2>(xc.data_ptr<float>(), rows, K, wp, out, bp, y);
#endif
    default:
      break;
  }
  gemv_generic(xc.data_ptr<float>(), rows, K, wp, out, bp, y.data_ptr<float>());
  return y;
}

BlockedLinearKernels::BlockedLinearKernels(LinearMatrices& matrices) {
  for (const LinearMatrix& m : matrices.projections) {
    if (static_cast<size_t>(m.layer) >= layers_.size()) layers_.resize(static_cast<size_t>(m.layer) + 1);
    layers_[static_cast<size_t>(m.layer)][static_cast<size_t>(m.slot)] =
        m.in_out ? BlockedMatrix::from_in_out(*m.weight) : BlockedMatrix::from_out_in(*m.weight);
    *m.weight = at::Tensor();
  }
  head_ = BlockedMatrix::from_out_in(matrices.lm_head->contiguous());
  if (!matrices.lm_head_tied) *matrices.lm_head = at::Tensor();
}

at::Tensor BlockedLinearKernels::linear(int64_t layer, LinearSlot slot, const at::Tensor& x,
                                        const at::Tensor& bias) const {
  return blocked_linear(x, layers_.at(static_cast<size_t>(layer))[static_cast<size_t>(slot)], bias);
}

at::Tensor BlockedLinearKernels::embed(const at::Tensor&, const at::Tensor&) const {
  throw InputError("blocked linear kernels leave the embeddings to the model");
}

at::Tensor BlockedLinearKernels::lm_head(const at::Tensor& h) const {
  const at::Tensor y = blocked_linear(h.reshape({-1, h.size(-1)}), head_);
  std::vector<int64_t> s = h.sizes().vec();
  s.back() = y.size(1);
  return y.view(s);
}

int64_t BlockedLinearKernels::resident_bytes() const {
  // The blocked head is a second copy of wte when tied (the embedding keeps the plain one, counted
  // with the model's own tensors).
  int64_t n = head_.bytes();
  for (const auto& l : layers_)
    for (const auto& p : l) n += p.bytes();
  return n;
}

std::string BlockedLinearKernels::description() const {
  return "blocked fp32 GEMV/GEMM (16-channel blocks; " + std::string(isa_name(active_isa())) + ": " +
         blocked_linear_kernel(active_isa()) + ")";
}

at::Tensor BlockedLinearKernels::dense_weight(int64_t layer, LinearSlot slot) const {
  return layers_.at(static_cast<size_t>(layer))[static_cast<size_t>(slot)].to_out_in().t().contiguous();
}

at::Tensor BlockedLinearKernels::dense_lm_head() const { return head_.to_out_in(); }

std::unique_ptr<Model> pack_blocked_model(const Model& model) {
  std::string why;
  if (!blocked_linear_available(model.device(), model.dtype(), &why))
    throw InputError("blocked GEMM: " + why);
  if (model.kernels())
    throw InputError("blocked GEMM: the model's matrices are already run by other kernels");
  return model.with_kernels(
      [](LinearMatrices& matrices) { return std::make_shared<BlockedLinearKernels>(matrices); });
}

}  // namespace servelab

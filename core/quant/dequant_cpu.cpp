#include "quant/dequant_cpu.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <bit>
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
  int group_shift = -1;                     // log2(group) when it is a power of two

  // The group column j falls in: a shift for the usual sizes (16, 32, ...), since an integer
  // division in a kernel's inner loop costs more than the rest of the step.
  int64_t group_of(int64_t j) const { return group_shift >= 0 ? j >> group_shift : j / group; }

  explicit Rows(const QuantizedTensor& q) : scheme(q.scheme), cols(q.cols()) {
    values = static_cast<const uint8_t*>(q.values.data_ptr());
    row_bytes =
        scheme == QuantScheme::Int4Group ? cols / 2 : cols * static_cast<int64_t>(q.values.element_size());
    if (scheme == QuantScheme::Int4Group || scheme == QuantScheme::Int8Group) {
      group = q.group_size;
      groups = cols / group;
      if (group > 0 && (group & (group - 1)) == 0)
        group_shift = std::countr_zero(static_cast<uint64_t>(group));
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

#if SERVELAB_X86
// The GEMM tiles: kTile output channels of w, kRowsPerPass rows of x per kernel call (the
// accumulators' row stride under both ISAs).
constexpr int kTile = 8;
constexpr int64_t kRowsPerPass = 32;

// The kernels of each ISA (AVX2's before AVX-512's: neither uses the other's).
#include "quant/dequant_cpu_avx2.inc"
#include "quant/dequant_cpu_avx512.inc"

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

int64_t tiled_max_rows(Isa isa) {
  switch (isa) {
    case Isa::Avx512:
      return kDecodeGemvMaxRows;
    case Isa::Avx2:
      return 16;
    default:
      return 0;
  }
}

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
    // libtorch's GEMM runs a plain fp32 matrix past the GEMV's rows; a quantized one is dequantized
    // once past the rows the tiles win at.
    if (rows_.scheme == QuantScheme::None) return kFusedGemvMaxRows;
    return std::clamp(tiled_max_rows(active_isa()), kFusedGemvMaxRows, kDecodeGemvMaxRows);
  }
  bool rows_follow_isa() const override { return rows_.scheme != QuantScheme::None; }
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

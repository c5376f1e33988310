#include "quant/dequant_cpu.h"

#include <ATen/Parallel.h>

#include <cstdint>

#include "util/errors.h"

namespace servelab {

namespace {

// Plain loops the compiler vectorizes; on x86-64 one clone per instruction set, picked at load.
#if defined(__x86_64__) && defined(__GNUC__)
#define SERVELAB_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SERVELAB_CLONES
#endif

SERVELAB_CLONES
void int4_row(const uint8_t* packed, const float* scale, const float* minimum, int64_t groups, int64_t group,
              float* out) {
  const int64_t half = group / 2;
  for (int64_t g = 0; g < groups; ++g) {
    const float s = scale[g], m = minimum[g];
    const uint8_t* p = packed + g * half;
    float* o = out + g * group;
    for (int64_t j = 0; j < half; ++j) {
      o[2 * j] = static_cast<float>(p[j] & 15) * s + m;
      o[2 * j + 1] = static_cast<float>(p[j] >> 4) * s + m;
    }
  }
}

SERVELAB_CLONES
void uint8_row(const uint8_t* q, float scale, float zero, int64_t cols, float* out) {
  for (int64_t j = 0; j < cols; ++j) out[j] = static_cast<float>(q[j]) * scale + zero;
}

}  // namespace

bool fused_dequant_supported(const QuantizedTensor& q) {
  return q.values.device().is_cpu() && q.shape.size() == 2 && q.values.is_contiguous() &&
         (q.scheme == QuantScheme::Int4Group || q.scheme == QuantScheme::ZeroPointUint8);
}

void dequantize_rows_cpu(const QuantizedTensor& q, int64_t begin, at::Tensor& out) {
  if (!fused_dequant_supported(q) || out.scalar_type() != at::kFloat || !out.is_contiguous() ||
      out.dim() != 2 || out.size(1) != q.cols() || begin < 0 || begin + out.size(0) > q.rows())
    throw InputError("fused dequantization: unsupported tensor or output block");
  const int64_t cols = q.cols(), rows = out.size(0);
  float* dst = out.data_ptr<float>();
  const uint8_t* values = q.values.data_ptr<uint8_t>();
  if (q.scheme == QuantScheme::Int4Group) {
    const int64_t groups = cols / q.group_size;
    const float* scale = q.scale.data_ptr<float>();
    const float* minimum = q.offset.data_ptr<float>();
    at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t row = begin + r;
        int4_row(values + row * (cols / 2), scale + row * groups, minimum + row * groups, groups, q.group_size,
                 dst + r * cols);
      }
    });
  } else {
    const float scale = q.scale.item<float>(), zero = q.offset.item<float>();
    at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) uint8_row(values + (begin + r) * cols, scale, zero, cols, dst + r * cols);
    });
  }
}

}  // namespace servelab

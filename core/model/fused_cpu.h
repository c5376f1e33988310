#pragma once
// Single-pass CPU loops for the element-wise steps around a decode step's matrix products. At batch
// 1 a step of a small model is mostly host time per libtorch call (about 25 calls per Llama layer:
// RMSNorm alone is six, a rotary embedding eight), so each loop here replaces a chain of calls and
// their temporaries with one allocation and one pass. The arithmetic is Hugging Face's, in fp32.
#include <ATen/ATen.h>

namespace servelab::fused_cpu {

// CPU, fp32 and contiguous: what the loops here take. Anything else runs the libtorch chain.
bool eligible(const at::Tensor& x);

// x * rsqrt(mean(x^2) + eps) * weight over the last dimension; x contiguous, weight [x.size(-1)].
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// Rotate-half rotary embedding of x [B, H, T, D] (any strides but the last, which must be 1) at
// positions [B, T] from tables cos, sin [context, D]; a new contiguous [B, H, T, D].
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                  const at::Tensor& positions);

// The loops above for one row, for callers that run their own threads (model/decode_program):
// the same arithmetic, so the same bits. y must not alias x.
void rms_norm_row(const float* x, const float* weight, int64_t E, double eps, float* y);
// rms_norm_row in two parts, so that threads can each write a range of columns: the row's scale
// from the sum of squares of its E values (each value x[i], plus add[i] where add is given, plus
// bias[i] where that is given too: x + (add + bias), as a residual after a biased product), then
// y[i] = weight[i] * (v[i] * scale) for i in [begin, end).
float rms_norm_scale(const float* x, const float* add, const float* bias, int64_t E, double eps);
void rms_norm_apply(const float* x, const float* weight, float scale, int64_t begin, int64_t end, float* y);
void rotary_row(const float* x, const float* cos, const float* sin, int64_t D, float* y);

}  // namespace servelab::fused_cpu

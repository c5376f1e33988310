#include "model/fused_cpu.h"

#include <ATen/Parallel.h>

#include <cmath>

namespace servelab::fused_cpu {

bool eligible(const at::Tensor& x) {
  return x.device().is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous();
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const int64_t E = x.size(-1), rows = x.numel() / E;
  at::Tensor out = at::empty_like(x);
  const at::Tensor w = weight.contiguous();
  const float* src = x.const_data_ptr<float>();
  const float* wp = w.const_data_ptr<float>();
  float* dst = out.mutable_data_ptr<float>();
  // Rows are independent; a decode step's one row runs inline, a prompt's rows in parallel.
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / E), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) rms_norm_row(src + r * E, wp, E, eps, dst + r * E);
  });
  return out;
}

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                  const at::Tensor& positions) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  TORCH_CHECK(x.stride(3) == 1 && cos.is_contiguous() && sin.is_contiguous(), "rotary: unexpected layout");
  at::Tensor out = at::empty({B, H, T, D}, x.options());
  const at::Tensor pos = positions.to(at::kLong).contiguous();
  const int64_t* pp = pos.const_data_ptr<int64_t>();
  const float* xp = x.const_data_ptr<float>();
  const float* cp = cos.const_data_ptr<float>();
  const float* sp = sin.const_data_ptr<float>();
  float* op = out.mutable_data_ptr<float>();
  const int64_t sb = x.stride(0), sh = x.stride(1), st = x.stride(2), rows = B * H * T;
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / D), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (H * T), h = (r / T) % H, t = r % T;
      const float* xr = xp + b * sb + h * sh + t * st;
      const int64_t p = pp[b * T + t];
      rotary_row(xr, cp + p * D, sp + p * D, D, op + r * D);
    }
  });
  return out;
}

void rms_norm_row(const float* x, const float* weight, int64_t E, double eps, float* y) {
  rms_norm_apply(x, weight, rms_norm_scale(x, nullptr, nullptr, E, eps), 0, E, y);
}

float rms_norm_scale(const float* x, const float* add, const float* bias, int64_t E, double eps) {
  double squares = 0;
  for (int64_t i = 0; i < E; ++i) {
    const float v = add ? x[i] + (bias ? add[i] + bias[i] : add[i]) : x[i];
    squares += static_cast<double>(v) * v;
  }
  return 1.0f / std::sqrt(static_cast<float>(squares / static_cast<double>(E)) + static_cast<float>(eps));
}

void rms_norm_apply(const float* x, const float* weight, float scale, int64_t begin, int64_t end, float* y) {
  for (int64_t i = begin; i < end; ++i) y[i] = weight[i] * (x[i] * scale);
}

void rotary_row(const float* x, const float* cos, const float* sin, int64_t D, float* y) {
  // x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1].
  const int64_t half = D / 2;
  for (int64_t i = 0; i < half; ++i) y[i] = x[i] * cos[i] - x[i + half] * sin[i];
  for (int64_t i = half; i < D; ++i) y[i] = x[i] * cos[i] + x[i - half] * sin[i];
}

}  // namespace servelab::fused_cpu

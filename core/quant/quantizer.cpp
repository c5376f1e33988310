#include "quant/quantizer.h"

#include "util/errors.h"

namespace servelab {

namespace {

// Where a scale is 0 (a constant tensor, row or group) divide by 1 instead: q is then 0 and
// dequantizes to the minimum (or 0) exactly.
at::Tensor safe_divisor(const at::Tensor& scale) {
  return at::where(scale == 0, at::ones_like(scale), scale);
}

void require_matrix(const at::Tensor& t, const char* what) {
  if (t.dim() != 2)
    throw InputError(std::string(what) + " quantizes matrices; got a tensor of " + std::to_string(t.dim()) +
                     " dimensions");
}

}  // namespace

int64_t QuantizedTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t QuantizedTensor::value_bytes() const {
  return values.numel() * static_cast<int64_t>(values.element_size());
}

int64_t QuantizedTensor::state_bytes() const {
  int64_t n = 0;
  for (const at::Tensor* t : {&scale, &offset})
    if (t->defined()) n += t->numel() * static_cast<int64_t>(t->element_size());
  return n;
}

at::Tensor pack_int4(const at::Tensor& q) {
  require_matrix(q, "pack_int4");
  if (q.size(1) % 2) throw InputError("pack_int4 needs an even number of columns");
  at::Tensor pairs = q.to(at::kByte).reshape({q.size(0), q.size(1) / 2, 2});
  return pairs.select(2, 0).bitwise_or(pairs.select(2, 1).bitwise_left_shift(4)).contiguous();
}

at::Tensor unpack_int4(const at::Tensor& packed) {
  at::Tensor lo = packed.bitwise_and(15), hi = packed.bitwise_right_shift(4);
  return at::stack({lo, hi}, -1).reshape({packed.size(0), packed.size(1) * 2});
}

QuantizedTensor quantize_zero_point(const at::Tensor& t) {
  QuantizedTensor q;
  q.scheme = QuantScheme::ZeroPointUint8;
  q.shape = t.sizes().vec();
  at::Tensor f = t.to(at::kFloat);
  at::Tensor mn = f.min(), mx = f.max();
  q.scale = (mx - mn) / 255;
  q.offset = mn;
  q.values = at::clamp((f - q.offset) / safe_divisor(q.scale), 0, 255).to(at::kByte);
  return q;
}

QuantizedTensor quantize_per_channel_int8(const at::Tensor& m) {
  require_matrix(m, "per-channel int8");
  QuantizedTensor q;
  q.scheme = QuantScheme::PerChannelInt8;
  q.shape = m.sizes().vec();
  at::Tensor f = m.to(at::kFloat);
  q.scale = f.abs().amax(1) / 127;
  q.values = at::round(f / safe_divisor(q.scale).unsqueeze(1)).clamp(-127, 127).to(at::kChar);
  return q;
}

QuantizedTensor quantize_int4_group(const at::Tensor& m, int64_t g) {
  require_matrix(m, "int4");
  if (g < 2 || g % 2) throw InputError("int4 group size must be even, got " + std::to_string(g));
  if (m.size(1) % g)
    throw InputError("int4 with group size " + std::to_string(g) + " needs rows whose length divides by " +
                     std::to_string(g) + "; a matrix has rows of " + std::to_string(m.size(1)));
  QuantizedTensor q;
  q.scheme = QuantScheme::Int4Group;
  q.group_size = g;
  q.shape = m.sizes().vec();
  const int64_t rows = m.size(0), groups = m.size(1) / g;
  at::Tensor f = m.to(at::kFloat).reshape({rows, groups, g});
  at::Tensor mn = f.amin(2), mx = f.amax(2);
  q.scale = (mx - mn) / 15;
  q.offset = mn;
  at::Tensor codes = at::round((f - mn.unsqueeze(2)) / safe_divisor(q.scale).unsqueeze(2)).clamp(0, 15);
  q.values = pack_int4(codes.to(at::kByte).reshape({rows, groups * g}));
  return q;
}

QuantizedTensor quantize_int8_group(const at::Tensor& m, int64_t g) {
  require_matrix(m, "int8 groups");
  if (g < 1 || m.size(1) % g)
    throw InputError("int8 with group size " + std::to_string(g) +
                     " needs rows whose length divides by it; " + "a matrix has rows of " +
                     std::to_string(m.size(1)));
  QuantizedTensor q;
  q.scheme = QuantScheme::Int8Group;
  q.group_size = g;
  q.shape = m.sizes().vec();
  const int64_t rows = m.size(0), groups = m.size(1) / g;
  at::Tensor f = m.to(at::kFloat).reshape({rows, groups, g});
  q.scale = f.abs().amax(2) / 127;
  q.values = at::round(f / safe_divisor(q.scale).unsqueeze(2))
                 .clamp(-127, 127)
                 .to(at::kChar)
                 .reshape({rows, groups * g});
  return q;
}

QuantizedTensor select_rows(const QuantizedTensor& q, const at::Tensor& index) {
  QuantizedTensor r = q;
  r.values = q.values.index_select(0, index).contiguous();
  const bool per_row = q.scheme == QuantScheme::PerChannelInt8 || q.scheme == QuantScheme::Int4Group ||
                       q.scheme == QuantScheme::Int8Group;
  if (per_row) r.scale = q.scale.index_select(0, index).contiguous();
  if (q.scheme == QuantScheme::Int4Group) r.offset = q.offset.index_select(0, index).contiguous();
  return r;
}

QuantizedTensor quantize_half(const at::Tensor& t, at::ScalarType half) {
  QuantizedTensor q;
  q.scheme = half == at::kHalf ? QuantScheme::Fp16 : QuantScheme::Bf16;
  q.shape = t.sizes().vec();
  q.values = t.to(half).contiguous();
  return q;
}

QuantizedTensor quantize_tensor(const at::Tensor& t, const QuantSpec& spec, bool transpose) {
  const at::Tensor src = transpose ? t.t().contiguous() : t.contiguous();
  QuantizedTensor q;
  switch (spec.scheme) {
    case QuantScheme::None:
      q.shape = src.sizes().vec();
      q.values = src;
      break;
    case QuantScheme::ZeroPointUint8:
      q = quantize_zero_point(src);
      break;
    case QuantScheme::PerChannelInt8:
      q = quantize_per_channel_int8(src);
      break;
    case QuantScheme::Int4Group:
      q = quantize_int4_group(src, spec.group_size);
      break;
    case QuantScheme::Int8Group:
      q = quantize_int8_group(src, spec.group_size);
      break;
    case QuantScheme::Fp16:
      q = quantize_half(src, at::kHalf);
      break;
    case QuantScheme::Bf16:
      q = quantize_half(src, at::kBFloat16);
      break;
  }
  q.transposed = transpose;
  return q;
}

namespace {

// Dequantizes a block of stored rows (values, and the states of those rows).
at::Tensor dequantize_block(const QuantizedTensor& q, const at::Tensor& values, const at::Tensor& scale,
                            const at::Tensor& offset, at::ScalarType dtype) {
  switch (q.scheme) {
    case QuantScheme::None:
      return values.to(dtype);
    case QuantScheme::ZeroPointUint8:
      return (values.to(at::kFloat) * q.scale + q.offset).to(dtype);
    case QuantScheme::PerChannelInt8: {
      at::Tensor s = scale.unsqueeze(-1);
      return (values.to(at::kFloat) * s).to(dtype);
    }
    case QuantScheme::Int4Group: {
      const int64_t n = values.size(0), cols = values.size(1) * 2, groups = cols / q.group_size;
      at::Tensor codes = unpack_int4(values).to(at::kFloat).view({n, groups, q.group_size});
      return (codes * scale.unsqueeze(-1) + offset.unsqueeze(-1)).view({n, cols}).to(dtype);
    }
    case QuantScheme::Int8Group: {
      const int64_t n = values.size(0), cols = values.size(1), groups = cols / q.group_size;
      at::Tensor v = values.to(at::kFloat).view({n, groups, q.group_size});
      return (v * scale.unsqueeze(-1)).view({n, cols}).to(dtype);
    }
    case QuantScheme::Fp16:
    case QuantScheme::Bf16:
      return values.to(dtype);
  }
  throw InputError("unknown quantization scheme");
}

}  // namespace

at::Tensor QuantizedTensor::dequantize(at::ScalarType dtype) const {
  return dequantize_block(*this, values, scale, offset, dtype);
}

at::Tensor QuantizedTensor::dequantize_rows(int64_t begin, int64_t end, at::ScalarType dtype) const {
  const int64_t n = end - begin;
  const bool per_row = scheme == QuantScheme::PerChannelInt8 || scheme == QuantScheme::Int4Group ||
                       scheme == QuantScheme::Int8Group;
  return dequantize_block(*this, values.narrow(0, begin, n), per_row ? scale.narrow(0, begin, n) : scale,
                          scheme == QuantScheme::Int4Group ? offset.narrow(0, begin, n) : offset, dtype);
}

at::Tensor QuantizedTensor::gather_rows(const at::Tensor& index, at::ScalarType dtype) const {
  at::Tensor flat = index.reshape({-1});
  const bool per_row = scheme == QuantScheme::PerChannelInt8 || scheme == QuantScheme::Int4Group ||
                       scheme == QuantScheme::Int8Group;
  at::Tensor rows =
      dequantize_block(*this, values.index_select(0, flat), per_row ? scale.index_select(0, flat) : scale,
                       scheme == QuantScheme::Int4Group ? offset.index_select(0, flat) : offset, dtype);
  std::vector<int64_t> out = index.sizes().vec();
  out.push_back(cols());
  return rows.view(out);
}

at::Tensor QuantizedTensor::dequantize_parameter(at::ScalarType dtype) const {
  at::Tensor t = dequantize(dtype);
  return transposed ? t.t().contiguous() : t;
}

}  // namespace servelab

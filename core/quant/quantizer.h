#pragma once
// One tensor in a quantized form, and the quantizers that make it. Matrices are stored with one
// row per output channel (GPT-2's Conv1D [in, out] weights transposed), so "per channel" means
// per row and int4 groups run along a row.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "quant/quant_spec.h"

namespace servelab {

struct QuantizedTensor {
  QuantScheme scheme = QuantScheme::None;
  std::vector<int64_t> shape;  // as stored: [rows, cols] for matrices
  bool transposed = false;     // stored as the transpose of the parameter (Conv1D weights)
  // None: the tensor itself; ZeroPointUint8: uint8; PerChannelInt8, Int8Group: int8; Int4Group:
  // uint8 [rows, cols / 2], column 2j in the low nibble and 2j+1 in the high one; Fp16/Bf16: half.
  at::Tensor values;
  // ZeroPointUint8: 0-dim scale and zero point (the minimum); PerChannelInt8: scale [rows];
  // Int4Group: scale and minimum [rows, cols / group_size]; Int8Group: scale [rows, cols /
  // group_size]. fp32. Otherwise undefined.
  at::Tensor scale, offset;
  int64_t group_size = 0;

  bool defined() const { return values.defined(); }
  int64_t numel() const;
  int64_t rows() const { return shape.at(0); }
  int64_t cols() const { return shape.size() > 1 ? shape[1] : 1; }
  int64_t value_bytes() const;
  int64_t state_bytes() const;
  // Everything, in the stored layout, as dtype.
  at::Tensor dequantize(at::ScalarType dtype) const;
  // Rows [begin, end) of a matrix, [end - begin, cols], as dtype.
  at::Tensor dequantize_rows(int64_t begin, int64_t end, at::ScalarType dtype) const;
  // The rows named by index (any shape) of a matrix: [index..., cols], as dtype (embeddings).
  at::Tensor gather_rows(const at::Tensor& index, at::ScalarType dtype) const;
  // The parameter as it was laid out before quantization, as dtype.
  at::Tensor dequantize_parameter(at::ScalarType dtype) const;
};

// The course's formula exactly: scale = (max - min) / 255, zero_point = min,
// q = clamp((t - zero_point) / scale, 0, 255) cast to uint8 by truncation. A constant tensor
// (max = min) gets scale 0 and q = 0, so it dequantizes to its value without dividing by zero.
QuantizedTensor quantize_zero_point(const at::Tensor& t);
// Symmetric int8 per row: scale = max |row| / 127, q = round(t / scale) in [-127, 127].
QuantizedTensor quantize_per_channel_int8(const at::Tensor& matrix);
// Asymmetric 4-bit per group of group_size columns: scale = (max - min) / 15,
// q = round((t - min) / scale) in [0, 15]; two per byte.
QuantizedTensor quantize_int4_group(const at::Tensor& matrix, int64_t group_size);
// Symmetric int8 per group of group_size columns: scale = max |group| / 127, q = round(t / scale).
QuantizedTensor quantize_int8_group(const at::Tensor& matrix, int64_t group_size);
// Rows of a stored matrix reordered: out row i is row index[i] (values and per-row states).
QuantizedTensor select_rows(const QuantizedTensor& q, const at::Tensor& index);
QuantizedTensor quantize_half(const at::Tensor& t, at::ScalarType half);
// Any scheme; matrices are transposed first when transpose is set.
QuantizedTensor quantize_tensor(const at::Tensor& t, const QuantSpec& spec, bool transpose);

// uint8 values in [0, 15], [rows, cols] with cols even -> [rows, cols / 2]; and back.
at::Tensor pack_int4(const at::Tensor& q);
at::Tensor unpack_int4(const at::Tensor& packed);

}  // namespace servelab

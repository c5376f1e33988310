#pragma once
// Fused dequantization of a block of rows on the CPU, one pass from the quantized bytes to fp32:
// what the JIT path runs before each block's GEMM. ATen would need five or six passes for int4
// (mask, shift, interleave, convert, scale, shift) and two for the seed's format.
#include <ATen/ATen.h>

#include "quant/quantizer.h"

namespace servelab {

// Whether dequantize_rows_cpu handles this tensor (int4 groups or the seed's uint8, on the CPU).
bool fused_dequant_supported(const QuantizedTensor& q);
// Rows [begin, begin + out.size(0)) of q into out (fp32, [rows, cols], contiguous).
void dequantize_rows_cpu(const QuantizedTensor& q, int64_t begin, at::Tensor& out);

}  // namespace servelab

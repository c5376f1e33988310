#pragma once
// Integer activations for the JIT path's int4 and int8 group matrices of 32 (a GGUF file's Q4_0,
// Q4_1, Q5_0, Q8_0 and Q4_K blocks as stored, our int4-g32): x is quantized to int8 per block of 32 columns,
// each group's dot product is taken in integers (u8 x s8 products: AVX-512 VNNI's vpdpbusd, or AVX2's
// vpmaddubsw + vpmaddwd) and only then scaled. This is what llama.cpp does on the CPU, and it
// replaces the conversion of every weight to fp32 with one integer instruction per 64 weight
// bytes. It is opt-in (--quant-exec jit-int8): rounding the activations moves the products off the
// dequantized model's by about 1e-3 relative, and the default JIT path is held to that model
// within 1e-6 (the HF parity tests).
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "quant/dequant_cpu.h"
#include "quant/quantizer.h"
#include "util/cpu_features.h"

namespace servelab {

// Rows of x quantized per block of 32 columns: d = max |x| / 127 over the block and
// q = nearbyint(x * (127 / max |x|)) in [-127, 127]; a block of zeros has d = 0 and q = 0.
// cols must be a multiple of 32. Equal bit for bit under every ISA (AVX2 vectors, or portable C++).
struct Int8Rows {
  int64_t rows = 0, cols = 0, blocks = 0;
  std::vector<int8_t> q;  // [rows, cols]
  std::vector<float> d;   // [rows, blocks]
};
Int8Rows quantize_rows_int8(const float* x, int64_t rows, int64_t cols);

// Whether int8_activation_linear_cpu runs w: Int4Group or Int8Group in groups of 32, a contiguous
// CPU matrix, and active_isa() avx512 or avx2.
bool int8_activation_supported(const QuantizedTensor& w);
// x [rows, cols] (fp32, any number of rows) times w dequantized, transposed, where each row of x
// is first replaced by its int8 quantization (quantize_rows_int8): [rows, w.rows()], fp32, without
// bias. The integer sums are exact; only their scaling and the sum over groups round. int4's
// minimums multiply each block's fp32 sum of x, not of its rounding (sum_j (n_j s + mn) x_j =
// s sum_j n_j x_j + mn sum_j x_j: only the first sum needs integers).
at::Tensor int8_activation_linear_cpu(const QuantizedTensor& w, const at::Tensor& x);
// int8_activation_linear_cpu's product for 1 to kFusedGemvMaxRows rows as a DecodeGemv (a caller
// running its own threads: the decode program), the same operand and kernels, so the same bits;
// null where int8_activation_supported(w) is false.
std::shared_ptr<const DecodeGemv> int8_activation_decode_gemv(const QuantizedTensor& w);
// What computes those products under `isa`, in words (engine info).
std::string int8_activation_kernel(Isa isa);

}  // namespace servelab

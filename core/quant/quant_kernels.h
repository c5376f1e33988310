#pragma once
// LinearKernels over quantized matrices: JIT dequantization a cache-sized block of output
// channels at a time, and the library kernels that read quantized weights directly.
#include <memory>

#include "model/linear_kernels.h"
#include "quant/quantized_model.h"

namespace servelab {

// int8_activations: int4/int8 groups of 32 multiply int8-quantized activations in integers
// (quant/int8_activations.h) at every row count; other matrices run as without it.
std::shared_ptr<const LinearKernels> make_jit_kernels(const QuantizedMatrices& q, at::ScalarType activations,
                                                      int64_t block_bytes, bool int8_activations = false);
// Throws InputError when the scheme has no native kernel on the device (see native_quant_available).
std::shared_ptr<const LinearKernels> make_native_kernels(const QuantizedMatrices& q,
                                                         at::ScalarType activations, at::Device device);

}  // namespace servelab

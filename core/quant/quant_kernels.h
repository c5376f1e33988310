#pragma once
// LinearKernels over quantized matrices: JIT dequantization a cache-sized block of output
// channels at a time, and the library kernels that read quantized weights directly.
#include <memory>

#include "model/linear_kernels.h"
#include "quant/quantized_model.h"

namespace servelab {

std::shared_ptr<const LinearKernels> make_jit_kernels(const QuantizedMatrices& q, at::ScalarType activations,
                                                      int64_t block_bytes);
// Throws InputError when the scheme has no native kernel on the device (see native_quant_available).
std::shared_ptr<const LinearKernels> make_native_kernels(const QuantizedMatrices& q,
                                                         at::ScalarType activations, at::Device device);

}  // namespace servelab

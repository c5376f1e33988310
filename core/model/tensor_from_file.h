#pragma once
// Tensors out of mapped model files, copied once onto the model's device in its dtype.
#include <ATen/ATen.h>

#include <string>

#include "model/safetensors_file.h"

namespace servelab {

// An owning copy of a safetensors tensor (F32, F16 or BF16; ModelFormatError naming the file and
// tensor otherwise) in `dtype` on `device`.
at::Tensor tensor_from_safetensors(const StTensor& t, const std::string& file, at::Device device,
                                   at::ScalarType dtype);

std::string shape_string(at::IntArrayRef shape);

}  // namespace servelab

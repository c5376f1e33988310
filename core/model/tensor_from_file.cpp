#include "model/tensor_from_file.h"

#include <sstream>

#include "util/errors.h"

namespace servelab {

std::string shape_string(at::IntArrayRef shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

at::Tensor tensor_from_safetensors(const StTensor& t, const std::string& file, at::Device device,
                                   at::ScalarType dtype) {
  at::ScalarType src;
  switch (t.dtype) {
    case StDType::F32:
      src = at::kFloat;
      break;
    case StDType::F16:
      src = at::kHalf;
      break;
    case StDType::BF16:
      src = at::kBFloat16;
      break;
    default:
      throw ModelFormatError(file + ": tensor \"" + t.name + "\" has dtype " + dtype_name(t.dtype) +
                             "; model weights must be F32, F16 or BF16");
  }
  // from_blob over the read-only mapping, then an owning copy in the target dtype and device.
  at::Tensor view = at::from_blob(const_cast<std::byte*>(t.data), t.shape, at::TensorOptions().dtype(src));
  return view.to(at::TensorOptions().dtype(dtype).device(device), /*non_blocking=*/false, /*copy=*/true);
}

}  // namespace servelab

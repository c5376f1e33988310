#include <torch/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <variant>

#include "util/device.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

bool cuda_available() { return torch::cuda::is_available(); }

at::Device parse_device(const std::string& name) {
  if (name == "cpu") return at::Device(at::kCPU);
  if (name.rfind("cuda", 0) == 0) {
    if (!cuda_available())
      throw DeviceError("device \"" + name + "\" requested but CUDA is not available on this machine");
    std::optional<at::Device> d;
    try {
      d.emplace(name);
    } catch (const std::exception&) {  // c10::Error, or std::out_of_range for "cuda:99999999999"
      throw DeviceError("cannot parse device \"" + name + "\" (expected cpu, cuda or cuda:N)");
    }
    if (d->has_index() && d->index() >= static_cast<int>(torch::cuda::device_count()))
      throw DeviceError("device \"" + name + "\" does not exist: this machine has " +
                        std::to_string(torch::cuda::device_count()) + " CUDA device(s)");
    return *d;
  }
  throw InputError("unknown device \"" + name + "\" (expected cpu, cuda or cuda:N)");
}

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return at::kFloat;
  if (name == "fp16" || name == "float16") return at::kHalf;
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  throw InputError("unknown dtype \"" + name + "\" (expected fp32, fp16 or bf16)");
}

std::string dtype_label(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "fp32";
    case at::kHalf:
      return "fp16";
    case at::kBFloat16:
      return "bf16";
    default:
      return c10::toString(dtype);
  }
}

std::string device_label(const at::Device& device) { return device.str(); }

void prefer_length_independent_attention() {
  static const bool applied = [] {
    const char* keep = std::getenv("SERVELAB_CUDNN_ATTENTION");
    if (keep && std::string(keep) == "1") return false;
    at::globalContext().setSDPUseCuDNN(false);
    return true;
  }();
  (void)applied;
}

void synchronize(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.has_index() ? device.index() : -1);
}

bool is_out_of_memory(const c10::Error& error) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&error)) return true;
  const std::string msg = error.what_without_backtrace();
  return msg.find("can't allocate memory") != std::string::npos ||
         msg.find("not enough memory") != std::string::npos;
}

namespace {

class OneLineWarnings : public c10::WarningHandler {
 public:
  void process(const c10::Warning& warning) override {
    if (std::holds_alternative<c10::DeprecationWarning>(warning.type())) return;
    std::string msg = warning.msg();
    for (char& c : msg)
      if (c == '\n' || c == '\r') c = ' ';
    const std::lock_guard<std::mutex> lock(mutex_);
    if (seen_.insert(msg).second) std::fprintf(stderr, "libtorch warning: %s\n", msg.c_str());
  }

 private:
  std::mutex mutex_;
  std::set<std::string> seen_;
};

}  // namespace

void route_libtorch_warnings() {
  static OneLineWarnings handler;
  static const bool installed = [] {
    c10::WarningUtils::set_warning_handler(&handler);
    return true;
  }();
  (void)installed;
}

std::int64_t available_host_memory_bytes() { return limits::host_memory_budget_bytes(); }

}  // namespace servelab

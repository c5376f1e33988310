#pragma once
// Device and dtype choices, and the clock that reads time only after the device has finished.
#include <ATen/ATen.h>

#include <chrono>
#include <string>

namespace servelab {

// "cpu" / "cuda" / "cuda:1" -> device; DeviceError when CUDA is asked for but absent.
at::Device parse_device(const std::string& name);
// "fp32" / "fp16" / "bf16" -> scalar type; InputError otherwise.
at::ScalarType parse_dtype(const std::string& name);
std::string dtype_label(at::ScalarType dtype);
std::string device_label(const at::Device& device);
bool cuda_available();

// On CUDA, keeps at::scaled_dot_product_attention off cuDNN's attention. cuDNN builds an execution
// plan for every new sequence length, which costs tens of milliseconds the first time each length
// is seen: a decode step, whose key length grows by one each token, would pay it at every token of
// a fresh run. The flash and memory-efficient kernels take any length. Called once per process
// when a model is placed on a GPU; SERVELAB_CUDNN_ATTENTION=1 leaves libtorch's choice alone (to
// compare the two).
void prefer_length_independent_attention();

// Waits for all queued work on the device (a no-op on CPU). Called before every clock read.
void synchronize(const at::Device& device);

// Milliseconds between construction (or restart) and elapsed_ms(), both taken after a sync.
class DeviceTimer {
 public:
  explicit DeviceTimer(at::Device device) : device_(device) { restart(); }
  void restart() {
    synchronize(device_);
    start_ = std::chrono::steady_clock::now();
  }
  double elapsed_ms() const {
    synchronize(device_);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  at::Device device_;
  std::chrono::steady_clock::time_point start_;
};

// True for libtorch's allocation failures: c10::OutOfMemoryError (CUDA) and the CPU allocator's
// plain c10::Error ("DefaultCPUAllocator: can't allocate memory").
bool is_out_of_memory(const c10::Error& error);

// Replaces libtorch's warning handler (once per process): deprecation warnings, which address
// libtorch's developers and not our users, are dropped; any other warning is printed once per
// distinct message as one line "libtorch warning: ..." instead of libtorch's multi-line text on
// every call.
void route_libtorch_warnings();

// Bytes of memory the OS could still give us (MemAvailable), or 0 when unknown.
std::int64_t available_host_memory_bytes();

}  // namespace servelab

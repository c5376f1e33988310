#pragma once
// The roofline: this machine's limits (memory read bandwidth with the engine's threads, peak fp32
// FLOP/s of a large GEMM), measured once and cached, and a short workload's steps (prefill at a few
// lengths, decode at a few batch sizes) as points of arithmetic intensity (FLOP per byte moved,
// model/step_cost.h) against achieved FLOP/s. A step under the slope bandwidth x intensity is
// memory-bound; under the flat roof, compute-bound; the two meet at the ridge point.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "experiments/experiment_sink.h"
#include "experiments/roofline_point.h"
#include "model/engine.h"

namespace servelab {

struct MachineLimits {
  std::string cpu;     // the CPU's model name
  std::string isa;     // the instruction set our kernels run (util/cpu_features.h)
  std::string device;  // "cpu" or "cuda:0"
  int threads = 0;     // the engine's (libtorch's) threads the probe ran with
  // Each the fastest of 7 runs (a limit is what the machine reaches at best).
  double read_gb_s = 0;  // a sum over 256 MiB of fp32: bytes read per second / 1e9
  // The faster of our GEMM paths on [512, 2048] x [2048, 2048] fp32: libtorch's at::mm and, on
  // the CPU, our blocked kernel (model/blocked_linear.h); gemm names the one that gave it.
  double fp32_gflop_s = 0;
  std::string gemm;
  // Our integer kernel (int8 activations times int8 weights in groups of 32, --quant-exec jit-int8)
  // on the same shape, in GOP/s; 0 where it does not run (no AVX2 or AVX-512, or not the CPU).
  double int8_gop_s = 0;
  std::string int8_kernel;
  std::string measured_at;  // UTC, ISO 8601
  // The intensity where the bandwidth slope meets the compute roof (FLOP/byte).
  double ridge() const { return read_gb_s > 0 ? fp32_gflop_s / read_gb_s : 0; }
  // Whether this record describes the machine and settings of `now` (same CPU, device, threads).
  bool same_machine(const MachineLimits& now) const;
  nlohmann::json to_json() const;
  static MachineLimits from_json(const nlohmann::json& j);
};

// Measures now, on the engine's device, with its threads (a second or two).
MachineLimits probe_machine(const Engine& engine);
// The limits cached in the JSON file at cache_path when they describe this machine and remeasure is
// false; otherwise measures and writes the file (its folder made if needed). An empty path never
// caches. A cache that cannot be read or written is measured over, not an error.
MachineLimits machine_limits(const Engine& engine, const std::string& cache_path, bool remeasure);
// Where the CLI keeps the cache: $XDG_CACHE_HOME/servelab/machine_limits.json (or ~/.cache/...).
std::string default_machine_limits_path();

struct RooflineParams {
  std::vector<int64_t> prefill_lengths{32, 128, 512};
  std::vector<int64_t> decode_batches{1, 8, 32};
  int64_t decode_context = 64;  // positions cached per row before the timed decode steps
  int64_t decode_steps = 4;     // timed decode steps per batch size (the median is the point)
  int64_t repeats = 3;          // timed prefills per length (the median is the point)
};

struct RooflineResult {
  MachineLimits machine;
  std::vector<RooflinePoint> points;
  nlohmann::json to_json() const;
};

// InputError naming the first parameter the engine's model cannot run (a prefill longer than its
// context, a batch beyond limits): what run_roofline checks first, for faces to call before the
// machine probe.
void check_roofline_params(const Engine& engine, const RooflineParams& params);

// Runs the workload on the engine's model (InputError for lengths beyond its context or a batch
// beyond limits). Each point is reported to control.sink as it is measured: on_point(label,
// intensity, FLOP/s).
RooflineResult run_roofline(const Engine& engine, const RooflineParams& params, const MachineLimits& machine,
                            const ExperimentControl& control = {});

}  // namespace servelab

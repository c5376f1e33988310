// The roofline: the machine's limits and a short workload's steps. See roofline.h.
#include "experiments/roofline.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "experiments/batch_sweep.h"
#include "generate/generation.h"
#include "generate/slot_kv_memory.h"
#include "model/blocked_linear.h"
#include "model/model.h"
#include "model/step_cost.h"
#include "quant/int8_activations.h"
#include "quant/quantizer.h"
#include "tokenizer/prompt.h"
#include "util/cpu_features.h"
#include "util/device.h"
#include "util/errors.h"
#include "util/limits.h"
#include "util/utc_time.h"

namespace servelab {

namespace {

constexpr int kProbeRepeats = 7;

// The times of `repeats` timed calls of f after one untimed one, in ms.
template <typename F>
std::vector<double> times_ms(at::Device device, int repeats, F&& f) {
  f();
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    const DeviceTimer timer(device);
    f();
    ms.push_back(timer.elapsed_ms());
  }
  return ms;
}

// A limit of the machine is what it reaches at best: the fastest of the repeats (a busy machine
// slows some of them, never speeds one up).
template <typename F>
double best_ms(at::Device device, F&& f) {
  const std::vector<double> ms = times_ms(device, kProbeRepeats, std::forward<F>(f));
  return *std::min_element(ms.begin(), ms.end());
}

void check_cancel(const ExperimentControl& control) {
  if (control.cancel && control.cancel->load()) throw CancelledError("roofline run stopped");
}

}  // namespace

bool MachineLimits::same_machine(const MachineLimits& now) const {
  return cpu == now.cpu && device == now.device && threads == now.threads && isa == now.isa &&
         read_gb_s > 0 && fp32_gflop_s > 0;
}

nlohmann::json MachineLimits::to_json() const {
  return {{"cpu", cpu},
          {"isa", isa},
          {"device", device},
          {"threads", threads},
          {"read_gb_s", read_gb_s},
          {"fp32_gflop_s", fp32_gflop_s},
          {"ridge_flop_per_byte", ridge()},
          {"measured_at", measured_at},
          {"read_probe", "sum over 256 MiB of fp32, the fastest of 7"},
          {"gemm", gemm},
          {"gemm_probe",
           "[512, 2048] x [2048, 2048] fp32, the fastest of 7, through the faster of at::mm and our blocked "
           "GEMM"},
          {"int8_gop_s", int8_gop_s},
          {"int8_kernel", int8_kernel}};
}

MachineLimits MachineLimits::from_json(const nlohmann::json& j) {
  MachineLimits m;
  m.cpu = j.value("cpu", "");
  m.isa = j.value("isa", "");
  m.device = j.value("device", "");
  m.threads = j.value("threads", 0);
  m.read_gb_s = j.value("read_gb_s", 0.0);
  m.fp32_gflop_s = j.value("fp32_gflop_s", 0.0);
  m.gemm = j.value("gemm", "");
  m.int8_gop_s = j.value("int8_gop_s", 0.0);
  m.int8_kernel = j.value("int8_kernel", "");
  m.measured_at = j.value("measured_at", "");
  return m;
}

namespace {

MachineLimits this_machine(const Engine& engine) {
  MachineLimits m;
  m.cpu = cpu_model_name();
  m.isa = isa_name(active_isa());
  m.device = engine.model().device().str();
  m.threads = at::get_num_threads();
  return m;
}

}  // namespace

MachineLimits probe_machine(const Engine& engine) {
  c10::InferenceMode guard;
  MachineLimits m = this_machine(engine);
  const at::Device device = engine.model().device();
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  {
    const int64_t n = int64_t{64} << 20;  // 64 Mi floats: 256 MiB, far beyond any cache
    const at::Tensor x = at::ones({n}, options);
    const double ms = best_ms(device, [&] { (void)x.sum().item<float>(); });
    m.read_gb_s = static_cast<double>(n) * 4 / (ms * 1e6);
  }
  {
    const int64_t M = 512, K = 2048, N = 2048;
    const at::Tensor a = at::rand({M, K}, options), b = at::rand({K, N}, options);
    at::Tensor c = at::empty({M, N}, options);
    const double flop = 2.0 * M * K * N;
    m.fp32_gflop_s = flop / (best_ms(device, [&] { at::mm_out(c, a, b); }) * 1e6);
    m.gemm = "at::mm";
    if (blocked_linear_available(device, at::kFloat)) {
      const BlockedMatrix w = BlockedMatrix::from_in_out(b);
      const double blocked = flop / (best_ms(device, [&] { (void)blocked_linear(a, w); }) * 1e6);
      if (blocked > m.fp32_gflop_s) {
        m.fp32_gflop_s = blocked;
        m.gemm = "blocked (" + blocked_linear_kernel(active_isa()) + ")";
      }
    }
    if (device.is_cpu()) {
      const QuantizedTensor w = quantize_int8_group(b.t().contiguous(), 32);  // [N, K]
      if (int8_activation_supported(w)) {
        m.int8_gop_s = flop / (best_ms(device, [&] { (void)int8_activation_linear_cpu(w, a); }) * 1e6);
        m.int8_kernel = int8_activation_kernel(active_isa());
      }
    }
  }
  m.measured_at = utc_now_iso8601();
  return m;
}

std::string default_machine_limits_path() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::filesystem::path dir;
  if (xdg && *xdg) {
    dir = xdg;
  } else if (home && *home) {
    dir = std::filesystem::path(home) / ".cache";
  } else {
    return "";
  }
  return (dir / "servelab" / "machine_limits.json").string();
}

MachineLimits machine_limits(const Engine& engine, const std::string& cache_path, bool remeasure) {
  const MachineLimits now = this_machine(engine);
  if (!cache_path.empty() && !remeasure) {
    std::ifstream in(cache_path);
    if (in) {
      const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (j.is_object()) {
        const MachineLimits cached = MachineLimits::from_json(j);
        if (cached.same_machine(now)) return cached;
      }
    }
  }
  const MachineLimits m = probe_machine(engine);
  if (!cache_path.empty()) {
    std::error_code ec;
    const std::filesystem::path path(cache_path);
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
    std::ofstream out(cache_path);
    if (out) out << m.to_json().dump(2) << "\n";
  }
  return m;
}

nlohmann::json RooflineResult::to_json() const {
  return {{"experiment", "roofline"},
          {"machine", machine.to_json()},
          {"points", roofline_json(points)},
          {"cost_model",
           "model/step_cost.h: weights read once per forward, KV read per cached position "
           "and written per new one, projection activations in and out"}};
}

void check_roofline_params(const Engine& engine, const RooflineParams& p) {
  const int64_t context = engine.shape().context;
  if (p.prefill_lengths.empty() || p.decode_batches.empty())
    throw InputError("the roofline workload needs at least one prefill length and one decode batch");
  for (int64_t n : p.prefill_lengths) limits::check_range("prefill length (tokens)", n, 1, context - 1);
  for (int64_t b : p.decode_batches) limits::check_range("decode batch", b, 1, limits::kMaxBatch);
  limits::check_range("decode steps", p.decode_steps, 1, limits::kMaxTokens);
  limits::check_range("decode context (tokens)", p.decode_context, 1, context - p.decode_steps - 1);
  limits::check_range("repeats", p.repeats, 1, limits::kMaxRepeats);
}

RooflineResult run_roofline(const Engine& engine, const RooflineParams& p, const MachineLimits& machine,
                            const ExperimentControl& control) {
  check_roofline_params(engine, p);
  const Model& m = engine.model();
  c10::InferenceMode guard;
  RooflineResult r;
  r.machine = machine;
  const StepCostModel cost = m.cost_model();
  const std::string quant = roofline_quant(engine);
  const int32_t pad = padding_id(m, engine.tokenizer());
  const std::string text = "The quick brown fox jumped over the lazy dog.";
  const double total = static_cast<double>(p.prefill_lengths.size() + p.decode_batches.size());
  const auto report = [&](RooflinePoint point) {
    if (control.sink) {
      control.sink->on_point(point.label, point.intensity(), point.flop_s());
      control.sink->on_progress(static_cast<double>(r.points.size() + 1) / total, point.label);
    }
    r.points.push_back(std::move(point));
  };

  for (int64_t n : p.prefill_lengths) {
    check_cancel(control);
    const std::vector<int32_t> prompt = tokens_of_length(engine.tokenizer(), text, n);
    const double ms = median(times_ms(m.device(), static_cast<int>(p.repeats), [&] {
      SlotKvMemory kv(m, 1, n + 1, pad);
      (void)kv.prefill({{0, &prompt, 1}}).sum().item<float>();
    }));
    const StepCost c = cost.forward({{0, n, 1}});
    report({"prefill", "prefill " + std::to_string(n) + " tokens", quant, 1, n, c.flops, c.bytes(), ms});
  }
  for (int64_t b : p.decode_batches) {
    check_cancel(control);
    const int64_t n = p.decode_context;
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = 0; i < b; ++i)
      prompts.push_back(
          tokens_of_length(engine.tokenizer(), "Request " + std::to_string(i) + ": " + text, n));
    std::vector<PrefillRequest> admitted;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < b; ++i) {
      admitted.push_back({i, &prompts[static_cast<size_t>(i)], p.decode_steps + 1});
      ids.push_back(i);
    }
    SlotKvMemory kv(m, b, n + p.decode_steps + 2, pad);
    at::Tensor next = kv.prefill(admitted).argmax(-1).to(at::kCPU);
    std::vector<double> ms;
    std::vector<int32_t> tokens(static_cast<size_t>(b));
    StepCost steps;
    for (int64_t s = 0; s < p.decode_steps; ++s) {
      for (int64_t i = 0; i < b; ++i)
        tokens[static_cast<size_t>(i)] = static_cast<int32_t>(next[i].item<int64_t>());
      const DeviceTimer timer(m.device());
      next = kv.decode(ids, tokens).argmax(-1).to(at::kCPU);  // synchronised: the tokens are read
      ms.push_back(timer.elapsed_ms());
      steps += cost.forward(std::vector<CostRow>(static_cast<size_t>(b), CostRow{n + s, 1, 1}));
    }
    // The median step's time against the mean step's cost (steps differ by one cached position).
    const double k = static_cast<double>(p.decode_steps);
    report({"decode", "decode batch " + std::to_string(b), quant, b, b, steps.flops / k, steps.bytes() / k,
            median(ms)});
  }
  return r;
}

}  // namespace servelab

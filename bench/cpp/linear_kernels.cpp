// bench_linear_kernels: the fp32 products of one GPT-2 small step, kernel by kernel, on the
// built-in model's weights. For each row count, every kernel runs all 48 projections and the LM
// head once per repeat, kernels taking turns within a repeat; medians. Prints JSON.
//
//   build/release/bench/bench_linear_kernels [--threads 2] [--repeats 7] [--rows 1,2,4,8,32]
//   SERVELAB_ISA=avx2 build/release/bench/bench_linear_kernels ...   (our kernels' AVX2 paths)
//
// Kernels: "onednn_packed" (--gemm onednn, the default under the generic ISA: weights
// prepacked once),
// "onednn_plain" (oneDNN on plain [out, in] matrices), "aten_addmm" (the Conv1D layout),
// "ours" (fp32_linear_cpu over plain [out, in] matrices: the GEMV up to 7 rows, 8-channel tiles
// beyond, AVX-512 or AVX2), "blocked" (what --gemm blocked runs: blocked_linear.h's
// GEMV and GEMM over 16-channel weight blocks). The floor is the bytes
// of the matrices over the copy bandwidth (read + write bytes per second of a 256 MiB copy_).
#include "model/linear_kernels.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench_util.h"
#include "model/blocked_linear.h"
#include "model/gpt2_config.h"
#include "model/gpt2_model.h"
#include "model/gpt2_weights.h"
#include "model/packed_linear.h"
#include "quant/dequant_cpu.h"
#include "util/cpu_features.h"

namespace {

using namespace servelab;
using namespace servelab::bench;

double copy_bandwidth_gbs() {
  const int64_t n = int64_t{64} << 20;
  at::Tensor src = at::ones({n}), dst = at::empty_like(src);
  dst.copy_(src);
  std::vector<double> gbs;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    dst.copy_(src);
    gbs.push_back(2.0 * static_cast<double>(n) * 4.0 / (ms_since(t0) * 1e6));
  }
  return median(gbs);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, repeats = 7;
  std::vector<int64_t> rows_list = {1, 2, 4, 8, 32};
  std::string error;
  const auto o = parse_options(argc, argv, {"--threads", "--repeats", "--rows"}, &error);
  if (!error.empty()) {
    std::fprintf(stderr, "bench_linear_kernels: %s\n", error.c_str());
    return 2;
  }
  if (o.count("--threads")) threads = std::atoi(o.at("--threads").c_str());
  if (o.count("--repeats")) repeats = std::atoi(o.at("--repeats").c_str());
  if (o.count("--rows")) rows_list = parse_rows(o.at("--rows"));
  if (threads > 0) at::set_num_threads(threads);
  c10::InferenceMode guard;
  const Gpt2Config cfg = Gpt2Config::gpt2_small();
  const Gpt2Weights w = make_random_gpt2_weights(cfg, 1234, at::kCPU, at::kFloat);

  // The step's matrices: [in, out] (Conv1D, for addmm) and [out, in] (oneDNN plain, GEMV).
  struct Matrix {
    at::Tensor in_out, out_in, bias;
    int64_t layer;
    LinearSlot slot;
  };
  std::vector<Matrix> mats;
  int64_t bytes = 0;
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    const auto& L = w.layers[static_cast<size_t>(l)];
    const std::array<std::pair<LinearSlot, std::pair<at::Tensor, at::Tensor>>, 4> slots = {{
        {LinearSlot::Attn, {L.c_attn_weight, L.c_attn_bias}},
        {LinearSlot::AttnProj, {L.c_proj_weight, L.c_proj_bias}},
        {LinearSlot::Fc, {L.c_fc_weight, L.c_fc_bias}},
        {LinearSlot::MlpProj, {L.mlp_proj_weight, L.mlp_proj_bias}},
    }};
    for (const auto& [slot, wb] : slots) {
      mats.push_back({wb.first, wb.first.t().contiguous(), wb.second, l, slot});
      bytes += wb.first.numel() * 4;
    }
  }
  const at::Tensor head = w.lm_head.contiguous();  // [vocab, d]: already [out, in]
  bytes += head.numel() * 4;
  const Gpt2Model plain_model(cfg, w);
  const auto packed_model = pack_linears(plain_model);
  const LinearKernels& packed = *packed_model->kernels();
  // What --gemm blocked runs.
  std::unique_ptr<Gpt2Model> blocked_model;
  if (blocked_linear_available(at::kCPU, at::kFloat)) blocked_model = pack_blocked_linears(plain_model);

  using Run = std::function<void(const at::Tensor& x_d, const at::Tensor& x_ff)>;
  std::map<std::string, Run> kernels;
  kernels["onednn_packed"] = [&](const at::Tensor& xd, const at::Tensor& xf) {
    for (const auto& m : mats)
      packed.linear(m.layer, m.slot, m.slot == LinearSlot::MlpProj ? xf : xd, m.bias);
    packed.lm_head(xd);
  };
  kernels["onednn_plain"] = [&](const at::Tensor& xd, const at::Tensor& xf) {
    for (const auto& m : mats) onednn_linear(m.slot == LinearSlot::MlpProj ? xf : xd, m.out_in, m.bias);
    onednn_linear(xd, head, at::Tensor());
  };
  kernels["aten_addmm"] = [&](const at::Tensor& xd, const at::Tensor& xf) {
    for (const auto& m : mats) at::addmm(m.bias, m.slot == LinearSlot::MlpProj ? xf : xd, m.in_out);
    at::mm(xd, head.t());
  };
  if (fp32_gemv_supported(head))
    kernels["ours"] = [&](const at::Tensor& xd, const at::Tensor& xf) {
      for (const auto& m : mats)
        fp32_linear_cpu(m.out_in, m.slot == LinearSlot::MlpProj ? xf : xd).add_(m.bias);
      fp32_linear_cpu(head, xd);
    };

  if (blocked_model) {
    kernels["blocked"] = [&, &blocked = *blocked_model->kernels()](const at::Tensor& xd,
                                                                   const at::Tensor& xf) {
      for (const auto& m : mats)
        blocked.linear(m.layer, m.slot, m.slot == LinearSlot::MlpProj ? xf : xd, m.bias);
      blocked.lm_head(xd);
    };
  }

  const double bw = copy_bandwidth_gbs();
  std::string json =
      "{\"bench\":\"linear_kernels\",\"cpu\":\"" + cpu_model_name() + "\",\"isa\":\"" +
      isa_name(active_isa()) + "\",\"blocked_kernel\":\"" + blocked_linear_kernel(active_isa()) +
      "\",\"threads\":" + std::to_string(at::get_num_threads()) + ",\"repeats\":" + std::to_string(repeats) +
      ",\"weight_bytes\":" + std::to_string(bytes) + ",\"copy_bandwidth_gbs\":" + std::to_string(bw) +
      ",\"floor_ms\":" + std::to_string(static_cast<double>(bytes) / (bw * 1e6)) + ",\"rows\":[";
  for (size_t ri = 0; ri < rows_list.size(); ++ri) {
    const int64_t rows = rows_list[ri];
    const at::Tensor xd = at::randn({rows, cfg.n_embd}), xf = at::randn({rows, 4 * cfg.n_embd});
    std::vector<std::string> names;
    for (const auto& [name, run] : kernels) names.push_back(name);
    for (const auto& n : names) kernels[n](xd, xf);  // warm-up (oneDNN primitive caches)
    std::map<std::string, std::vector<double>> t;
    for (int r = 0; r < repeats; ++r)
      for (const auto& n : names) {
        const auto t0 = Clock::now();
        kernels[n](xd, xf);
        t[n].push_back(ms_since(t0));
      }
    json += std::string(ri ? "," : "") + "{\"rows\":" + std::to_string(rows) + ",\"median_ms\":{";
    for (size_t i = 0; i < names.size(); ++i)
      json += std::string(i ? "," : "") + "\"" + names[i] + "\":" + std::to_string(median(t[names[i]]));
    json += "}}";
  }
  json += "]}";
  std::printf("%s\n", json.c_str());
  return 0;
}

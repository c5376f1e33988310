// bench_decode_gemv: the decode step's weight products on a GGUF file's blocks as stored, kernel by
// kernel, outside the model: every matrix the JIT kernels read (the built-in model's by default)
// run once per repeat through DecodeGemv (quant/dequant_cpu.h), the way the decode program runs
// them, with fp32 activations ("jit", the default) and int8 ones ("jit_int8"), the two taking turns
// within a repeat; medians. The floor is the matrices' bytes over the read bandwidth of a 256 MiB
// sum, measured in the same run. Prints JSON.
//
//   build/release/bench/cpp/bench_decode_gemv [--model PATH] [--match NAME_PART] [--threads 1]
//                                             [--repeats 15] [--rows 1,2,4,8,32]
//   SERVELAB_ISA=avx2 build/release/bench/cpp/bench_decode_gemv ...   (the AVX2 kernels)
//
// Each thread takes a contiguous share of every matrix's output channels (a multiple of 8), as the
// decode program's threads do; the operand is prepared once per matrix before the threads run.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "model/engine.h"
#include "model/gguf_file.h"
#include "quant/dequant_cpu.h"
#include "quant/int8_activations.h"
#include "quant/quantized_llama.h"
#include "util/cpu_features.h"

namespace {

using namespace servelab;
using namespace servelab::bench;

// Bytes a second read by summing a buffer larger than any cache (all threads).
double read_bandwidth_gbs() {
  const at::Tensor buf = at::ones({int64_t{64} << 20});
  (void)buf.sum().item<float>();
  std::vector<double> gbs;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    (void)buf.sum().item<float>();
    gbs.push_back(static_cast<double>(buf.numel()) * 4.0 / (ms_since(t0) * 1e6));
  }
  return median(gbs);
}

struct Matrix {
  std::string name;
  QuantizedTensor q;
  std::shared_ptr<const DecodeGemv> jit, jit_int8;
};

// One pass over every matrix with `kernel`, m rows of x, y sized for the widest matrix.
template <typename Pick>
void run_all(const std::vector<Matrix>& mats, Pick pick, const at::Tensor& x_small, const at::Tensor& x_wide,
             std::vector<float>& scratch, std::vector<float>& y, int64_t m) {
  for (const auto& mat : mats) {
    const DecodeGemv& g = *pick(mat);
    const float* x = (g.in() == x_small.size(1) ? x_small : x_wide).data_ptr<float>();
    const float* operand = g.prepare(x, m, scratch.data());
    const int64_t out = g.out();
    at::parallel_for(0, (out + 7) / 8, 1, [&](int64_t b0, int64_t b1) {
      g.run(operand, m, 8 * b0, std::min(out, 8 * b1), y.data(), out);
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, repeats = 15;
  std::string model, match;
  std::vector<int64_t> rows_list = {1, 2, 4, 8, 32};
  std::string error;
  const auto o =
      parse_options(argc, argv, {"--threads", "--repeats", "--rows", "--model", "--match"}, &error);
  if (!error.empty()) {
    std::fprintf(stderr, "bench_decode_gemv: %s\n", error.c_str());
    return 2;
  }
  if (o.count("--threads")) threads = std::atoi(o.at("--threads").c_str());
  if (o.count("--repeats")) repeats = std::atoi(o.at("--repeats").c_str());
  if (o.count("--rows")) rows_list = parse_rows(o.at("--rows"));
  if (o.count("--model")) model = o.at("--model");
  if (o.count("--match")) match = o.at("--match");
  try {
    if (threads > 0) at::set_num_threads(threads);
    c10::InferenceMode guard;
    if (model.empty()) model = default_model_path();
    const GgufFile file = GgufFile::open(model);
    std::vector<Matrix> mats;
    int64_t bytes = 0, in_small = 0, in_wide = 0;
    for (const GgufTensor& t : file.tensors()) {
      if (t.ne.size() != 2 || t.name.find(match) == std::string::npos) continue;
      std::optional<QuantizedTensor> q = ggml_as_stored(t);
      if (!q) continue;
      Matrix mat{t.name, *q, DecodeGemv::of(*q), int8_activation_decode_gemv(*q)};
      if (!mat.jit || !mat.jit_int8) continue;
      bytes += static_cast<int64_t>(t.nbytes);
      in_small = in_small ? std::min(in_small, mat.jit->in()) : mat.jit->in();
      in_wide = std::max(in_wide, mat.jit->in());
      mats.push_back(std::move(mat));
    }
    if (mats.empty()) throw std::runtime_error(model + " has no matrix the JIT decode kernels read");
    const double bw = read_bandwidth_gbs();
    std::string json =
        "{\"bench\":\"decode_gemv\",\"model\":\"" + model + "\",\"match\":\"" + match + "\",\"cpu\":\"" +
        cpu_model_name() + "\",\"isa\":\"" + isa_name(active_isa()) +
        "\",\"threads\":" + std::to_string(at::get_num_threads()) +
        ",\"repeats\":" + std::to_string(repeats) + ",\"matrices\":" + std::to_string(mats.size()) +
        ",\"file_bytes\":" + std::to_string(bytes) + ",\"read_bandwidth_gbs\":" + std::to_string(bw) +
        ",\"floor_ms\":" + std::to_string(static_cast<double>(bytes) / (bw * 1e6)) + ",\"rows\":[";
    for (size_t ri = 0; ri < rows_list.size(); ++ri) {
      const int64_t m = rows_list[ri];
      const at::Tensor xs = at::randn({m, in_small}), xw = at::randn({m, in_wide});
      int64_t scratch_floats = 0, widest = 0;
      for (const auto& mat : mats) {
        if (m > mat.jit->max_rows() || m > mat.jit_int8->max_rows())
          throw std::runtime_error("--rows " + std::to_string(m) + " is past what the kernels take");
        scratch_floats =
            std::max({scratch_floats, mat.jit->operand_floats(m), mat.jit_int8->operand_floats(m)});
        widest = std::max(widest, mat.jit->out());
      }
      std::vector<float> scratch(static_cast<size_t>(scratch_floats + 64)),
          y(static_cast<size_t>(m * widest));
      const std::map<std::string, std::shared_ptr<const DecodeGemv> Matrix::*> kernels = {
          {"jit", &Matrix::jit}, {"jit_int8", &Matrix::jit_int8}};
      std::map<std::string, std::vector<double>> t;
      for (int r = -1; r < repeats; ++r)  // r = -1 warms up
        for (const auto& [name, member] : kernels) {
          const auto t0 = Clock::now();
          run_all(
              mats, [member](const Matrix& mat) { return (mat.*member).get(); }, xs, xw, scratch, y, m);
          if (r >= 0) t[name].push_back(ms_since(t0));
        }
      json += std::string(ri ? "," : "") + "{\"rows\":" + std::to_string(m) + ",\"median_ms\":{";
      bool first = true;
      for (const auto& [name, member] : kernels) {
        json += std::string(first ? "" : ",") + "\"" + name + "\":" + std::to_string(median(t[name]));
        first = false;
      }
      json += "}}";
    }
    json += "]}";
    std::printf("%s\n", json.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_decode_gemv: %s\n", e.what());
    return 1;
  }
  return 0;
}

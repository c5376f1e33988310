#pragma once
// What every servelab-cli subcommand shares: the model options (ModelArgs), the checks of lists and
// counts on the command line, JSON output, and the colour of generated text at a terminal.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_speculative.h"
#include "cli_usage.h"
#include "model/engine.h"
#include "util/cpu_features.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

// Generated text is coloured after its prompt only for a person at a terminal (colour_output()).
bool colour_output();
const char* colour_generated();
const char* colour_reset();

// The course's three prompts (the default of generate and the batch sweep).
extern const std::vector<std::string> kCoursePrompts;

struct ModelArgs {
  std::string model;
  bool demo = false;
  std::string device = "cpu";
  std::string dtype = "fp32";
  int threads = 0;
  std::string quant = "none";
  std::string quant_exec = "auto";
  std::string gemm = "auto";
  std::string isa;
  std::string cuda_graphs = "on";
  int cuda_graph_max_batch = 128;
  std::string fused_decode = "on";

  void add_to(CLI::App* app, bool with_quant = true) {
    app->add_option("--isa", isa,
                    "force the ISA of our CPU kernels: avx512, avx2 or generic (default: the best this CPU "
                    "has, or SERVELAB_ISA)")
        ->check(CLI::IsMember({"avx512", "avx2", "generic"}));
    app->add_option("--model", model,
                    "Hugging Face model folder (GPT-2 or Llama family) or .gguf file (default: the built-in "
                    "SmolLM2-135M-Instruct)");
    app->add_flag("--demo", demo,
                  "the GPT-2 small shape with random weights instead (the course's exact tensors and GPT-2 "
                  "timings; its text is noise)");
    app->add_option("--device", device, "cpu, cuda or cuda:N");
    app->add_option("--dtype", dtype, "fp32, fp16 or bf16");
    app->add_option("--threads", threads, "CPU threads for libtorch (0: its default)");
    app->add_option(
        "--gemm", gemm,
        "fp32 GEMMs: aten (addmm), onednn (weights prepacked once by oneDNN; CPU fp32), blocked "
        "(our kernels over 16-channel weight blocks; CPU fp32), auto (blocked where the ISA is avx512 "
        "or avx2, else onednn where available)");
    app->add_option("--cuda-graphs", cuda_graphs,
                    "on a GPU, replay each decode step as a CUDA graph captured per batch bucket (on), or "
                    "launch every kernel eagerly (off); ignored on the CPU")
        ->check(CLI::IsMember({"on", "off"}));
    app->add_option("--cuda-graph-max-batch", cuda_graph_max_batch,
                    "the largest batch bucket captured (buckets 1, 2, 4, ... up to it; larger steps run "
                    "eagerly)")
        ->check(CLI::Range(1, 4096));
    app->add_option(
           "--fused-decode", fused_decode,
           "on the CPU, run each decode step of 1-128 rows (1-16 under AVX2 with fp32 activations), and "
           "each speculative verification, as one "
           "fused program (one parallel region per step; the Llama family) or op by op (off); `info` "
           "says whether it applies")
        ->check(CLI::IsMember({"on", "off"}));
    if (!with_quant) return;
    app->add_option("--quant", quant,
                    "quantize the weights after loading: none, zp-uint8, int8-channel, int4-g32, int4-g64, "
                    "int4-g128, fp16, bf16");
    app->add_option(
        "--quant-exec", quant_exec,
        "how quantized weights run: dequant-once, jit, jit-int8 (jit with int8 activations for int4/int8 "
        "groups of 32, as llama.cpp computes), native or auto (native where a kernel exists)");
  }
  EngineOptions options() const {
    EngineOptions o{device, dtype, threads};
    o.quant = quant;
    o.quant_exec = quant_exec;
    o.gemm = gemm;
    o.cuda_graphs = cuda_graphs == "on";
    o.cuda_graph_max_batch = cuda_graph_max_batch;
    o.fused_decode = fused_decode == "on";
    return o;
  }
  std::unique_ptr<Engine> load() const {
    const EngineOptions o = options();
    if (demo && !model.empty()) throw InputError("give --model or --demo, not both");
    if (!isa.empty()) set_active_isa(parse_isa(isa, "--isa"), "--isa");
    limits::check_range("--threads", threads, 0, limits::max_threads());
    if (demo) return Engine::load_demo(o);
    return model.empty() ? Engine::load_builtin(o) : Engine::load(model, o);
  }
};

// Speculation's settings given without speculation (or the other method's) mean nothing.
void check_speculative_flags(CLI::App* cmd, const SpeculativeArgs& a);
// "1,2,4" as integers; InputError naming `what` for an item that is not one, or an empty list.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what);
// parse_int_list, each value checked against [lo, hi] before anything is built from it.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what, int64_t lo, int64_t hi);
void print_json(const nlohmann::json& j);
// The upper bound of a count, named by its option, before the engine loads or builds anything;
// lower bounds are the engine's (its messages name them the same way for every face).
void at_most(const std::string& option, int64_t value, int64_t hi);
// A comma-separated list of names; an empty list or an empty item ("a,,b") is refused, never read
// as "the defaults".
std::vector<std::string> split_list(const std::string& text, const std::string& what);

}  // namespace servelab

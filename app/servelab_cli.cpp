// servelab-cli: the engine without a window. Every subcommand prints JSON with --json, and every
// error is one readable line on stderr with a non-zero exit code.
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "cli_chat.h"
#include "cli_loadgen.h"
#include "cli_models.h"
#include "cli_roofline.h"
#include "cli_serve.h"
#include "cli_speculative.h"
#include "cli_usage.h"
#include "experiments/adapter_serving.h"
#include "experiments/batch_sweep.h"
#include "experiments/chunked_prefill.h"
#include "experiments/course_benchmark.h"
#include "experiments/kv_cache_timing.h"
#include "experiments/multi_lora.h"
#include "experiments/paged_kv.h"
#include "experiments/quantization.h"
#include "experiments/sync_vs_continuous.h"
#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "lora/lora_adapter.h"
#include "model/engine.h"
#include "model/gguf_file.h"
#include "model/model_export.h"
#include "model/safetensors_file.h"
#include "serve/http_server.h"
#include "serve/load_generator.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/prompt.h"
#include "tokenizer/tokenizer.h"
#include "util/cpu_features.h"
#include "util/device.h"
#include "util/errors.h"
#include "util/limits.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace servelab;

namespace {

// The generated text is coloured after its prompt only for a person at a terminal: never into a
// pipe or a file (`servelab-cli generate ... | tail` gets plain text), and never when NO_COLOR is
// set to a non-empty value (https://no-color.org).
bool colour_output() {
  static const bool on = [] {
    const char* no_color = std::getenv("NO_COLOR");
    return isatty(STDOUT_FILENO) == 1 && !(no_color && *no_color);
  }();
  return on;
}
const char* colour_generated() { return colour_output() ? "\x1b[31m" : ""; }
const char* colour_reset() { return colour_output() ? "\x1b[0m" : ""; }

const std::vector<std::string> kCoursePrompts = {"The quick brown fox jumped over the",
                                                 "The rain in Spain falls", "What comes up must"};

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
           "on the CPU, run each decode step of 1-128 rows, and each speculative verification, as one "
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

void check_speculative_flags(CLI::App* cmd, const SpeculativeArgs& a) {
  const bool on = a.enabled();
  for (const char* flag :
       {"--num-speculative-tokens", "--prompt-lookup-max", "--prompt-lookup-min", "--draft-model"}) {
    if (!cmd->count(flag)) continue;
    if (!on) throw UsageError(std::string(flag) + " needs --speculative ngram or draft");
    const bool ngram_only = std::string(flag).rfind("--prompt-lookup", 0) == 0;
    if (ngram_only && a.method != "ngram")
      throw UsageError(std::string(flag) + " is a setting of --speculative ngram");
    if (std::string(flag) == "--draft-model" && a.method != "draft")
      throw UsageError("--draft-model is a setting of --speculative draft");
  }
}

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw InputError(what + ": \"" + item + "\" is not an integer");
    }
  }
  if (out.empty()) throw InputError(what + " is empty");
  return out;
}

// parse_int_list, each value checked against [lo, hi] before anything is built from it.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what, int64_t lo,
                                    int64_t hi) {
  std::vector<int64_t> out = parse_int_list(text, what);
  for (int64_t v : out) limits::check_range(what, v, lo, hi);
  return out;
}

void print_json(const json& j) { std::cout << j.dump() << "\n"; }

// The upper bound of a count, named by its option, before the engine loads or builds anything;
// lower bounds are the engine's (its messages name them the same way for every face).
void at_most(const std::string& option, int64_t value, int64_t hi) {
  if (value > hi) limits::check_range(option, value, std::numeric_limits<int64_t>::min(), hi);
}

int cmd_info(const ModelArgs& m) {
  auto engine = m.load();
  std::cout << engine->info().dump(2) << "\n";
  return 0;
}

int cmd_tokenize(const std::string& tokenizer_dir, const std::string& model_path, bool demo, bool as_json,
                 const std::vector<std::string>& texts) {
  if (int(!tokenizer_dir.empty()) + int(!model_path.empty()) + int(demo) > 1)
    throw InputError("give one of --tokenizer, --model and --demo");
  // Without a choice, the built-in model's tokenizer (from its GGUF); --demo: GPT-2's.
  const std::string path = !tokenizer_dir.empty() ? tokenizer_dir
                           : !model_path.empty()  ? model_path
                           : demo                 ? default_tokenizer_dir()
                                                  : default_model_path();
  std::unique_ptr<Tokenizer> tok;
  if (fs::is_regular_file(path) && fs::path(path).extension() == ".gguf") {
    tok = load_gguf_tokenizer(GgufFile::open(path));
  } else {
    tok = load_tokenizer(path);
  }
  for (const auto& text : texts) {
    std::vector<int32_t> ids = tok->encode(text);
    std::vector<std::string> pieces;
    for (int32_t id : ids) pieces.push_back(tok->token_display(id));
    if (as_json) {
      print_json({{"text", text}, {"ids", ids}, {"tokens", pieces}});
    } else {
      std::cout << text << "\n  ids:";
      for (int32_t id : ids) std::cout << " " << id;
      std::cout << "\n  tokens:";
      for (const auto& p : pieces) std::cout << " " << p;
      std::cout << "\n";
    }
  }
  return 0;
}

json sequence_json(const std::string& prompt, const GeneratedSequence& s, double total_ms) {
  json top = json::array();
  for (const auto& step : s.top) {
    json row = json::array();
    for (const auto& [id, logit] : step) row.push_back({id, logit});
    top.push_back(row);
  }
  return {{"prompt", prompt},
          {"prompt_ids", s.prompt_ids},
          {"generated_ids", s.generated_ids},
          {"text", s.text},
          {"top5", top},
          {"step_ms", s.step_ms},
          {"finish_reason", s.finish_reason},
          {"total_ms", total_ms}};
}

struct GenerateArgs {
  std::vector<std::string> prompts;
  int64_t max_new_tokens = 10;
  bool greedy = false;
  double temperature = 1;
  bool sampling = false;  // --temperature given
  int64_t top_k = 0;
  double top_p = 1.0;
  std::uint64_t seed = 0;
  bool no_kv_cache = false;
  bool batch = false;
  bool chat = false;
  std::string system;
  bool json_out = false;
  std::vector<std::string> stop;
  std::vector<std::string> adapters;  // PEFT folders: one for every prompt, or one per prompt ("none": base)
  std::string lora_strategy = "segmented";
  double min_p = 0, repetition_penalty = 1, presence_penalty = 0, frequency_penalty = 0;
  int64_t logprobs = 0;
  bool logprobs_given = false;
  // The prompts through the continuous-batching scheduler (given when either is > 0).
  int64_t max_num_batched_tokens = 0, max_num_seqs = 0;
  std::string kv = "paged";
  SpeculativeArgs speculative;
};

// The prompts as requests of the continuous-batching scheduler, the way the server runs them.
json continuous_sequence_json(const std::string& prompt, const RequestResult& r) {
  return {{"prompt", prompt},
          {"prompt_ids", r.prompt_ids},
          {"generated_ids", r.generated_ids},
          {"text", r.text},
          {"finish_reason", r.finish_reason},
          {"ttft_ms", r.ttft_ms},
          {"latency_ms", r.latency_ms},
          {"token_ms", r.token_ms},
          {"preemptions", r.preemptions},
          {"cached_tokens", r.cached_tokens}};
}

int cmd_generate(const ModelArgs& m, const GenerateArgs& a) {
  limits::check_range("--prompt (count)", static_cast<int64_t>(a.prompts.size()), 1, limits::kMaxPrompts);
  limits::check_range("--max-new-tokens", a.max_new_tokens, 1, limits::kMaxTokens);
  auto engine = m.load();
  GenerateOptions o;
  o.max_new_tokens = a.max_new_tokens;
  o.use_kv_cache = !a.no_kv_cache;
  o.stop_strings = a.stop;
  // Greedy unless --temperature is given (main() refuses --greedy with it, and the other sampling
  // flags without it).
  o.sampling.greedy = !a.sampling;
  if (a.sampling && !(a.temperature > 0 && std::isfinite(a.temperature))) {
    std::ostringstream t;
    t << a.temperature;
    throw InputError("--temperature must be > 0 and finite, got " + t.str());
  }
  if (!o.sampling.greedy) {
    o.sampling.temperature = a.temperature;
    o.sampling.top_k = a.top_k;
    o.sampling.top_p = a.top_p;
    o.sampling.min_p = a.min_p;
    o.sampling.seed = a.seed;
  }
  o.sampling.repetition_penalty = a.repetition_penalty;
  o.sampling.presence_penalty = a.presence_penalty;
  o.sampling.frequency_penalty = a.frequency_penalty;
  if (a.logprobs_given) {
    o.logprobs = true;
    o.sampling.top_logprobs = a.logprobs;
  }
  o.sampling.validate();
  const bool continuous = a.max_num_batched_tokens > 0 || a.max_num_seqs > 0 || a.speculative.enabled();
  if (continuous && (a.batch || a.no_kv_cache))
    throw UsageError(
        std::string("--max-num-batched-tokens, --max-num-seqs and --speculative serve the prompts by "
                    "continuous batching; ") +
        (a.batch ? "--batch is the course's static batch" : "--no-kv-cache has no KV memory"));
  at_most("--max-num-seqs", a.max_num_seqs, limits::kMaxBatch);
  if (continuous && (!a.adapters.empty() || a.logprobs_given))
    throw UsageError(std::string(a.adapters.empty() ? "--logprobs" : "--adapter") +
                     " is not available with --max-num-batched-tokens / --max-num-seqs / --speculative yet");
  std::vector<std::vector<int32_t>> ids;
  // --chat: each prompt is one user turn in the model's own chat template.
  std::vector<std::string> texts = a.prompts;
  if (!a.system.empty() && !a.chat) throw InputError("--system needs --chat");
  if (a.chat)
    for (auto& t : texts) t = chat_prompt(engine->tokenizer(), t, a.system);
  for (const auto& p : texts) ids.push_back(encode_prompt(engine->tokenizer(), p));
  // Adapters per prompt: --adapter once applies to every prompt, or once per prompt in order.
  std::vector<std::shared_ptr<const LoraAdapter>> per_prompt;
  if (!a.adapters.empty()) {
    if (a.adapters.size() != 1 && a.adapters.size() != a.prompts.size())
      throw InputError(std::to_string(a.adapters.size()) + " --adapter options for " +
                       std::to_string(a.prompts.size()) + " prompts: give one for all, or one per prompt");
    o.lora_strategy = parse_multi_lora_strategy(a.lora_strategy);
    std::map<std::string, std::shared_ptr<const LoraAdapter>> loaded;
    for (size_t i = 0; i < a.prompts.size(); ++i) {
      const std::string& dir = a.adapters[a.adapters.size() == 1 ? 0 : i];
      if (dir == "none") {
        per_prompt.push_back(nullptr);
        continue;
      }
      if (!loaded.count(dir)) {
        AdapterSource src;
        src.name = fs::path(dir).filename().string();
        if (src.name.empty()) src.name = dir;
        src.peft_dir = dir;
        loaded[dir] = load_adapter(src, engine->model());
      }
      per_prompt.push_back(loaded[dir]);
    }
  }
  if (continuous) {
    if (a.kv != "paged" && a.kv != "slot") throw UsageError("--kv must be paged or slot, got '" + a.kv + "'");
    std::vector<BatchRequest> requests;
    for (const auto& one : ids) {
      BatchRequest r;
      r.prompt_ids = one;
      r.max_new_tokens = a.max_new_tokens;
      r.sampling = o.sampling;
      r.stop_strings = a.stop;
      requests.push_back(std::move(r));
    }
    BatchOptions bo;
    bo.kv = a.kv == "paged" ? KvStrategy::Paged : KvStrategy::SlotKv;
    bo.max_batch = a.max_num_seqs > 0 ? a.max_num_seqs : 8;
    bo.max_num_batched_tokens = a.max_num_batched_tokens;
    const SpeculativeSetup spec = resolve_speculative(a.speculative, *engine, m.options());
    bo.speculative = spec.config;
    const BatchRunResult run = run_continuous_batching(*spec.target, engine->tokenizer(), requests, bo);
    if (!a.json_out && engine->is_demo()) std::cout << "[" << engine->text_caveat() << "]\n";
    for (size_t i = 0; i < run.requests.size(); ++i) {
      if (a.json_out) {
        json j = continuous_sequence_json(a.prompts[i], run.requests[i]);
        if (a.chat) j["chat_prompt"] = texts[i];
        if (bo.speculative.enabled()) j["speculative"] = speculative_json(spec, run.speculative);
        print_json(j);
      } else {
        std::cout << a.prompts[i] << colour_generated() << run.requests[i].text << colour_reset() << "\n";
      }
    }
    if (!a.json_out && bo.speculative.enabled()) {
      const SpecDecodeStats& st = run.speculative;
      std::fprintf(
          stderr,
          "speculative decoding, %s, k %lld: %lld of %lld proposed tokens accepted (%.0f%%), %.2f tokens per "
          "verified step\n",
          spec.description.c_str(), static_cast<long long>(bo.speculative.num_speculative_tokens),
          static_cast<long long>(st.num_accepted_tokens), static_cast<long long>(st.num_draft_tokens),
          100.0 * st.acceptance_rate(), st.mean_accepted_length());
    }
    return 0;
  }
  std::vector<GeneratedSequence> out;
  std::vector<double> totals;  // wall time of the generate() call that produced each sequence
  if (a.batch) {
    o.adapters = per_prompt;
    GenerateResult r = generate(engine->model(), engine->tokenizer(), ids, o);
    out = std::move(r.sequences);
    totals.assign(out.size(), r.total_ms);
  } else {
    check_generation_fits(engine->model(), ids, o);
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto& one = ids[i];
      o.adapters.clear();
      if (!per_prompt.empty()) o.adapters = {per_prompt[i]};
      GenerateResult r = generate(engine->model(), engine->tokenizer(), {one}, o);
      out.push_back(std::move(r.sequences[0]));
      totals.push_back(r.total_ms);
    }
  }
  if (!a.json_out && engine->is_demo()) std::cout << "[" << engine->text_caveat() << "]\n";
  for (size_t i = 0; i < out.size(); ++i) {
    if (a.json_out) {
      json j = sequence_json(a.prompts[i], out[i], totals[i]);
      if (a.chat) j["chat_prompt"] = texts[i];
      if (!per_prompt.empty()) j["adapter"] = per_prompt[i] ? per_prompt[i]->name() : "";
      if (o.logprobs) {
        json top = json::array();
        for (const auto& step : out[i].top_logprobs) {
          json row = json::array();
          for (const auto& [id, lp] : step) row.push_back({id, lp});
          top.push_back(row);
        }
        j["logprobs"] = out[i].logprobs;
        j["top_logprobs"] = top;
      }
      print_json(j);
    } else {
      std::cout << a.prompts[i] << colour_generated() << out[i].text << colour_reset() << "\n";
    }
  }
  return 0;
}

int cmd_bench_kv(const ModelArgs& m, const KvCacheTimingParams& p, bool as_json) {
  at_most("--prompt-tokens", p.prompt_tokens, limits::kMaxTokens);
  at_most("--new-tokens", p.new_tokens, limits::kMaxTokens);
  at_most("--repeats", p.repeats, limits::kMaxRepeats);
  auto engine = m.load();
  KvCacheTimingResult r = run_kv_cache_timing(*engine, p);
  json j = r.to_json();
  j["engine"] = engine->info();
  if (as_json) {
    print_json(j);
  } else {
    std::cout << j.dump(2) << "\n";
  }
  return 0;
}

int cmd_bench_sweep(const ModelArgs& m, BatchSweepParams p, const std::string& sizes, bool sizes_given,
                    bool as_json) {
  if (sizes_given) p.batch_sizes = parse_int_list(sizes, "--batch-sizes");
  for (int64_t b : p.batch_sizes) at_most("--batch-sizes", b, limits::kMaxBatch);
  at_most("--new-tokens", p.new_tokens, limits::kMaxTokens);
  at_most("--repeats", p.repeats, limits::kMaxRepeats);
  auto engine = m.load();
  BatchSweepResult r = run_batch_sweep(*engine, p);
  json j = r.to_json();
  j["engine"] = engine->info();
  if (as_json) {
    print_json(j);
    return 0;
  }
  // The course's lesson-2 table: throughput rises with the batch while every step gets slower.
  std::printf("%10s %12s %13s %16s %12s\n", "batch size", "total ms", "tokens/ms", "latency ms/step",
              "decode ms");
  for (const BatchSweepPoint& pt : r.points)
    std::printf("%10lld %12.1f %13.4f %16.2f %12.2f\n", static_cast<long long>(pt.batch_size), pt.total_ms,
                pt.tokens_per_ms, pt.step_ms, pt.decode_step_ms);
  std::printf("%s\n", engine->text_caveat().c_str());
  return 0;
}

int cmd_bench_sync_vs_continuous(const ModelArgs& m, const SyncVsContinuousParams& p, bool as_json) {
  at_most("--requests", p.requests, limits::kMaxRequests);
  at_most("--max-batch", p.max_batch, limits::kMaxBatch);
  at_most("--long-tokens", p.long_tokens, limits::kMaxTokens);
  at_most("--short-tokens", p.short_tokens, limits::kMaxTokens);
  at_most("--prompt-tokens-min", p.prompt_tokens_min, limits::kMaxTokens);
  at_most("--prompt-tokens-max", p.prompt_tokens_max, limits::kMaxTokens);
  auto engine = m.load();
  SyncVsContinuousResult r = run_sync_vs_continuous(*engine, p);
  json j = r.to_json();
  j["engine"] = engine->info();
  if (as_json) {
    print_json(j);
    return 0;
  }
  std::printf("%-28s %10s %9s %7s %9s %9s %9s %9s %9s %9s %12s\n", "method", "total ms", "tokens/s", "calls",
              "avg batch", "TTFT p50", "TTFT p90", "TTFT p99", "lat p50", "lat p99", "KV copied MB");
  for (const ServeSummary& s : r.methods)
    std::printf("%-28s %10.1f %9.1f %7lld %9.2f %9.1f %9.1f %9.1f %9.1f %9.1f %12.1f\n", s.method.c_str(),
                s.total_ms, s.tokens_per_s, static_cast<long long>(s.inference_calls), s.average_batch,
                s.ttft_p50, s.ttft_p90, s.ttft_p99, s.latency_p50, s.latency_p99,
                static_cast<double>(s.kv_copy_bytes) / 1e6);
  std::printf("continuous (slot KV) is %.2fx faster than synchronous; greedy tokens %s\n", r.speedup,
              r.same_tokens ? "identical" : "DIFFER");
  return 0;
}

int cmd_bench_course(const ModelArgs& m, const CourseBenchmarkParams& p, bool as_json) {
  at_most("--queries", p.queries, limits::kMaxRequests);
  at_most("--new-tokens", p.new_tokens, limits::kMaxTokens);
  at_most("--max-batch", p.max_batch, limits::kMaxBatch);
  auto engine = m.load();
  CourseBenchmarkResult r = run_course_benchmark(*engine, p);
  json j = r.to_json();
  j["engine"] = engine->info();
  if (as_json) {
    print_json(j);
    return 0;
  }
  std::printf("%-42s %8s %9s %11s %9s %9s %7s %15s\n", "method", "queries", "time s", "throughput",
              "max batch", "avg batch", "tokens", "inference calls");
  for (const CourseBenchmarkRow& row : r.rows)
    std::printf("%-42s %8lld %9.2f %10.1f%c %9lld %9.1f %7lld %15lld\n", row.method.c_str(),
                static_cast<long long>(row.queries), row.time_s, row.throughput_vs_baseline,
                row.throughput_vs_baseline > 0 ? 'x' : ' ', static_cast<long long>(row.max_batch),
                row.avg_batch, static_cast<long long>(row.tokens),
                static_cast<long long>(row.inference_calls));
  return 0;
}

int cmd_bench_chunked_prefill(const ModelArgs& m, const ChunkedPrefillParams& p, bool as_json) {
  at_most("--streams", p.streams, limits::kMaxBatch - 1);
  at_most("--stream-tokens", p.stream_tokens, limits::kMaxTokens);
  at_most("--long-new-tokens", p.long_new_tokens, limits::kMaxTokens);
  at_most("--rounds", p.rounds, limits::kMaxRepeats);
  auto engine = m.load();
  const ChunkedPrefillResult r = run_chunked_prefill(*engine, p);
  json j = r.to_json();
  j["engine"] = engine->info();
  if (as_json) {
    print_json(j);
    return 0;
  }
  std::printf(
      "%lld streams decoding, a %lld-token prompt arriving at step %lld (%.0f ms; %s, medians of %lld "
      "rounds)\n",
      static_cast<long long>(p.streams), static_cast<long long>(p.long_prompt_tokens),
      static_cast<long long>(p.arrive_after_tokens), r.arrival_ms, kv_strategy_name(p.kv),
      static_cast<long long>(p.rounds));
  std::printf("%-26s %10s %10s %10s %14s %10s\n", "", "ITL p50", "ITL p99", "ITL max", "long TTFT",
              "tokens/s");
  for (const ChunkedPrefillRun* run : {&r.unchunked, &r.chunked})
    std::printf("%-26s %8.1f ms %7.1f ms %7.1f ms %11.0f ms %10.1f\n",
                run->budget ? ("budget " + std::to_string(run->budget) + " tokens").c_str() : "whole prompts",
                run->itl_p50_ms, run->itl_p99_ms, run->itl_max_ms, run->long_ttft_ms, run->tokens_per_s);
  std::printf(
      "max ITL %.1fx lower, p99 %.2fx; the long request's first token %.2fx later; throughput %.2fx; "
      "greedy tokens %s\n",
      r.itl_max_cut, r.itl_p99_cut, r.ttft_cost, r.throughput_ratio,
      r.same_tokens ? "identical both ways" : "DIFFER");
  return 0;
}

// bench paged-kv: its options, registered on the bench command, and the run.
struct PagedKvCli {
  PagedKvParams p;
  bool json = false, no_solo = false;
  CLI::App* cmd = nullptr;
};

void add_bench_paged_kv(CLI::App* bench, ModelArgs& margs, PagedKvCli& a) {
  a.cmd =
      bench->add_subcommand("paged-kv",
                            "How many requests fit: slot KV vs paged KV (with and without prefix caching) "
                            "under one KV memory budget");
  margs.add_to(a.cmd);
  CLI::App* c = a.cmd;
  c->add_option("--requests", a.p.requests, "requests in the queue");
  c->add_option("--max-batch,--max-num-seqs", a.p.max_batch, "requests running at once, whatever the memory");
  c->add_option("--max-num-batched-tokens", a.p.max_num_batched_tokens,
                "chunked prefill for every method: tokens one step computes (off by default)");
  auto* mb = c->add_option("--budget-mb", a.p.budget_mb, "KV memory budget in megabytes (1e6 bytes)");
  auto* blocks = c->add_option("--budget-blocks", a.p.budget_blocks, "KV memory budget in blocks");
  mb->excludes(blocks);
  c->add_option("--block-size", a.p.block_size, "positions per KV block");
  c->add_option("--shared-prefix-tokens", a.p.shared_prefix_tokens,
                "a system prompt of this many tokens in front of every prompt");
  c->add_option("--prompt", a.p.prompt, "words of every request's prompt");
  c->add_option("--long-every", a.p.long_every, "every n-th request is a long one");
  c->add_option("--long-tokens", a.p.long_tokens, "new tokens of a long request");
  c->add_option("--short-tokens", a.p.short_tokens, "new tokens of the others");
  c->add_option("--prompt-tokens-min", a.p.prompt_tokens_min, "own prompt length: lower bound");
  c->add_option("--prompt-tokens-max", a.p.prompt_tokens_max, "own prompt length: upper bound");
  c->add_option("--arrival-rate", a.p.arrival_rate, "Poisson arrivals per second (0: all at the start)");
  c->add_option("--seed", a.p.seed, "seed of prompt lengths and arrivals")->check(kSeedValidator);
  c->add_option("--rounds", a.p.rounds, "runs of each method, interleaved (medians reported)");
  c->add_option("--decode-batch", a.p.decode_batch, "decode-step comparison: rows");
  c->add_option("--decode-context", a.p.decode_context, "decode-step comparison: positions cached per row");
  c->add_option("--decode-steps", a.p.decode_steps, "decode-step comparison: steps timed per layout");
  c->add_flag("--no-solo-check", a.no_solo, "skip comparing every request with its solo generation");
  c->add_flag("--json", a.json, "compact JSON");
}

int cmd_bench_paged_kv(const ModelArgs& m, PagedKvCli& a) {
  PagedKvParams& p = a.p;
  p.check_solo = !a.no_solo;
  at_most("--requests", p.requests, limits::kMaxRequests);
  at_most("--max-batch", p.max_batch, limits::kMaxBatch);
  at_most("--long-tokens", p.long_tokens, limits::kMaxTokens);
  at_most("--short-tokens", p.short_tokens, limits::kMaxTokens);
  auto engine = m.load();
  const PagedKvResult r = run_paged_kv(*engine, p);
  json j = r.to_json();
  j["engine"] = engine->info();
  if (a.json) {
    print_json(j);
    return 0;
  }
  std::printf("KV budget %.1f MB: %lld slots of %lld positions, or %lld blocks of %lld\n",
              static_cast<double>(r.budget_bytes) / 1e6,
              static_cast<long long>(r.methods[0].capacity_requests),
              static_cast<long long>(r.longest_positions), static_cast<long long>(r.methods[1].kv_blocks),
              static_cast<long long>(p.block_size));
  std::printf("%-24s %8s %9s %8s %8s %9s %9s %10s %9s %9s %9s %6s\n", "method", "most held", "avg batch",
              "preempt", "hit rate", "TTFT p50", "TTFT p99", "total ms", "tokens/s", "used MB", "frag",
              "solo");
  for (const PagedKvMethod& s : r.methods)
    std::printf("%-24s %8lld %9.2f %8lld %8.2f %9.1f %9.1f %10.1f %9.1f %9.1f %9.2f %6s\n", s.method.c_str(),
                static_cast<long long>(s.max_running), s.average_batch, static_cast<long long>(s.preemptions),
                s.prefix_hit_rate, s.ttft_p50, s.ttft_p99, s.total_ms, s.tokens_per_s,
                static_cast<double>(s.kv_peak_used_bytes) / 1e6, s.kv_fragmentation,
                !p.check_solo    ? "-"
                : s.same_as_solo ? "same"
                                 : "DIFFER");
  std::printf(
      "paged holds %.2fx the requests of slot KV and finishes %.2fx sooner; prefix caching cuts median "
      "TTFT %.2fx\n",
      r.concurrency_ratio, r.speedup, r.ttft_p50_cut);
  std::printf(
      "decode step, batch %lld x %lld positions: slot %.2f ms, paged in place %.2f ms (%.2fx), paged "
      "gather %.2f ms (%.2fx)\n",
      static_cast<long long>(r.decode.batch), static_cast<long long>(r.decode.context), r.decode.slot_ms,
      r.decode.paged_in_place_ms, r.decode.in_place_vs_slot, r.decode.paged_gather_ms,
      r.decode.gather_vs_slot);
  return 0;
}

// A comma-separated list of names; an empty list or an empty item ("a,,b") is refused, never read
// as "the defaults".
std::vector<std::string> split_list(const std::string& text, const std::string& what) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) throw InputError(what + " has an empty item in \"" + text + "\"");
    out.push_back(item);
  }
  if (out.empty() || text.back() == ',') throw InputError(what + " has an empty item in \"" + text + "\"");
  return out;
}

int cmd_quantize(const ModelArgs& m, QuantizationParams p, const std::string& modes, bool modes_given,
                 bool as_json) {
  if (modes_given) p.modes = split_list(modes, "--mode");
  limits::check_range("--batch", p.batch, 1, limits::kMaxBatch);
  limits::check_range("--repeats", p.repeats, 1, limits::kMaxRepeats);
  limits::check_range("--new-tokens", p.new_tokens, 1, limits::kMaxTokens);
  for (const auto& name : p.modes) parse_quant_mode(name);  // a bad name fails before loading
  parse_quant_exec(p.exec);
  auto engine = m.load();
  QuantizationResult r = run_quantization(*engine, p);
  json j = r.to_json();
  j["engine"] = engine->info();
  if (as_json) {
    print_json(j);
    return 0;
  }
  std::printf("%-13s %-13s %11s %8s %11s %10s %9s %9s %9s %10s %10s %10s\n", "mode", "exec", "weights MB",
              "of fp32", "resident MB", "max |err|", "KL mean", "top-1", "decode ms", "vs fp32",
              "batch tok/s", "vs fp32");
  for (const QuantModeResult& q : r.modes) {
    std::printf("%-13s %-13s %11.1f %7.1f%% %11.1f %10.2e %9.2e %8.1f%%", q.mode.c_str(), q.exec.c_str(),
                static_cast<double>(q.memory.total_bytes) / 1e6, 100.0 * q.memory.fraction_of_fp32,
                static_cast<double>(q.memory.resident_bytes) / 1e6, q.max_abs_error, q.kl_mean,
                100.0 * q.top1_agreement);
    if (q.speed)
      std::printf(" %9.2f %9.2fx %10.1f %9.2fx", q.speed->decode_ms, q.speed->decode_speedup,
                  q.speed->batch_tokens_per_s, q.speed->batch_ratio);
    std::printf("\n");
  }
  for (const QuantModeResult& q : r.modes)
    if (q.mode == "zp-uint8")
      std::printf(
          "course comparison (HF get_memory_footprint, with GPT-2's causal-mask buffers): %lld bytes fp32, "
          "%lld bytes zero-point uint8\n",
          static_cast<long long>(q.memory.course_fp32_footprint_bytes),
          static_cast<long long>(q.memory.course_footprint_bytes));
  if (!r.modes.empty()) {
    std::printf("\ngreedy text, fp32 vs each mode (first prompt):\n  %-13s %s%s\n", "fp32",
                r.modes.front().greedy.front().prompt.c_str(),
                r.modes.front().greedy.front().reference_text.c_str());
    for (const QuantModeResult& q : r.modes)
      if (q.mode != "none")
        std::printf("  %-13s %s%s\n", q.mode.c_str(), q.greedy.front().prompt.c_str(),
                    q.greedy.front().text.c_str());
  }
  if (!r.caveat.empty()) std::printf("[%s]\n", r.caveat.c_str());
  return 0;
}

int cmd_export_demo(const std::string& out_dir, bool tiny) {
  // Same config, seed, device and dtype as Engine::load_demo, so the folder loads to the same model.
  const EngineOptions defaults;
  export_random_gpt2_folder(out_dir, tiny ? tiny_gpt2_config() : Gpt2Config::gpt2_small(),
                            defaults.demo_seed);
  std::cout << "wrote the " << (tiny ? "tiny test" : "built-in demo") << " model to " << out_dir << "\n";
  return 0;
}

int cmd_demo(const ModelArgs& m) {
  auto engine = m.load();
  const json info = engine->info();
  std::cout << "ServeLab demo on " << engine->name() << ", " << info["device"].get<std::string>() << " "
            << info["dtype"].get<std::string>() << ", " << info["threads"] << " threads\n";
  if (engine->is_demo()) std::cout << "[" << engine->text_caveat() << "]\n";
  GenerateOptions o;
  o.max_new_tokens = 10;
  std::vector<std::vector<int32_t>> ids;
  for (const auto& p : kCoursePrompts) ids.push_back(encode_prompt(engine->tokenizer(), p));
  GenerateResult g = generate(engine->model(), engine->tokenizer(), ids, o);
  std::cout << "\nGreedy, 10 new tokens, the three course prompts as one left-padded batch:\n";
  for (size_t i = 0; i < ids.size(); ++i)
    std::cout << "  " << kCoursePrompts[i] << colour_generated() << g.sequences[i].text << colour_reset()
              << "\n";
  KvCacheTimingParams kp;
  kp.prompt = kCoursePrompts[0];
  kp.new_tokens = 10;
  KvCacheTimingResult r = run_kv_cache_timing(*engine, kp);
  std::printf("\nPer-token latency, \"%s\", median of %lld interleaved runs (ms):\n", kp.prompt.c_str(),
              static_cast<long long>(r.repeats));
  std::printf("  %5s %14s %14s\n", "token", "no KV cache", "KV cache");
  for (size_t i = 0; i < r.cache_ms.size(); ++i)
    std::printf("  %5zu %14.2f %14.2f%s\n", i + 1, r.no_cache_ms[i], r.cache_ms[i],
                i == 0 ? "   (prefill)" : "");
  std::printf("  %5s %14.2f %14.2f\n", "total", r.no_cache_total_ms, r.cache_total_ms);
  std::printf("KV cache speed-up: %.2fx overall, %.2fx on decode steps; cache holds %.1f KiB\n", r.speedup,
              r.decode_speedup, static_cast<double>(r.kv_cache_bytes) / 1024.0);
  return 0;
}

// Adapters named on the command line: PEFT folders, else `count` random ones whose ranks cycle over
// ranks_text ("8", or "4,8,16" for mixed ranks).
std::vector<AdapterSource> adapter_sources(const std::vector<std::string>& dirs, int64_t count,
                                           const std::string& ranks_text) {
  std::vector<AdapterSource> out;
  for (const std::string& dir : dirs) {
    AdapterSource s;
    s.peft_dir = dir;
    s.name = fs::path(dir).filename().string();
    if (s.name.empty()) s.name = dir;
    for (const AdapterSource& o : out)
      if (o.name == s.name) s.name = dir;  // two folders with one base name: use the paths
    out.push_back(s);
  }
  if (out.empty()) {
    const std::vector<int64_t> ranks = parse_int_list(ranks_text, "--rank", 1, limits::kMaxRank);
    limits::check_range("--adapters", count, 1, limits::kMaxAdapters);
    for (int64_t i = 0; i < count; ++i) {
      const int64_t rank = ranks[static_cast<size_t>(i) % ranks.size()];
      if (rank < 1) throw InputError("--rank must be at least 1, got " + std::to_string(rank));
      AdapterSource s;
      s.name = "rand-r" + std::to_string(rank) + "-" + std::to_string(i + 1);
      s.rank = rank;
      s.alpha = 2.0 * static_cast<double>(rank);
      s.seed = static_cast<uint64_t>(i + 1);
      out.push_back(s);
    }
  }
  return out;
}

struct LoraBenchArgs {
  MultiLoraParams p;
  std::string strategies = "loop,gathered,segmented";
  std::string sizes = "1,2,4,8,16,32";
  std::vector<std::string> dirs;
  std::string ranks = "8";
  bool json_out = false;
};

int cmd_lora_bench(const ModelArgs& m, LoraBenchArgs a) {
  a.p.strategies = split_list(a.strategies, "--strategies");
  a.p.batch_sizes = parse_int_list(a.sizes, "--batch-sizes", 1, 1024);
  limits::check_range("--adapter (folders)", static_cast<int64_t>(a.dirs.size()), 0, limits::kMaxAdapters);
  if (a.dirs.empty()) limits::check_range("--adapters", a.p.random_adapters, 1, limits::kMaxAdapters);
  at_most("--repeats", a.p.repeats, limits::kMaxRepeats);
  at_most("--decode-steps", a.p.decode_steps, limits::kMaxSteps);
  at_most("--context", a.p.context, limits::kMaxTokens);
  at_most("--samples", a.p.toy_samples, limits::kMaxSteps);
  at_most("--toy-adapters", a.p.toy_adapters, limits::kMaxAdapters);
  at_most("--shared", a.p.shared_adapters, limits::kMaxAdapters);
  at_most("--new-tokens", a.p.new_tokens, limits::kMaxTokens);
  parse_int_list(a.ranks, "--rank", 1, limits::kMaxRank);
  auto engine = m.load();
  // Random adapters are made here too when ranks are mixed (the experiment makes one rank itself).
  if (!a.dirs.empty() || a.ranks.find(',') != std::string::npos) {
    a.p.adapters = adapter_sources(a.dirs, a.p.random_adapters, a.ranks);
  } else {
    a.p.random_rank = parse_int_list(a.ranks, "--rank")[0];
  }
  MultiLoraResult r = run_multi_lora(*engine, a.p);
  json j = r.to_json();
  j["engine"] = engine->info();
  if (a.json_out) {
    print_json(j);
    return 0;
  }
  std::cout << j.dump(2) << "\n";
  return 0;
}

struct LoraServeArgs {
  int64_t requests = 16;
  std::string prompt = "The quick brown fox jumped over the";
  int64_t new_tokens = 16;
  int64_t max_batch = 8;
  int64_t adapters = 4;
  std::string rank = "8";
  std::vector<std::string> dirs;
  int64_t base_every = 0;  // every n-th request runs the base model (0: none)
  int64_t cache_capacity = 0;
  std::string strategy = "segmented";
  bool json_out = false;
};

int cmd_lora_serve(const ModelArgs& m, const LoraServeArgs& a) {
  limits::check_range("--requests", a.requests, 1, limits::kMaxRequests);
  limits::check_range("--adapter (folders)", static_cast<int64_t>(a.dirs.size()), 0, limits::kMaxAdapters);
  if (a.dirs.empty()) limits::check_range("--adapters", a.adapters, 1, limits::kMaxAdapters);
  at_most("--new-tokens", a.new_tokens, limits::kMaxTokens);
  at_most("--max-batch", a.max_batch, limits::kMaxBatch);
  at_most("--cache-capacity", a.cache_capacity, limits::kMaxAdapters);
  auto engine = m.load();
  AdapterServingParams p;
  p.prompt = a.prompt;
  p.requests = a.requests;
  p.new_tokens = a.new_tokens;
  p.max_batch = a.max_batch;
  p.adapters = adapter_sources(a.dirs, a.adapters, a.rank);
  p.base_every = a.base_every;
  p.cache_capacity = a.cache_capacity;
  p.strategy = parse_multi_lora_strategy(a.strategy);
  if (a.requests < 1) throw InputError("--requests must be at least 1");
  json j = run_adapter_serving(*engine, p).to_json();
  if (engine->is_demo()) j["caveat"] = engine->text_caveat();
  std::cout << (a.json_out ? j.dump() : j.dump(2)) << "\n";
  return 0;
}

int cmd_lora_describe(const ModelArgs& m, const std::vector<std::string>& dirs) {
  auto engine = m.load();
  for (const AdapterSource& s : adapter_sources(dirs, 0, "1")) {
    const AdapterInfo i = describe_adapter(*engine, s);
    print_json({{"name", i.name},
                {"source", i.source},
                {"rank", i.rank},
                {"alpha", i.alpha},
                {"scale", i.scale},
                {"modules", i.modules},
                {"parameters", i.parameters},
                {"bytes", i.bytes},
                {"base_parameters", i.base_parameters}});
  }
  return 0;
}

// CLI11 answers an unknown subcommand with "A subcommand is required": name it and the choices
// before parsing. Walks argv down the subcommand tree as far as names lead.
void check_subcommands(CLI::App& app, int argc, char** argv) {
  CLI::App* level = &app;
  std::string path = "servelab-cli";
  for (int i = 1; i < argc; ++i) {
    const std::string token = argv[i];
    const std::vector<CLI::App*> subs = level->get_subcommands([](CLI::App*) { return true; });
    if (subs.empty() || (!token.empty() && token[0] == '-')) return;
    CLI::App* next = nullptr;
    std::string names;
    for (CLI::App* s : subs) {
      if (s->check_name(token)) next = s;
      names += (names.empty() ? "" : ", ") + s->get_name();
    }
    if (!next) throw UsageError("unknown subcommand '" + token + "' of " + path + " (choose " + names + ")");
    level = next;
    path += " " + next->get_name();
  }
  const std::vector<CLI::App*> subs = level->get_subcommands([](CLI::App*) { return true; });
  if (!subs.empty() && !(argc > 1 && std::string(argv[argc - 1]).rfind("--help", 0) == 0) &&
      !(argc > 1 && std::string(argv[argc - 1]) == "-h")) {
    std::string names;
    for (CLI::App* s : subs) names += (names.empty() ? "" : ", ") + s->get_name();
    throw UsageError(path + " needs a subcommand (" + names + ")");
  }
}

// Options whose value names a thing (a device, a mode, a list, a path): given empty, they would
// silently mean the default, so an empty value is a usage error.
void check_no_empty_values(const CLI::App& app) {
  static const std::set<std::string> kNamed = {
      "--model",        "--tokenizer", "--device",        "--dtype",  "--gemm",       "--cuda-graphs",
      "--fused-decode", "--quant",     "--quant-exec",    "--exec",   "--mode",       "--batch-sizes",
      "--strategies",   "--strategy",  "--lora-strategy", "--rank",   "--assignment", "--workload",
      "--adapter",      "--out",       "--stop",          "--ca-file"};
  for (const CLI::App* sub : app.get_subcommands()) {
    for (const CLI::Option* o : sub->get_options()) {
      if (!o->count() || !kNamed.count(o->get_name())) continue;
      for (const std::string& v : o->results())
        if (v.empty()) throw UsageError(o->get_name() + " is given an empty value");
    }
    check_no_empty_values(*sub);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "servelab-cli: ServeLab's engine without the window. Generation, tokenization, the course's "
      "experiments and benchmarks, and an OpenAI/TGI/LoRAX-compatible server, on the built-in "
      "SmolLM2-135M-Instruct or any GPT-2 or Llama-family model (Hugging Face folder or GGUF file)"};
  app.require_subcommand(1);
  ModelArgs margs;

  ModelsCommand models;
  models.add_to(&app);

  auto* info =
      app.add_subcommand("info", "Print the model's config, parameter count, dtype, device, weight bytes");
  margs.add_to(info);

  std::string tok_dir, tok_model;
  bool tok_demo = false;
  bool tok_json = false;
  std::vector<std::string> tok_texts;
  auto* tokenize = app.add_subcommand("tokenize", "Print token ids and pieces of each TEXT");
  tokenize->add_option("--tokenizer", tok_dir,
                       "folder with tokenizer.json, vocab.json+merges.txt or a .model");
  tokenize->add_option("--model", tok_model,
                       "model folder or .gguf file whose tokenizer to use (default: the built-in model's)");
  tokenize->add_flag("--demo", tok_demo, "GPT-2's tokenizer (the random-weight demo model's)");
  tokenize->add_flag("--json", tok_json, "one JSON line per text");
  tokenize->add_option("text", tok_texts, "texts to tokenize")->required();

  GenerateArgs gargs;
  auto* gen = app.add_subcommand("generate", "Generate from one or more prompts");
  margs.add_to(gen);
  gen->add_option("--prompt", gargs.prompts, "prompt text (repeatable)")->required();
  gen->add_option("--max-new-tokens", gargs.max_new_tokens, "tokens to generate per prompt");
  gen->add_flag("--greedy", gargs.greedy, "argmax decoding (the default)");
  gen->add_option("--temperature", gargs.temperature, "sample with this temperature (> 0)");
  gen->add_option("--top-k", gargs.top_k, "sample from the k most likely tokens");
  gen->add_option("--top-p", gargs.top_p, "sample from the smallest set with this probability mass");
  gen->add_option("--seed", gargs.seed, "sampling seed")->check(kSeedValidator);
  gen->add_option("--stop", gargs.stop, "stop string (repeatable)");
  gen->add_flag("--no-kv-cache", gargs.no_kv_cache, "re-run the whole sequence every step");
  gen->add_flag("--batch", gargs.batch, "run all prompts as one left-padded batch");
  gen->add_flag("--chat", gargs.chat,
                "format each prompt as a user turn in the model's chat template (ChatML, Llama 2/3, Zephyr, "
                "Gemma, Mistral)");
  gen->add_option("--system", gargs.system, "with --chat: a system message before the user turn");
  gen->add_flag("--json", gargs.json_out, "one JSON line per prompt");
  gen->add_option("--adapter", gargs.adapters,
                  "PEFT LoRA folder: once for every prompt, or once per prompt in order (\"none\": the base "
                  "model)");
  gen->add_option("--lora-strategy", gargs.lora_strategy, "loop, gathered or segmented (batched prompts)");
  gen->add_option("--min-p", gargs.min_p,
                  "sample only tokens at least this fraction as likely as the top one");
  gen->add_option(
      "--repetition-penalty", gargs.repetition_penalty,
      "divide (multiply, when negative) the logits of tokens seen in the prompt or output (> 0; 1: off)");
  gen->add_option("--presence-penalty", gargs.presence_penalty,
                  "subtract from the logit of every token already generated ([-2, 2])");
  gen->add_option("--frequency-penalty", gargs.frequency_penalty,
                  "subtract this times each token's count in the output ([-2, 2])");
  gen->add_option(
      "--logprobs", gargs.logprobs,
      "with --json: each token's log-probability and this many most likely alternatives ([0, 20])");
  gen->add_option("--max-num-batched-tokens", gargs.max_num_batched_tokens,
                  "serve the prompts by continuous batching with chunked prefill: tokens per step");
  gen->add_option("--max-num-seqs", gargs.max_num_seqs,
                  "serve the prompts by continuous batching: requests running at once");
  gen->add_option("--kv", gargs.kv, "with continuous batching: paged (default) or slot KV");
  gargs.speculative.add_to(gen);
  ChatCommand chat;
  chat.add_to(&app);
  margs.add_to(chat.cmd);

  auto* bench = app.add_subcommand("bench", "Timing experiments, as JSON");
  bench->require_subcommand(1);
  KvCacheTimingParams kv;
  bool kv_json = false;
  auto* bench_kv = bench->add_subcommand("kv-cache", "Per-token latency with and without the KV cache");
  margs.add_to(bench_kv);
  bench_kv->add_option("--prompt", kv.prompt, "prompt");
  bench_kv->add_option("--prompt-tokens", kv.prompt_tokens,
                       "repeat the prompt's tokens to exactly this many");
  bench_kv->add_option("--new-tokens", kv.new_tokens, "tokens to generate");
  bench_kv->add_option("--repeats", kv.repeats, "interleaved repeats (medians are reported)");
  bench_kv->add_flag("--json", kv_json, "compact JSON");
  BatchSweepParams sw;
  std::string sizes;
  bool sw_json = false;
  auto* bench_sweep = bench->add_subcommand("batch-sweep", "Throughput and latency per batch size");
  margs.add_to(bench_sweep);
  bench_sweep->add_option("--batch-sizes", sizes, "comma-separated, e.g. 1,2,4,8");
  bench_sweep->add_option("--new-tokens", sw.new_tokens, "tokens to generate per row");
  bench_sweep->add_option("--repeats", sw.repeats, "repeats per batch size (medians are reported)");
  bench_sweep->add_option("--prompt", sw.prompts, "prompts, cycled to fill the batch (repeatable)");
  bench_sweep->add_flag("--json", sw_json, "compact JSON");

  SyncVsContinuousParams svc;
  bool svc_json = false, svc_no_naive = false;
  auto* bench_svc = bench->add_subcommand("sync-vs-continuous",
                                          "Lesson 3: synchronous vs continuous batching of a request queue");
  margs.add_to(bench_svc);
  bench_svc->add_option("--prompt", svc.prompt, "prompt of every request");
  bench_svc->add_option("--requests", svc.requests, "requests in the queue");
  bench_svc->add_option("--max-batch,--max-num-seqs", svc.max_batch, "requests running at once");
  bench_svc->add_option("--max-num-batched-tokens", svc.max_num_batched_tokens,
                        "chunked prefill on slot and paged KV: tokens one step computes (off by default)");
  bench_svc->add_option("--long-every", svc.long_every, "every n-th request is a long one");
  bench_svc->add_option("--long-tokens", svc.long_tokens, "new tokens of a long request");
  bench_svc->add_option("--short-tokens", svc.short_tokens, "new tokens of the others");
  bench_svc->add_option("--prompt-tokens-min", svc.prompt_tokens_min, "random prompt length: lower bound");
  bench_svc->add_option("--prompt-tokens-max", svc.prompt_tokens_max,
                        "random prompt length: upper bound (0: off)");
  bench_svc->add_option("--arrival-rate", svc.arrival_rate,
                        "Poisson arrivals per second (0: all at the start)");
  bench_svc->add_option("--seed", svc.seed, "seed of prompt lengths and arrivals")->check(kSeedValidator);
  bench_svc->add_flag("--no-naive", svc_no_naive, "skip the course's merge/filter continuous batching");
  bench_svc->add_flag("--json", svc_json, "compact JSON");
  CourseBenchmarkParams sb;
  bool sb_json = false;
  ChunkedPrefillParams cp;
  std::string cp_kv = "paged";
  bool cp_json = false;
  auto* bench_chunked = bench->add_subcommand(
      "chunked-prefill",
      "Streams decoding when a long prompt arrives: inter-token latency with and without "
      "a token budget (chunked prefill)");
  margs.add_to(bench_chunked);
  bench_chunked->add_option("--streams", cp.streams, "requests decoding when the long prompt arrives");
  bench_chunked->add_option("--stream-tokens", cp.stream_tokens, "new tokens of each stream");
  bench_chunked->add_option("--long-prompt-tokens", cp.long_prompt_tokens, "the long prompt's length");
  bench_chunked->add_option("--long-new-tokens", cp.long_new_tokens, "new tokens of the long request");
  bench_chunked->add_option("--arrive-after-tokens", cp.arrive_after_tokens,
                            "the long prompt arrives once the streams have this many tokens");
  bench_chunked->add_option("--max-num-batched-tokens", cp.budget, "the token budget of the chunked run");
  bench_chunked->add_option("--kv", cp_kv, "paged (default) or slot KV");
  bench_chunked->add_option("--rounds", cp.rounds, "interleaved rounds of both ways (medians reported)");
  bench_chunked->add_flag("--json", cp_json, "compact JSON");
  SpeculativeBenchCommand bench_spec;
  bench_spec.add_to(bench);
  margs.add_to(bench_spec.cmd);
  auto* bench_course = bench->add_subcommand(
      "course-benchmark", "The course's batch benchmark: queries one at a time vs continuous batching");
  bench_course->alias("seed-benchmark");  // its name before "seed" meant only the RNG seed
  margs.add_to(bench_course);
  bench_course->add_option("--queries", sb.queries, "queries");
  bench_course->add_option("--new-tokens", sb.new_tokens, "greedy tokens per query");
  bench_course->add_option("--max-batch", sb.max_batch, "largest batch of the batched run");
  bench_course->add_option("--prompt", sb.prompts, "prompts, cycled over the queries (repeatable)");
  bool sb_no_baseline = false;
  bench_course->add_flag("--no-baseline", sb_no_baseline, "run the batched queries only");
  bench_course->add_flag("--json", sb_json, "compact JSON");
  PagedKvCli paged_kv;
  add_bench_paged_kv(bench, margs, paged_kv);
  RooflineCommand roofline;
  roofline.add_to(bench);
  margs.add_to(roofline.cmd);

  QuantizationParams qp;
  std::string q_modes;
  bool q_json = false, q_no_speed = false;
  auto* quantize = app.add_subcommand(
      "quantize", "Every quantization mode against fp32: memory, error, logit drift, greedy text, speed");
  margs.add_to(quantize, false);
  quantize->add_option("--mode", q_modes,
                       "comma-separated: zp-uint8, int8-channel, int4-g32, int4-g64, int4-g128, fp16, bf16 "
                       "(default: zp-uint8,int8-channel,int4-g64,fp16,bf16)");
  quantize->add_option("--exec", qp.exec, "dequant-once, jit, native or auto");
  quantize->add_option("--prompt", qp.prompts, "prompts for logit drift and greedy text (repeatable)");
  quantize->add_option("--new-tokens", qp.new_tokens, "greedy tokens compared with fp32");
  quantize->add_option("--repeats", qp.repeats, "alternating fp32 / mode timing repeats (medians)");
  quantize->add_option("--batch", qp.batch, "rows of the batched throughput run");
  quantize->add_flag("--no-speed", q_no_speed, "skip the timings");
  quantize->add_flag("--json", q_json, "compact JSON");

  auto* lora =
      app.add_subcommand("lora", "LoRA adapters: multi-LoRA timings, serving with adapters per request");
  lora->require_subcommand(1);
  LoraBenchArgs lb;
  auto* lora_bench = lora->add_subcommand(
      "bench", "Decode step time per batch size: base model vs loop, gathered and segmented multi-LoRA");
  margs.add_to(lora_bench);
  lora_bench->add_option(
      "--workload", lb.p.workload,
      "gpt2 (the engine's model, whatever its architecture) or toy (the course's 10x10 model)");
  lora_bench->add_option("--strategies", lb.strategies, "comma-separated: loop, gathered, segmented");
  lora_bench->add_option("--batch-sizes", lb.sizes, "comma-separated, e.g. 1,2,4,8,16,32");
  lora_bench->add_option("--adapter", lb.dirs, "PEFT LoRA folder (repeatable; default: random adapters)");
  lora_bench->add_option("--adapters", lb.p.random_adapters, "random adapters to make");
  lora_bench->add_option("--rank", lb.ranks, "rank of the random adapters; a list (4,8,16) cycles over them");
  lora_bench->add_option("--assignment", lb.p.assignment,
                         "which adapter each row uses: distinct, shared, mixed (every other row base)");
  lora_bench->add_option("--shared", lb.p.shared_adapters,
                         "adapters the rows share with --assignment shared");
  lora_bench->add_option("--context", lb.p.context, "cached tokens before the timed decode steps");
  lora_bench->add_option("--decode-steps", lb.p.decode_steps, "timed decode steps per repeat");
  lora_bench->add_option("--repeats", lb.p.repeats, "repeats (methods take turns; medians)");
  lora_bench->add_option("--samples", lb.p.toy_samples,
                         "toy workload: forward passes averaged per batch size");
  lora_bench->add_option("--toy-adapters", lb.p.toy_adapters, "toy workload: adapters");
  lora_bench->add_option("--toy-rank", lb.p.toy_rank, "toy workload: rank");
  lora_bench->add_option("--prompt", lb.p.prompt, "prompt generated through each adapter");
  lora_bench->add_option("--new-tokens", lb.p.new_tokens, "tokens generated per adapter");
  lora_bench->add_flag("--json", lb.json_out, "compact JSON");

  LoraServeArgs ls;
  auto* lora_serve = lora->add_subcommand(
      "serve", "Continuous batching where every request names its adapter, with an adapter cache");
  margs.add_to(lora_serve);
  lora_serve->add_option("--requests", ls.requests, "requests in the queue (adapters assigned round robin)");
  lora_serve->add_option("--prompt", ls.prompt, "prompt of every request");
  lora_serve->add_option("--new-tokens", ls.new_tokens, "greedy tokens per request");
  lora_serve->add_option("--max-batch", ls.max_batch, "requests running at once");
  lora_serve->add_option("--adapter", ls.dirs, "PEFT LoRA folder (repeatable; default: random adapters)");
  lora_serve->add_option("--adapters", ls.adapters, "random adapters to make");
  lora_serve->add_option("--rank", ls.rank, "rank of the random adapters; a list (4,8,16) cycles over them");
  lora_serve->add_option("--base-every", ls.base_every, "every n-th request runs the base model (0: none)");
  lora_serve->add_option("--cache-capacity", ls.cache_capacity, "adapters held at once (0: all)");
  lora_serve->add_option("--strategy", ls.strategy, "loop, gathered or segmented");
  lora_serve->add_flag("--json", ls.json_out, "compact JSON");

  std::vector<std::string> describe_dirs;
  auto* lora_describe = lora->add_subcommand("describe", "Load PEFT LoRA folders and print what they hold");
  margs.add_to(lora_describe, false);
  lora_describe->add_option("dir", describe_dirs, "PEFT LoRA folders")->required();

  std::string export_dir;
  auto* exp = app.add_subcommand(
      "export-demo", "Write the GPT-2 small shape with random weights (--demo) as a Hugging Face folder");
  bool export_tiny = false;
  exp->add_option("--out", export_dir, "output folder")->required();
  exp->add_flag("--tiny", export_tiny, "a 2-layer, 32-wide model with GPT-2's vocabulary (for tests)");

  auto* demo = app.add_subcommand("demo", "Generate from the course prompts and compare KV-cache timings");
  margs.add_to(demo);

  ServeCommand sv;
  auto* serve = app.add_subcommand(
      "serve", "LoRAX/TGI- and OpenAI-compatible HTTP server with continuous batching, until SIGINT/SIGTERM");
  margs.add_to(serve);
  sv.add_to(serve);

  LoadgenCommand lg;
  lg.add_to(&app);

  try {
    check_subcommands(app, argc, argv);
    app.parse(argc, argv);
    check_no_empty_values(app);
    // Sampling is --temperature; --greedy with it, or the sampling flags without it, contradict.
    gargs.sampling = gen->count("--temperature") > 0;
    gargs.logprobs_given = gen->count("--logprobs") > 0;
    if (gargs.greedy && gargs.sampling)
      throw UsageError("--greedy and --temperature contradict each other: give one of them");
    for (const char* flag : {"--top-k", "--top-p", "--min-p", "--seed"})
      if (gen->count(flag) && !gargs.sampling)
        throw UsageError(std::string(flag) + " needs --temperature (without it generation is greedy)");
    if (gen->count("--kv") && !gen->count("--max-num-batched-tokens") && !gen->count("--max-num-seqs") &&
        !gargs.speculative.enabled())
      throw UsageError(
          "--kv chooses the KV memory of continuous batching: give --max-num-batched-tokens, "
          "--max-num-seqs or --speculative");
    check_speculative_flags(gen, gargs.speculative);
    check_speculative_flags(serve, sv.args.speculative);
    // 0 is the budget's "off" inside; on the command line, leaving the flag out says that. (Where
    // --max-num-seqs names --max-batch, the engine's "max batch" check answers for both.)
    for (CLI::App* cmd : {gen, serve, bench_svc, paged_kv.cmd, bench_chunked})
      if (cmd->count("--max-num-batched-tokens") &&
          cmd->get_option("--max-num-batched-tokens")->as<int64_t>() < 1)
        throw UsageError("--max-num-batched-tokens must be at least 1, got " +
                         cmd->get_option("--max-num-batched-tokens")->as<std::string>());
    if (gen->count("--max-num-seqs") && gargs.max_num_seqs < 1)
      throw UsageError("--max-num-seqs must be at least 1, got " + std::to_string(gargs.max_num_seqs));
    if (*paged_kv.cmd && !paged_kv.cmd->count("--budget-mb") && !paged_kv.cmd->count("--budget-blocks"))
      throw UsageError("bench paged-kv needs a KV budget: --budget-mb M or --budget-blocks B");
  } catch (const UsageError& e) {
    std::cerr << "servelab-cli: " << one_line(e.what()) << " (see --help)\n";
    return 2;
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "servelab-cli: " << one_line(e.what()) << " (see --help)\n";
    return 2;
  }
  try {
    if (*models.cmd) return models.run();
    if (*info) return cmd_info(margs);
    if (*tokenize) return cmd_tokenize(tok_dir, tok_model, tok_demo, tok_json, tok_texts);
    if (*gen) return cmd_generate(margs, gargs);
    if (*chat.cmd) {
      // Line editing only for a person at a terminal: readline writes its prompt, echo and
      // redrawing to stderr, so both stdin and stderr must be that terminal. From a pipe the turns
      // are read as plain lines, without a prompt.
      auto engine = margs.load();
      const bool interactive = isatty(STDIN_FILENO) == 1;
      const std::unique_ptr<LineReader> in = interactive && isatty(STDERR_FILENO) == 1
                                                 ? readline_line_reader(chat_history_path(), std::cerr)
                                                 : stream_line_reader(std::cin, std::cerr, interactive);
      return chat.run(*engine, *in, std::cout, std::cerr, interactive, colour_output());
    }
    if (*bench_kv) return cmd_bench_kv(margs, kv, kv_json);
    if (*bench_sweep)
      return cmd_bench_sweep(margs, sw, sizes, bench_sweep->count("--batch-sizes") > 0, sw_json);
    if (*bench_svc) {
      svc.naive = !svc_no_naive;
      return cmd_bench_sync_vs_continuous(margs, svc, svc_json);
    }
    if (*paged_kv.cmd) return cmd_bench_paged_kv(margs, paged_kv);
    if (*roofline.cmd) {
      auto engine = margs.load();
      json j = roofline.run(*engine);
      j["engine"] = engine->info();
      if (roofline.json) print_json(j);
      return 0;
    }
    if (*bench_chunked) {
      if (cp_kv != "paged" && cp_kv != "slot")
        throw UsageError("--kv must be paged or slot, got '" + cp_kv + "'");
      cp.kv = cp_kv == "paged" ? KvStrategy::Paged : KvStrategy::SlotKv;
      return cmd_bench_chunked_prefill(margs, cp, cp_json);
    }
    if (*bench_spec.cmd) {
      auto engine = margs.load();
      json j = bench_spec.run(*engine, margs.options());
      j["engine"] = engine->info();
      if (bench_spec.json) print_json(j);
      return 0;
    }
    if (*bench_course) {
      sb.baseline = !sb_no_baseline;
      return cmd_bench_course(margs, sb, sb_json);
    }
    if (*quantize) {
      qp.measure_speed = !q_no_speed;
      return cmd_quantize(margs, qp, q_modes, quantize->count("--mode") > 0, q_json);
    }
    if (*lora_bench) return cmd_lora_bench(margs, lb);
    if (*lora_serve) return cmd_lora_serve(margs, ls);
    if (*lora_describe) return cmd_lora_describe(margs, describe_dirs);
    if (*exp) return cmd_export_demo(export_dir, export_tiny);
    if (*demo) return cmd_demo(margs);
    if (*serve) return sv.run([&margs] { return margs.load(); }, margs.options());
    if (*lg.cmd) return lg.run();
  } catch (const UsageError& e) {  // a value only a subcommand can check
    std::cerr << "servelab-cli: " << one_line(e.what()) << " (see --help)\n";
    return 2;
  } catch (const Error& e) {
    std::cerr << "servelab-cli: " << error_kind_name(e.kind()) << ": " << one_line(e.what()) << "\n";
    return 1;
  } catch (const c10::Error& e) {
    std::cerr << "servelab-cli: libtorch error: " << one_line(e.what_without_backtrace()) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "servelab-cli: " << one_line(e.what()) << "\n";
    return 1;
  }
  return 0;
}

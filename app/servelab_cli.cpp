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
#include "cli_common.h"
#include "cli_experiments.h"
#include "cli_generate.h"
#include "cli_loadgen.h"
#include "cli_lora.h"
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

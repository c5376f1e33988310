// `servelab-cli bench ...` and `quantize`: the timing experiments, as JSON or a table.
#include "cli_experiments.h"

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

namespace servelab {

using nlohmann::json;
namespace fs = std::filesystem;

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

}  // namespace servelab

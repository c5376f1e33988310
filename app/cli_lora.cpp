// `servelab-cli lora ...`: multi-LoRA timings, serving with adapters per request, describing adapters.
#include "cli_lora.h"

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

}  // namespace servelab

// `servelab-cli generate`: prompts alone, as a padded batch, or served by continuous batching.
#include "cli_generate.h"

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

}  // namespace servelab

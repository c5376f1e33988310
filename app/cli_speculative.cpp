#include "cli_speculative.h"

#include <cstdio>
#include <sstream>

#include "util/errors.h"

namespace servelab {

void SpeculativeArgs::add_to(CLI::App* app) {
  app->add_option("--speculative", method,
                  "speculative decoding: ngram (prompt lookup: proposals copied from the prompt and output), "
                  "draft (a draft model proposes) or off")
      ->check(CLI::IsMember({"ngram", "draft", "off"}));
  app->add_option("--num-speculative-tokens", k, "tokens proposed per verification step (k, [1, 16])");
  app->add_option("--prompt-lookup-max", lookup_max, "ngram: the longest suffix matched ([1, 16])");
  app->add_option("--prompt-lookup-min", lookup_min, "ngram: the shortest suffix matched");
  app->add_option("--draft-model", draft_model,
                  "draft: a model folder or .gguf with the same vocabulary, or int4 (default): a cheaper "
                  "copy of the loaded model (a GGUF run as stored drafts with its blocks for its "
                  "dequantized fp32 self; a dense model drafts with its int4-g32 quantization)");
}

SpeculativeSetup resolve_speculative(const SpeculativeArgs& a, const Engine& engine,
                                     const EngineOptions& options) {
  SpeculativeSetup s;
  s.target = &engine.model();
  s.config.method = parse_speculative_method(a.method);
  s.config.num_speculative_tokens = a.k;
  s.config.prompt_lookup_max = a.lookup_max;
  s.config.prompt_lookup_min = a.lookup_min;
  if (s.config.method == SpeculativeMethod::Ngram) {
    s.description =
        "prompt lookup (n-gram " + std::to_string(a.lookup_min) + ".." + std::to_string(a.lookup_max) + ")";
  } else if (s.config.method == SpeculativeMethod::DraftModel) {
    if (a.draft_model == "int4") {
      Engine::DraftPair pair = engine.int4_draft_pair();
      s.target_holder = pair.target;
      s.draft_holder = pair.draft;
      s.target = pair.target.get();
      s.config.draft_model = pair.draft.get();
      s.description = pair.description;
    } else {
      EngineOptions o = options;
      o.quant = "none";
      o.quant_exec = "auto";
      s.draft_engine = Engine::load(a.draft_model, o);
      s.config.draft_model = &s.draft_engine->model();
      if (s.draft_engine->tokenizer().vocab_size() != engine.tokenizer().vocab_size())
        throw InputError("--draft-model " + a.draft_model + " has a tokenizer of " +
                         std::to_string(s.draft_engine->tokenizer().vocab_size()) +
                         " tokens, the target's has " + std::to_string(engine.tokenizer().vocab_size()) +
                         ": they must share one");
      s.description = "draft model " + s.draft_engine->name();
    }
  }
  s.config.validate();
  return s;
}

void SpeculativeBenchCommand::add_to(CLI::App* bench) {
  cmd = bench->add_subcommand(
      "speculative",
      "Speculative decoding against plain decoding: tokens/s, acceptance and speed-up per "
      "drafter and k, greedy tokens compared");
  cmd->add_option("--workload", params.workload,
                  "grounded (answers that copy their input) or open (open-ended questions)")
      ->check(CLI::IsMember({"grounded", "open"}));
  cmd->add_option("--methods", methods, "drafters, comma-separated: ngram, draft");
  cmd->add_option("--k", ks, "proposed tokens per step, comma-separated");
  cmd->add_option("--new-tokens", params.new_tokens, "new tokens per request (EOS may end one sooner)");
  cmd->add_option("--concurrency", params.concurrency, "requests decoded at once");
  cmd->add_option("--requests", params.requests, "requests (the workload's prompts in turn)");
  cmd->add_option("--rounds", params.rounds, "interleaved rounds (medians reported)");
  cmd->add_option("--prompt-lookup-max", params.prompt_lookup_max, "ngram: the longest suffix matched");
  cmd->add_option("--draft-model", draft_model,
                  "draft: a model folder or .gguf, or int4 (see generate --help)");
  cmd->add_option("--kv", kv, "paged (default) or slot KV")->check(CLI::IsMember({"paged", "slot"}));
  cmd->add_flag("--json", json, "compact JSON");
}

nlohmann::json SpeculativeBenchCommand::run(const Engine& engine, const EngineOptions& options) {
  params.methods.clear();
  bool wants_draft = false;
  std::stringstream ms(methods);
  for (std::string m; std::getline(ms, m, ',');) {
    const SpeculativeMethod method = parse_speculative_method(m);
    if (method == SpeculativeMethod::None)
      throw InputError("--methods lists drafters (ngram, draft), got 'off'");
    wants_draft = wants_draft || method == SpeculativeMethod::DraftModel;
    params.methods.push_back(method);
  }
  if (params.methods.empty()) throw InputError("--methods must name at least one drafter");
  params.ks.clear();
  std::stringstream kss(ks);
  for (std::string k; std::getline(kss, k, ',');) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(k, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != k.size() || v < 1 || v > 16)
      throw InputError("--k takes numbers in [1, 16], got '" + k + "'");
    params.ks.push_back(v);
  }
  params.kv = kv == "slot" ? KvStrategy::SlotKv : KvStrategy::Paged;
  SpeculativeSetup setup;
  setup.target = &engine.model();
  if (wants_draft) {
    SpeculativeArgs a;
    a.method = "draft";
    a.draft_model = draft_model;
    setup = resolve_speculative(a, engine, options);
  }
  const SpeculativeBenchResult r =
      run_speculative_bench(engine, *setup.target, setup.config.draft_model, setup.description, params);
  nlohmann::json j = r.to_json();
  if (json) return j;
  std::printf("%s workload, %lld requests, %lld at once, %lld new tokens, medians of %lld rounds%s%s\n",
              params.workload.c_str(), static_cast<long long>(params.requests),
              static_cast<long long>(params.concurrency), static_cast<long long>(params.new_tokens),
              static_cast<long long>(params.rounds), setup.description.empty() ? "" : "; ",
              setup.description.c_str());
  std::printf("%-8s %3s %10s %9s %11s %13s %10s %9s\n", "method", "k", "tokens/s", "speed-up", "acceptance",
              "tokens/verify", "draft ms", "greedy");
  for (const SpeculativeBenchRun& run : r.runs)
    std::printf("%-8s %3lld %10.1f %8.2fx %10.0f%% %13.2f %10.1f %9s\n",
                run.method == SpeculativeMethod::None ? "plain" : speculative_method_name(run.method),
                static_cast<long long>(run.k), run.tokens_per_s, run.speedup,
                100.0 * run.stats.acceptance_rate(), run.stats.mean_accepted_length(), run.draft_ms,
                run.identical ? "same" : "DIFFERENT");
  return j;
}

nlohmann::json speculative_json(const SpeculativeSetup& setup, const SpecDecodeStats& st) {
  nlohmann::json j = {{"method", speculative_method_name(setup.config.method)},
                      {"num_speculative_tokens", setup.config.num_speculative_tokens},
                      {"pairing", setup.description}};
  j.update(spec_decode_stats_json(st));
  return j;
}

}  // namespace servelab

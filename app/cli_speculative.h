#pragma once
// The speculative-decoding options the CLI's generate, serve and bench commands share, and the
// draft model they resolve to.
#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "experiments/speculative.h"
#include "generate/speculative_config.h"
#include "model/engine.h"

namespace servelab {

struct SpeculativeArgs {
  std::string method = "off";
  int64_t k = 4;
  int64_t lookup_max = 4, lookup_min = 1;
  std::string draft_model = "int4";
  bool enabled() const { return method != "off"; }
  void add_to(CLI::App* app);
};

// What a command runs speculation with: the model that verifies (the loaded one, or with
// --draft-model int4 on a GGUF run as stored, its dequantized copy) and the config, whose draft
// model this holds alive.
struct SpeculativeSetup {
  const Model* target = nullptr;
  SpeculativeConfig config;
  std::string description;  // which pairing, for the output
  std::shared_ptr<const Model> target_holder, draft_holder;
  std::unique_ptr<Engine> draft_engine;
};

// InputError / UsageError-worthy problems as InputError naming the flag.
SpeculativeSetup resolve_speculative(const SpeculativeArgs& args, const Engine& engine,
                                     const EngineOptions& options);

// `bench speculative`: plain decoding against each drafter at each k, interleaved rounds.
struct SpeculativeBenchCommand {
  CLI::App* cmd = nullptr;
  SpeculativeBenchParams params;
  std::string methods = "ngram", ks = "2,4,8", kv = "paged", draft_model = "int4";
  bool json = false;
  // Adds the subcommand to `bench` (the caller adds the model options).
  void add_to(CLI::App* bench);
  // Runs it: the result as JSON (a table on stdout unless json).
  nlohmann::json run(const Engine& engine, const EngineOptions& options);
};

// The counters under vLLM's names, with the settings.
nlohmann::json speculative_json(const SpeculativeSetup& setup, const SpecDecodeStats& stats);

}  // namespace servelab

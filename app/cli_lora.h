#pragma once
// `servelab-cli lora ...`: multi-LoRA timings, serving with an adapter per request, and what an
// adapter is (rank, alpha, modules) for the loaded model.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "cli_common.h"
#include "experiments/adapter_serving.h"
#include "experiments/multi_lora.h"
#include "lora/lora_adapter.h"

namespace servelab {

struct LoraBenchArgs {
  MultiLoraParams p;
  std::string strategies = "loop,gathered,segmented";
  std::string sizes = "1,2,4,8,16,32";
  std::vector<std::string> dirs;
  std::string ranks = "8";
  bool json_out = false;
};

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

// Adapters named on the command line: PEFT folders, else `count` random ones whose ranks cycle over
// ranks_text ("8", or "4,8,16" for mixed ranks).
std::vector<AdapterSource> adapter_sources(const std::vector<std::string>& dirs, int64_t count,
                                           const std::string& ranks_text);
// Each subcommand's run: its exit code, its output on stdout (JSON with json_out).
int cmd_lora_bench(const ModelArgs& m, LoraBenchArgs a);
int cmd_lora_serve(const ModelArgs& m, const LoraServeArgs& a);
int cmd_lora_describe(const ModelArgs& m, const std::vector<std::string>& dirs);

}  // namespace servelab

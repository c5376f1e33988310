#pragma once
// `servelab-cli loadgen`: the course's serving scenarios, and a vLLM-style benchmark (sweep),
// against any LoRAX/TGI- or OpenAI-compatible URL (core/serve/load_generator).
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "serve/load_generator.h"

namespace servelab {

struct LoadgenArgs {
  LoadTarget target;
  LoadOptions options;
  std::string api = "lorax", clients = "1,2,4", schema_file, tokenizer, percentiles = "50,90,95,99";
  std::vector<std::string> headers;  // "Key: value"
  std::vector<std::string> goodput;  // "ttft:500"
  std::string save_requests, csv, save_result;
  bool json_out = false;
};

struct LoadgenCommand {
  LoadgenArgs args;
  CLI::App* cmd = nullptr;
  // Adds the loadgen subcommand and its options to app.
  void add_to(CLI::App* app);
  // Runs it as parsed; the exit code. UsageError for options that do not go together.
  int run() const;
};

}  // namespace servelab

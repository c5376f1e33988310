#pragma once
// `bench roofline`: this machine's limits (measured once and cached) and a short workload's steps as
// roofline points: arithmetic intensity against achieved FLOP/s (docs/guide/roofline.md).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "experiments/roofline.h"
#include "model/engine.h"

namespace servelab {

struct RooflineCommand {
  CLI::App* cmd = nullptr;
  RooflineParams params;
  std::string cache = default_machine_limits_path();
  bool remeasure = false, json = false;
  // Adds the subcommand to `bench` (the caller adds the model options).
  void add_to(CLI::App* bench);
  // Checks the workload against the model (InputError naming the value), then measures or reads
  // the limits and runs it: the result as JSON (the limits and a table on stdout unless json).
  nlohmann::json run(const Engine& engine);
};

}  // namespace servelab

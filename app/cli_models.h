#pragma once
// `models`: the models already on this computer (the Hugging Face cache, LM Studio, Ollama and the
// folders given with --dir), what each one is and whether ServeLab loads it (model/model_catalog.h).
#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace servelab {

struct ModelsCommand {
  CLI::App* cmd = nullptr;
  std::vector<std::string> dirs;
  bool json = false;
  // Adds the subcommand to the app.
  void add_to(CLI::App* app);
  // Scans and prints: a table, or with --json one JSON array of the entries. InputError naming a
  // --dir that is not a folder.
  int run() const;
};

}  // namespace servelab

#include "cli_models.h"

#include <iostream>
#include <nlohmann/json.hpp>

#include "model/model_catalog.h"

namespace servelab {

void ModelsCommand::add_to(CLI::App* app) {
  cmd =
      app->add_subcommand("models",
                          "List the models already on this computer (Hugging Face cache, LM Studio, Ollama, "
                          "--dir folders): architecture, format, quantization, size, and whether they load");
  cmd->add_option("--dir", dirs, "also search this folder for model folders and .gguf files (repeatable)");
  cmd->add_flag("--json", json, "one JSON array, an object per model");
}

int ModelsCommand::run() const {
  CatalogRoots roots = default_catalog_roots();
  roots.folders = dirs;
  const std::vector<CatalogEntry> entries = scan_models(roots);
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const CatalogEntry& e : entries) out.push_back(e.to_json());
    std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << catalog_table(entries);
  }
  return 0;
}

}  // namespace servelab

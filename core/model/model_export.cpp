#include "model/model_export.h"

#include <c10/core/InferenceMode.h>

#include <filesystem>
#include <fstream>

#include "model/engine.h"
#include "model/gpt2_weights.h"
#include "util/errors.h"

namespace fs = std::filesystem;

namespace servelab {

Gpt2Config tiny_gpt2_config() {
  Gpt2Config c = Gpt2Config::gpt2_small();
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.n_positions = 256;
  return c;
}

void export_random_gpt2_folder(const std::string& dir, const Gpt2Config& config, std::uint64_t seed,
                               const std::string& tokenizer_dir) {
  const std::string tok = tokenizer_dir.empty() ? default_tokenizer_dir() : tokenizer_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError("cannot create " + dir + ": " + ec.message());
  {
    c10::InferenceMode guard;
    save_gpt2_weights(make_random_gpt2_weights(config, seed, at::Device(at::kCPU), at::kFloat),
                      (fs::path(dir) / "model.safetensors").string());
  }
  nlohmann::json cfg = config.to_json();
  cfg["architectures"] = {"GPT2LMHeadModel"};
  std::ofstream out(fs::path(dir) / "config.json");
  out << cfg.dump(2) << "\n";
  if (!out) throw InputError("cannot write " + (fs::path(dir) / "config.json").string());
  for (const char* f : {"vocab.json", "merges.txt"}) {
    fs::copy_file(fs::path(tok) / f, fs::path(dir) / f, fs::copy_options::overwrite_existing, ec);
    if (ec)
      throw InputError("cannot copy " + (fs::path(tok) / f).string() + " to " + dir + ": " + ec.message());
  }
}

}  // namespace servelab

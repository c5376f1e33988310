// Loading a Llama's weights from a Hugging Face folder: model.safetensors, or the shards that
// model.safetensors.index.json maps every tensor to.
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "model/llama_model.h"
#include "model/safetensors_file.h"
#include "model/tensor_from_file.h"
#include "util/errors.h"

namespace fs = std::filesystem;

namespace servelab {

LlamaWeights load_llama_safetensors(const std::string& folder, const LlamaConfig& config, at::Device device,
                                    at::ScalarType dtype, const LlamaFetchHook& hook) {
  const fs::path root(folder);
  std::vector<SafetensorsFile> files;
  std::map<std::string, size_t> file_of;  // tensor name -> index into files
  const fs::path index = root / "model.safetensors.index.json";
  if (fs::exists(root / "model.safetensors")) {
    files.push_back(SafetensorsFile::open((root / "model.safetensors").string()));
    for (const StTensor& t : files.back().tensors()) file_of[t.name] = 0;
  } else if (fs::exists(index)) {
    nlohmann::json j;
    try {
      if (const std::string why = file_problem(index.string()); !why.empty())
        throw ModelFormatError(index.string() + ": " + why);
      std::ifstream in(index);
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw ModelFormatError(index.string() + ": not valid JSON: " + e.what());
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw ModelFormatError(index.string() + ": no \"weight_map\" object");
    std::map<std::string, size_t> shard_index;
    for (const auto& [name, shard] : j["weight_map"].items()) {
      if (!shard.is_string())
        throw ModelFormatError(index.string() + ": weight_map[\"" + name + "\"] is not a file name");
      const std::string s = shard.get<std::string>();
      if (s.find('/') != std::string::npos || s == "..")
        throw ModelFormatError(index.string() + ": shard \"" + s + "\" is not a file in the folder");
      auto [it, added] = shard_index.emplace(s, files.size());
      if (added) files.push_back(SafetensorsFile::open((root / s).string()));
      if (!files[it->second].find(name))
        throw ModelFormatError(index.string() + ": \"" + name + "\" is mapped to " + s + ", which lacks it");
      file_of[name] = it->second;
    }
  } else {
    throw ModelFormatError(folder + ": model.safetensors not found (nor model.safetensors.index.json)");
  }

  std::set<std::string> used;
  const LlamaTensorFetch from_file = [&](const std::string& name, const std::vector<int64_t>& shape,
                                         bool optional) -> at::Tensor {
    auto it = file_of.find(name);
    if (it == file_of.end()) {
      if (optional) return {};
      throw ModelFormatError(folder + ": missing tensor \"" + name + "\"");
    }
    const SafetensorsFile& f = files[it->second];
    const StTensor& t = f.at(name);
    if (t.shape != shape)
      throw ModelFormatError(f.path() + ": tensor \"" + name + "\" has shape " + shape_string(t.shape) +
                             ", expected " + shape_string(shape) + " from config.json");
    used.insert(name);
    return tensor_from_safetensors(t, f.path(), device, dtype);
  };
  LlamaWeights w = assemble_llama_weights(config, hook ? hook(config, from_file) : from_file);
  for (const auto& [name, i] : file_of) {
    // Rotary caches some exporters save are recomputed; anything else unknown is a model we do not know.
    if (used.count(name) || name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    throw ModelFormatError(files[i].path() + ": unexpected tensor \"" + name + "\" for a " +
                           config.model_type + " model with this config");
  }
  return w;
}

}  // namespace servelab

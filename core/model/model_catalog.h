#pragma once
// The models already on this computer: the Hugging Face cache, LM Studio's and Ollama's model
// folders and folders the user names, each model described from its headers (config.json, the
// safetensors header, the GGUF metadata) and judged loadable by check_loadable, so that
// "why not" is the message loading would give. No weights are read. Torch-free header: the Models
// dialog and `servelab-cli models` both use it.
#include <atomic>
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace servelab {

enum class ModelSource { HfCache, LmStudio, Ollama, Folder };

// "hf-cache", "lm-studio", "ollama", "folder" (the JSON's and the table's words).
const char* model_source_name(ModelSource source);

struct CatalogEntry {
  // "HuggingFaceTB/SmolLM2-135M-Instruct", "bartowski/Qwen2.5-0.5B-GGUF/qwen2.5-0.5b-q4_0.gguf",
  // "llama3.2:1b": what the source calls it.
  std::string name;
  ModelSource source = ModelSource::Folder;
  std::string root;          // the cache or folder scanned
  std::string path;          // what Engine::load takes: a model folder or a GGUF file (an Ollama blob)
  std::string architecture;  // config.json model_type or GGUF general.architecture; empty if unread
  std::string format;        // "safetensors" or "gguf"
  // A GGUF file's type (general.file_type, "Q4_K_M") or else its matrices' most common tensor type;
  // a folder's pre-quantized method ("gptq 4-bit"), else its weights' dtype of most bytes ("BF16"),
  // else config.json's torch_dtype.
  std::string quantization;
  std::uint64_t size_bytes = 0;  // the files that make up the model (symbolic links followed)
  bool loadable = false;
  std::string why_not;  // one line, empty when loadable

  nlohmann::json to_json() const;
};

struct CatalogRoots {
  std::string hf_cache;                // models--org--name/snapshots/<rev>/
  std::vector<std::string> lm_studio;  // <publisher>/<repo>/*.gguf
  std::string ollama;                  // manifests/<registry>/<namespace>/<name>/<tag> + blobs/
  std::vector<std::string> folders;    // searched for model folders and .gguf files
};

// The default roots from the environment: the Hugging Face Hub's cache as huggingface_hub finds it
// (util/hf_hub_cache.h); ~/.lmstudio/models and the older ~/.cache/lm-studio/models;
// OLLAMA_MODELS, else ~/.ollama/models. No folders of the user's.
CatalogRoots default_catalog_roots();

// What Engine::load checks before it reads any weights, with the same errors: the path's kind, a
// folder's config.json model_type (a registered one), its weights' files and its tokenizer; a GGUF
// file's header, tokenizer and general.architecture. Returns when those pass; the weights (and the
// config fields only an architecture's reader checks) are checked by loading. Defined in
// model/engine.cpp, beside the loads that share these checks.
void check_loadable(const std::string& path);

// What a scan says while it runs, and how to stop it: progress (when given) is called on the
// scanning thread after each model is found (and judged), with the number so far and its path; cancel
// (when given) is read before each folder is listed and each model judged, and once it is true the
// scan throws ScanCancelled. A window closed during a scan of a large disk stops it this way.
struct ScanControl {
  std::function<void(size_t found, const std::string& path)> progress;
  const std::atomic<bool>* cancel = nullptr;
};
struct ScanCancelled : std::runtime_error {
  ScanCancelled() : std::runtime_error("the search for models was cancelled") {}
};

// Every model under the roots, in root order and by name within each. A root that does not exist
// holds nothing, except a folder of the user's: InputError naming it. An entry that cannot be read
// is listed with the reason; the scan itself never fails on one. Symbolic links are followed, each
// folder once, to a bounded depth.
std::vector<CatalogEntry> scan_models(const CatalogRoots& roots, const ScanControl& control = {});

// The catalog as a table for people: one line per model, "why not" under the ones that do not load.
std::string catalog_table(const std::vector<CatalogEntry>& entries);

// "1.2 GB", "540 MB", "12 KB": sizes in the table and the Models dialog.
std::string human_size(std::uint64_t bytes);

}  // namespace servelab

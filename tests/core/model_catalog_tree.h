#pragma once
// A computer's models in miniature, for the catalog's suites (core, CLI, the Models dialog): a
// Hugging Face cache, an LM Studio folder, an Ollama store and a folder of the user's under one
// temporary root, with the tiny random GPT-2 folder and the built-in SmolLM2 GGUF (linked, not
// copied) as the models that load, and the ways a model fails: an unsupported model_type, a GPTQ
// checkpoint, a corrupt GGUF, an unsupported GGUF architecture, an Ollama manifest whose blob is gone, a
// dangling link and a link back up the tree.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "gguf_crafted.h"
#include "model/model_export.h"

namespace servelab::test {

struct CatalogTree {
  std::filesystem::path root;
  std::filesystem::path home() const { return root / "home"; }
  std::filesystem::path hub() const { return root / "hub"; }
  std::filesystem::path ollama() const { return root / "ollama"; }
  std::filesystem::path mine() const { return root / "mine"; }
  std::filesystem::path lm_studio() const { return home() / ".lmstudio" / "models"; }
  // The Hugging Face repository with refs/main and two snapshots; refs/main names "bbb".
  std::filesystem::path tiny_snapshot() const {
    return hub() / "models--org--tiny-gpt2" / "snapshots" / "bbb";
  }
  std::filesystem::path tiny_blobs() const { return hub() / "models--org--tiny-gpt2" / "blobs"; }
  // The repository without refs/main: its newer snapshot is "new".
  std::filesystem::path bert_snapshot() const {
    return hub() / "models--org--bert-tiny" / "snapshots" / "new";
  }
  std::filesystem::path gptq_snapshot() const {
    return hub() / "models--org--llama-gptq" / "snapshots" / "ccc";
  }
  std::filesystem::path lm_gguf() const {
    return lm_studio() / "bartowski" / "SmolLM2-GGUF" / "SmolLM2.Q4_1.gguf";
  }
  std::filesystem::path corrupt_gguf() const { return lm_studio() / "someone" / "broken" / "broken.gguf"; }
  std::filesystem::path ollama_blob() const {
    return ollama() / "blobs" / ("sha256-" + std::string(64, 'a'));
  }
  std::filesystem::path user_tiny() const { return mine() / "tiny"; }
  std::filesystem::path bert_gguf() const { return mine() / "deep" / "er" / "bert.gguf"; }
  std::filesystem::path dangling() const { return mine() / "dangling.gguf"; }

  // Points HOME, HF_HUB_CACHE and OLLAMA_MODELS at the tree (HF_HOME unset): the catalog's default
  // roots are then the tree's and nothing of the machine's.
  void use_as_environment() const {
    ::setenv("HOME", home().c_str(), 1);
    ::setenv("HF_HUB_CACHE", hub().c_str(), 1);
    ::setenv("OLLAMA_MODELS", ollama().c_str(), 1);
    ::unsetenv("HF_HOME");
  }
};

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// The tiny GPT-2 folder in `dir`, from $SERVELAB_SHARED's GPT-2 tokenizer when set.
inline void write_tiny_gpt2(const std::filesystem::path& dir) {
  const char* shared = std::getenv("SERVELAB_SHARED");
  export_random_gpt2_folder(dir.string(), tiny_gpt2_config(), 3,
                            shared && *shared ? std::string(shared) + "/data/gpt2" : std::string());
}

// Builds the tree under root (which exists and is empty); builtin_gguf: the built-in model's file.
inline CatalogTree make_catalog_tree(const std::filesystem::path& root,
                                     const std::filesystem::path& builtin_gguf) {
  namespace fs = std::filesystem;
  CatalogTree t{root};
  // Hugging Face: snapshot files are links into blobs/, as huggingface_hub writes them.
  const fs::path repo = t.hub() / "models--org--tiny-gpt2";
  write_tiny_gpt2(t.tiny_blobs());
  fs::create_directories(t.tiny_snapshot());
  for (const fs::directory_entry& f : fs::directory_iterator(t.tiny_blobs()))
    fs::create_symlink(fs::path("../../blobs") / f.path().filename(),
                       t.tiny_snapshot() / f.path().filename());
  write_text(repo / "snapshots" / "aaa" / "config.json", R"({"model_type": "t5"})");
  write_text(repo / "refs" / "main", "bbb\n");
  const fs::path bert = t.hub() / "models--org--bert-tiny" / "snapshots";
  write_text(bert / "old" / "config.json", R"({"model_type": "t5"})");
  write_text(bert / "new" / "config.json", R"({"model_type": "bert", "torch_dtype": "float32"})");
  write_text(bert / "new" / "model.safetensors", "weights, never read");
  fs::last_write_time(bert / "old", fs::last_write_time(bert / "new") - std::chrono::hours(24));
  // A GPTQ checkpoint: a llama by model_type, its matrices packed under other names.
  write_tiny_gpt2(t.gptq_snapshot());
  write_text(t.gptq_snapshot() / "config.json",
             R"({"model_type": "llama", "quantization_config": {"quant_method": "gptq", "bits": 4}})");
  write_text(t.hub() / "models--org--llama-gptq" / "refs" / "main", "ccc");
  // LM Studio: the built-in GGUF by a link, and a file that only starts like a GGUF.
  fs::create_directories(t.lm_gguf().parent_path());
  fs::create_symlink(builtin_gguf, t.lm_gguf());
  write_text(t.corrupt_gguf(), "GGUF\x03");
  // Ollama: smollm2:135m's model layer is the built-in GGUF; gone:latest names a missing blob.
  fs::create_directories(t.ollama_blob().parent_path());
  fs::create_symlink(builtin_gguf, t.ollama_blob());
  const std::string layer = R"({"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:)";
  write_text(t.ollama() / "manifests" / "registry.ollama.ai" / "library" / "smollm2" / "135m",
             R"({"schemaVersion": 2, "layers": [{"mediaType": "application/vnd.ollama.image.template", )"
             R"("digest": "sha256:0"}, )" +
                 layer + std::string(64, 'a') + R"("}]})");
  write_text(t.ollama() / "manifests" / "registry.ollama.ai" / "someone" / "gone" / "latest",
             R"({"layers": [)" + layer + std::string(64, 'b') + R"("}]})");
  // The user's folder: a model folder, a GGUF of an architecture no record loads (Q8_0 by
  // general.file_type), a dangling link and a link back to the folder itself.
  write_tiny_gpt2(t.user_tiny());
  {
    // Its config claims bf16 while its weights are stored in fp32: the catalog reports what is stored.
    std::ifstream in(t.user_tiny() / "config.json");
    nlohmann::json config = nlohmann::json::parse(in);
    config["torch_dtype"] = "bfloat16";
    write_text(t.user_tiny() / "config.json", config.dump(2));
  }
  Crafted bert_gguf;
  bert_gguf.kvs = {kv_str("general.architecture", "bert"), kv_u32("general.file_type", 7)};
  fs::create_directories(t.bert_gguf().parent_path());
  write_bytes(t.bert_gguf().string(), bert_gguf.bytes());
  fs::create_symlink(t.mine() / "no-such-file.gguf", t.dangling());
  fs::create_symlink(t.mine(), t.mine() / "deep" / "loop");
  fs::create_directories(t.home());
  return t;
}

// The suites' tree: under root, with the built-in model, as the environment. Where the built-in
// model is not installed (the GPU machine carries no such file) the suites skip, saying this.
inline const char* const kNoBuiltinModel = "the built-in SmolLM2 GGUF is not installed (scripts/bootstrap)";
inline bool have_builtin_model() { return std::filesystem::exists(SERVELAB_BUILTIN_MODEL); }
inline CatalogTree catalog_environment(const std::filesystem::path& root) {
  CatalogTree t = make_catalog_tree(root, SERVELAB_BUILTIN_MODEL);
  t.use_as_environment();
  return t;
}

}  // namespace servelab::test

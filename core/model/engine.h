#pragma once
// The engine a face talks to: one model, its tokenizer, a device and a dtype. Torch-free header:
// the GUI includes it (the model itself stays behind a forward declaration).
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model_shape.h"
#include "quant/quant_spec.h"
#include "tokenizer/tokenizer.h"

namespace servelab {

class Model;             // model/model.h (which brings in libtorch)
class GgufFile;          // model/gguf_file.h
enum class GemmBackend;  // model/packed_linear.h (which brings in libtorch)

struct EngineOptions {
  std::string device = "cpu";
  std::string dtype = "fp32";
  int threads = 0;  // 0: leave libtorch's default
  std::uint64_t demo_seed = 1234;
  // Quantize the weights right after loading (quant_spec.h names); "none" keeps them as loaded.
  std::string quant = "none";
  std::string quant_exec = "auto";
  // fp32 GEMMs: "aten" (addmm), "onednn" (prepacked weights, CPU fp32), "blocked" (our kernels
  // over 16-channel blocks, CPU fp32), "auto" (blocked where active_isa() is avx512 or avx2, else
  // onednn where it exists).
  std::string gemm = "auto";
  // CUDA graphs for decode steps on a GPU (model/decode_graphs.h), captured for batch buckets up
  // to cuda_graph_max_batch; ignored on the CPU.
  bool cuda_graphs = true;
  int cuda_graph_max_batch = 128;
  // A CPU decode step as one fused program per step (model/llama_decode_program.h) where the
  // architecture has one; off runs every step op by op.
  bool fused_decode = true;
};

class Engine {
 public:
  // The built-in model: SmolLM2-135M-Instruct, the Q4_1 GGUF that scripts/bootstrap installs
  // (default_model_path()).
  static std::unique_ptr<Engine> load_builtin(const EngineOptions& options);
  // A Hugging Face folder or a .gguf file.
  static std::unique_ptr<Engine> load(const std::string& path, const EngineOptions& options);
  // A GGUF file of a registered general.architecture (model/architecture.h): config, weights and
  // tokenizer from the file.
  static std::unique_ptr<Engine> load_gguf(const std::string& path, const EngineOptions& options);
  // GPT-2 small shape with seeded random weights and the real GPT-2 tokenizer (from
  // tokenizer_dir, or default_tokenizer_dir() when empty): the course's exact tensors and GPT-2
  // timings; its text is noise.
  static std::unique_ptr<Engine> load_demo(const EngineOptions& options,
                                           const std::string& tokenizer_dir = "");
  // A Hugging Face folder: config.json (a model_type the registry knows: gpt2, llama, mistral,
  // qwen2, qwen3), the safetensors weights (sharded too, where the architecture allows) and the
  // tokenizer files.
  static std::unique_ptr<Engine> load_folder(const std::string& dir, const EngineOptions& options);

  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Replaces the model by its quantized form (the fp32 matrices are released). Once only.
  void quantize(const QuantSpec& spec);
  // The scheme and the execution it resolved to; scheme None when the weights are as loaded.
  const QuantSpec& quantization() const { return quant_; }

  const Model& model() const { return *model_; }
  // The model in its dtype with every weight to hand (the Quantization tab's reference): the model
  // itself when it holds them (plain, or in a GEMM layout that gives them back: dense_weights()),
  // else a copy rebuilt from its file (a GGUF run as stored: the file's blocks dequantized, run by
  // the blocked fp32 kernels where --gemm auto picks them). Null when neither can be had (a model
  // quantized by --quant: load it again without).
  std::shared_ptr<const Model> dense_reference() const;
  Model& model() { return *model_; }
  // Speculative decoding's default draft (--draft-model int4), a cheaper copy of this model, with
  // the target it drafts for. A GGUF whose quantized blocks run as stored (the built-in model): the
  // target is the file dequantized once (dense_reference()) and the draft is the model as loaded,
  // verifying the blocks against the weights they came from; a dense model: the target is the model
  // and the draft its int4-group quantization (group 32, JIT), as gpt-fast drafts. InputError for a
  // model quantized by --quant (no dense target left).
  struct DraftPair {
    std::shared_ptr<const Model> target, draft;
    std::string description;
  };
  DraftPair int4_draft_pair() const;
  const ModelShape& shape() const;
  // The model as its class (Gpt2Model, LlamaModel; include its header): InputError naming the
  // loaded architecture when it is another.
  template <class M>
  const M& model_as() const {
    if (const M* m = dynamic_cast<const M*>(model_.get())) return *m;
    throw_not_model_class();
  }
  int64_t dtype_bytes() const;  // bytes per element of the weights and KV cache
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  bool is_demo() const { return is_demo_; }
  // Whether this is the built-in model's file (model/builtin_model.h), decided once at load.
  bool is_builtin() const { return is_builtin_; }
  const std::string& name() const { return name_; }
  // What the faces print beside any generated text.
  std::string text_caveat() const;
  nlohmann::json info() const;
  // Whether activations are rounded at run time, so that a cache-free pass and a cached step may
  // part: jit-int8 quantizes each row per 32 columns, native int8 on the CPU casts them to bf16;
  // the two passes' different orders of summation (attention over a prefix) can round a value the
  // other way.
  bool activations_quantized_per_call() const;

 private:
  Engine() = default;
  void apply_options(const EngineOptions& options);
  [[noreturn]] void throw_not_model_class() const;
  // What every GGUF load ends with: format, name, tensor types, then the options.
  void finish_gguf(const GgufFile& file, const EngineOptions& options);
  std::shared_ptr<Model> model_;
  bool int8_activations_ = false;  // --quant-exec jit-int8 in effect
  std::string source_path_;        // the file or folder loaded (empty for the demo model)
  std::unique_ptr<Tokenizer> tokenizer_;
  bool is_demo_ = false;
  bool is_builtin_ = false;
  std::string format_;  // "random", "safetensors" or "gguf"
  std::string name_;
  QuantSpec quant_;
  // The fp32 GEMM backend resolved at load (Aten, OneDnn or Blocked; packed_linear.h): fp32 models,
  // dequantize-once ones included, run it. Value-initialised: Aten.
  GemmBackend gemm_{};
  std::string quant_kernel_;
  // What the file holds, per ggml type ("Q4_1" -> 210), for a GGUF; and how those run here.
  std::map<std::string, int64_t> file_tensor_types_;
  std::string file_tensors_run_as_;
  int64_t parameters_ = 0;
};

// Where the built-in model's GPT-2 tokenizer is: $SERVELAB_TOKENIZER_DIR, else gpt2/ in the first
// data_dirs() entry that has it (util/data_paths.h: beside the binary, then XDG), else the folder
// scripts/bootstrap filled (compiled in; not in packaged builds). Throws TokenizerError when none has
// the files.
std::string default_tokenizer_dir();
// Where the built-in model's GGUF is: $SERVELAB_MODEL, else models/<name> in the first data_dirs()
// entry that has it, else the file scripts/bootstrap linked (compiled in; not in packaged builds).
// Throws ModelFormatError saying where it looked when none exists.
std::string default_model_path();

// Applies the thread count (0 = keep) to libtorch's intra-op pool.
void set_engine_threads(int threads);
// libtorch's intra-op thread count now.
int engine_threads();
// "cpu", plus "cuda" when libtorch sees a CUDA device.
std::vector<std::string> available_devices();

}  // namespace servelab

#pragma once
// The architecture registry: one record per architecture (llama.cpp's src/models/*.cpp, vLLM's
// model registry) holding everything that differs between them: the names its files give it, its
// projection table, how a folder or a GGUF file becomes a model (config reader, weight fix-ups,
// the wiring of the shared layers), and how its model is quantized and handed to the packed fp32
// GEMMs. The engine, LoRA, the quantization experiment and `info` look a model's record up and
// never name an architecture. Adding one: its file(s) and one line in architecture.cpp's list
// (docs/howto/add-a-model.md).
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/packed_linear.h"
#include "quant/quant_spec.h"
#include "quant/quantized_model.h"

namespace servelab {

class GgufFile;  // model/gguf_file.h

// The quantization experiment's side of an architecture (experiments/quantization.h): the reference's
// parameters as plain tensors, and per scheme the quantized parameters (one per named entry, same
// order) and the model that runs them.
struct QuantizedSet {
  std::vector<QuantizedParameter> parameters;
  std::function<std::unique_ptr<Model>(QuantExec)> build;
};
struct QuantTarget {
  std::vector<std::pair<std::string, at::Tensor>> named;
  std::function<QuantizedSet(const QuantSpec&)> quantize;
  int64_t hf_buffer_bytes = 0;  // what HF's get_memory_footprint() adds besides the parameters
};

struct Architecture {
  std::string name;     // ModelShape::architecture: "gpt2", "llama", ...
  std::string display;  // in messages: "GPT-2", "Llama"
  // config.json model_type values and GGUF general.architecture values this record loads.
  std::vector<std::string> model_types;
  std::vector<std::string> gguf_architectures;
  // Where Hugging Face (and PEFT's keys and target_modules) put the blocks: block N is
  // hf_root + hf_blocks + "N." ("transformer." "h.", "model." "layers.").
  std::string hf_root, hf_blocks;
  // The projection table's slots and names (sizes 0: they depend on the config).
  std::vector<Projection> projection_names;
  // The fused matrices of its Hugging Face checkpoints (PEFT adapters name them), if any.
  std::vector<FusedModule> fused_modules;
  // Whether a folder may hold its weights as shards (model.safetensors.index.json).
  bool sharded_folders = false;

  // A Hugging Face folder (config.json + safetensors) as a model on device in dtype.
  std::function<std::unique_ptr<Model>(const std::string& dir, at::Device device, at::ScalarType dtype)>
      load_folder;
  // A GGUF file with every tensor dequantized once to dtype.
  std::function<std::unique_ptr<Model>(const GgufFile& file, at::Device device, at::ScalarType dtype)>
      load_gguf;
  // A GGUF file whose blocks run as stored (CPU, fp32 activations); run_as gets one line for
  // `info`. Empty where the kernels are not wired for this architecture: its files then load
  // dequantized once.
  std::function<std::unique_ptr<Model>(const GgufFile& file, std::string* run_as, bool int8_activations)>
      load_gguf_as_stored;
  // What multiplies its plain matrices (`info`'s gemm): "aten linear", "aten addmm".
  std::string plain_gemm = "aten linear";
  // Whether --gemm onednn (and auto's fallback to it) is offered for its matrices; the packed
  // GEMMs themselves take any model's matrices (Model::with_kernels, with_gemm_backend).
  bool onednn_gemm = false;
  // Whether a model quantized with --quant-exec dequant-once keeps the fp32 GEMM backend resolved
  // at load (GPT-2's packed layouts do).
  bool dequantized_keeps_gemm = false;
  // The model quantized in spec (exec resolved); gemm: the fp32 backend resolved at load.
  std::function<std::unique_ptr<Model>(const Model& model, const QuantSpec& spec, GemmBackend gemm)> quantize;
  // The quantization experiment's view of a reference model of this architecture.
  std::function<QuantTarget(const Model& reference)> quant_target;
  // The built-in demo model (Engine::load_demo: a shape with seeded random weights) and its name;
  // empty for every record but one.
  std::function<std::unique_ptr<Model>(std::uint64_t seed, at::Device device, at::ScalarType dtype)>
      make_demo;
  std::string demo_name;
};

// Every registered architecture, in registration order.
const std::vector<Architecture>& architectures();
// The record called `name` (ModelShape::architecture); InputError when none.
const Architecture& architecture_named(const std::string& name);
// The record of a loaded model (by ModelShape::architecture); InputError when none (never for a
// model this registry built).
const Architecture& architecture_of(const Model& model);
// The record loading a config.json model_type; ModelFormatError naming `source`, the type and the
// supported ones when none does.
const Architecture& architecture_for_model_type(const std::string& model_type, const std::string& source);
// The record loading a Hugging Face config.json (its path): by its model_type, ModelFormatError
// naming the file when it has none or one no record loads.
const Architecture& architecture_for_config(const std::string& config_json);
// The record loading a GGUF general.architecture; ModelFormatError likewise.
const Architecture& architecture_for_gguf(const std::string& gguf_architecture, const std::string& source);
// "gpt2, llama, mistral, ...": every model_type (or GGUF name) some record loads.
std::string supported_model_types();
std::string supported_gguf_architectures();

}  // namespace servelab

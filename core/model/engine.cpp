#include "model/engine.h"

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "lora/builtin_adapters.h"
#include "model/architecture.h"
#include "model/blocked_linear.h"
#include "model/builtin_model.h"
#include "model/decode_attention.h"
#include "model/decode_graphs.h"
#include "model/gguf_file.h"
#include "model/llama_config.h"   // read_llama_family_json
#include "model/model_catalog.h"  // check_loadable
#include "model/packed_linear.h"
#include "quant/dequant_cpu.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/gguf_tokenizer.h"
#include "util/cpu_features.h"
#include "util/data_paths.h"
#include "util/device.h"
#include "util/errors.h"
#include "util/limits.h"
#include "util/openmp_wait.h"

namespace fs = std::filesystem;

namespace servelab {

namespace {

// The build tree's copy of a data file (scripts/bootstrap's, compiled in), searched after
// data_dirs() where build_tree_data_allowed().
std::string build_tree_copy(const std::string& compiled_in) {
  std::error_code ec;
  return build_tree_data_allowed() && fs::exists(compiled_in, ec) ? compiled_in : "";
}

std::string looked_in(const std::string& compiled_in) {
  return data_dirs_text() + (build_tree_data_allowed() ? ", " + compiled_in : std::string());
}

}  // namespace

// The built-in model's data: $SERVELAB_MODEL / $SERVELAB_TOKENIZER_DIR, else the first
// data_dirs() entry that holds it (next to the binary, XDG_DATA_HOME, XDG_DATA_DIRS), else the
// build tree's copy scripts/bootstrap made.
std::string default_tokenizer_dir() {
  const auto has_files = [](const fs::path& dir) {
    return fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt");
  };
  // $SERVELAB_TOKENIZER_DIR when it has the files (the suites point it at the shared data).
  if (const char* env = std::getenv("SERVELAB_TOKENIZER_DIR"); env && *env && has_files(env)) return env;
  if (const fs::path dir = find_data_dir({"gpt2/vocab.json", "gpt2/merges.txt"}); !dir.empty())
    return (dir / "gpt2").string();
  const std::string built = build_tree_copy(SERVELAB_DEFAULT_TOKENIZER_DIR);
  if (!built.empty() && has_files(built)) return built;
  throw TokenizerError("GPT-2 tokenizer for the built-in model not found (looked for gpt2/ in " +
                       looked_in(SERVELAB_DEFAULT_TOKENIZER_DIR) +
                       "); run scripts/bootstrap or set SERVELAB_TOKENIZER_DIR");
}

std::string default_model_path() {
  if (const char* env = std::getenv("SERVELAB_MODEL"); env && *env) {
    if (!fs::exists(env))
      throw ModelFormatError(std::string("SERVELAB_MODEL names ") + env + ", which does not exist");
    return env;
  }
  const std::string name = fs::path(SERVELAB_BUILTIN_MODEL).filename().string();
  if (const fs::path dir = find_data_dir({"models/" + name}); !dir.empty())
    return (dir / "models" / name).string();
  if (const std::string built = build_tree_copy(SERVELAB_BUILTIN_MODEL); !built.empty()) return built;
  throw ModelFormatError("the built-in model (" + name + ") was not found (looked for models/" + name +
                         " in " + looked_in(SERVELAB_BUILTIN_MODEL) +
                         "); run scripts/bootstrap, or set SERVELAB_MODEL");
}

void set_engine_threads(int threads) {
  route_libtorch_warnings();  // every load passes here first
  // Each libtorch thread reserves its own stacks and arenas: 10,000 of them take gigabytes.
  limits::check_range("threads", threads, 0, limits::max_threads());
  if (threads > 0) at::set_num_threads(threads);
}

std::unique_ptr<Engine> Engine::load_demo(const EngineOptions& o, const std::string& tokenizer_dir) {
  const at::Device device = parse_device(o.device);
  const at::ScalarType dtype = parse_dtype(o.dtype);
  set_engine_threads(o.threads);
  std::unique_ptr<Engine> e(new Engine());
  e->tokenizer_ = load_tokenizer(tokenizer_dir.empty() ? default_tokenizer_dir() : tokenizer_dir);
  c10::InferenceMode guard;
  // The demo is the one record that builds one (the course's shape with seeded random weights).
  const auto& all = architectures();
  const auto demo =
      std::find_if(all.begin(), all.end(), [](const Architecture& a) { return bool(a.make_demo); });
  if (demo == all.end()) throw InputError("no registered architecture builds a demo model");
  e->model_ = demo->make_demo(o.demo_seed, device, dtype);
  e->is_demo_ = true;
  e->format_ = "random";
  e->name_ = demo->demo_name;
  e->parameters_ = e->model_->parameter_count();
  e->apply_options(o);
  return e;
}

namespace {

// What load_folder checks before it reads any weights (check_loadable shares it, so that the
// Models list says why not in the words loading would): the folder, its config.json's
// model_type and where the weights are. Returns the record that loads it.
const Architecture& checked_folder(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::exists(root)) throw ModelFormatError("model folder " + dir + " not found");
  if (!fs::is_directory(root))
    throw ModelFormatError(dir + " is not a folder (give a Hugging Face model folder or a .gguf file)");
  for (const char* name : {"config.json", "model.safetensors"}) {
    const std::string why = file_problem((root / name).string());
    if (!why.empty() && why != "not found") throw ModelFormatError((root / name).string() + ": " + why);
  }
  const fs::path weights = root / "model.safetensors";
  const std::string config_json = (root / "config.json").string();
  // The record that loads the folder's model_type (ModelFormatError naming the supported ones).
  auto architecture = [&]() -> const Architecture& { return architecture_for_config(config_json); };
  // A config.json that cannot be read is the first thing to say, before what the weights lack.
  if (fs::exists(config_json)) architecture();
  const bool sharded = fs::exists(root / "model.safetensors.index.json") && fs::exists(config_json) &&
                       architecture().sharded_folders;
  if (!fs::exists(weights) && !sharded) {
    if (fs::exists(root / "pytorch_model.bin"))
      throw ModelFormatError(dir +
                             ": only model.safetensors is supported, found pytorch_model.bin "
                             "(convert it with transformers' save_pretrained(safe_serialization=True))");
    if (fs::exists(root / "model.safetensors.index.json"))
      throw ModelFormatError(dir + ": sharded checkpoints (model.safetensors.index.json) are not supported");
    throw ModelFormatError(dir + ": model.safetensors not found");
  }
  const Architecture& arch = architecture();
  // A pre-quantized checkpoint (GPTQ, AWQ, bitsandbytes, FP8, ...) keeps packed matrices under other
  // names: the load's first complaint would be a missing weight, so it is named here instead.
  std::string file;
  const nlohmann::json config = read_llama_family_json(config_json, &file);
  if (config.is_object() && config.contains("quantization_config")) {
    const nlohmann::json& q = config["quantization_config"];
    const std::string method = q.is_object() && q.contains("quant_method") && q["quant_method"].is_string()
                                   ? q["quant_method"].get<std::string>()
                                   : std::string("unnamed");
    throw ModelFormatError("config.json at " + file + ": a pre-quantized checkpoint (quantization_config, " +
                           "quant_method \"" + method +
                           "\") is not supported; load the unquantized model (and --quant) or a GGUF file");
  }
  return arch;
}

// What load_gguf checks before it reads any weights, in its order: the tokenizer (kept), the
// embedding's rows against it, and the record that loads general.architecture.
struct CheckedGguf {
  std::unique_ptr<Tokenizer> tokenizer;
  const Architecture* architecture;
};
CheckedGguf checked_gguf(const GgufFile& file) {
  CheckedGguf c;
  const std::string& path = file.path();
  c.tokenizer = load_gguf_tokenizer(file);
  const int64_t vocabulary_rows = file.at("token_embd.weight").shape().front();
  if (c.tokenizer->vocab_size() > vocabulary_rows)
    throw ModelFormatError(path + ": the tokenizer has " + std::to_string(c.tokenizer->vocab_size()) +
                           " tokens but token_embd.weight only " + std::to_string(vocabulary_rows) + " rows");
  // get_string throws, naming the file, when the key is missing or not a string.
  c.architecture = &architecture_for_gguf(file.get_string("general.architecture"), path);
  if (!c.architecture->load_gguf)
    throw ModelFormatError(path + ": " + c.architecture->display + " GGUF files do not load yet");
  return c;
}

// Whether the file starts with GGUF's magic: Ollama keeps its GGUF files as blobs/sha256-<hex>,
// without the extension.
bool has_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, sizeof magic) && std::string(magic, sizeof magic) == "GGUF";
}

// Whether `path` is a GGUF file (true) or names a folder (false); ModelFormatError for a file that is
// neither a .gguf nor starts like one, and for a .gguf that does not exist.
bool is_gguf_path(const std::string& path) {
  if (fs::is_regular_file(path)) {
    if (fs::path(path).extension() != ".gguf" && !has_gguf_magic(path))
      throw ModelFormatError(path +
                             " is a file but not a .gguf; give a GGUF file or a Hugging Face model folder");
    return true;
  }
  if (!fs::exists(path) && fs::path(path).extension() == ".gguf")
    throw ModelFormatError(path + ": not found (a GGUF file)");
  return false;
}

}  // namespace

std::unique_ptr<Engine> Engine::load_folder(const std::string& dir, const EngineOptions& o) {
  const at::Device device = parse_device(o.device);
  const at::ScalarType dtype = parse_dtype(o.dtype);
  set_engine_threads(o.threads);
  const Architecture& arch = checked_folder(dir);
  const fs::path root(dir);
  const fs::path weights = root / "model.safetensors";
  std::unique_ptr<Engine> e(new Engine());
  {
    c10::InferenceMode guard;
    try {
      e->model_ = arch.load_folder(dir, device, dtype);
    } catch (const c10::OutOfMemoryError&) {
      throw OutOfMemoryError("out of memory loading " + weights.string() + " onto " + device.str());
    }
  }
  // Where shards may hold the weights, the folder names them.
  check_finite_tensors(e->model_->named_tensors(), arch.sharded_folders ? dir : weights.string());
  e->tokenizer_ = load_tokenizer(dir);
  if (e->tokenizer_->vocab_size() > e->shape().vocab_size)
    throw ModelFormatError(dir + ": tokenizer has " + std::to_string(e->tokenizer_->vocab_size()) +
                           " tokens but config.json vocab_size is " + std::to_string(e->shape().vocab_size));
  e->format_ = "safetensors";
  e->name_ = root.filename().empty() ? root.parent_path().filename().string() : root.filename().string();
  e->parameters_ = e->model_->parameter_count();
  e->apply_options(o);
  return e;
}

namespace {

// Whether path is the built-in model's file (default_model_path()), however it is spelled.
bool builtin_model_file(const std::string& path) {
  if (path.empty()) return false;
  std::string builtin;
  try {
    builtin = default_model_path();
  } catch (const std::exception&) {
    return false;  // no built-in model on this computer
  }
  std::error_code ec;
  const bool same = fs::equivalent(path, builtin, ec);
  return !ec && same;
}

}  // namespace

bool is_builtin_model(const Engine& engine) { return engine.is_builtin(); }

std::unique_ptr<Engine> Engine::load_builtin(const EngineOptions& o) {
  return load_gguf(default_model_path(), o);
}

std::unique_ptr<Engine> Engine::load(const std::string& path, const EngineOptions& o) {
  return is_gguf_path(path) ? load_gguf(path, o) : load_folder(path, o);
}

void check_loadable(const std::string& path) {
  if (is_gguf_path(path)) {
    checked_gguf(GgufFile::open(path));
    return;
  }
  checked_folder(path);
  load_tokenizer(path);
}

std::unique_ptr<Engine> Engine::load_gguf(const std::string& path, const EngineOptions& o) {
  const at::Device device = parse_device(o.device);
  const at::ScalarType dtype = parse_dtype(o.dtype);
  set_engine_threads(o.threads);
  const GgufFile file = GgufFile::open(path);
  std::unique_ptr<Engine> e(new Engine());
  CheckedGguf checked = checked_gguf(file);
  e->tokenizer_ = std::move(checked.tokenizer);
  const Architecture& arch = *checked.architecture;
  const bool requantize = parse_quant_mode(o.quant).is_quantized();
  const QuantExec exec = parse_quant_exec(o.quant_exec);
  const bool cpu_fp32 = device.is_cpu() && dtype == at::kFloat;
  // The file's quantized blocks run as stored (our JIT kernels read Q4_0, Q4_1, Q5_0, Q8_0, Q4_K
  // and Q6_K as repacked groups) where the architecture's record wires them, unless a quantization of our own
  // is asked for (it starts from dense weights) or the execution says dequant-once; on the CPU in fp32, where
  // those kernels are built.
  bool as_stored = false;
  if (!arch.load_gguf_as_stored) {
    if (!requantize && exec == QuantExec::Native)
      throw InputError("--quant-exec native needs --quant: a GGUF file's own blocks run dequantized once");
  } else {
    if (!requantize && exec == QuantExec::Native)
      throw InputError(
          "--quant-exec native needs --quant: a GGUF file's own blocks run with jit or jit-int8 (as "
          "stored) or dequant-once");
    if (!requantize && (exec == QuantExec::Jit || exec == QuantExec::JitInt8) && !cpu_fp32)
      throw InputError(
          "a GGUF file's blocks run as stored (--quant-exec jit or jit-int8) on the CPU in fp32 only; give "
          "--quant-exec dequant-once for " +
          device.str() + " " + dtype_label(dtype));
    as_stored = !requantize && cpu_fp32 && exec != QuantExec::DequantOnce;
  }
  {
    c10::InferenceMode guard;
    try {
      if (as_stored) {
        e->model_ = arch.load_gguf_as_stored(file, &e->file_tensors_run_as_, exec == QuantExec::JitInt8);
        e->int8_activations_ = exec == QuantExec::JitInt8;
      } else {
        e->model_ = arch.load_gguf(file, device, dtype);
        e->file_tensors_run_as_ =
            "dequantized once to " + dtype_label(dtype) + " at load" +
            (arch.load_gguf_as_stored ? std::string()
                                      : " (" + arch.display + " files' blocks do not run as stored yet)");
      }
    } catch (const c10::OutOfMemoryError&) {
      throw OutOfMemoryError("out of memory loading " + path + " onto " + device.str());
    }
  }
  check_finite_tensors(e->model_->named_tensors(), path);
  e->finish_gguf(file, o);
  return e;
}

void Engine::finish_gguf(const GgufFile& file, const EngineOptions& o) {
  format_ = "gguf";
  source_path_ = file.path();
  is_builtin_ = builtin_model_file(source_path_);
  file_tensor_types_ = gguf_tensor_type_counts(file);
  // The file's own name says what it is ("SmolLM2-135M-Instruct.Q4_1"); general.name is often a
  // training-run label, but better than the digest an Ollama blob is named by.
  const fs::path path(file.path());
  name_ = path.extension() == ".gguf" ? path.stem().string()
                                      : file.find_string("general.name").value_or(path.filename().string());
  parameters_ = model_->parameter_count();
  apply_options(o);
}

Engine::~Engine() = default;

void Engine::apply_options(const EngineOptions& o) {
  limits::check_range("CUDA graph max batch", static_cast<int64_t>(o.cuda_graph_max_batch), int64_t{1},
                      int64_t{4096});
  model_->set_cuda_graphs(o.cuda_graphs, o.cuda_graph_max_batch);
  model_->set_fused_decode(o.fused_decode);
  QuantSpec spec = parse_quant_mode(o.quant);
  spec.exec = parse_quant_exec(o.quant_exec);
  const GemmBackend requested = parse_gemm_backend(o.gemm);
  const Architecture& arch = architecture_of(*model_);
  // Plain fp32 matrices, as loaded, that no quantization replaces: what the packed GEMMs take.
  const bool plain = !model_->kernels() && !spec.is_quantized();
  // The GEMM a model quantized later keeps, where its record says so (dequantize-once models then
  // run the packed fp32 GEMMs).
  const bool gemm_applies = plain || arch.dequantized_keeps_gemm;
  if ((requested == GemmBackend::OneDnn && !arch.onednn_gemm) ||
      (requested == GemmBackend::Blocked && !gemm_applies))
    throw InputError(std::string("--gemm ") + gemm_backend_name(requested) + " is not built for this " +
                     model_->shape().architecture +
                     " model (onednn: " + (arch.onednn_gemm ? "yes" : "not for " + arch.display) +
                     "; blocked: a model's plain fp32 matrices" +
                     (arch.dequantized_keeps_gemm ? "" : ", not quantized ones") +
                     "); give --gemm auto or aten");
  GemmBackend gemm =
      gemm_applies ? resolve_gemm_backend(requested, model_->device(), model_->dtype()) : GemmBackend::Aten;
  if (gemm == GemmBackend::OneDnn && !arch.onednn_gemm) gemm = GemmBackend::Aten;  // auto's fallback
  gemm_ = gemm;
  if (spec.is_quantized()) {
    quantize(spec);
  } else if (gemm != GemmBackend::Aten) {
    c10::InferenceMode guard;
    model_ = with_gemm_backend(*model_, gemm);
  }
}

void Engine::throw_not_model_class() const {
  throw InputError("this needs another architecture; the loaded model is " + model_->shape().architecture);
}

void Engine::quantize(const QuantSpec& spec) {
  if (!spec.is_quantized()) return;
  if (quant_.is_quantized())
    throw InputError("the model is already quantized (" + quant_.mode_name() + "); load it again to change");
  if (model_->kernels() && !model_->kernels()->holds_dense_weights())
    throw InputError(
        "this model runs its file's quantized blocks as stored; load it with --quant-exec "
        "dequant-once to quantize it to " +
        spec.mode_name());
  c10::InferenceMode guard;
  QuantSpec resolved = spec;
  resolved.exec = resolve_quant_exec(spec, model_->device());
  try {
    std::unique_ptr<Model> m = architecture_of(*model_).quantize(*model_, resolved, gemm_);
    m->inherit_run_settings(*model_);
    m->set_weight_quantization(resolved);
    model_ = std::move(m);
  } catch (const c10::OutOfMemoryError&) {
    throw OutOfMemoryError("out of memory quantizing the model to " + spec.mode_name());
  }
  quant_ = resolved;
  int8_activations_ = resolved.exec == QuantExec::JitInt8;
  quant_kernel_ = model_->kernels() ? model_->kernels()->description()
                                    : "dequantized once to " + dtype_label(model_->dtype());
}

const ModelShape& Engine::shape() const { return model_->shape(); }

std::shared_ptr<const Model> Engine::dense_reference() const {
  if (quant_.is_quantized()) return nullptr;
  // Plain matrices, or packed layouts that give them back (dense_weights()).
  if (!model_->kernels() || model_->kernels()->holds_dense_weights()) return model_;
  if (format_ != "gguf") return nullptr;
  const Architecture& arch = architecture_of(*model_);
  c10::InferenceMode guard;
  const GgufFile file = GgufFile::open(source_path_);
  std::unique_ptr<Model> m = arch.load_gguf(file, model_->device(), model_->dtype());
  m->inherit_run_settings(*model_);
  // The fp32 reference times with the fp32 kernels a model loaded dequantized gets (--gemm auto), or
  // every mode's speed-up over it would count aten's slower GEMV as the quantization's gain.
  if (resolve_gemm_backend(GemmBackend::Auto, model_->device(), model_->dtype()) == GemmBackend::Blocked)
    m = pack_blocked_model(*m);
  return m;
}

Engine::DraftPair Engine::int4_draft_pair() const {
  if (quant_.is_quantized())
    throw InputError(
        "--draft-model int4 drafts with a cheaper copy of a dense model, and this one is quantized (" +
        quant_.mode_name() + "): load it without --quant, or give --draft-model PATH");
  if (model_->kernels() && !model_->kernels()->holds_dense_weights()) {
    std::shared_ptr<const Model> dense = dense_reference();
    if (!dense)
      throw InputError("--draft-model int4: this model's dense weights cannot be rebuilt from its file");
    return {dense, model_,
            "target: the file dequantized once to " + dtype_label(model_->dtype()) +
                "; draft: its quantized blocks as stored (" + file_tensors_run_as_ + ")"};
  }
  c10::InferenceMode guard;
  QuantSpec spec = parse_quant_mode("int4-g32");
  spec.exec = QuantExec::Jit;
  spec.exec = resolve_quant_exec(spec, model_->device());
  std::shared_ptr<Model> draft = architecture_of(*model_).quantize(*model_, spec, gemm_);
  draft->inherit_run_settings(*model_);
  return {model_, draft,
          "target: the model as loaded; draft: its int4-g32 copy (" +
              std::string(quant_exec_name(spec.exec)) + ")"};
}

int64_t Engine::dtype_bytes() const { return static_cast<int64_t>(c10::elementSize(model_->dtype())); }

int engine_threads() { return at::get_num_threads(); }

std::vector<std::string> available_devices() {
  std::vector<std::string> d{"cpu"};
  if (cuda_available()) d.emplace_back("cuda");
  return d;
}

std::string Engine::text_caveat() const {
  return is_demo_ ? "random weights: timings are real, text is noise" : "";
}

bool Engine::activations_quantized_per_call() const {
  return int8_activations_ || (quant_.is_quantized() && quant_.exec == QuantExec::Native &&
                               quant_.scheme == QuantScheme::PerChannelInt8 && model_->device().is_cpu());
}

nlohmann::json Engine::info() const {
  nlohmann::json j;
  j["model"] = name_;
  j["architecture"] = model_->shape().architecture;
  j["format"] = format_;
  if (!source_path_.empty()) j["path"] = source_path_;
  // The built-in model (model/builtin_model.h), and its adapters (lora/builtin_adapters.h): where
  // they are, and their ids.
  if (is_builtin_) {
    j["builtin_model"] = true;
    const std::vector<AdapterSource> adapters = builtin_adapter_sources();
    nlohmann::json b = {{"dir", builtin_adapters_dir()}, {"ids", nlohmann::json::array()}};
    for (const AdapterSource& a : adapters) b["ids"].push_back(a.name);
    j["builtin_adapters"] = b;
  }
  j["demo"] = is_demo_;
  j["random_weights"] = is_demo_;
  if (is_demo_) j["caveat"] = text_caveat();
  j["config"] = model_->config_json();
  j["parameters"] = parameters_;
  // Every block's matrices as LoRA and quantization see them (Hugging Face's names).
  j["projections"] = nlohmann::json::array();
  for (const Projection& p : model_->projections())
    j["projections"].push_back({{"name", p.hf_name}, {"in", p.in}, {"out", p.out}});
  // The weights in their own format (quantized size when quantized), and what the process holds
  // for them (packed GEMM layouts can keep a second copy of the tied embedding).
  const bool stored_blocks = format_ == "gguf" && model_->kernels();  // a GGUF run as stored
  j["weight_bytes"] =
      quant_.is_quantized() || stored_blocks ? model_->resident_bytes() : parameters_ * dtype_bytes();
  j["resident_weight_bytes"] = model_->resident_bytes();
  j["gemm"] = model_->kernels() ? model_->kernels()->description() : architecture_of(*model_).plain_gemm;
  if (quant_.is_quantized())
    j["quantization"] = {
        {"mode", quant_.mode_name()}, {"exec", quant_exec_name(quant_.exec)}, {"kernel", quant_kernel_}};
  j["lm_head_tied"] = model_->lm_head_tied();
  if (!file_tensor_types_.empty()) {
    j["file_tensor_types"] = file_tensor_types_;
    j["file_tensors_run_as"] = file_tensors_run_as_;
  }
  j["dtype"] = dtype_label(model_->dtype());
  j["device"] = device_label(model_->device());
  j["threads"] = at::get_num_threads();
  // The CPU and the ISA our kernels run (active_isa: the best the CPU has unless --isa or
  // SERVELAB_ISA forced another), and what each path of ours runs under it.
  const Isa isa = active_isa();
  j["cpu"] = {{"model", cpu_model_name()},
              {"isa", isa_name(isa)},
              {"openmp_wait_policy", openmp_wait_policy()},
              {"best_isa", isa_name(best_isa())},
              {"kernels",
               {{"fp32_blocked", blocked_linear_kernel(isa)},
                {"quantized_jit", fused_kernels(isa)},
                {"decode_attention", decode_attention_kernel(model_->dtype(), model_->shape().head_dim)},
                {"lora_segmented", isa == Isa::Generic
                                       ? "portable C++ loops"
                                       : std::string(isa_name(isa)) + " loops (compiler-vectorized)"}}}};
  j["tokenizer"] = tokenizer_->kind();
  // The chat template's family, "unrecognised", or null when the model has none.
  if (tokenizer_->chat_template().empty()) {
    j["chat_template"] = nullptr;
  } else {
    const auto family = detect_chat_family(tokenizer_->chat_template());
    j["chat_template"] = family ? chat_family_name(*family) : "unrecognised";
  }
  j["cuda_available"] = cuda_available();
  // Whether decode steps replay CUDA graphs, and why not; what they cost is per run (a KV memory's
  // graphs), in the run's results.
  const std::string graphs_off = cuda_graphs_unavailable(*model_);
  j["cuda_graphs"] = {{"active", graphs_off.empty()},
                      {"max_batch", model_->cuda_graph_max_batch()},
                      {"batch_buckets", graph_batch_buckets(model_->cuda_graph_max_batch())}};
  if (!graphs_off.empty()) j["cuda_graphs"]["why_not"] = graphs_off;
  // Whether CPU decode steps run as one fused program per step, and why not.
  const std::string fused_off = model_->fused_decode_unavailable();
  j["fused_decode"] = {{"active", fused_off.empty()}};
  if (!fused_off.empty()) j["fused_decode"]["why_not"] = fused_off;
  return j;
}

}  // namespace servelab

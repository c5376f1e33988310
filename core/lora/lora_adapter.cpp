#include "lora/lora_adapter.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string_view>

#include "model/architecture.h"
#include "model/gpt2_model.h"
#include "model/llama_model.h"
#include "model/safetensors_file.h"
#include "util/errors.h"
#include "util/regex.h"

namespace servelab {

namespace {

constexpr LinearSlot slot_at(int i) { return static_cast<LinearSlot>(i); }

// Whether a module name picks a projection the way PEFT's target_modules entries do: equal to its
// full name, or to its last dot-separated parts.
bool name_matches(const std::string& full, const std::string& key) {
  return full == key ||
         (full.size() > key.size() && full.compare(full.size() - key.size(), key.size(), key) == 0 &&
          full[full.size() - key.size() - 1] == '.');
}

std::string regex_escape(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (std::string_view(".^$|()[]{}*+?\\").find(ch) != std::string_view::npos) out += '\\';
    out += ch;
  }
  return out;
}

// "attn.c_attn, attn.c_proj, ..." of a target's table.
std::string module_list(const LoraTarget& t) {
  std::string out;
  for (const Projection& p : t.projections) {
    if (!out.empty()) out += ", ";
    out += p.hf_name;
  }
  return out;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

at::Tensor st_to_tensor(const StTensor& t, const std::string& file) {
  at::ScalarType st;
  switch (t.dtype) {
    case StDType::F32:
      st = at::kFloat;
      break;
    case StDType::F16:
      st = at::kHalf;
      break;
    case StDType::BF16:
      st = at::kBFloat16;
      break;
    default:
      throw ModelFormatError(file + ": tensor \"" + t.name + "\" has dtype " + dtype_name(t.dtype) +
                             "; LoRA weights must be F32, F16 or BF16");
  }
  at::Tensor out = at::empty(t.shape, at::TensorOptions().dtype(st));
  std::memcpy(out.data_ptr(), t.data, t.nbytes);
  return out;
}

}  // namespace

const Projection& LoraTarget::projection(LinearSlot slot) const {
  for (const Projection& p : projections)
    if (p.slot == slot) return p;
  throw InputError("a " + display + " block has no projection number " +
                   std::to_string(static_cast<int>(slot)));
}

std::string LoraTarget::module_path(int64_t layer, LinearSlot slot) const {
  return blocks + std::to_string(layer) + "." + projection(slot).hf_name;
}

namespace {

// The record's side of a target: where Hugging Face (and PEFT's keys and target_modules regexes)
// put its blocks, and its name in messages.
LoraTarget target_of(const Architecture& a, int64_t n_layer, std::vector<Projection> projections) {
  return {a.name, a.display, n_layer, std::move(projections), a.hf_root, a.hf_blocks, a.fused_modules};
}

}  // namespace

LoraTarget lora_target(const Gpt2Config& c) {
  return target_of(architecture_named(gpt2_shape(c).architecture), c.n_layer, gpt2_projections(c));
}

LoraTarget lora_target(const LlamaConfig& c) {
  return target_of(architecture_named(llama_shape(c).architecture), c.n_layer, llama_projections(c));
}

LoraTarget lora_target(const Model& model) {
  return target_of(architecture_of(model), model.shape().n_layer, model.projections());
}

const char* lora_module_name(LinearSlot slot) {
  // A slot means one module in every architecture that has it (slots are distinct across them).
  for (const Architecture& a : architectures())
    for (const Projection& p : a.projection_names)
      if (p.slot == slot) return p.hf_name.c_str();
  throw InputError("no LoRA module for projection number " + std::to_string(static_cast<int>(slot)));
}

LinearSlot lora_slot(const std::string& module) {
  std::string known;
  for (const Architecture& a : architectures()) {
    std::string names;
    for (const Projection& p : a.projection_names) {
      if (module == p.hf_name) return p.slot;
      names += (names.empty() ? "" : ", ") + p.hf_name;
    }
    known += (known.empty() ? "" : "; ") + a.display + " has " + names;
  }
  throw InputError("unknown LoRA module '" + module + "' (" + known + ")");
}

std::vector<LinearSlot> lora_slots(const LoraTarget& t, const std::string& module) {
  std::vector<LinearSlot> out;
  for (const Projection& p : t.projections)
    if (name_matches(p.hf_name, module)) out.push_back(p.slot);
  if (out.empty())
    throw InputError("unknown LoRA module '" + module + "' (a " + t.display + " block has " + module_list(t) +
                     ")");
  return out;
}

std::pair<int64_t, int64_t> lora_slot_shape(const Gpt2Config& c, LinearSlot slot) {
  for (const Projection& p : gpt2_projections(c))
    if (p.slot == slot) return {p.in, p.out};
  throw InputError("a GPT-2 block has no projection number " + std::to_string(static_cast<int>(slot)));
}

LoraAdapter::LoraAdapter(std::string name, int64_t n_layer, std::string blocks)
    : name_(std::move(name)), blocks_(std::move(blocks)), layers_(static_cast<size_t>(n_layer)) {}

void LoraAdapter::set(int64_t layer, LinearSlot slot, at::Tensor a, at::Tensor b, double scale) {
  LoraWeights& w = layers_.at(static_cast<size_t>(layer))[static_cast<size_t>(slot)];
  w.a = a.contiguous();
  w.b = b.contiguous();
  w.scale = scale;
}

int64_t LoraAdapter::max_rank() const {
  int64_t r = 0;
  for (const auto& l : layers_)
    for (const auto& w : l) r = std::max(r, w.rank());
  return r;
}

int64_t LoraAdapter::parameters() const {
  int64_t n = 0;
  for (const auto& l : layers_)
    for (const auto& w : l)
      if (w.defined()) n += w.a.numel() + w.b.numel();
  return n;
}

int64_t LoraAdapter::bytes() const {
  int64_t n = 0;
  for (const auto& l : layers_)
    for (const auto& w : l)
      if (w.defined()) n += w.a.numel() * w.a.element_size() + w.b.numel() * w.b.element_size();
  return n;
}

std::vector<std::string> LoraAdapter::modules() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < layers_.size(); ++i)
    for (int s = 0; s < kLinearSlotCount; ++s)
      if (layers_[i][static_cast<size_t>(s)].defined())
        out.push_back(blocks_ + std::to_string(i) + "." + lora_module_name(slot_at(s)));
  return out;
}

AdapterInfo LoraAdapter::info() const {
  AdapterInfo i;
  i.name = name_;
  i.source = source;
  i.rank = max_rank();
  i.alpha = alpha;
  for (const auto& l : layers_)
    for (const auto& w : l)
      if (w.defined()) {
        i.scale = w.scale;
        i.base_parameters += w.a.size(0) * w.b.size(1);
      }
  i.modules = modules();
  i.parameters = parameters();
  i.bytes = bytes();
  return i;
}

std::shared_ptr<const LoraAdapter> make_random_lora(const Gpt2Config& c, const AdapterSource& s,
                                                    at::Device device, at::ScalarType dtype) {
  return make_random_lora(lora_target(c), s, device, dtype);
}

std::shared_ptr<const LoraAdapter> make_random_lora(const LoraTarget& c, const AdapterSource& s,
                                                    at::Device device, at::ScalarType dtype) {
  if (s.rank < 1)
    throw InputError("adapter '" + s.name + "': rank must be at least 1, got " + std::to_string(s.rank));
  if (!(s.alpha > 0 && s.alpha <= kMaxLoraAlpha))
    throw InputError("adapter '" + s.name + "': alpha must be in (0, " +
                     std::to_string(static_cast<int64_t>(kMaxLoraAlpha)) + "], got " +
                     std::to_string(s.alpha));
  std::vector<LinearSlot> slots;
  for (const auto& m : s.modules)
    for (LinearSlot slot : lora_slots(c, m)) slots.push_back(slot);
  if (s.modules.empty())
    for (const Projection& p : c.projections) slots.push_back(p.slot);
  for (LinearSlot slot : slots) {
    const int64_t in = c.projection(slot).in;
    if (s.rank > in)
      throw InputError("adapter '" + s.name + "': rank " + std::to_string(s.rank) + " exceeds " +
                       lora_module_name(slot) + "'s input width " + std::to_string(in));
  }
  auto adapter = std::make_shared<LoraAdapter>(s.name, c.n_layer, c.blocks);
  adapter->source = "random (seed " + std::to_string(s.seed) + ")";
  adapter->alpha = s.alpha;
  const double scale = s.alpha / static_cast<double>(s.rank);
  // x A has entries of about |x| / sqrt(in) * sqrt(in) ~ 1 for LayerNorm-sized inputs; B is sized so
  // that the delta's entries are about 0.1 whatever the rank and alpha: visible, not destructive.
  const double b_std = 0.1 / (scale * std::sqrt(static_cast<double>(s.rank)));
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(s.seed);
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  // Layer by layer in table order: GPT-2's adapters are the same for a seed as before the table.
  for (int64_t l = 0; l < c.n_layer; ++l) {
    for (const Projection& p : c.projections) {
      const LinearSlot slot = p.slot;
      if (std::find(slots.begin(), slots.end(), slot) == slots.end()) continue;
      const int64_t in = p.in, out = p.out;
      at::Tensor a = at::randn({in, s.rank}, gen, opts) / std::sqrt(static_cast<double>(in));
      at::Tensor b = at::randn({s.rank, out}, gen, opts) * b_std;
      adapter->set(l, slot, a.to(device, dtype), b.to(device, dtype), scale);
    }
  }
  return adapter;
}

int64_t lora_adapter_bytes(const Model& model, int64_t rank) {
  int64_t per_layer = 0;
  for (const Projection& p : model.projections()) per_layer += p.in + p.out;
  return rank * per_layer * model.shape().n_layer * static_cast<int64_t>(c10::elementSize(model.dtype()));
}

namespace {

nlohmann::json read_adapter_config(const std::filesystem::path& path) {
  const std::string why = file_problem(path.string());
  if (why == "not found")
    throw ModelFormatError(path.string() + ": missing (a PEFT adapter folder needs adapter_config.json)");
  if (!why.empty()) throw ModelFormatError(path.string() + ": " + why);
  std::ifstream f(path);
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw ModelFormatError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

bool truthy(const nlohmann::json& j) {
  if (j.is_null()) return false;
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_string()) return !j.get<std::string>().empty();
  if (j.is_array() || j.is_object()) return !j.empty();
  return true;
}

}  // namespace

std::shared_ptr<const LoraAdapter> load_peft_lora(const std::string& dir, const Gpt2Config& c,
                                                  at::Device device, at::ScalarType dtype,
                                                  const std::string& name) {
  return load_peft_lora(dir, lora_target(c), device, dtype, name);
}

std::shared_ptr<const LoraAdapter> load_peft_lora(const std::string& dir, const LoraTarget& c,
                                                  at::Device device, at::ScalarType dtype,
                                                  const std::string& name) {
  namespace fs = std::filesystem;
  const fs::path root(dir);
  if (!fs::is_directory(root))
    throw ModelFormatError(dir + ": not a folder (expected a PEFT adapter folder)");
  const fs::path cfg_path = root / "adapter_config.json";
  const std::string cfg_file = cfg_path.string();
  const nlohmann::json cfg = read_adapter_config(cfg_path);
  if (!cfg.is_object()) throw ModelFormatError(cfg_file + ": not a JSON object");

  auto unsupported = [&](const std::string& key, const std::string& what) {
    throw ModelFormatError(cfg_file + ": \"" + key + "\" " + what + " is not supported (plain LoRA only)");
  };
  const std::string peft_type = cfg.value("peft_type", std::string("LORA"));
  if (peft_type != "LORA")
    throw ModelFormatError(cfg_file + ": \"peft_type\" is " + peft_type +
                           "; only LORA adapters can be loaded");
  if (cfg.contains("use_dora") && truthy(cfg["use_dora"])) unsupported("use_dora", "(DoRA)");
  if (cfg.contains("bias") && cfg["bias"].is_string() && cfg["bias"].get<std::string>() != "none") {
    std::string what = cfg["bias"].get<std::string>();
    what.insert(0, 1, '"');
    what += "\" (trained biases)";
    unsupported("bias", what);
  }
  if (cfg.contains("lora_bias") && truthy(cfg["lora_bias"])) unsupported("lora_bias", "(trained biases)");
  if (cfg.contains("modules_to_save") && truthy(cfg["modules_to_save"]))
    unsupported("modules_to_save", "(fully trained extra modules)");
  if (cfg.contains("rank_pattern") && truthy(cfg["rank_pattern"]))
    unsupported("rank_pattern", "(ranks per module)");
  if (cfg.contains("alpha_pattern") && truthy(cfg["alpha_pattern"]))
    unsupported("alpha_pattern", "(alphas per module)");
  if (cfg.contains("trainable_token_indices") && truthy(cfg["trainable_token_indices"]))
    unsupported("trainable_token_indices", "(trained token embeddings)");
  if (cfg.contains("target_parameters") && truthy(cfg["target_parameters"]))
    unsupported("target_parameters", "(LoRA on raw parameters)");
  if (!cfg.contains("r") || !cfg["r"].is_number_integer() || cfg["r"].get<int64_t>() < 1)
    throw ModelFormatError(cfg_file + ": \"r\" must be a positive integer");
  const int64_t r = cfg["r"].get<int64_t>();
  if (!cfg.contains("lora_alpha") || !cfg["lora_alpha"].is_number())
    throw ModelFormatError(cfg_file + ": \"lora_alpha\" must be a number");
  const double alpha = cfg["lora_alpha"].get<double>();
  // A negative alpha flips the update's sign, and a huge one (1e308) turns every logit into NaN:
  // neither is a trained adapter.
  if (!(alpha > 0 && alpha <= kMaxLoraAlpha))
    throw ModelFormatError(cfg_file + ": \"lora_alpha\" must be in (0, " +
                           std::to_string(static_cast<int64_t>(kMaxLoraAlpha)) + "], got " +
                           cfg["lora_alpha"].dump());
  const bool rslora = cfg.contains("use_rslora") && truthy(cfg["use_rslora"]);
  const double scale = rslora ? alpha / std::sqrt(static_cast<double>(r)) : alpha / static_cast<double>(r);

  // Layers the adapter may touch.
  std::set<int64_t> layers;
  if (cfg.contains("layers_to_transform") && !cfg["layers_to_transform"].is_null()) {
    const auto& lt = cfg["layers_to_transform"];
    auto add = [&](const nlohmann::json& v) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.n_layer)
        throw ModelFormatError(cfg_file + ": \"layers_to_transform\" has " + v.dump() +
                               "; the model has layers 0.." + std::to_string(c.n_layer - 1));
      layers.insert(v.get<int64_t>());
    };
    if (lt.is_array()) {
      for (const auto& v : lt) add(v);
    } else {
      add(lt);
    }
  } else {
    for (int64_t l = 0; l < c.n_layer; ++l) layers.insert(l);
  }

  // Which (layer, module) pairs the config targets, the way peft matches names: a list entry
  // matches a module whose full name equals it or ends with "." + it; a string is a regex that must
  // match the whole name.
  if (!cfg.contains("target_modules") || cfg["target_modules"].is_null())
    throw ModelFormatError(cfg_file + ": no \"target_modules\"");
  // The modules a PEFT file may name: each projection, and each fused matrix the model splits.
  struct PeftModule {
    std::string hf_name;
    std::vector<LinearSlot> parts;
  };
  std::vector<PeftModule> modules;
  for (const Projection& p : c.projections) modules.push_back({p.hf_name, {p.slot}});
  for (const FusedModule& f : c.fused) modules.push_back({f.hf_name, f.parts});
  // "model.layers.3.self_attn.q_proj", "model.layers.3.self_attn.qkv_proj": the names PEFT matches.
  const auto full_name = [&](int64_t layer, const PeftModule& m) {
    return c.hf_root + c.blocks + std::to_string(layer) + "." + m.hf_name;
  };
  // (layer, index into modules)
  std::set<std::pair<int64_t, int>> targeted;
  const auto& tm = cfg["target_modules"];
  for (int64_t l = 0; l < c.n_layer; ++l) {
    for (size_t mi = 0; mi < modules.size(); ++mi) {
      const std::string full = full_name(l, modules[mi]);
      bool hit = false;
      if (tm.is_string()) {
        try {
          // peft matches re.fullmatch against the module's name in the base model.
          const std::string re = tm.get<std::string>();
          hit = regex_full_match(re, full) || regex_full_match(re, full.substr(c.hf_root.size()));
        } catch (const InputError& e) {
          throw ModelFormatError(cfg_file + ": \"target_modules\" is not a valid regex (" + e.what() + ")");
        }
      } else if (tm.is_array()) {
        for (const auto& t : tm) {
          if (!t.is_string()) throw ModelFormatError(cfg_file + ": \"target_modules\" must hold strings");
          if (name_matches(full, t.get<std::string>())) hit = true;
        }
      } else {
        throw ModelFormatError(cfg_file + ": \"target_modules\" must be a list or a regex string");
      }
      if (hit && layers.count(l)) targeted.insert({l, static_cast<int>(mi)});
    }
  }
  if (tm.is_array()) {
    for (const auto& t : tm) {
      const std::string key = t.get<std::string>();
      bool any = false;
      for (int64_t l = 0; l < c.n_layer && !any; ++l)
        for (const PeftModule& m : modules)
          if (name_matches(full_name(l, m), key)) any = true;
      if (!any) {
        // The last parts of the table's names, as target_modules usually lists them.
        std::string names;
        for (const PeftModule& m : modules) {
          const std::string last = m.hf_name.substr(m.hf_name.rfind('.') + 1);
          if (names.find(last) != std::string::npos) continue;
          if (!names.empty()) names += ", ";
          names += last;
        }
        throw ModelFormatError(cfg_file + ": target module \"" + key + "\" is not a " + c.display +
                               " projection (" + names + ")");
      }
    }
  }
  if (targeted.empty())
    throw ModelFormatError(cfg_file + ": \"target_modules\" matches no " + c.display + " projection");

  const fs::path st_path = root / "adapter_model.safetensors";
  if (!fs::exists(st_path)) {
    const std::string extra = fs::exists(root / "adapter_model.bin")
                                  ? " (only adapter_model.bin, a pickle, is there; "
                                    "save with safe_serialization=True)"
                                  : "";
    throw ModelFormatError(st_path.string() + ": missing" + extra);
  }
  SafetensorsFile file = SafetensorsFile::open(st_path.string());
  const std::string st_file = st_path.string();

  // Keys as peft writes them: base_model.model.<hf_root><blocks><i>.<module>.lora_<A|B>.weight
  // (an adapter name may sit before ".weight" in files saved by hand); modules from the table.
  std::string modules_re;
  for (const PeftModule& m : modules) {
    if (!modules_re.empty()) modules_re += '|';
    modules_re += regex_escape(m.hf_name);
  }
  const std::string key_re = "(?:^|\\.)" + regex_escape(c.blocks) + "(\\d+)\\.(" + modules_re +
                             ")\\.lora_([AB])(?:\\.[A-Za-z0-9_]+)?\\.weight$";
  std::map<std::pair<int64_t, int>, std::pair<const StTensor*, const StTensor*>> found;
  for (const StTensor& t : file.tensors()) {
    const std::optional<std::vector<std::string>> m = regex_search(key_re, t.name);
    if (!m)
      throw ModelFormatError(st_file + ": unexpected tensor \"" + t.name +
                             "\" (only lora_A / lora_B weights of " + c.display +
                             " projections are supported)");
    // At most 9 digits, so that a layer number no model has cannot overflow the conversion.
    const int64_t layer = (*m)[1].size() > 9 ? c.n_layer : std::stoll((*m)[1]);
    const std::string& module = (*m)[2];
    if (layer >= c.n_layer)
      throw ModelFormatError(st_file + ": tensor \"" + t.name + "\" is for layer " + std::to_string(layer) +
                             " but the model has " + std::to_string(c.n_layer));
    // The regex took a whole module name.
    const int mi = static_cast<int>(std::find_if(modules.begin(), modules.end(),
                                                 [&](const PeftModule& x) { return x.hf_name == module; }) -
                                    modules.begin());
    if (!targeted.count({layer, mi}))
      throw ModelFormatError(st_file + ": tensor \"" + t.name +
                             "\" is for a module adapter_config.json does not target");
    auto& p = found[{layer, mi}];
    ((*m)[3] == "A" ? p.first : p.second) = &t;
  }
  if (found.empty()) throw ModelFormatError(st_file + ": no lora_A / lora_B tensors");

  auto adapter =
      std::make_shared<LoraAdapter>(name.empty() ? root.filename().string() : name, c.n_layer, c.blocks);
  adapter->source = "peft " + dir;
  adapter->alpha = alpha;
  adapter->rslora = rslora;
  for (const auto& [key, ab] : found) {
    const auto [layer, mi] = key;
    const PeftModule& module = modules[static_cast<size_t>(mi)];
    const std::string where = c.blocks + std::to_string(layer) + "." + module.hf_name;
    const StTensor* ta = ab.first;
    const StTensor* tb = ab.second;
    if (!ta) throw ModelFormatError(st_file + ": " + where + " has lora_B but no lora_A weight");
    if (!tb) {
      std::string b_name = ta->name;
      b_name.replace(b_name.rfind("lora_A"), 6, "lora_B");
      throw ModelFormatError(st_file + ": tensor \"" + ta->name + "\" has no matching \"" + b_name + "\"");
    }
    const int64_t in = c.projection(module.parts.front()).in;
    int64_t out = 0;
    for (const LinearSlot part : module.parts) out += c.projection(part).out;
    if (ta->shape.size() != 2 || ta->shape[1] != in)
      throw ModelFormatError(st_file + ": tensor \"" + ta->name + "\" has shape " + shape_str(ta->shape) +
                             ", expected [r, " + std::to_string(in) + "] (" + where + " takes " +
                             std::to_string(in) + " inputs)");
    if (tb->shape.size() != 2 || tb->shape[0] != out)
      throw ModelFormatError(st_file + ": tensor \"" + tb->name + "\" has shape " + shape_str(tb->shape) +
                             ", expected [" + std::to_string(out) + ", r] (" + where + " gives " +
                             std::to_string(out) + " outputs)");
    if (ta->shape[0] != r || tb->shape[1] != r)
      throw ModelFormatError(st_file + ": tensors \"" + ta->name + "\" and \"" + tb->name + "\" have rank " +
                             std::to_string(ta->shape[0]) + " / " + std::to_string(tb->shape[1]) +
                             " but adapter_config.json says r = " + std::to_string(r));
    // peft's lora_A is [r, in] and lora_B [out, r] (nn.Linear layout): ours are their transposes.
    at::Tensor a = st_to_tensor(*ta, st_file).t().contiguous();
    at::Tensor b = st_to_tensor(*tb, st_file).t().contiguous();
    check_finite_tensors({{ta->name, a}, {tb->name, b}}, st_file);
    // A fused module's B ([in-rank, every part's outputs] here) splits by columns into its parts,
    // each with the same A: B A x's rows for a part are that part's update.
    int64_t offset = 0;
    for (const LinearSlot part : module.parts) {
      const int64_t n = c.projection(part).out;
      adapter->set(layer, part, a.to(device, dtype), b.narrow(1, offset, n).contiguous().to(device, dtype),
                   scale);
      offset += n;
    }
  }
  return adapter;
}

std::shared_ptr<const LoraAdapter> load_adapter(const AdapterSource& source, const Model& base) {
  if (source.name.empty()) throw InputError("an adapter needs a name");
  const LoraTarget target = lora_target(base);
  if (!source.peft_dir.empty())
    return load_peft_lora(source.peft_dir, target, base.device(), base.dtype(), source.name);
  return make_random_lora(target, source, base.device(), base.dtype());
}

void merge_lora_matrices(LinearMatrices& matrices, const LoraAdapter& adapter, double sign) {
  int64_t n_layer = 0;
  for (const LinearMatrix& m : matrices.projections) n_layer = std::max(n_layer, m.layer + 1);
  if (adapter.n_layer() != n_layer)
    throw InputError("adapter '" + adapter.name() + "' has " + std::to_string(adapter.n_layer()) +
                     " layers, the model " + std::to_string(n_layer));
  c10::InferenceMode guard;
  for (int64_t l = 0; l < adapter.n_layer(); ++l)
    for (int s = 0; s < kLinearSlotCount; ++s) {
      if (!adapter.weights(l, slot_at(s)).defined()) continue;
      bool found = false;
      for (const LinearMatrix& m : matrices.projections) found |= m.layer == l && m.slot == slot_at(s);
      if (!found)
        throw InputError("adapter '" + adapter.name() + "' wraps " + lora_module_name(slot_at(s)) +
                         ", which this model's blocks do not have");
    }
  for (const LinearMatrix& m : matrices.projections) {
    const LoraWeights& lo = adapter.weights(m.layer, m.slot);
    if (!lo.defined()) continue;
    at::Tensor& W = *m.weight;
    if (!W.defined())
      throw InputError("cannot merge adapter '" + adapter.name() + "': the base weights are quantized");
    // A B is [in, out], Conv1D's layout; nn.Linear's [out, in] takes its transpose. In fp32 whatever
    // the model's dtype, then rounded once.
    at::Tensor delta = at::mm(lo.a.to(at::kFloat), lo.b.to(at::kFloat)) * (sign * lo.scale);
    if (!m.in_out) delta = delta.t();
    W = (W.to(at::kFloat) + delta.to(W.device())).to(W.scalar_type());
  }
}

}  // namespace servelab

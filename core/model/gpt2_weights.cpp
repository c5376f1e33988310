#include "model/gpt2_weights.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <cmath>
#include <set>
#include <sstream>

#include "model/safetensors_file.h"
#include "model/tensor_from_file.h"
#include "util/errors.h"

namespace servelab {
namespace {

class WeightReader {
 public:
  WeightReader(const SafetensorsFile& file, at::Device device, at::ScalarType dtype)
      : file_(file), device_(device), dtype_(dtype) {
    if (file.find("transformer.wte.weight")) {
      prefix_ = "transformer.";
    } else if (!file.find("wte.weight")) {
      throw ModelFormatError(
          file.path() + ": no \"transformer.wte.weight\" or \"wte.weight\" tensor: not a GPT-2 checkpoint");
    }
  }

  bool has(const std::string& name) const { return file_.find(prefix_ + name) != nullptr; }

  at::Tensor get(const std::string& name, std::vector<int64_t> expected, const std::string& why,
                 const std::string& full_name_override = "") {
    const std::string full = full_name_override.empty() ? prefix_ + name : full_name_override;
    const StTensor* t = file_.find(full);
    if (!t) throw ModelFormatError(file_.path() + ": missing tensor \"" + full + "\"");
    if (t->shape != expected)
      throw ModelFormatError(file_.path() + ": tensor \"" + full + "\" has shape " + shape_string(t->shape) +
                             ", expected " + shape_string(expected) + " (" + why + ")");
    used_.insert(full);
    return tensor_from_safetensors(*t, file_.path(), device_, dtype_);
  }

  const std::string& prefix() const { return prefix_; }
  const std::set<std::string>& used() const { return used_; }

 private:
  const SafetensorsFile& file_;
  at::Device device_;
  at::ScalarType dtype_;
  std::string prefix_;
  std::set<std::string> used_;
};

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> Gpt2Weights::named_tensors() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back("transformer.wte.weight", wte);
  out.emplace_back("transformer.wpe.weight", wpe);
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    const std::string p = "transformer.h." + std::to_string(i) + ".";
    out.emplace_back(p + "ln_1.weight", l.ln_1_weight);
    out.emplace_back(p + "ln_1.bias", l.ln_1_bias);
    out.emplace_back(p + "attn.c_attn.weight", l.c_attn_weight);
    out.emplace_back(p + "attn.c_attn.bias", l.c_attn_bias);
    out.emplace_back(p + "attn.c_proj.weight", l.c_proj_weight);
    out.emplace_back(p + "attn.c_proj.bias", l.c_proj_bias);
    out.emplace_back(p + "ln_2.weight", l.ln_2_weight);
    out.emplace_back(p + "ln_2.bias", l.ln_2_bias);
    out.emplace_back(p + "mlp.c_fc.weight", l.c_fc_weight);
    out.emplace_back(p + "mlp.c_fc.bias", l.c_fc_bias);
    out.emplace_back(p + "mlp.c_proj.weight", l.mlp_proj_weight);
    out.emplace_back(p + "mlp.c_proj.bias", l.mlp_proj_bias);
  }
  out.emplace_back("transformer.ln_f.weight", ln_f_weight);
  out.emplace_back("transformer.ln_f.bias", ln_f_bias);
  if (!lm_head_tied) out.emplace_back("lm_head.weight", lm_head);
  return out;
}

std::int64_t Gpt2Weights::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : named_tensors())
    if (t.defined()) n += t.numel();
  return n;
}

LinearMatrices Gpt2Weights::linear_matrices() {
  LinearMatrices m;
  for (size_t l = 0; l < layers.size(); ++l) {
    Gpt2LayerWeights& lw = layers[l];
    const int64_t layer = static_cast<int64_t>(l);
    m.projections.push_back({layer, LinearSlot::Attn, &lw.c_attn_weight, true});
    m.projections.push_back({layer, LinearSlot::AttnProj, &lw.c_proj_weight, true});
    m.projections.push_back({layer, LinearSlot::Fc, &lw.c_fc_weight, true});
    m.projections.push_back({layer, LinearSlot::MlpProj, &lw.mlp_proj_weight, true});
  }
  m.lm_head = &lm_head;
  m.lm_head_tied = lm_head_tied;
  return m;
}

std::int64_t Gpt2Weights::bytes() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : named_tensors())
    if (t.defined()) n += t.numel() * static_cast<std::int64_t>(t.element_size());
  return n;
}

Gpt2Weights load_gpt2_weights(const std::string& path, const Gpt2Config& c, at::Device device,
                              at::ScalarType dtype) {
  SafetensorsFile file = SafetensorsFile::open(path);
  WeightReader r(file, device, dtype);
  const int64_t E = c.n_embd, I = c.inner_dim();
  const std::string cfg = "config.json n_embd=" + std::to_string(E);
  Gpt2Weights w;
  w.wte = r.get("wte.weight", {c.vocab_size, E}, "config.json vocab_size=" + std::to_string(c.vocab_size));
  w.wpe = r.get("wpe.weight", {c.n_positions, E}, "config.json n_positions=" + std::to_string(c.n_positions));
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    Gpt2LayerWeights l;
    l.ln_1_weight = r.get(p + "ln_1.weight", {E}, cfg);
    l.ln_1_bias = r.get(p + "ln_1.bias", {E}, cfg);
    l.c_attn_weight = r.get(p + "attn.c_attn.weight", {E, 3 * E}, cfg);
    l.c_attn_bias = r.get(p + "attn.c_attn.bias", {3 * E}, cfg);
    l.c_proj_weight = r.get(p + "attn.c_proj.weight", {E, E}, cfg);
    l.c_proj_bias = r.get(p + "attn.c_proj.bias", {E}, cfg);
    l.ln_2_weight = r.get(p + "ln_2.weight", {E}, cfg);
    l.ln_2_bias = r.get(p + "ln_2.bias", {E}, cfg);
    l.c_fc_weight = r.get(p + "mlp.c_fc.weight", {E, I}, cfg + ", inner=" + std::to_string(I));
    l.c_fc_bias = r.get(p + "mlp.c_fc.bias", {I}, cfg + ", inner=" + std::to_string(I));
    l.mlp_proj_weight = r.get(p + "mlp.c_proj.weight", {I, E}, cfg + ", inner=" + std::to_string(I));
    l.mlp_proj_bias = r.get(p + "mlp.c_proj.bias", {E}, cfg);
    w.layers.push_back(std::move(l));
  }
  w.ln_f_weight = r.get("ln_f.weight", {E}, cfg);
  w.ln_f_bias = r.get("ln_f.bias", {E}, cfg);
  if (file.find("lm_head.weight")) {
    w.lm_head = r.get("", {c.vocab_size, E}, "config.json vocab_size", "lm_head.weight");
    // Checkpoints written by save_pretrained keep a tied copy: share storage when it is one.
    w.lm_head_tied = at::equal(w.lm_head, w.wte);
    if (w.lm_head_tied) w.lm_head = w.wte;
  } else {
    w.lm_head = w.wte;
    w.lm_head_tied = true;
  }
  // Anything left over must be a known buffer; an unknown tensor means a different architecture.
  for (const StTensor& t : file.tensors()) {
    if (r.used().count(t.name)) continue;
    const std::string& n = t.name;
    auto ends_with = [&](const std::string& suf) {
      return n.size() >= suf.size() && n.compare(n.size() - suf.size(), suf.size(), suf) == 0;
    };
    if (ends_with("attn.bias") || ends_with("attn.masked_bias")) continue;
    throw ModelFormatError(path + ": unexpected tensor \"" + n +
                           "\" (not part of a GPT-2 LM head model with the given config)");
  }
  return w;
}

Gpt2Weights make_random_gpt2_weights(const Gpt2Config& c, std::uint64_t seed, at::Device device,
                                     at::ScalarType dtype) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const double std_dev = 0.02;
  const double resid_std = std_dev / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  auto normal = [&](std::vector<int64_t> shape, double sd) {
    at::Tensor t = at::empty(shape, f32);
    t.normal_(0.0, sd, gen);
    return t.to(at::TensorOptions().dtype(dtype).device(device));
  };
  auto ones = [&](int64_t n) { return at::ones({n}, f32.dtype(dtype).device(device)); };
  auto zeros = [&](int64_t n) { return at::zeros({n}, f32.dtype(dtype).device(device)); };
  const int64_t E = c.n_embd, I = c.inner_dim();
  Gpt2Weights w;
  w.wte = normal({c.vocab_size, E}, std_dev);
  w.wpe = normal({c.n_positions, E}, std_dev);
  for (int64_t i = 0; i < c.n_layer; ++i) {
    Gpt2LayerWeights l;
    l.ln_1_weight = ones(E);
    l.ln_1_bias = zeros(E);
    l.c_attn_weight = normal({E, 3 * E}, std_dev);
    l.c_attn_bias = zeros(3 * E);
    l.c_proj_weight = normal({E, E}, resid_std);
    l.c_proj_bias = zeros(E);
    l.ln_2_weight = ones(E);
    l.ln_2_bias = zeros(E);
    l.c_fc_weight = normal({E, I}, std_dev);
    l.c_fc_bias = zeros(I);
    l.mlp_proj_weight = normal({I, E}, resid_std);
    l.mlp_proj_bias = zeros(E);
    w.layers.push_back(std::move(l));
  }
  w.ln_f_weight = ones(E);
  w.ln_f_bias = zeros(E);
  w.lm_head = w.wte;
  w.lm_head_tied = true;
  return w;
}

void save_gpt2_weights(const Gpt2Weights& weights, const std::string& path) {
  std::vector<at::Tensor> keep;  // contiguous CPU copies that outlive the write
  std::vector<StWriteTensor> out;
  for (const auto& [name, t] : weights.named_tensors()) {
    at::Tensor cpu = t.to(at::kCPU).contiguous();
    StDType dt = cpu.scalar_type() == at::kHalf       ? StDType::F16
                 : cpu.scalar_type() == at::kBFloat16 ? StDType::BF16
                                                      : StDType::F32;
    if (dt == StDType::F32) cpu = cpu.to(at::kFloat).contiguous();
    keep.push_back(cpu);
    out.push_back({name, dt, cpu.sizes().vec(), cpu.data_ptr(),
                   static_cast<size_t>(cpu.numel()) * static_cast<size_t>(cpu.element_size())});
  }
  write_safetensors(path, out, {{"format", "pt"}});
}

}  // namespace servelab

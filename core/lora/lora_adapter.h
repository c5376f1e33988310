#pragma once
// A LoRA adapter for GPT-2 (lesson 5): for each wrapped matrix W [in, out] (Conv1D layout) two
// small matrices A [in, r] and B [r, out], and y = x W + scale * x A B with scale = alpha / r
// (alpha / sqrt(r) with rsLoRA). Loaded from PEFT folders or made from a seed.
#include <ATen/ATen.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "lora/lora_spec.h"
#include "model/gpt2_config.h"
#include "model/gpt2_weights.h"
#include "model/linear_kernels.h"

namespace servelab {

class Model;  // model/model.h

struct LoraWeights {
  at::Tensor a;  // [in, r]
  at::Tensor b;  // [r, out]
  double scale = 0;
  bool defined() const { return a.defined(); }
  int64_t rank() const { return a.defined() ? a.size(1) : 0; }
};

// "attn.c_attn" ... for a slot, and back (InputError for other names).
const char* lora_module_name(LinearSlot slot);
LinearSlot lora_slot(const std::string& module);
// [in, out] of a slot's matrix in a GPT-2 of this config.
std::pair<int64_t, int64_t> lora_slot_shape(const Gpt2Config& c, LinearSlot slot);

class LoraAdapter {
 public:
  LoraAdapter(std::string name, int64_t n_layer);

  const std::string& name() const { return name_; }
  int64_t n_layer() const { return static_cast<int64_t>(layers_.size()); }
  const LoraWeights& weights(int64_t layer, LinearSlot slot) const {
    return layers_[static_cast<size_t>(layer)][static_cast<size_t>(slot)];
  }
  // A [in, r], B [r, out] on the model's device and dtype.
  void set(int64_t layer, LinearSlot slot, at::Tensor a, at::Tensor b, double scale);

  int64_t max_rank() const;
  int64_t parameters() const;  // |A| + |B| over every wrapped matrix
  int64_t bytes() const;
  std::vector<std::string> modules() const;  // "h.0.attn.c_attn", ...

  std::string source;  // "peft <dir>" or "random (seed N)"
  double alpha = 0;
  bool rslora = false;

  AdapterInfo info() const;

 private:
  std::string name_;
  std::vector<std::array<LoraWeights, 4>> layers_;
};

// Seeded random adapter of source.rank on source.modules in every layer (A ~ N(0, 1/in), B small
// enough that the model still speaks but different adapters give different text). Deterministic
// for a seed on every device.
std::shared_ptr<const LoraAdapter> make_random_lora(const Gpt2Config& c, const AdapterSource& source,
                                                    at::Device device, at::ScalarType dtype);

// A PEFT LoRA folder: adapter_config.json + adapter_model.safetensors as peft's save_pretrained
// writes them for a GPT-2 (lora_A [r, in], lora_B [out, r], whatever fan_in_fan_out says, since
// PEFT keeps its own A and B in nn.Linear layout for Conv1D too). Supported: target_modules as a
// list of (suffixes of) module names or as a regex over full names, layers_to_transform, r,
// lora_alpha, use_rslora. ModelFormatError naming the file, key or option for anything else:
// missing or unreadable files, DoRA, biases, modules_to_save, rank/alpha patterns, targets that
// are not GPT-2 projections, wrong shapes, ranks that disagree with r, A without B.
std::shared_ptr<const LoraAdapter> load_peft_lora(const std::string& dir, const Gpt2Config& c,
                                                  at::Device device, at::ScalarType dtype,
                                                  const std::string& name = "");

// Either of the two, on the model's device and dtype.
std::shared_ptr<const LoraAdapter> load_adapter(const AdapterSource& source, const Model& model);

// W += sign * scale * A B on every wrapped matrix of dense (Conv1D) weights: sign +1 merges the
// adapter into the base model, -1 takes it back out.
void merge_lora(Gpt2Weights& weights, const LoraAdapter& adapter, double sign = 1.0);

}  // namespace servelab

#pragma once
// A LoRA adapter (lesson 5): for each wrapped matrix W of a block two small matrices A [in, r] and
// B [r, out], and y = x W + scale * x A B with scale = alpha / r (alpha / sqrt(r) with rsLoRA).
// Loaded from PEFT folders or made from a seed, for any architecture: the matrices an adapter may
// wrap, their names and shapes come from the model's projection table (Model::projections()).
#include <ATen/ATen.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "lora/lora_spec.h"
#include "model/gpt2_config.h"
#include "model/gpt2_weights.h"
#include "model/linear_kernels.h"
#include "model/llama_config.h"
#include "model/model.h"

namespace servelab {

struct LlamaWeights;  // model/llama_model.h

struct LoraWeights {
  at::Tensor a;  // [in, r]
  at::Tensor b;  // [r, out]
  double scale = 0;
  bool defined() const { return a.defined(); }
  int64_t rank() const { return a.defined() ? a.size(1) : 0; }
};

// What an adapter is built for: an architecture's projection table, its depth and where its
// blocks sit among Hugging Face's module names (PEFT's keys and target_modules use those).
struct LoraTarget {
  std::string architecture;  // ModelShape::architecture: "gpt2", "llama"
  std::string display;       // for messages: "GPT-2", "Llama"
  int64_t n_layer = 0;
  std::vector<Projection> projections;
  std::string hf_root;  // "transformer." / "model.": the blocks' parent
  std::string blocks;   // "h." / "layers.": block N is hf_root + blocks + "N."
  // Modules Hugging Face keeps fused, split into these projections at load (Phi-3's).
  std::vector<FusedModule> fused;

  // InputError naming the architecture for a slot its blocks do not have.
  const Projection& projection(LinearSlot slot) const;
  // "h.3.attn.c_attn" / "layers.3.self_attn.q_proj"
  std::string module_path(int64_t layer, LinearSlot slot) const;
};
LoraTarget lora_target(const Model& model);
LoraTarget lora_target(const Gpt2Config& c);
LoraTarget lora_target(const LlamaConfig& c);

// A slot's module name inside a block ("attn.c_attn", "self_attn.q_proj": slots are distinct
// across architectures), and back (InputError for other names).
const char* lora_module_name(LinearSlot slot);
LinearSlot lora_slot(const std::string& module);
// The slots of `target` a module name picks, the way PEFT's target_modules entries match: the
// whole name ("mlp.c_proj") or its last parts ("c_proj": both of GPT-2's). InputError naming the
// architecture and its modules when none matches.
std::vector<LinearSlot> lora_slots(const LoraTarget& target, const std::string& module);
// [in, out] of a slot's matrix in a GPT-2 of this config.
std::pair<int64_t, int64_t> lora_slot_shape(const Gpt2Config& c, LinearSlot slot);

class LoraAdapter {
 public:
  // `blocks` names the layers in modules(): "h." (GPT-2's) or "layers." (Llama's).
  LoraAdapter(std::string name, int64_t n_layer, std::string blocks = "h.");

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
  std::vector<std::string> modules() const;  // "h.0.attn.c_attn", "layers.0.self_attn.q_proj", ...

  std::string source;  // "peft <dir>" or "random (seed N)"
  double alpha = 0;
  bool rslora = false;

  AdapterInfo info() const;

 private:
  std::string name_;
  std::string blocks_;
  std::vector<std::array<LoraWeights, kLinearSlotCount>> layers_;
};

// The largest lora_alpha an adapter may have (PEFT's are 1 to a few hundred); beyond it the update
// swamps the model and soon overflows.
inline constexpr double kMaxLoraAlpha = 1e6;

// Bytes a random adapter of `rank` on every projection of the model holds (A and B in the model's
// dtype): what a count of adapters will cost, checked before any is made.
int64_t lora_adapter_bytes(const Model& model, int64_t rank);

// Seeded random adapter of source.rank on source.modules (empty: every projection of the target)
// in every layer (A ~ N(0, 1/in), B small enough that the model still speaks but different adapters
// give different text). Deterministic for a seed on every device.
std::shared_ptr<const LoraAdapter> make_random_lora(const LoraTarget& target, const AdapterSource& source,
                                                    at::Device device, at::ScalarType dtype);
std::shared_ptr<const LoraAdapter> make_random_lora(const Gpt2Config& c, const AdapterSource& source,
                                                    at::Device device, at::ScalarType dtype);

// A PEFT LoRA folder: adapter_config.json + adapter_model.safetensors as peft's save_pretrained
// writes them (lora_A [r, in], lora_B [out, r], whatever fan_in_fan_out says, since PEFT keeps its
// own A and B in nn.Linear layout for GPT-2's Conv1D too); keys name the target's modules:
// base_model.model.transformer.h.N.attn.c_attn.lora_A.weight (GPT-2),
// base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight (Llama). Supported: target_modules as a
// list of (suffixes of) module names or as a regex over full names, layers_to_transform, r,
// lora_alpha, use_rslora. ModelFormatError naming the file, key or option for anything else:
// missing or unreadable files, DoRA, biases, modules_to_save, rank/alpha patterns, targets that
// are not the target's projections, wrong shapes, ranks that disagree with r, A without B.
std::shared_ptr<const LoraAdapter> load_peft_lora(const std::string& dir, const LoraTarget& target,
                                                  at::Device device, at::ScalarType dtype,
                                                  const std::string& name = "");
std::shared_ptr<const LoraAdapter> load_peft_lora(const std::string& dir, const Gpt2Config& c,
                                                  at::Device device, at::ScalarType dtype,
                                                  const std::string& name = "");

// Either of the two, on the model's device and dtype.
std::shared_ptr<const LoraAdapter> load_adapter(const AdapterSource& source, const Model& model);

// W += sign * scale * A B on every wrapped matrix (its transpose for [out, in] matrices): sign +1
// merges the adapter into the base model, -1 takes it back out. InputError for a module the
// matrices lack, or matrices a quantization released.
void merge_lora_matrices(LinearMatrices& matrices, const LoraAdapter& adapter, double sign = 1.0);
// The same over an architecture's weights (Gpt2Weights, LlamaWeights: their linear_matrices()).
template <class Weights>
void merge_lora(Weights& weights, const LoraAdapter& adapter, double sign = 1.0) {
  LinearMatrices matrices = weights.linear_matrices();
  merge_lora_matrices(matrices, adapter, sign);
}

}  // namespace servelab

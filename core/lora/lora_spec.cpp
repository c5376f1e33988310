#include "lora/lora_spec.h"

#include "util/errors.h"

namespace servelab {

const char* multi_lora_strategy_name(MultiLoraStrategy s) {
  switch (s) {
    case MultiLoraStrategy::Loop:
      return "loop";
    case MultiLoraStrategy::Gathered:
      return "gathered";
    case MultiLoraStrategy::Segmented:
      return "segmented";
  }
  return "?";
}

std::vector<std::string> multi_lora_strategy_names() { return {"loop", "gathered", "segmented"}; }

MultiLoraStrategy parse_multi_lora_strategy(const std::string& name) {
  if (name == "loop") return MultiLoraStrategy::Loop;
  if (name == "gathered") return MultiLoraStrategy::Gathered;
  if (name == "segmented") return MultiLoraStrategy::Segmented;
  throw InputError("unknown multi-LoRA strategy '" + name + "' (choose one of loop, gathered, segmented)");
}

std::vector<std::string> lora_module_names() {
  return {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
}

}  // namespace servelab

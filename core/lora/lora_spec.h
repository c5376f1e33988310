#pragma once
// LoRA adapters and multi-LoRA strategies as plain names and descriptions the CLI and the GUI
// share. Torch-free.
#include <cstdint>
#include <string>
#include <vector>

namespace servelab {

// How a batch whose rows use different adapters computes x A B (lesson 6 and beyond).
enum class MultiLoraStrategy {
  Loop,       // the course's: one row at a time, y[i] += x[i] A_i B_i
  Gathered,   // the course's: index_select every row's A and B from one stack, one batched matmul
  Segmented,  // rows grouped by adapter, one product pair per segment (Punica's SGMV idea)
};
const char* multi_lora_strategy_name(MultiLoraStrategy s);
// loop, gathered, segmented. Throws InputError naming the accepted ones.
MultiLoraStrategy parse_multi_lora_strategy(const std::string& name);
std::vector<std::string> multi_lora_strategy_names();

// GPT-2 modules a LoRA may wrap, by the names PEFT targets: "attn.c_attn", "attn.c_proj",
// "mlp.c_fc", "mlp.c_proj". Other architectures' come from their projection tables
// (Model::projections(), lora_adapter.h).
std::vector<std::string> lora_module_names();

// Where an adapter comes from: a PEFT folder, or seeded random weights for experiments.
struct AdapterSource {
  std::string name;      // unique within a run
  std::string peft_dir;  // adapter_config.json + adapter_model.safetensors; empty: random
  // Random adapters only.
  int64_t rank = 8;
  double alpha = 16;
  // Module names inside a block, as PEFT's target_modules entries ("self_attn.q_proj" or "q_proj");
  // empty: every projection the model has, whatever its architecture.
  std::vector<std::string> modules;
  uint64_t seed = 0;
};

// A loaded adapter, as the faces show it.
struct AdapterInfo {
  std::string name;
  std::string source;  // "peft <dir>" or "random (seed N)"
  int64_t rank = 0;    // the largest rank over its matrices
  double alpha = 0;
  double scale = 0;                  // alpha / r (alpha / sqrt(r) with rsLoRA)
  std::vector<std::string> modules;  // wrapped modules, "h.0.attn.c_attn", "layers.0.self_attn.q_proj", ...
  int64_t parameters = 0;            // |A| + |B| over every wrapped matrix
  int64_t bytes = 0;
  int64_t base_parameters = 0;  // |W| over the same matrices
};

// Counters of the adapter cache of a continuous run (LoRAX / S-LoRA keep a bounded set of
// adapters loaded and evict the least recently used one that no running request needs).
struct AdapterCacheStats {
  int64_t capacity = 0;  // adapters held at most
  int64_t loads = 0;     // read from a folder or made from a seed
  int64_t hits = 0;      // requested and already loaded
  int64_t evictions = 0;
  int64_t resident = 0;  // adapters loaded now
  int64_t resident_bytes = 0;
};

}  // namespace servelab

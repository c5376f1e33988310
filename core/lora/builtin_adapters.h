#pragma once
// The built-in adapters (docs/adapters.md): three LoRA adapters trained by scripts/train_adapters on
// the built-in SmolLM2-135M-Instruct, each doing one of the course's lesson-7 jobs, registered under
// the course's ids so that its client code (adapter_source "hub") finds them with no Hugging Face
// cache. Their folders ship with the app: share/servelab/adapters/<folder>/ (util/data_paths.h),
// else the build tree's resources/adapters/ (compiled in; not in packaged builds). Torch-free.
#include <string>
#include <vector>

#include "lora/lora_spec.h"

namespace servelab {

struct BuiltinAdapter {
  std::string id;      // the course's id: "predibase/conllpp"
  std::string folder;  // under adapters/: "conllpp"
  std::string job;     // what it does, in a few words
  // The prompt it was trained on: the course's template, `{input}` where the input goes (the
  // course's Python format escapes already undone: `{"person": ...` is literal).
  std::string prompt_template;
  std::string example_input;  // the course's own example for this adapter
  int max_new_tokens = 64;    // enough for its answer
};

// The three, in the course's order: hellaswag_processed, cnn, conllpp.
const std::vector<BuiltinAdapter>& builtin_adapters();
// The built-in adapter registered as id, or nullptr.
const BuiltinAdapter* find_builtin_adapter(const std::string& id);
// The built-in adapter a source is: its name is a built-in id and its folder that adapter's
// folder (in whichever data folder); nullptr otherwise (a random adapter, any other folder).
const BuiltinAdapter* builtin_adapter_of(const AdapterSource& source);
// prompt_template with `{input}` replaced by input.
std::string builtin_adapter_prompt(const BuiltinAdapter& adapter, const std::string& input);

// The folder holding the adapters' folders: $SERVELAB_ADAPTERS_DIR, else adapters/ in the first
// data_dirs() entry that has all three, else the build tree's copy (compiled in; not in packaged
// builds). Empty when none has them.
std::string builtin_adapters_dir();
// AdapterSource per built-in adapter (name = the course's id, peft_dir its folder); empty when
// builtin_adapters_dir() is.
std::vector<AdapterSource> builtin_adapter_sources();

}  // namespace servelab

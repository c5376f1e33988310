#include "model/architecture.h"

#include <algorithm>

#include "model/llama_config.h"  // read_model_type
#include "util/errors.h"

namespace servelab {

// Each architecture's file defines its record.
Architecture gpt2_architecture();    // model/gpt2_architecture.cpp
Architecture llama_architecture();   // model/llama_architecture.cpp
Architecture qwen3_architecture();   // model/qwen3_architecture.cpp
Architecture gemma2_architecture();  // model/gemma2_architecture.cpp
Architecture gemma3_architecture();  // model/gemma3_architecture.cpp
Architecture phi3_architecture();    // model/phi3_architecture.cpp

// The registrations: one line per architecture.
const std::vector<Architecture>& architectures() {
  static const std::vector<Architecture> all = {
      gpt2_architecture(),   llama_architecture(),  qwen3_architecture(),
      gemma2_architecture(), gemma3_architecture(), phi3_architecture(),
  };
  return all;
}

namespace {

std::string joined(std::vector<std::string> Architecture::*names) {
  std::string out;
  for (const Architecture& a : architectures())
    for (const std::string& n : a.*names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

bool lists(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

std::string supported_model_types() { return joined(&Architecture::model_types); }
std::string supported_gguf_architectures() { return joined(&Architecture::gguf_architectures); }

const Architecture& architecture_named(const std::string& name) {
  for (const Architecture& a : architectures())
    if (a.name == name) return a;
  throw InputError("no registered architecture is called \"" + name + "\"");
}

const Architecture& architecture_of(const Model& model) {
  return architecture_named(model.shape().architecture);
}

const Architecture& architecture_for_model_type(const std::string& model_type, const std::string& source) {
  for (const Architecture& a : architectures())
    if (lists(a.model_types, model_type)) return a;
  throw ModelFormatError(source + ": model_type \"" + model_type +
                         "\" is not supported (supported: " + supported_model_types() + ")");
}

const Architecture& architecture_for_config(const std::string& config_json) {
  return architecture_for_model_type(read_model_type(config_json), "config.json at " + config_json);
}

const Architecture& architecture_for_gguf(const std::string& gguf_architecture, const std::string& source) {
  for (const Architecture& a : architectures())
    if (lists(a.gguf_architectures, gguf_architecture)) return a;
  throw ModelFormatError(source + ": general.architecture \"" + gguf_architecture +
                         "\" is not supported (supported: " + supported_gguf_architectures() + ")");
}

}  // namespace servelab

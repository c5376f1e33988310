// What servelab-cli's subcommands share. See cli_common.h.
#include "cli_common.h"

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "cli_chat.h"
#include "cli_common.h"
#include "cli_loadgen.h"
#include "cli_models.h"
#include "cli_roofline.h"
#include "cli_serve.h"
#include "cli_speculative.h"
#include "cli_usage.h"
#include "experiments/adapter_serving.h"
#include "experiments/batch_sweep.h"
#include "experiments/chunked_prefill.h"
#include "experiments/course_benchmark.h"
#include "experiments/kv_cache_timing.h"
#include "experiments/multi_lora.h"
#include "experiments/paged_kv.h"
#include "experiments/quantization.h"
#include "experiments/sync_vs_continuous.h"
#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "lora/lora_adapter.h"
#include "model/engine.h"
#include "model/gguf_file.h"
#include "model/model_export.h"
#include "model/safetensors_file.h"
#include "serve/http_server.h"
#include "serve/load_generator.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/prompt.h"
#include "tokenizer/tokenizer.h"
#include "util/cpu_features.h"
#include "util/device.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

using nlohmann::json;
namespace fs = std::filesystem;

// The generated text is coloured after its prompt only for a person at a terminal: never into a
// pipe or a file (`servelab-cli generate ... | tail` gets plain text), and never when NO_COLOR is
// set to a non-empty value (https://no-color.org).
bool colour_output() {
  static const bool on = [] {
    const char* no_color = std::getenv("NO_COLOR");
    return isatty(STDOUT_FILENO) == 1 && !(no_color && *no_color);
  }();
  return on;
}
const char* colour_generated() { return colour_output() ? "\x1b[31m" : ""; }
const char* colour_reset() { return colour_output() ? "\x1b[0m" : ""; }

const std::vector<std::string> kCoursePrompts = {"The quick brown fox jumped over the",
                                                 "The rain in Spain falls", "What comes up must"};

void check_speculative_flags(CLI::App* cmd, const SpeculativeArgs& a) {
  const bool on = a.enabled();
  for (const char* flag :
       {"--num-speculative-tokens", "--prompt-lookup-max", "--prompt-lookup-min", "--draft-model"}) {
    if (!cmd->count(flag)) continue;
    if (!on) throw UsageError(std::string(flag) + " needs --speculative ngram or draft");
    const bool ngram_only = std::string(flag).rfind("--prompt-lookup", 0) == 0;
    if (ngram_only && a.method != "ngram")
      throw UsageError(std::string(flag) + " is a setting of --speculative ngram");
    if (std::string(flag) == "--draft-model" && a.method != "draft")
      throw UsageError("--draft-model is a setting of --speculative draft");
  }
}

std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw InputError(what + ": \"" + item + "\" is not an integer");
    }
  }
  if (out.empty()) throw InputError(what + " is empty");
  return out;
}

// parse_int_list, each value checked against [lo, hi] before anything is built from it.
std::vector<int64_t> parse_int_list(const std::string& text, const std::string& what, int64_t lo,
                                    int64_t hi) {
  std::vector<int64_t> out = parse_int_list(text, what);
  for (int64_t v : out) limits::check_range(what, v, lo, hi);
  return out;
}

void print_json(const json& j) { std::cout << j.dump() << "\n"; }

// The upper bound of a count, named by its option, before the engine loads or builds anything;
// lower bounds are the engine's (its messages name them the same way for every face).
void at_most(const std::string& option, int64_t value, int64_t hi) {
  if (value > hi) limits::check_range(option, value, std::numeric_limits<int64_t>::min(), hi);
}

// A comma-separated list of names; an empty list or an empty item ("a,,b") is refused, never read
// as "the defaults".
std::vector<std::string> split_list(const std::string& text, const std::string& what) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) throw InputError(what + " has an empty item in \"" + text + "\"");
    out.push_back(item);
  }
  if (out.empty() || text.back() == ',') throw InputError(what + " has an empty item in \"" + text + "\"");
  return out;
}

}  // namespace servelab

#include "lora/builtin_adapters.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "util/data_paths.h"

namespace fs = std::filesystem;

namespace servelab {

namespace {

// The course's lesson-7 templates (pt_hellaswag_processed, pt_cnn, pt_conllpp), as Python's
// str.format leaves them.
const char* const kHellaswag =
    "You are provided with an incomplete passage below. Please read the passage and then finish it with an "
    "appropriate response. For example:\n"
    "### Passage: My friend and I think alike. We\n"
    "### Ending: often finish each other's sentences.\n"
    "Now please finish the following passage:\n"
    "### Passage: {input}\n"
    "### Ending: ";
const char* const kCnn =
    "You are given a news article below. Please summarize the article, including only its highlights.\n"
    "### Article: {input}\n"
    "### Summary: ";
const char* const kConllpp =
    "\n"
    "Your task is a Named Entity Recognition (NER) task. Predict the category of\n"
    "each entity, then place the entity into the list associated with the\n"
    "category in an output JSON payload. Below is an example:\n"
    "Input: EU rejects German call to boycott British lamb . Output: {\"person\":\n"
    "[], \"organization\": [\"EU\"], \"location\": [], \"miscellaneous\": [\"German\",\n"
    "\"British\"]}\n"
    "Now, complete the task.\n"
    "Input: {input} Output:";

bool has_all(const fs::path& dir) {
  for (const BuiltinAdapter& a : builtin_adapters()) {
    std::error_code ec;
    if (!fs::exists(dir / a.folder / "adapter_config.json", ec) ||
        !fs::exists(dir / a.folder / "adapter_model.safetensors", ec))
      return false;
  }
  return true;
}

}  // namespace

const std::vector<BuiltinAdapter>& builtin_adapters() {
  static const std::vector<BuiltinAdapter> all = {
      {"predibase/hellaswag_processed", "hellaswag_processed", "finishes a passage", kHellaswag,
       "Numerous people are watching others on a field. Trainers are playing frisbee with their dogs. the "
       "dogs",
       24},
      {"predibase/cnn", "cnn", "summarises a news article", kCnn,
       "(CNN)Former Vice President Walter Mondale was released from the Mayo Clinic on Saturday after being "
       "admitted with influenza, hospital spokeswoman Kelley Luckstein said. \"He's doing well. We treated "
       "him "
       "for flu and cold symptoms and he was released today,\" she said. Mondale, 87, was diagnosed after he "
       "went to the hospital for a routine checkup following a fever, former President Jimmy Carter said "
       "Friday. \"He is in the bed right this moment, but looking forward to come back home,\" Carter said "
       "during a speech at a Nobel Peace Prize Forum in Minneapolis. \"He said tell everybody he is doing "
       "well.\" Mondale underwent treatment at the Mayo Clinic in Rochester, Minnesota. The 42nd vice "
       "president served under Carter between 1977 and 1981, and later ran for President, but lost to Ronald "
       "Reagan. But not before he made history by naming a woman, U.S. Rep. Geraldine A. Ferraro of New "
       "York, "
       "as his running mate. Before that, the former lawyer was a U.S. senator from Minnesota. His wife, "
       "Joan "
       "Mondale, died last year.",
       64},
      {"predibase/conllpp", "conllpp", "named entities as JSON", kConllpp,
       "Only France and Britain backed Fischler 's proposal .", 64},
  };
  return all;
}

const BuiltinAdapter* find_builtin_adapter(const std::string& id) {
  for (const BuiltinAdapter& a : builtin_adapters())
    if (a.id == id) return &a;
  return nullptr;
}

const BuiltinAdapter* builtin_adapter_of(const AdapterSource& source) {
  const BuiltinAdapter* a = find_builtin_adapter(source.name);
  if (!a || source.peft_dir.empty()) return nullptr;
  fs::path dir(source.peft_dir);
  if (!dir.has_filename()) dir = dir.parent_path();  // a trailing slash
  return dir.filename() == a->folder ? a : nullptr;
}

std::string builtin_adapter_prompt(const BuiltinAdapter& adapter, const std::string& input) {
  std::string out = adapter.prompt_template;
  const std::string mark = "{input}";
  const size_t at = out.find(mark);
  if (at != std::string::npos) out.replace(at, mark.size(), input);
  return out;
}

std::string builtin_adapters_dir() {
  if (const char* env = std::getenv("SERVELAB_ADAPTERS_DIR"); env && *env)
    return has_all(env) ? std::string(env) : std::string();
  for (const fs::path& dir : data_dirs())
    if (has_all(dir / "adapters")) return (dir / "adapters").string();
  if (build_tree_data_allowed() && has_all(SERVELAB_BUILTIN_ADAPTERS_DIR))
    return SERVELAB_BUILTIN_ADAPTERS_DIR;
  return "";
}

std::vector<AdapterSource> builtin_adapter_sources() {
  std::vector<AdapterSource> out;
  const std::string dir = builtin_adapters_dir();
  if (dir.empty()) return out;
  for (const BuiltinAdapter& a : builtin_adapters()) {
    AdapterSource s;
    s.name = a.id;
    s.peft_dir = (fs::path(dir) / a.folder).string();
    out.push_back(s);
  }
  return out;
}

}  // namespace servelab

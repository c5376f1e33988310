#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/gpt2_bpe_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace servelab {
namespace {

using json = nlohmann::json;

std::string read_text(const std::filesystem::path& path) {
  if (const std::string why = file_problem(path.string()); !why.empty() && why != "not found")
    throw TokenizerError(path.string() + ": " + why);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError(path.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json read_json(const std::filesystem::path& path) {
  try {
    return json::parse(read_text(path));
  } catch (const json::exception& e) {
    throw TokenizerError(path.string() + ": malformed JSON: " + e.what());
  }
}

// A special token as tokenizer_config.json writes it: a string, or an AddedToken object with
// "content"; null is none.
std::optional<std::string> token_field(const json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string())
    return v["content"].get<std::string>();
  throw TokenizerError(source + ": " + key + " must be a string or an object with \"content\", got " +
                       v.dump());
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path folder(dir);
  TokenizerConfig config;
  const fs::path tc = folder / "tokenizer_config.json";
  if (fs::is_regular_file(tc, ec)) {
    const std::string source = tc.string();
    config.source = source;
    const json j = read_json(tc);
    if (!j.is_object()) throw TokenizerError(source + ": expected a JSON object");
    config.bos_token = token_field(j, "bos_token", source);
    config.eos_token = token_field(j, "eos_token", source);
    if (j.contains("add_bos_token") && !j["add_bos_token"].is_null()) {
      if (!j["add_bos_token"].is_boolean())
        throw TokenizerError(source + ": add_bos_token must be true or false");
      config.add_bos = j["add_bos_token"].get<bool>();
    }
    if (j.contains("chat_template") && !j["chat_template"].is_null()) {
      const json& t = j["chat_template"];
      if (t.is_string()) {
        config.chat_template = t.get<std::string>();
      } else if (t.is_array()) {
        // The list form names its templates ("default", "tool_use", "rag"); transformers takes
        // "default" when asked for none by name, and so do we. Without one there is no template.
        for (const json& entry : t) {
          if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
              !entry["name"].is_string() || !entry["template"].is_string()) {
            throw TokenizerError(source +
                                 ": chat_template list entries need string \"name\" and \"template\"");
          }
          if (entry["name"] == "default") config.chat_template = entry["template"].get<std::string>();
        }
      } else {
        throw TokenizerError(source + ": chat_template must be a string or a list of {name, template}");
      }
    }
  }
  // Newer transformers save the template beside the config; it wins, as it does in transformers.
  const fs::path jinja = folder / "chat_template.jinja";
  if (fs::is_regular_file(jinja, ec)) {
    config.chat_template = read_text(jinja);
    config.source += (config.source.empty() ? "" : " + ") + jinja.string();
  }
  const fs::path gc = folder / "generation_config.json";
  if (fs::is_regular_file(gc, ec)) {
    const std::string source = gc.string();
    const json j = read_json(gc);
    if (j.is_object() && j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
      const json& e = j["eos_token_id"];
      const auto add = [&](const json& v) {
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
          throw TokenizerError(source + ": eos_token_id entries must be non-negative integers, got " +
                               v.dump());
        }
        config.eos_ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
      };
      if (e.is_array()) {
        for (const json& v : e) add(v);
      } else {
        add(e);
      }
      config.source += (config.source.empty() ? "" : " + ") + source;
    }
  }
  return config;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path folder(dir);
  if (!fs::is_directory(folder, ec)) {
    throw TokenizerError(fs::exists(folder, ec)
                             ? "tokenizer folder '" + dir +
                                   "' is a file, not a folder (give the folder that holds tokenizer.json or "
                                   "vocab.json + merges.txt)"
                             : "tokenizer folder '" + dir + "' does not exist");
  }
  // Present at all: a folder where a file belongs is then refused by its reader, by name.
  const auto has = [&](const char* name) { return fs::exists(folder / name, ec); };
  if (has("tokenizer.json")) {
    return Gpt2BpeTokenizer::from_tokenizer_json((folder / "tokenizer.json").string(),
                                                 read_tokenizer_config(dir));
  }
  if (has("vocab.json") && has("merges.txt")) {
    return Gpt2BpeTokenizer::from_vocab_merges((folder / "vocab.json").string(),
                                               (folder / "merges.txt").string(), read_tokenizer_config(dir));
  }
  // SentencePiece: prefer the conventional name, else the first *.model in name order.
  std::vector<fs::path> models;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    if (entry.is_regular_file(ec) && entry.path().extension() == ".model") models.push_back(entry.path());
  }
  if (!models.empty()) {
    std::sort(models.begin(), models.end());
    const auto named = std::find_if(models.begin(), models.end(),
                                    [](const fs::path& p) { return p.filename() == "tokenizer.model"; });
    return std::make_unique<SentencePieceTokenizer>(
        (named != models.end() ? *named : models.front()).string(), read_tokenizer_config(dir));
  }
  std::string msg = "no tokenizer in folder '" + dir +
                    "': looked for tokenizer.json, vocab.json + merges.txt, or a SentencePiece *.model file";
  if (has("vocab.json")) msg += " (vocab.json is there but merges.txt is missing)";
  if (has("merges.txt")) msg += " (merges.txt is there but vocab.json is missing)";
  throw TokenizerError(msg);
}

}  // namespace servelab

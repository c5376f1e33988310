// The byte-level BPE's loaders: from GPT-2's vocab.json + merges.txt, from a Hugging Face
// tokenizer.json, and from plain parts (a GGUF's metadata). Each reads and checks its source into a
// bpe_detail::RawTokenizer; the engine (gpt2_bpe_tokenizer.cpp) builds the tokenizer from that.
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/bpe_detail.h"
#include "tokenizer/gpt2_bpe_tokenizer.h"

namespace servelab {
namespace {

using json = nlohmann::json;
using bpe_detail::AddedToken;
using bpe_detail::kGpt2Split;
using bpe_detail::kLlama3Split;
using bpe_detail::kQwen2Split;
using bpe_detail::pre_tokenizer_spec;
using bpe_detail::PreTokenizerSpec;
using bpe_detail::RawTokenizer;

std::string read_file(const std::string& path) {
  if (const std::string why = file_problem(path); !why.empty() && why != "not found")
    throw TokenizerError(path + ": " + why + " (a tokenizer file)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError(path + ": cannot open tokenizer file (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw TokenizerError(path + ": read error");
  return ss.str();
}

json parse_json(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw TokenizerError(path + ": malformed JSON: " + e.what());
  }
}

std::unordered_map<std::string, int32_t> vocab_from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw TokenizerError(source + ": vocabulary must be a JSON object of token -> id");
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(j.size());
  for (const auto& [token, id] : j.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      throw TokenizerError(source + ": token '" + token + "' has id " + id.dump() +
                           "; ids must be non-negative integers");
    }
    vocab.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
  }
  return vocab;
}

// "<|endoftext|>" among the added tokens is eos, bos and a stop token, as transformers makes it for
// GPT-2; tokenizer_config.json may name others (apply_config).
void endoftext_specials(RawTokenizer& raw) {
  for (const AddedToken& a : raw.added) {
    if (a.content == "<|endoftext|>") {
      raw.eos = a.id;
      if (!raw.bos) raw.bos = a.id;
      raw.extra_stops.push_back(a.id);
    }
  }
}

// What a model folder's tokenizer_config.json and generation_config.json add.
void apply_config(RawTokenizer& raw, const TokenizerConfig& config) {
  const auto id_of = [&](const std::string& token, const char* field) -> int32_t {
    for (const AddedToken& a : raw.added) {
      if (a.content == token) return a.id;
    }
    const auto it = raw.vocab.find(token);
    if (it == raw.vocab.end()) {
      throw TokenizerError(config.source + ": " + field + " '" + token +
                           "' is not a token of the vocabulary");
    }
    return it->second;
  };
  if (config.bos_token) raw.bos = id_of(*config.bos_token, "bos_token");
  if (config.eos_token) raw.eos = id_of(*config.eos_token, "eos_token");
  if (config.add_bos) raw.add_bos = *config.add_bos;
  raw.extra_stops.insert(raw.extra_stops.end(), config.eos_ids.begin(), config.eos_ids.end());
  if (!config.chat_template.empty()) raw.chat_template = config.chat_template;
  if (config.bos_token || config.eos_token || !config.eos_ids.empty()) raw.specials_source = config.source;
}

// "ByteLevel", "Sequence[Digits, ByteLevel]": what a tokenizer.json pre_tokenizer is, for messages.
std::string describe_pre_tokenizer(const json& pt) {
  if (!pt.is_object()) return pt.dump();
  std::string type = pt.value("type", std::string("?"));
  if (type == "Sequence" && pt.contains("pretokenizers") && pt["pretokenizers"].is_array()) {
    type += "[";
    for (size_t i = 0; i < pt["pretokenizers"].size(); ++i) {
      type += (i ? ", " : "") + describe_pre_tokenizer(pt["pretokenizers"][i]);
    }
    type += "]";
  }
  return type;
}

bool json_bool(const json& j, const char* key, bool fallback) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : fallback;
}

// The pre_tokenizer of a tokenizer.json as one of our kinds; TokenizerError naming it otherwise.
PreTokenizerSpec pre_tokenizer_from_json(const json& j, const std::string& path) {
  if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null()) return {};  // as before: GPT-2's regex
  const json& pt = j["pre_tokenizer"];
  const std::string supported =
      "; supported: ByteLevel(use_regex=true), Sequence[Digits(individual_digits=true), "
      "ByteLevel(use_regex=true)], Sequence[Split(Regex, Isolated), ByteLevel(use_regex=false)], "
      "all with add_prefix_space=false";
  const auto refuse = [&](const std::string& why) {
    throw TokenizerError(path + ": pre_tokenizer " + describe_pre_tokenizer(pt) + " is not supported (" +
                         why + ")" + supported);
  };
  const auto byte_level = [&](const json& b, bool use_regex) {
    if (!b.is_object() || b.value("type", std::string()) != "ByteLevel") return false;
    if (json_bool(b, "add_prefix_space", false)) refuse("add_prefix_space=true");
    if (json_bool(b, "use_regex", true) != use_regex)
      refuse(std::string("ByteLevel with use_regex=") + (use_regex ? "false" : "true") + " here");
    return true;
  };
  if (!pt.is_object()) refuse("not an object");
  const std::string type = pt.value("type", std::string());
  if (type == "ByteLevel") {
    byte_level(pt, true);
    return {};
  }
  if (type != "Sequence" || !pt.contains("pretokenizers") || !pt["pretokenizers"].is_array() ||
      pt["pretokenizers"].size() != 2) {
    refuse("unknown shape");
  }
  const json& first = pt["pretokenizers"][0];
  const json& second = pt["pretokenizers"][1];
  const std::string first_type = first.is_object() ? first.value("type", std::string()) : std::string();
  if (first_type == "Digits") {
    if (!json_bool(first, "individual_digits", false)) refuse("Digits with individual_digits=false");
    if (!byte_level(second, true)) refuse("Digits must be followed by ByteLevel");
    return pre_tokenizer_spec(PreTokenizerKind::Smollm);
  }
  if (first_type == "Split") {
    if (!byte_level(second, false)) refuse("Split must be followed by ByteLevel");
    if (first.value("behavior", std::string()) != "Isolated") refuse("Split behavior must be Isolated");
    if (json_bool(first, "invert", false)) refuse("Split with invert=true");
    if (!first.contains("pattern") || !first["pattern"].is_object() || !first["pattern"].contains("Regex") ||
        !first["pattern"]["Regex"].is_string()) {
      refuse("Split pattern must be {\"Regex\": ...}");
    }
    const std::string regex = first["pattern"]["Regex"].get<std::string>();
    if (regex == kGpt2Split) return pre_tokenizer_spec(PreTokenizerKind::Gpt2);
    if (regex == kLlama3Split) return pre_tokenizer_spec(PreTokenizerKind::Llama3);
    if (regex == kQwen2Split) return pre_tokenizer_spec(PreTokenizerKind::Qwen2);
    return pre_tokenizer_spec(PreTokenizerKind::Regex, regex);
  }
  refuse("unknown shape");
  return {};  // not reached
}

// A TemplateProcessing post_processor (alone or in a Sequence) whose single-sequence template starts
// with a special token puts that token (Llama 3's <|begin_of_text|>) before every encoded text:
// that is our add_bos. Tokens it appends after the text are not ours to add; they are ignored.
void bos_from_post_processor(const json& pp, RawTokenizer& raw) {
  if (!pp.is_object()) return;
  const std::string type = pp.value("type", std::string());
  if (type == "Sequence" && pp.contains("processors") && pp["processors"].is_array()) {
    for (const json& p : pp["processors"]) bos_from_post_processor(p, raw);
    return;
  }
  if (type != "TemplateProcessing" || !pp.contains("single") || !pp["single"].is_array() ||
      pp["single"].empty()) {
    return;
  }
  const json& head = pp["single"][0];
  if (!head.is_object() || !head.contains("SpecialToken") || !head["SpecialToken"].is_object()) return;
  const json name = head["SpecialToken"].value("id", json());
  if (!name.is_string() || !pp.contains("special_tokens") || !pp["special_tokens"].is_object()) return;
  const json& entry = pp["special_tokens"].value(name.get<std::string>(), json());
  if (!entry.is_object() || !entry.contains("ids") || !entry["ids"].is_array() || entry["ids"].size() != 1 ||
      !entry["ids"][0].is_number_integer()) {
    return;
  }
  const int64_t id = entry["ids"][0].get<int64_t>();
  if (id < 0 || id > INT32_MAX) return;
  raw.bos = static_cast<int32_t>(id);
  raw.add_bos = true;
}

}  // namespace

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::from_vocab_merges(const std::string& vocab_json_path,
                                                                      const std::string& merges_txt_path,
                                                                      const TokenizerConfig& config) {
  RawTokenizer raw;
  raw.vocab_source = vocab_json_path;
  raw.merges_source = merges_txt_path;
  raw.specials_source = vocab_json_path;
  raw.vocab = vocab_from_json(parse_json(vocab_json_path), vocab_json_path);

  const std::string text = read_file(merges_txt_path);
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      throw TokenizerError(merges_txt_path + ": line " + std::to_string(line_no) +
                           ": expected two tokens separated by one space, got '" + std::string(line) + "'");
    }
    raw.merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
    raw.merge_lines.push_back(line_no);
  }
  // transformers' GPT2Tokenizer registers <|endoftext|> as its bos/eos/unk special token.
  if (raw.vocab.count("<|endoftext|>")) {
    AddedToken eot;
    eot.content = "<|endoftext|>";
    eot.id = raw.vocab.at("<|endoftext|>");
    raw.added.push_back(eot);
  }
  endoftext_specials(raw);
  apply_config(raw, config);
  return from_raw(std::move(raw));
}

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::from_tokenizer_json(const std::string& path,
                                                                        const TokenizerConfig& config) {
  const json j = parse_json(path);
  auto fail = [&](const std::string& what) { throw TokenizerError(path + ": " + what); };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail("no \"model\" object");
  const json& model = j["model"];
  if (model.contains("type") && model["type"] != "BPE") {
    fail("model.type is " + model["type"].dump() + "; only BPE (GPT-2 style) is supported here");
  }
  // Options that would change the result and that we do not implement: refuse rather than ignore.
  if (j.contains("normalizer") && !j["normalizer"].is_null()) {
    fail("a normalizer is not supported (got " + j["normalizer"].value("type", std::string("?")) + ")");
  }
  RawTokenizer raw;
  raw.pre = pre_tokenizer_from_json(j, path);
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      fail(std::string("model.") + key + " is not supported");
    }
  }
  if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"].get<double>() > 0) {
    fail("model.dropout is not supported");
  }
  if (json_bool(model, "byte_fallback", false)) fail("model.byte_fallback=true is not supported");
  raw.ignore_merges = json_bool(model, "ignore_merges", false);
  if (!model.contains("vocab")) fail("no model.vocab");
  if (!model.contains("merges") || !model["merges"].is_array()) fail("no model.merges list");

  raw.vocab_source = path + " (model.vocab)";
  raw.merges_source = path + " (model.merges)";
  raw.specials_source = path;
  raw.merges_are_lines = false;
  raw.vocab = vocab_from_json(model["vocab"], raw.vocab_source);
  // A missing byte is dropped (see bpe()); with an unk_token HF would give unk instead.
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    for (int b = 0; b < 256; ++b) {
      if (!raw.vocab.count(byte_symbol(static_cast<uint8_t>(b)))) {
        fail("model.unk_token is set and the vocabulary lacks the byte token of byte " + std::to_string(b) +
             "; unknown-token fallback is not supported");
      }
    }
  }
  const json& merges = model["merges"];
  raw.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos) {
        fail("model.merges[" + std::to_string(i) + "] is \"" + s + "\"; expected \"a b\"");
      }
      raw.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      raw.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("model.merges[" + std::to_string(i) + "] is " + m.dump() + "; expected \"a b\" or [\"a\", \"b\"]");
    }
    raw.merge_lines.push_back(i);
  }
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) fail("added_tokens must be a list");
    for (const json& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
          !t["content"].is_string() || t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() > INT32_MAX) {
        fail("added_tokens entry " + t.dump() +
             " needs a non-negative integer \"id\" and a string \"content\"");
      }
      AddedToken a;
      a.id = static_cast<int32_t>(t["id"].get<int64_t>());
      a.content = t["content"].get<std::string>();
      a.single_word = t.value("single_word", false);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.normalized = t.value("normalized", true);
      a.special = t.value("special", false);
      raw.added.push_back(std::move(a));
    }
  }
  endoftext_specials(raw);
  if (j.contains("post_processor")) bos_from_post_processor(j["post_processor"], raw);
  apply_config(raw, config);
  return from_raw(std::move(raw));
}

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::from_parts(const BpeParts& parts) {
  const std::string& src = parts.source.empty() ? std::string("tokenizer parts") : parts.source;
  const auto fail = [&](const std::string& what) { throw TokenizerError(src + ": " + what); };
  // Sizes first: nothing is allocated for a vocabulary that cannot be right.
  if (parts.tokens.empty()) fail("the vocabulary (tokenizer.ggml.tokens) is empty");
  if (parts.tokens.size() > static_cast<size_t>(INT32_MAX)) {
    fail("the vocabulary has " + std::to_string(parts.tokens.size()) + " tokens; at most " +
         std::to_string(INT32_MAX) + " fit 32-bit ids");
  }
  const auto n = static_cast<int64_t>(parts.tokens.size());
  if (!parts.token_types.empty() && parts.token_types.size() != parts.tokens.size()) {
    fail("tokenizer.ggml.token_type has " + std::to_string(parts.token_types.size()) + " entries for " +
         std::to_string(parts.tokens.size()) + " tokens");
  }
  const auto pre = pre_tokenizer_from_name(parts.pre);
  if (!pre) {
    fail("pre-tokenizer '" + parts.pre +
         "' (tokenizer.ggml.pre) is not supported; known: gpt2, gpt-2, default, smollm, llama3, llama-v3, "
         "llama-bpe, falcon3, falcon-h1, pixtral, midm-2.0, lfm2, qwen2");
  }
  const auto check_id = [&](const std::optional<int32_t>& id, const char* what) {
    if (id && (*id < 0 || *id >= n)) {
      fail(std::string(what) + " " + std::to_string(*id) + " is out of range (vocabulary size " +
           std::to_string(n) + ")");
    }
  };
  check_id(parts.bos_id, "bos id");
  check_id(parts.eos_id, "eos id");
  check_id(parts.unk_id, "unk id");
  check_id(parts.pad_id, "padding id");
  for (const int32_t id : parts.extra_stop_ids) check_id(id, "stop id");

  RawTokenizer raw;
  raw.vocab_source = src + " (tokenizer.ggml.tokens)";
  raw.merges_source = src + " (tokenizer.ggml.merges)";
  raw.specials_source = src;
  raw.merges_are_lines = false;
  raw.pre = pre_tokenizer_spec(*pre);
  raw.ignore_merges = parts.ignore_merges.value_or(*pre == PreTokenizerKind::Llama3);
  raw.bos = parts.bos_id;
  raw.eos = parts.eos_id;
  raw.unk = parts.unk_id;
  raw.pad = parts.pad_id;
  raw.extra_stops = parts.extra_stop_ids;
  raw.add_bos = parts.add_bos;
  raw.chat_template = parts.chat_template;

  raw.vocab.reserve(parts.tokens.size());
  for (int32_t id = 0; id < n; ++id) {
    const std::string& token = parts.tokens[id];
    const int32_t type = parts.token_types.empty() ? 1 : parts.token_types[id];
    if (type < 0 || type > 6) {
      fail("token " + std::to_string(id) + " ('" + token + "') has token type " + std::to_string(type) +
           "; GGUF types are 0-6");
    }
    if (token.empty()) fail("token " + std::to_string(id) + " is the empty string");
    const auto [it, inserted] = raw.vocab.emplace(token, id);
    if (!inserted) {
      fail("token '" + token + "' appears twice, as id " + std::to_string(it->second) + " and id " +
           std::to_string(id));
    }
    // Control and user-defined tokens are matched whole in the text before BPE, as llama.cpp does
    // and as HF's tokenizer from the same GGUF does with its added tokens.
    if (type == 3 || type == 4) {
      AddedToken a;
      a.content = token;
      a.id = id;
      a.normalized = false;
      a.special = type == 3;
      raw.added.push_back(std::move(a));
    }
  }
  raw.merges.reserve(parts.merges.size());
  for (size_t i = 0; i < parts.merges.size(); ++i) {
    const std::string& m = parts.merges[i];
    // As llama.cpp reads a merge: split at the first space after the first character.
    const size_t space = m.size() > 1 ? m.find(' ', 1) : std::string::npos;
    if (space == std::string::npos || space + 1 == m.size()) {
      fail("merge #" + std::to_string(i) + " is \"" + m + "\"; expected \"a b\"");
    }
    raw.merges.emplace_back(m.substr(0, space), m.substr(space + 1));
    raw.merge_lines.push_back(i);
  }
  return from_raw(std::move(raw));
}

}  // namespace servelab

// Byte-level BPE beyond GPT-2, against Hugging Face: SmolLM2's tokenizer through both routes (HF's
// tokenizer.json made from the GGUF with its pre-tokenizer fixed, and the GGUF's own metadata
// through from_parts), tiny Llama 3 / Qwen2 / custom-regex tokenizers, and every malformed input to
// from_parts. The fixtures come from tests/oracle/make_bpe_fixtures.py (a CTest fixture writes them to
// $SERVELAB_TOKENIZER_ORACLE_DIR); tests that need them skip, saying why, when they are absent.
#include <QTemporaryDir>
#include <QtTest>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/gpt2_bpe_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "util/errors.h"

using namespace servelab;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

template <typename F>
std::string tokenizer_error(F&& fn) {
  try {
    fn();
  } catch (const TokenizerError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<wrong exception type: ") + e.what() + ">";
  }
  return "<no exception>";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

BpeParts parts_from_json(const json& j) {
  BpeParts p;
  p.tokens = j.at("tokens").get<std::vector<std::string>>();
  p.merges = j.at("merges").get<std::vector<std::string>>();
  p.token_types = j.at("token_types").get<std::vector<int32_t>>();
  p.pre = j.at("pre").get<std::string>();
  const auto id = [&](const char* key) -> std::optional<int32_t> {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    return j[key].get<int32_t>();
  };
  p.bos_id = id("bos_id");
  p.eos_id = id("eos_id");
  p.unk_id = id("unk_id");
  p.pad_id = id("pad_id");
  if (j.contains("add_bos") && j["add_bos"].is_boolean()) p.add_bos = j["add_bos"].get<bool>();
  if (j.contains("chat_template") && j["chat_template"].is_string()) p.chat_template = j["chat_template"];
  p.source = j.at("source").get<std::string>();
  return p;
}

// The tiny vocabulary of the malformed-parts checks: the 256 byte symbols, then "he", "ll", "hell",
// "<|end|>" (control); merges "h e", "l l", "he ll".
BpeParts tiny_parts() {
  BpeParts p;
  for (int b = 0; b < 256; ++b) p.tokens.push_back(Gpt2BpeTokenizer::byte_symbol(static_cast<uint8_t>(b)));
  for (const char* t : {"he", "ll", "hell", "<|end|>"}) p.tokens.push_back(t);
  p.merges = {"h e", "l l", "he ll"};
  p.token_types.assign(p.tokens.size(), 1);
  p.token_types.back() = 3;
  p.eos_id = 259;
  p.source = "tiny.gguf";
  return p;
}

}  // namespace

class TestTokenizerOracle : public QObject {
  Q_OBJECT

 private:
  std::string dir_;   // the fixture folder, "" when absent
  std::string skip_;  // why the HF comparisons skip
  json cases_;        // bpe_cases.json
  std::string smollm_skip_;
  std::unique_ptr<Gpt2BpeTokenizer> smol_json_, smol_parts_;

  // Every case's ids must be HF's; every decode must be HF's decode of them.
  void check_cases(const Gpt2BpeTokenizer& tok, const json& cases, const char* route) {
    int failures = 0;
    for (const auto& c : cases) {
      const std::string text = c["text"];
      const std::vector<int32_t> expected = c["ids"];
      const auto got = tok.encode(text);
      if (got != expected) {
        if (++failures <= 10) {
          qWarning("%s: case %s: got %s, HF gives %s", route, c["name"].get<std::string>().c_str(),
                   ids_str(got).c_str(), ids_str(expected).c_str());
        }
        continue;
      }
      const std::string decoded = c["decoded"];
      if (tok.decode(got) != decoded) {
        if (++failures <= 10)
          qWarning("%s: case %s: decode differs from HF's", route, c["name"].get<std::string>().c_str());
      }
    }
    QCOMPARE(failures, 0);
  }

#define REQUIRE_FIXTURES()                  \
  do {                                      \
    if (dir_.empty()) QSKIP(skip_.c_str()); \
  } while (false)
#define REQUIRE_SMOLLM()                                    \
  do {                                                      \
    REQUIRE_FIXTURES();                                     \
    if (!smollm_skip_.empty()) QSKIP(smollm_skip_.c_str()); \
  } while (false)

 private Q_SLOTS:
  void initTestCase() {
    const char* env = std::getenv("SERVELAB_TOKENIZER_ORACLE_DIR");
    if (!env || !*env) {
      skip_ =
          "SERVELAB_TOKENIZER_ORACLE_DIR is not set: run this suite through ctest, which writes the HF "
          "fixtures "
          "with tests/oracle/make_bpe_fixtures.py (needs .venv); the HF comparisons are skipped";
      return;
    }
    if (!fs::exists(fs::path(env) / "bpe_cases.json")) {
      skip_ = std::string("no ") + env +
              "/bpe_cases.json: the fixture script did not run (no .venv? run scripts/bootstrap); the HF "
              "comparisons are skipped";
      return;
    }
    dir_ = env;
    cases_ = json::parse(read_file(dir_ + "/bpe_cases.json"));
    if (cases_.contains("smollm2_skip")) {
      smollm_skip_ = "SmolLM2 checks skipped: " + cases_["smollm2_skip"].get<std::string>();
    } else {
      smol_json_ = Gpt2BpeTokenizer::from_tokenizer_json(dir_ + "/smollm2/tokenizer.json");
      smol_parts_ =
          Gpt2BpeTokenizer::from_parts(parts_from_json(json::parse(read_file(dir_ + "/smollm2_parts.json"))));
    }
  }

  // --- SmolLM2 (its GGUF) ---

  void smollm2_tokenizer_json_matches_hf() {
    REQUIRE_SMOLLM();
    QCOMPARE(smol_json_->pre_tokenizer(), PreTokenizerKind::Smollm);
    QCOMPARE(smol_json_->vocab_size(), 49152);
    QVERIFY(cases_["smollm2"].size() > 400);
    check_cases(*smol_json_, cases_["smollm2"], "smollm2 tokenizer.json");
  }

  void smollm2_from_parts_matches_hf() {
    REQUIRE_SMOLLM();
    QCOMPARE(smol_parts_->pre_tokenizer(), PreTokenizerKind::Smollm);
    QCOMPARE(smol_parts_->vocab_size(), 49152);
    QCOMPARE(smol_parts_->merge_count(), size_t{48900});
    check_cases(*smol_parts_, cases_["smollm2"], "smollm2 from_parts");
    for (int32_t id = 0; id < smol_parts_->vocab_size(); ++id) {
      if (smol_parts_->token_bytes(id) != smol_json_->token_bytes(id))
        QFAIL(("token bytes differ between the routes at id " + std::to_string(id)).c_str());
    }
  }

  void smollm2_missing_bytes_are_dropped_like_hf() {
    REQUIRE_SMOLLM();
    const std::vector<int> expected = cases_["smollm2_info"]["missing_bytes"];
    QCOMPARE(expected.size(), size_t{21});
    const auto& missing = smol_parts_->unencodable_bytes();
    QCOMPARE(std::vector<int>(missing.begin(), missing.end()), expected);
    QCOMPARE(std::vector<int>(smol_json_->unencodable_bytes().begin(), smol_json_->unencodable_bytes().end()),
             expected);
    QCOMPARE(smol_parts_->encode("\x04"), std::vector<int32_t>{});
    QCOMPARE(smol_parts_->encode("a\x04"
                                 "b"),
             (std::vector<int32_t>{81, 82}));
    QCOMPARE(smol_parts_->decode(smol_parts_->encode("hello\x04 world")), std::string("hello world"));
  }

  void smollm2_decode_round_trips_where_hf_does() {
    REQUIRE_SMOLLM();
    int round_trips = 0;
    for (const auto& c : cases_["smollm2"]) {
      const std::string text = c["text"];
      const std::string back = smol_parts_->decode(smol_parts_->encode(text));
      if (c["decoded"] == text) {
        ++round_trips;
        QVERIFY2(back == text, ("decode(encode(x)) != x for " + c["name"].get<std::string>()).c_str());
      } else {
        // Only the dropped bytes are lost.
        QVERIFY2(back == c["decoded"].get<std::string>(),
                 ("decode differs from HF's for " + c["name"].get<std::string>()).c_str());
      }
    }
    QVERIFY(round_trips > 300);
  }

  void smollm2_models_md_examples() {
    REQUIRE_SMOLLM();
    for (const Gpt2BpeTokenizer* tok : {smol_json_.get(), smol_parts_.get()}) {
      QCOMPARE(tok->encode("a  1"), (std::vector<int32_t>{81, 256, 33}));
      QCOMPARE(tok->encode("1 2  3   4"), (std::vector<int32_t>{33, 216, 34, 256, 35, 333, 36}));
      QCOMPARE(tok->encode("<|im_start|>user\nHi<|im_end|>\n"),
               (std::vector<int32_t>{1, 4093, 198, 26843, 2, 198}));
    }
  }

  void smollm2_specials_and_chat_template() {
    REQUIRE_SMOLLM();
    const Gpt2BpeTokenizer& tok = *smol_parts_;
    // GGUF: bos 1, eos 2, unk 0, pad 2; SmolLM2 also stops on <|endoftext|> (0), as llama.cpp does.
    QCOMPARE(tok.bos_id(), std::optional<int32_t>(1));
    QCOMPARE(tok.eos_id(), std::optional<int32_t>(2));
    QCOMPARE(tok.add_bos(), false);
    QCOMPARE(tok.token_display(1), std::string("<|im_start|>"));
    QCOMPARE(tok.token_id("<|im_end|>"), std::optional<int32_t>(2));
    QCOMPARE(tok.token_id("\xC4\xA0the"), std::optional<int32_t>(260));  // "Ġthe"
    QCOMPARE(tok.token_id("no such token"), std::optional<int32_t>());

    BpeParts parts = parts_from_json(json::parse(read_file(dir_ + "/smollm2_parts.json")));
    parts.extra_stop_ids = {0};
    const auto with_stops = Gpt2BpeTokenizer::from_parts(parts);
    QCOMPARE(with_stops->stop_ids(), (std::vector<int32_t>{2, 0}));
    parts.extra_stop_ids = {2, 0, 0};  // duplicates and eos itself collapse
    QCOMPARE(Gpt2BpeTokenizer::from_parts(parts)->stop_ids(), (std::vector<int32_t>{2, 0}));

    QVERIFY(!tok.chat_template().empty());
    const ChatTemplate chat = ChatTemplate::from_jinja(tok.chat_template(), tok.token_display(*tok.bos_id()),
                                                       tok.token_display(*tok.eos_id()));
    QCOMPARE(chat.family(), ChatFamily::ChatML);
    QCOMPARE(chat.default_system(),
             cases_["smollm2_info"]["chat_template_default_system"].get<std::string>());
    const std::string prompt = chat.format({{"user", "What is 2+2?"}});
    QCOMPARE(prompt,
             std::string("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                         "Hugging Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                         "<|im_start|>assistant\n"));
    const auto ids = tok.encode(prompt);
    QCOMPARE(ids.front(), 1);
    QCOMPARE(std::count(ids.begin(), ids.end(), 1), 3);  // three <|im_start|>, never split
    QCOMPARE(std::count(ids.begin(), ids.end(), 2), 2);
  }

  // --- Tiny Llama 3 / Qwen2 / custom-regex tokenizers ---

  void llama3_tokenizer_json_matches_hf() {
    REQUIRE_FIXTURES();
    const auto tok = Gpt2BpeTokenizer::from_tokenizer_json(dir_ + "/llama3/tokenizer.json");
    QCOMPARE(tok->pre_tokenizer(), PreTokenizerKind::Llama3);
    // The TemplateProcessing post-processor puts <|begin_of_text|> (id 0) first.
    QCOMPARE(tok->add_bos(), true);
    QCOMPARE(tok->bos_id(), std::optional<int32_t>(0));
    check_cases(*tok, cases_["llama3"], "llama3 tokenizer.json");
  }

  void llama3_from_parts_matches_hf_and_ignores_merges() {
    REQUIRE_FIXTURES();
    BpeParts parts = parts_from_json(json::parse(read_file(dir_ + "/llama3_parts.json")));
    QCOMPARE(parts.pre, std::string("llama-bpe"));
    const auto tok = Gpt2BpeTokenizer::from_parts(parts);
    QCOMPARE(tok->pre_tokenizer(), PreTokenizerKind::Llama3);
    check_cases(*tok, cases_["llama3"], "llama3 from_parts");
    // " qwertyuiop" is a token no merge makes: whole with ignore_merges (llama.cpp's default for
    // llama3), in pieces without.
    QCOMPARE(tok->encode(" qwertyuiop").size(), size_t{1});
    parts.ignore_merges = false;
    QVERIFY(Gpt2BpeTokenizer::from_parts(parts)->encode(" qwertyuiop").size() > 1);
  }

  void qwen2_and_custom_regex_match_hf() {
    REQUIRE_FIXTURES();
    const auto qwen = Gpt2BpeTokenizer::from_tokenizer_json(dir_ + "/qwen2/tokenizer.json");
    QCOMPARE(qwen->pre_tokenizer(), PreTokenizerKind::Qwen2);
    QCOMPARE(qwen->add_bos(), false);
    check_cases(*qwen, cases_["qwen2"], "qwen2 tokenizer.json");
    const auto custom = Gpt2BpeTokenizer::from_tokenizer_json(dir_ + "/regex/tokenizer.json");
    QCOMPARE(custom->pre_tokenizer(), PreTokenizerKind::Regex);
    check_cases(*custom, cases_["regex"], "custom regex tokenizer.json");
  }

  void load_tokenizer_reads_the_folder_config() {
    REQUIRE_FIXTURES();
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString();
    fs::copy_file(dir_ + "/llama3/tokenizer.json", dir + "/tokenizer.json");
    write_file(dir + "/tokenizer_config.json",
               json{{"bos_token", "<|begin_of_text|>"},
                    {"eos_token", json{{"content", "<|eot_id|>"}, {"__type", "AddedToken"}}},
                    {"add_bos_token", false},
                    {"chat_template", json::array({json{{"name", "tool_use"}, {"template", "T"}},
                                                   json{{"name", "default"}, {"template", "D"}}})}}
                   .dump());
    write_file(dir + "/generation_config.json", json{{"eos_token_id", json::array({1, 4})}}.dump());
    const auto tok = load_tokenizer(dir);
    QCOMPARE(tok->bos_id(), std::optional<int32_t>(0));
    QCOMPARE(tok->eos_id(), std::optional<int32_t>(4));  // <|eot_id|>
    QCOMPARE(tok->stop_ids(), (std::vector<int32_t>{4, 1}));
    QCOMPARE(tok->add_bos(), false);  // the config overrides the post-processor
    QCOMPARE(tok->chat_template(), std::string("D"));
    // chat_template.jinja wins over tokenizer_config.json's, as in transformers.
    write_file(dir + "/chat_template.jinja", "J");
    QCOMPARE(load_tokenizer(dir)->chat_template(), std::string("J"));

    write_file(dir + "/tokenizer_config.json", json{{"eos_token", "<|nope|>"}}.dump());
    std::string e = tokenizer_error([&] { load_tokenizer(dir); });
    QVERIFY2(contains(e, "tokenizer_config.json") && contains(e, "<|nope|>"), e.c_str());
    write_file(dir + "/tokenizer_config.json", json{{"add_bos_token", "yes"}}.dump());
    e = tokenizer_error([&] { load_tokenizer(dir); });
    QVERIFY2(contains(e, "tokenizer_config.json") && contains(e, "add_bos_token"), e.c_str());
    write_file(dir + "/tokenizer_config.json", "{");
    e = tokenizer_error([&] { load_tokenizer(dir); });
    QVERIFY2(contains(e, "tokenizer_config.json") && contains(e, "malformed JSON"), e.c_str());
    write_file(dir + "/tokenizer_config.json", "{}");
    write_file(dir + "/generation_config.json", json{{"eos_token_id", 999}}.dump());
    e = tokenizer_error([&] { load_tokenizer(dir); });
    QVERIFY2(contains(e, "generation_config.json") && contains(e, "999") && contains(e, "out of range"),
             e.c_str());
  }

  // --- No fixtures needed ---

  void pre_tokenizer_names() {
    QCOMPARE(pre_tokenizer_from_name("smollm"), std::optional<PreTokenizerKind>(PreTokenizerKind::Smollm));
    QCOMPARE(pre_tokenizer_from_name("gpt2"), std::optional<PreTokenizerKind>(PreTokenizerKind::Gpt2));
    QCOMPARE(pre_tokenizer_from_name("default"), std::optional<PreTokenizerKind>(PreTokenizerKind::Gpt2));
    QCOMPARE(pre_tokenizer_from_name("llama-bpe"), std::optional<PreTokenizerKind>(PreTokenizerKind::Llama3));
    QCOMPARE(pre_tokenizer_from_name("llama3"), std::optional<PreTokenizerKind>(PreTokenizerKind::Llama3));
    QCOMPARE(pre_tokenizer_from_name("qwen2"), std::optional<PreTokenizerKind>(PreTokenizerKind::Qwen2));
    QCOMPARE(pre_tokenizer_from_name("deepseek-llm"), std::optional<PreTokenizerKind>());
    QCOMPARE(std::string(pre_tokenizer_name(PreTokenizerKind::Smollm)), std::string("smollm"));
  }

  void tiny_parts_tokenize() {
    BpeParts p = tiny_parts();
    const auto tok = Gpt2BpeTokenizer::from_parts(p);
    QCOMPARE(tok->vocab_size(), 260);
    QCOMPARE(tok->encode("hello<|end|>"), (std::vector<int32_t>{258, 'o', 259}));
    QCOMPARE(tok->stop_ids(), std::vector<int32_t>{259});
    QCOMPARE(tok->bos_id(), std::optional<int32_t>());
    QCOMPARE(tok->chat_template(), std::string());
    QCOMPARE(tok->unencodable_bytes(), std::vector<uint8_t>{});
    // Smollm isolates digits; GPT-2 keeps " 12" one word, which the merge "1 2" then joins.
    p.tokens.push_back("12");
    p.token_types.push_back(1);
    p.merges.push_back("1 2");
    // Tokens are the byte symbols at their byte's id: "Ġ" (space) is 32, "1" is 49, "2" is 50.
    QCOMPARE(Gpt2BpeTokenizer::from_parts(p)->encode(" 12"), (std::vector<int32_t>{32, 260}));
    p.pre = "smollm";
    QCOMPARE(Gpt2BpeTokenizer::from_parts(p)->pre_tokenizer(), PreTokenizerKind::Smollm);
    QCOMPARE(Gpt2BpeTokenizer::from_parts(p)->encode(" 12"), (std::vector<int32_t>{32, 49, 50}));
  }

  void malformed_parts_name_the_source_and_culprit() {
    const auto err = [](const BpeParts& p) {
      return tokenizer_error([&] { Gpt2BpeTokenizer::from_parts(p); });
    };
    std::string e;

    BpeParts p;
    p.source = "empty.gguf";
    e = err(p);
    QVERIFY2(contains(e, "empty.gguf") && contains(e, "empty"), e.c_str());

    p = tiny_parts();
    p.tokens[258] = "he";  // duplicate of 256
    e = err(p);
    QVERIFY2(contains(e, "tiny.gguf") && contains(e, "'he'") && contains(e, "256") && contains(e, "258"),
             e.c_str());

    p = tiny_parts();
    p.merges.push_back("he zz");
    e = err(p);
    QVERIFY2(contains(e, "tiny.gguf") && contains(e, "merge #3") && contains(e, "unknown token 'zz'"),
             e.c_str());

    p = tiny_parts();
    p.merges.push_back("hell");
    e = err(p);
    QVERIFY2(contains(e, "tiny.gguf") && contains(e, "merge #3") && contains(e, "\"hell\""), e.c_str());

    p = tiny_parts();
    p.merges.push_back("l o");  // "lo" is no token
    e = err(p);
    QVERIFY2(contains(e, "merge #3") && contains(e, "'lo'"), e.c_str());

    p = tiny_parts();
    p.token_types.pop_back();
    e = err(p);
    QVERIFY2(
        contains(e, "tiny.gguf") && contains(e, "token_type") && contains(e, "259") && contains(e, "260"),
        e.c_str());

    p = tiny_parts();
    p.token_types[5] = 9;
    e = err(p);
    QVERIFY2(contains(e, "token 5") && contains(e, "type 9"), e.c_str());

    p = tiny_parts();
    p.tokens[259] = "";
    e = err(p);
    QVERIFY2(contains(e, "token 259") && contains(e, "empty"), e.c_str());

    for (const char* which : {"bos", "eos", "unk", "padding", "stop"}) {
      p = tiny_parts();
      const std::string w = which;
      if (w == "bos") p.bos_id = 260;
      if (w == "eos") p.eos_id = -1;
      if (w == "unk") p.unk_id = 1000;
      if (w == "padding") p.pad_id = 260;
      if (w == "stop") p.extra_stop_ids = {7, 5000};
      e = err(p);
      QVERIFY2(contains(e, "tiny.gguf") && contains(e, w + " id") && contains(e, "out of range"), e.c_str());
    }

    p = tiny_parts();
    p.pre = "deepseek-coder";
    e = err(p);
    QVERIFY2(contains(e, "tiny.gguf") && contains(e, "'deepseek-coder'") && contains(e, "smollm"), e.c_str());

    p = tiny_parts();
    p.tokens['A'] = "not-a-byte";  // the byte token of 'A' is gone
    e = err(p);
    QVERIFY2(contains(e, "tiny.gguf") && contains(e, "byte 65"), e.c_str());

    // Bytes outside tab/newline/CR/printable ASCII may be missing: they are reported and dropped.
    p = tiny_parts();
    p.tokens[0x04] = "x04";
    p.tokens[0xFF] = "xff";
    p.tokens.push_back("..");
    p.token_types.push_back(1);
    p.merges.push_back(". .");
    const auto tok = Gpt2BpeTokenizer::from_parts(p);
    QCOMPARE(tok->unencodable_bytes(), (std::vector<uint8_t>{0x04, 0xFF}));
    QCOMPARE(tok->encode("\x04"), std::vector<int32_t>{});
    // ".\x04." is one regex piece: without the dropped byte its dots are neighbours and merge.
    QCOMPARE(tok->encode(".\x04."), std::vector<int32_t>{260});
    QCOMPARE(tok->encode("h\x04"
                         "e"),
             (std::vector<int32_t>{'h', 'e'}));  // three pieces: nothing to merge
  }

  void tokenizer_json_pre_tokenizers_are_recognised_or_refused() {
    QTemporaryDir tmp;
    const std::string path = tmp.path().toStdString() + "/tokenizer.json";
    json vocab = json::object();
    for (int b = 0; b < 256; ++b) vocab[Gpt2BpeTokenizer::byte_symbol(static_cast<uint8_t>(b))] = b;
    const auto doc = [&](const json& pre) {
      return json{{"model", json{{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
                  {"pre_tokenizer", pre}};
    };
    const json byte_level = json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    const json byte_level_plain =
        json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}};
    const auto split = [](const std::string& regex) {
      return json{{"type", "Split"},
                  {"pattern", json{{"Regex", regex}}},
                  {"behavior", "Isolated"},
                  {"invert", false}};
    };
    const auto load = [&](const json& pre) {
      write_file(path, doc(pre).dump());
      return Gpt2BpeTokenizer::from_tokenizer_json(path);
    };
    const auto refused = [&](const json& pre) {
      write_file(path, doc(pre).dump());
      return tokenizer_error([&] { Gpt2BpeTokenizer::from_tokenizer_json(path); });
    };
    const std::string gpt2_regex =
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
    QCOMPARE(load(byte_level)->pre_tokenizer(), PreTokenizerKind::Gpt2);
    QCOMPARE(load(json{{"type", "Sequence"},
                       {"pretokenizers", json::array({split(gpt2_regex), byte_level_plain})}})
                 ->pre_tokenizer(),
             PreTokenizerKind::Gpt2);
    QCOMPARE(load(json{{"type", "Sequence"},
                       {"pretokenizers",
                        json::array({json{{"type", "Digits"}, {"individual_digits", true}}, byte_level})}})
                 ->pre_tokenizer(),
             PreTokenizerKind::Smollm);
    // A custom regex runs as given, with \s as Unicode White_Space.
    const auto custom = load(
        json{{"type", "Sequence"}, {"pretokenizers", json::array({split(R"(\S+|\s+)"), byte_level_plain})}});
    QCOMPARE(custom->pre_tokenizer(), PreTokenizerKind::Regex);
    QCOMPARE(custom
                 ->encode("ab  c\xE2\x80\x83"
                          "d")
                 .size(),
             size_t{9});  // ab | "  " | c | U+2003 (3 bytes) | d

    std::string e = refused(json{{"type", "Whitespace"}});
    QVERIFY2(contains(e, "tokenizer.json") && contains(e, "Whitespace") && contains(e, "not supported"),
             e.c_str());
    e = refused(json{{"type", "Sequence"},
                     {"pretokenizers",
                      json::array({json{{"type", "Digits"}, {"individual_digits", false}}, byte_level})}});
    QVERIFY2(contains(e, "Sequence[Digits, ByteLevel]") && contains(e, "individual_digits=false"), e.c_str());
    e = refused(json{
        {"type", "Sequence"},
        {"pretokenizers",
         json::array({json{{"type", "Split"}, {"pattern", json{{"String", " "}}}, {"behavior", "Isolated"}},
                      byte_level_plain})}});
    QVERIFY2(contains(e, "Split") && contains(e, "Regex"), e.c_str());
    json removed = split("a");
    removed["behavior"] = "Removed";
    e = refused(json{{"type", "Sequence"}, {"pretokenizers", json::array({removed, byte_level_plain})}});
    QVERIFY2(contains(e, "Isolated"), e.c_str());
    e = refused(json{{"type", "Sequence"}, {"pretokenizers", json::array({split("a"), byte_level})}});
    QVERIFY2(contains(e, "use_regex=true"), e.c_str());
    e = refused(json{{"type", "ByteLevel"}, {"add_prefix_space", true}});
    QVERIFY2(contains(e, "add_prefix_space=true"), e.c_str());
    e = refused(
        json{{"type", "Sequence"}, {"pretokenizers", json::array({split("(unclosed"), byte_level_plain})}});
    QVERIFY2(contains(e, "tokenizer.json") && contains(e, "does not compile") && contains(e, "(unclosed"),
             e.c_str());

    json nfc = doc(byte_level);
    nfc["normalizer"] = json{{"type", "NFC"}};
    write_file(path, nfc.dump());
    e = tokenizer_error([&] { Gpt2BpeTokenizer::from_tokenizer_json(path); });
    QVERIFY2(contains(e, "normalizer") && contains(e, "NFC"), e.c_str());
    json fallback = doc(byte_level);
    fallback["model"]["byte_fallback"] = true;
    write_file(path, fallback.dump());
    e = tokenizer_error([&] { Gpt2BpeTokenizer::from_tokenizer_json(path); });
    QVERIFY2(contains(e, "byte_fallback"), e.c_str());
  }
};

QTEST_APPLESS_MAIN(TestTokenizerOracle)
#include "test_tokenizer_oracle.moc"

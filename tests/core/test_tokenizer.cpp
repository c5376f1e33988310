// Tokenizers of core/: GPT-2 byte-level BPE against Hugging Face `tokenizers` (ids recorded in
// tests/fixtures/tokenizer_cases.json by tests/oracle/make_tokenizer_fixtures.py), the streaming
// detokenizer, SentencePiece (a tiny model trained here), and the error of every bad input.
// The real GPT-2 files come from $SERVELAB_SHARED/data/gpt2 (or the project's bootstrap copy);
// tests that need them skip, saying so, when neither is there. The rest use tiny vocabularies.
#include <sentencepiece_trainer.h>

#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/gpt2_bpe_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/errors.h"

using namespace servelab;

#ifdef SERVELAB_TEST_WITH_TORCH
double servelab_test_torch_probe();  // torch_probe.cpp: a libtorch matmul
#endif
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::vector<int32_t> kCourseIds = {464, 2068, 7586, 21831, 11687, 625, 262};

// The message of the TokenizerError that fn throws; a marker (which no check matches) otherwise.
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

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// GPT-2 files: $SERVELAB_SHARED/data/gpt2 first, then the copy scripts/bootstrap puts in the venv.
struct Gpt2Files {
  std::string dir;
  bool has_tokenizer_json = false;
};

std::optional<Gpt2Files> find_gpt2_files() {
  if (const char* shared = std::getenv("SERVELAB_SHARED"); shared && *shared) {
    const fs::path dir = fs::path(shared) / "data" / "gpt2";
    if (fs::exists(dir / "vocab.json") && fs::exists(dir / "merges.txt")) {
      return Gpt2Files{dir.string(), fs::exists(dir / "tokenizer.json")};
    }
  }
  const fs::path venv = fs::path(SERVELAB_SOURCE_DIR) / ".venv" / "share" / "servelab" / "gpt2";
  if (fs::exists(venv / "vocab.json") && fs::exists(venv / "merges.txt")) {
    return Gpt2Files{venv.string(), fs::exists(venv / "tokenizer.json")};
  }
  return std::nullopt;
}

// A complete byte-level vocabulary (the 256 byte tokens) plus the given extra tokens and merges:
// enough to exercise the loader and the BPE without GPT-2's files.
json tiny_vocab(const std::vector<std::string>& extra) {
  json vocab = json::object();
  int32_t id = 0;
  for (int b = 0; b < 256; ++b) vocab[Gpt2BpeTokenizer::byte_symbol(static_cast<uint8_t>(b))] = id++;
  for (const auto& t : extra) vocab[t] = id++;
  return vocab;
}

const std::vector<std::string> kTinyExtra = {"he", "ll",  "llo",  "hello",
                                             "Ġw", "Ġwo", "Ġwor", "<|endoftext|>"};
const std::vector<std::string> kTinyMerges = {"h e", "l l", "ll o", "he llo", "Ġ w", "Ġw o", "Ġwo r"};

bool valid_utf8(const std::string& s) { return !utf8::first_invalid(s).has_value(); }

// Pushes ids one by one through a StreamDecoder and returns the concatenation of every push and
// the flush; `all_valid` says whether each piece was valid UTF-8 on its own.
std::string stream_all(const Tokenizer& tok, const std::vector<int32_t>& ids, bool& all_valid) {
  StreamDecoder dec(tok);
  std::string all;
  all_valid = true;
  for (const int32_t id : ids) {
    const std::string piece = dec.push(id);
    all_valid = all_valid && valid_utf8(piece);
    all += piece;
  }
  const std::string rest = dec.flush();
  all_valid = all_valid && valid_utf8(rest);
  return all + rest;
}

}  // namespace

// The checks against real GPT-2 ids need GPT-2's files; without them they skip and say why.
#define REQUIRE_GPT2()                                                                                   \
  do {                                                                                                   \
    if (!from_vocab_) {                                                                                  \
      QSKIP(                                                                                             \
          "GPT-2 tokenizer files not found: set SERVELAB_SHARED to the shared folder (with "             \
          "data/gpt2/vocab.json and merges.txt) or run scripts/bootstrap; this check of real GPT-2 ids " \
          "is skipped");                                                                                 \
    }                                                                                                    \
  } while (false)

class TestTokenizer : public QObject {
  Q_OBJECT

 private:
  std::optional<Gpt2Files> files_;
  json fixture_;
  std::unique_ptr<Gpt2BpeTokenizer> from_vocab_;  // vocab.json + merges.txt
  std::unique_ptr<Gpt2BpeTokenizer> from_json_;   // tokenizer.json

  const Gpt2BpeTokenizer* gpt2() const { return from_vocab_.get(); }

  std::string tiny_dir(QTemporaryDir& tmp) {
    const std::string dir = tmp.path().toStdString();
    write_file(dir + "/vocab.json", tiny_vocab(kTinyExtra).dump());
    std::string merges = "#version: 0.2\n";
    for (const auto& m : kTinyMerges) merges += m + "\n";
    write_file(dir + "/merges.txt", merges);
    return dir;
  }

 private Q_SLOTS:
  void initTestCase() {
    const std::string fixture_path =
        std::string(SERVELAB_SOURCE_DIR) + "/tests/fixtures/tokenizer_cases.json";
    QVERIFY2(fs::exists(fixture_path), ("missing fixture " + fixture_path).c_str());
    fixture_ = json::parse(read_file(fixture_path));
    QVERIFY2(fixture_["cases"].size() > 100, "fixture has too few cases");
    files_ = find_gpt2_files();
    if (files_) {
      from_vocab_ =
          Gpt2BpeTokenizer::from_vocab_merges(files_->dir + "/vocab.json", files_->dir + "/merges.txt");
      if (files_->has_tokenizer_json)
        from_json_ = Gpt2BpeTokenizer::from_tokenizer_json(files_->dir + "/tokenizer.json");
    }
  }

  // --- UTF-8 helpers (no files needed) ---

  void utf8_replacement_follows_maximal_subparts() {
    QCOMPARE(utf8::lossy("abc"), std::string("abc"));
    QCOMPARE(utf8::lossy("\xE3\x81"), std::string("\xEF\xBF\xBD"));  // one U+FFFD for a truncated char
    QCOMPARE(utf8::lossy("\xE3\x81"
                         "a"),
             std::string("\xEF\xBF\xBD"
                         "a"));
    QCOMPARE(utf8::lossy("\x80\x80"), std::string("\xEF\xBF\xBD\xEF\xBF\xBD"));  // each stray byte its own
    QCOMPARE(utf8::lossy("\xC0\xAF"), std::string("\xEF\xBF\xBD\xEF\xBF\xBD"));  // overlong lead
    QCOMPARE(utf8::lossy("\xED\xA0\x80"), std::string("\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"));  // surrogate
    QCOMPARE(utf8::incomplete_tail("a\xF0\x9F\x90"), size_t{3});
    QCOMPARE(utf8::incomplete_tail("a\xF0\x9F\x90\x8D"), size_t{0});
    QCOMPARE(utf8::incomplete_tail("\xC3"), size_t{1});
    QCOMPARE(utf8::incomplete_tail("\xE0\x80"), size_t{0});  // can never be completed
    QCOMPARE(utf8::first_invalid("ok \xE2\x82\xAC"), std::optional<size_t>());
    QCOMPARE(utf8::first_invalid("ok \xE2\x82"), std::optional<size_t>(3));
  }

  // --- Real GPT-2 files ---

  void course_prompt_gives_known_ids() {
    REQUIRE_GPT2();
    QCOMPARE(gpt2()->encode("The quick brown fox jumped over the"), kCourseIds);
    QCOMPARE(gpt2()->vocab_size(), 50257);
    QCOMPARE(gpt2()->eos_id(), std::optional<int32_t>(50256));
    QCOMPARE(gpt2()->kind(), std::string("gpt2-bpe"));
    QCOMPARE(gpt2()->token_display(21831), std::string("\xC4\xA0"
                                                       "fox"));  // "Ġfox"
    QCOMPARE(gpt2()->token_bytes(21831), std::string(" fox"));
    QCOMPARE(gpt2()->merge_count(), size_t{50000});
  }

  void ids_match_hugging_face_vocab_merges() {
    REQUIRE_GPT2();
    check_fixture(*from_vocab_, "vocab.json+merges.txt");
  }

  void ids_match_hugging_face_tokenizer_json() {
    if (!from_json_) {
      QSKIP(
          "GPT-2 tokenizer.json not found: set SERVELAB_SHARED to the shared folder (with "
          "data/gpt2/tokenizer.json); "
          "the tokenizer.json loading route is not checked");
    }
    check_fixture(*from_json_, "tokenizer.json");
  }

  void both_loading_routes_agree() {
    if (!from_json_ || !from_vocab_) {
      QSKIP(
          "needs both GPT-2 vocab.json+merges.txt and tokenizer.json from SERVELAB_SHARED/data/gpt2; "
          "skipped");
    }
    QCOMPARE(from_json_->vocab_size(), from_vocab_->vocab_size());
    QCOMPARE(from_json_->eos_id(), from_vocab_->eos_id());
    QCOMPARE(from_json_->merge_count(), from_vocab_->merge_count());
    for (int32_t id = 0; id < from_vocab_->vocab_size(); ++id) {
      if (from_json_->token_bytes(id) != from_vocab_->token_bytes(id))
        QFAIL(("bytes differ for id " + std::to_string(id)).c_str());
    }
    for (const auto& c : fixture_["cases"]) {
      const std::string text = c["text"];
      QCOMPARE(from_json_->encode(text), from_vocab_->encode(text));
    }
  }

  void decode_round_trips_every_case() {
    REQUIRE_GPT2();
    for (const auto& c : fixture_["cases"]) {
      const std::string text = c["text"];
      const std::string back = gpt2()->decode(gpt2()->encode(text));
      QVERIFY2(back == text, ("decode(encode(x)) != x for case " + c["name"].get<std::string>()).c_str());
    }
  }

  void decode_replaces_invalid_utf8_like_hugging_face() {
    REQUIRE_GPT2();
    for (const auto& c : fixture_["decode_cases"]) {
      const std::vector<int32_t> ids = c["ids"];
      const std::string expected = c["text"];
      const std::string got = gpt2()->decode(ids);
      QVERIFY2(got == expected, ("decode differs from HF for " + c["name"].get<std::string>()).c_str());
      QVERIFY(valid_utf8(got));
    }
  }

  void endoftext_is_one_special_token() {
    REQUIRE_GPT2();
    QCOMPARE(gpt2()->encode("<|endoftext|>"), std::vector<int32_t>{50256});
    const auto ids = gpt2()->encode("a<|endoftext|>b");
    QCOMPARE(ids.size(), size_t{3});
    QCOMPARE(ids[1], 50256);
    QCOMPARE(gpt2()->decode(ids), std::string("a<|endoftext|>b"));
    QCOMPARE(gpt2()->token_display(50256), std::string("<|endoftext|>"));
  }

  void stream_decoder_never_splits_characters() {
    REQUIRE_GPT2();
    const std::vector<std::string> texts = {"🐍 snake",
                                            "日本語のテキスト",
                                            "👨‍👩‍👧‍👦 family 👩🏽‍💻",
                                            "🇯🇵🇫🇷 flags ❤️‍🔥",
                                            "café naïve Ünïcödé",
                                            "The quick brown fox jumped over the",
                                            "a<|endoftext|>日本"};
    for (const auto& text : texts) {
      const auto ids = gpt2()->encode(text);
      bool valid = false;
      QCOMPARE(stream_all(*gpt2(), ids, valid), text);
      QVERIFY2(valid, ("a pushed piece was not valid UTF-8 for " + text).c_str());
    }
    // A multi-byte character split across tokens is held back until complete.
    const auto snake = gpt2()->encode("🐍");
    QVERIFY2(snake.size() > 1, "expected the emoji to take several byte-level tokens");
    StreamDecoder dec(*gpt2());
    QCOMPARE(dec.push(snake[0]), std::string());
    std::string rest;
    for (size_t i = 1; i < snake.size(); ++i) rest += dec.push(snake[i]);
    QCOMPARE(rest, std::string("🐍"));
    QCOMPARE(dec.flush(), std::string());
    // A character that is never completed comes out as U+FFFD at flush, as decode() gives it.
    StreamDecoder cut(*gpt2());
    QCOMPARE(cut.push(snake[0]), std::string());
    QCOMPARE(cut.flush(), gpt2()->decode({snake[0]}));
  }

  void stream_decoder_matches_decode_on_random_ids() {
    REQUIRE_GPT2();
    // Ids biased to single-byte tokens (0..255 in GPT-2) so that invalid sequences abound.
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> any(0, gpt2()->vocab_size() - 1), low(0, 255), pick(0, 2);
    for (int round = 0; round < 300; ++round) {
      std::vector<int32_t> ids(1 + rng() % 30);
      for (auto& id : ids) id = pick(rng) == 0 ? any(rng) : low(rng);
      const std::string expected = gpt2()->decode(ids);
      bool valid = false;
      const std::string got = stream_all(*gpt2(), ids, valid);
      QVERIFY2(got == expected, ("stream != decode for " + ids_str(ids)).c_str());
      QVERIFY2(valid, ("a pushed piece was not valid UTF-8 for " + ids_str(ids)).c_str());
    }
    for (const auto& c : fixture_["decode_cases"]) {
      const std::vector<int32_t> ids = c["ids"];
      bool valid = false;
      QCOMPARE(stream_all(*gpt2(), ids, valid), c["text"].get<std::string>());
      QVERIFY2(valid, ("a pushed piece was not valid UTF-8 for " + c["name"].get<std::string>()).c_str());
    }
  }

  void encode_is_fast() {
    REQUIRE_GPT2();
    // About 1 MB of varied text: many distinct words, so the word cache does not do all the work.
    std::mt19937 rng(11);
    const std::vector<std::string> parts = {"tra", "ns", "for", "mer",  "ing", "ed", " ",
                                            " ",   ", ", ".\n", "日本", "é",   "42", "'s",
                                            "🐍",   "qu", "ick", "zz",   "ab",  "le", "  "};
    std::string text;
    while (text.size() < (1u << 20)) text += parts[rng() % parts.size()];
    QElapsedTimer timer;
    timer.start();
    const auto ids = gpt2()->encode(text);
    const qint64 ms = timer.elapsed();
    qInfo("encoded %zu bytes into %zu tokens in %lld ms", text.size(), ids.size(),
          static_cast<long long>(ms));
    QCOMPARE(gpt2()->decode(ids), text);
#ifdef NDEBUG
    QVERIFY2(ms < 1000, "1 MB should encode in well under a second in an optimized build");
#endif
  }

  void load_tokenizer_finds_gpt2_folder() {
    REQUIRE_GPT2();
    const auto tok = load_tokenizer(files_->dir);
    QCOMPARE(tok->kind(), std::string("gpt2-bpe"));
    QCOMPARE(tok->encode("The quick brown fox jumped over the"), kCourseIds);
  }

  // --- Tiny vocabularies, no files needed ---

  void tiny_bpe_applies_merges_by_rank() {
    QTemporaryDir tmp;
    const std::string dir = tiny_dir(tmp);
    const auto tok = Gpt2BpeTokenizer::from_vocab_merges(dir + "/vocab.json", dir + "/merges.txt");
    const json vocab = tiny_vocab(kTinyExtra);
    const auto id = [&](const std::string& t) { return vocab.at(t).get<int32_t>(); };
    QCOMPARE(tok->vocab_size(), 256 + static_cast<int32_t>(kTinyExtra.size()));
    QCOMPARE(tok->encode("hello world"), (std::vector<int32_t>{id("hello"), id("Ġwor"), id("l"), id("d")}));
    QCOMPARE(tok->encode("hell"), (std::vector<int32_t>{id("he"), id("ll")}));
    QCOMPARE(tok->encode("x<|endoftext|>"), (std::vector<int32_t>{id("x"), id("<|endoftext|>")}));
    QCOMPARE(tok->eos_id(), std::optional<int32_t>(id("<|endoftext|>")));
    QCOMPARE(tok->decode(tok->encode("hello world")), std::string("hello world"));
    // load_tokenizer takes vocab.json + merges.txt when there is no tokenizer.json.
    QCOMPARE(load_tokenizer(dir)->encode("hello"), std::vector<int32_t>{id("hello")});
  }

  void tokenizer_json_merges_as_strings_or_pairs() {
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString();
    json pairs = json::array(), strings = json::array();
    for (const auto& m : kTinyMerges) {
      strings.push_back(m);
      pairs.push_back(json::array({m.substr(0, m.find(' ')), m.substr(m.find(' ') + 1)}));
    }
    const json vocab = tiny_vocab({"he", "ll", "llo", "hello", "Ġw", "Ġwo", "Ġwor"});
    // Ids must be contiguous: the added token takes the id right after the vocabulary.
    auto doc = [&](const json& merges) {
      return json{
          {"version", "1.0"},
          {"added_tokens", json::array({json{{"id", 263}, {"content", "<|endoftext|>"}, {"special", true}}})},
          {"pre_tokenizer", json{{"type", "ByteLevel"}, {"add_prefix_space", false}}},
          {"model", json{{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
    };
    QCOMPARE(vocab.size(), size_t{263});
    write_file(dir + "/a.json", doc(strings).dump());
    write_file(dir + "/b.json", doc(pairs).dump());
    const auto a = Gpt2BpeTokenizer::from_tokenizer_json(dir + "/a.json");
    const auto b = Gpt2BpeTokenizer::from_tokenizer_json(dir + "/b.json");
    const std::string text = "hello world<|endoftext|> hello";
    QCOMPARE(a->encode(text), b->encode(text));
    QCOMPARE(a->encode(text)[4], 263);  // hello, Ġwor, l, d, <|endoftext|>, ...
    QCOMPARE(a->vocab_size(), 264);
    QCOMPARE(a->decode(a->encode(text)), text);
  }

  void added_token_options_match_hugging_face() {
    // A tiny tokenizer.json made by the oracle script, with lstrip/rstrip/single_word/normalized
    // added tokens (GPT-2's <|endoftext|> uses none of them), and HF's ids for it.
    QTemporaryDir tmp;
    const std::string path = tmp.path().toStdString() + "/tokenizer.json";
    const json& options = fixture_["added_token_options"];
    write_file(path, options["tokenizer"].dump());
    const auto tok = Gpt2BpeTokenizer::from_tokenizer_json(path);
    for (const auto& c : options["cases"]) {
      const std::string text = c["text"];
      const std::vector<int32_t> expected = c["ids"];
      const auto got = tok->encode(text);
      QVERIFY2(got == expected,
               ("'" + text + "': got " + ids_str(got) + ", HF gives " + ids_str(expected)).c_str());
    }
  }

  void encode_is_safe_from_several_threads() {
    // The word cache is shared; encode() is const and must give the same ids from any thread.
    QTemporaryDir tmp;
    const std::string dir = tiny_dir(tmp);
    const auto tok = Gpt2BpeTokenizer::from_vocab_merges(dir + "/vocab.json", dir + "/merges.txt");
    std::vector<std::string> texts;
    for (const auto& c : fixture_["cases"]) texts.push_back(c["text"]);
    std::vector<std::vector<int32_t>> expected;
    for (const auto& t : texts) expected.push_back(tok->encode(t));
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int round = 0; round < 20; ++round) {
          for (size_t i = 0; i < texts.size(); ++i) {
            const size_t k = (i + static_cast<size_t>(t) * 37) % texts.size();
            if (tok->encode(texts[k]) != expected[k]) ++mismatches;
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    QCOMPARE(mismatches.load(), 0);
  }

  void encode_rejects_invalid_utf8() {
    QTemporaryDir tmp;
    const std::string dir = tiny_dir(tmp);
    const auto tok = Gpt2BpeTokenizer::from_vocab_merges(dir + "/vocab.json", dir + "/merges.txt");
    const std::string bad = tokenizer_error([&] {
      tok->encode(
          std::string("abc\xFF"
                      "def"));
    });
    QVERIFY2(contains(bad, "byte offset 3"), bad.c_str());
    const std::string cut = tokenizer_error([&] { tok->encode(std::string("ok\xE3\x81")); });
    QVERIFY2(contains(cut, "byte offset 2"), cut.c_str());
    const std::string sur = tokenizer_error([&] { tok->encode(std::string("\xED\xA0\x80")); });
    QVERIFY2(contains(sur, "byte offset 0"), sur.c_str());
    QCOMPARE(tok->encode(""), std::vector<int32_t>{});
  }

  void out_of_range_ids_are_errors() {
    QTemporaryDir tmp;
    const std::string dir = tiny_dir(tmp);
    const auto tok = Gpt2BpeTokenizer::from_vocab_merges(dir + "/vocab.json", dir + "/merges.txt");
    QVERIFY2(contains(tokenizer_error([&] { tok->token_bytes(-1); }), "out of range"), "token_bytes(-1)");
    QVERIFY2(contains(tokenizer_error([&] { tok->token_bytes(tok->vocab_size()); }), "out of range"),
             "token_bytes(n)");
    QVERIFY2(contains(tokenizer_error([&] { tok->decode({1, 99999}); }), "99999"), "decode");
    StreamDecoder dec(*tok);
    QVERIFY2(contains(tokenizer_error([&] { dec.push(99999); }), "99999"), "push");
  }

  void bad_files_name_the_file_and_problem() {
    QTemporaryDir tmp;
    const std::string dir = tiny_dir(tmp);
    const std::string vocab = dir + "/vocab.json", merges = dir + "/merges.txt";

    std::string e = tokenizer_error([&] { Gpt2BpeTokenizer::from_vocab_merges(dir + "/nope.json", merges); });
    QVERIFY2(contains(e, "nope.json") && contains(e, "cannot open"), e.c_str());
    e = tokenizer_error([&] { Gpt2BpeTokenizer::from_vocab_merges(vocab, dir + "/nope.txt"); });
    QVERIFY2(contains(e, "nope.txt") && contains(e, "cannot open"), e.c_str());

    write_file(dir + "/broken.json", "{\"a\": 0, ");
    e = tokenizer_error([&] { Gpt2BpeTokenizer::from_vocab_merges(dir + "/broken.json", merges); });
    QVERIFY2(contains(e, "broken.json") && contains(e, "malformed JSON"), e.c_str());

    write_file(dir + "/unknown.txt", "#version: 0.2\nh e\nq zzz\n");
    e = tokenizer_error([&] { Gpt2BpeTokenizer::from_vocab_merges(vocab, dir + "/unknown.txt"); });
    QVERIFY2(contains(e, "unknown.txt") && contains(e, "line 3") && contains(e, "unknown token 'zzz'"),
             e.c_str());

    write_file(dir + "/badline.txt", "#version: 0.2\nh e x\n");
    e = tokenizer_error([&] { Gpt2BpeTokenizer::from_vocab_merges(vocab, dir + "/badline.txt"); });
    QVERIFY2(contains(e, "badline.txt") && contains(e, "line 2"), e.c_str());

    json gap = tiny_vocab(kTinyExtra);
    gap["hello"] = 5000;  // ids 0..5000 but only ~263 tokens
    write_file(dir + "/gap.json", gap.dump());
    e = tokenizer_error([&] { Gpt2BpeTokenizer::from_vocab_merges(dir + "/gap.json", merges); });
    QVERIFY2(contains(e, "gap.json") && contains(e, "size mismatch"), e.c_str());

    json no_bytes = json::object({{"a", 0}, {"b", 1}});
    write_file(dir + "/nobytes.json", no_bytes.dump());
    e = tokenizer_error([&] { Gpt2BpeTokenizer::from_vocab_merges(dir + "/nobytes.json", merges); });
    QVERIFY2(contains(e, "nobytes.json") && contains(e, "256"), e.c_str());

    write_file(dir + "/tokenizer.json", "[1, 2");
    e = tokenizer_error([&] { load_tokenizer(dir); });  // tokenizer.json wins over vocab.json + merges.txt
    QVERIFY2(contains(e, "tokenizer.json") && contains(e, "malformed JSON"), e.c_str());
    write_file(dir + "/tokenizer.json", json{{"model", json{{"type", "Unigram"}}}}.dump());
    e = tokenizer_error([&] { load_tokenizer(dir); });
    QVERIFY2(contains(e, "tokenizer.json") && contains(e, "Unigram"), e.c_str());
    write_file(dir + "/tokenizer.json",
               json{{"model", json{{"vocab", tiny_vocab({})}, {"merges", json::array({"a zz"})}}}}.dump());
    e = tokenizer_error([&] { load_tokenizer(dir); });
    QVERIFY2(contains(e, "tokenizer.json") && contains(e, "unknown token 'zz'"), e.c_str());
  }

  void load_tokenizer_explains_empty_folder() {
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString();
    std::string e = tokenizer_error([&] { load_tokenizer(dir); });
    QVERIFY2(contains(e, dir) && contains(e, "tokenizer.json") && contains(e, "vocab.json") &&
                 contains(e, ".model"),
             e.c_str());
    write_file(dir + "/vocab.json", "{}");
    e = tokenizer_error([&] { load_tokenizer(dir); });
    QVERIFY2(contains(e, "merges.txt is missing"), e.c_str());
    e = tokenizer_error([&] { load_tokenizer(dir + "/absent"); });
    QVERIFY2(contains(e, "absent") && contains(e, "does not exist"), e.c_str());
  }

  // --- SentencePiece: a tiny model trained here ---

  void sentencepiece_round_trip_and_errors() {
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString();
    std::string corpus;
    for (int r = 0; r < 20; ++r) {
      corpus +=
          "the quick brown fox jumps over the lazy dog\nhello world, hello there\n"
          "serving models is fun and fast\ntokens and pieces make words\n";
    }
    write_file(dir + "/corpus.txt", corpus);
    // Byte fallback: characters never seen in training (CJK, emoji) become byte pieces, which is
    // the case where the stream decoder must hold partial characters back.
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + dir + "/corpus.txt --model_prefix=" + dir +
        "/tiny --vocab_size=300 --model_type=bpe --byte_fallback=true --character_coverage=1.0 "
        "--minloglevel=2");
    QVERIFY2(status.ok(), status.ToString().c_str());

    const SentencePieceTokenizer tok(dir + "/tiny.model");
    QCOMPARE(tok.kind(), std::string("sentencepiece"));
    QCOMPARE(tok.vocab_size(), 300);
    QVERIFY(tok.eos_id().has_value());
    for (const std::string text : {"hello world", "the lazy fox serves tokens", "日本 🐍 and café", ""}) {
      const auto ids = tok.encode(text);
      QCOMPARE(tok.decode(ids), text);
      bool valid = false;
      QCOMPARE(stream_all(tok, ids, valid), text);
      QVERIFY(valid);
    }
    // Leading space of the first piece is dropped only at the very start, even after control tokens.
    const auto ids = tok.encode("hello 日本 world");
    std::vector<int32_t> with_eos = {*tok.eos_id()};
    with_eos.insert(with_eos.end(), ids.begin(), ids.end());
    with_eos.push_back(*tok.eos_id());
    with_eos.insert(with_eos.end(), ids.begin(), ids.end());
    bool valid = false;
    QCOMPARE(stream_all(tok, with_eos, valid), tok.decode(with_eos));
    QVERIFY(valid);
    QVERIFY(tok.token_display(ids[0]).find("\xE2\x96\x81") == 0);  // "▁..."
    QVERIFY(contains(tokenizer_error([&] { tok.encode("\xFF"); }), "byte offset 0"));
    QVERIFY(contains(tokenizer_error([&] { tok.token_bytes(300); }), "out of range"));

    // load_tokenizer picks the .model file when there is no GPT-2 file.
    QCOMPARE(load_tokenizer(dir)->kind(), std::string("sentencepiece"));
#ifdef SERVELAB_TEST_WITH_TORCH
    // libsentencepiece (protobuf-lite) and PyPI libtorch in one process: both still work after
    // SentencePiece has trained and loaded a model.
    QCOMPARE(servelab_test_torch_probe(), 6.0);
#endif

    write_file(dir + "/corrupt.model", "this is not a protobuf \x01\x02\x03");
    std::string e = tokenizer_error([&] { SentencePieceTokenizer bad(dir + "/corrupt.model"); });
    QVERIFY2(contains(e, "corrupt.model"), e.c_str());
    e = tokenizer_error([&] { SentencePieceTokenizer missing(dir + "/missing.model"); });
    QVERIFY2(contains(e, "missing.model") && contains(e, "not found"), e.c_str());
  }

  // --- bos, stop ids, add_bos and the chat template (Tokenizer interface) ---

  void gpt2_specials_are_endoftext() {
    REQUIRE_GPT2();
    for (const Gpt2BpeTokenizer* tok : {from_vocab_.get(), from_json_.get()}) {
      if (!tok) continue;
      QCOMPARE(tok->bos_id(), std::optional<int32_t>(50256));
      QCOMPARE(tok->stop_ids(), std::vector<int32_t>{50256});
      QCOMPARE(tok->add_bos(), false);
      QCOMPARE(tok->chat_template(), std::string());
      QCOMPARE(tok->pre_tokenizer(), PreTokenizerKind::Gpt2);
      QCOMPARE(tok->unencodable_bytes(), std::vector<uint8_t>{});
      QCOMPARE(tok->token_id("<|endoftext|>"), std::optional<int32_t>(50256));
    }
    // A folder's tokenizer_config.json (the shared copy has one) names the same tokens.
    const auto folder = load_tokenizer(files_->dir);
    QCOMPARE(folder->bos_id(), std::optional<int32_t>(50256));
    QCOMPARE(folder->stop_ids(), std::vector<int32_t>{50256});
    QCOMPARE(folder->add_bos(), false);
  }

  void sentencepiece_specials_and_config() {
    QTemporaryDir tmp;
    const std::string dir = tmp.path().toStdString();
    std::string corpus;
    for (int r = 0; r < 20; ++r)
      corpus += "the quick brown fox jumps over the lazy dog\nhello world, hello there\n";
    write_file(dir + "/corpus.txt", corpus);
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + dir + "/corpus.txt --model_prefix=" + dir +
        "/tokenizer --vocab_size=60 --model_type=bpe --minloglevel=2");
    QVERIFY2(status.ok(), status.ToString().c_str());
    // SentencePiece's defaults: unk 0, bos 1, eos 2; a model with a bos piece wants it first, as
    // transformers' LlamaTokenizer does.
    const SentencePieceTokenizer plain(dir + "/tokenizer.model");
    QCOMPARE(plain.bos_id(), std::optional<int32_t>(1));
    QCOMPARE(plain.eos_id(), std::optional<int32_t>(2));
    QCOMPARE(plain.stop_ids(), std::vector<int32_t>{2});
    QCOMPARE(plain.add_bos(), true);
    QCOMPARE(plain.chat_template(), std::string());

    write_file(dir + "/tokenizer_config.json",
               json{{"add_bos_token", false}, {"eos_token", "<s>"}, {"chat_template", "{{ x }}"}}.dump());
    write_file(dir + "/generation_config.json", json{{"eos_token_id", json::array({2, 1})}}.dump());
    const auto tok = load_tokenizer(dir);
    QCOMPARE(tok->kind(), std::string("sentencepiece"));
    QCOMPARE(tok->add_bos(), false);
    QCOMPARE(tok->eos_id(), std::optional<int32_t>(1));
    QCOMPARE(tok->stop_ids(), (std::vector<int32_t>{1, 2}));
    QCOMPARE(tok->chat_template(), std::string("{{ x }}"));
    write_file(dir + "/tokenizer_config.json", json{{"bos_token", "<nope>"}}.dump());
    const std::string e = tokenizer_error([&] { load_tokenizer(dir); });
    QVERIFY2(contains(e, "tokenizer_config.json") && contains(e, "<nope>"), e.c_str());
  }

 private:
  void check_fixture(const Tokenizer& tok, const char* route) {
    int failures = 0;
    for (const auto& c : fixture_["cases"]) {
      const std::string text = c["text"];
      const std::vector<int32_t> expected = c["ids"];
      const auto got = tok.encode(text);
      if (got != expected) {
        ++failures;
        qWarning("%s: case %s: got %s, HF gives %s", route, c["name"].get<std::string>().c_str(),
                 ids_str(got).c_str(), ids_str(expected).c_str());
      }
    }
    QCOMPARE(failures, 0);
  }
};

QTEST_APPLESS_MAIN(TestTokenizer)
#include "test_tokenizer.moc"

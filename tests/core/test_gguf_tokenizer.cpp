// A GGUF file's SentencePiece vocabulary (tokenizer.ggml.model "llama"): a vocabulary trained here
// by SentencePiece's own trainer, written into crafted GGUF files, loaded by our GGUF tokenizer and
// compared with libsentencepiece on the trained model; each inconsistent vocabulary refused in one
// line naming the file (servelab_base, no libtorch).
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <QTemporaryDir>
#include <QtTest>
#include <fstream>
#include <string>
#include <vector>

#include "gguf_crafted.h"
#include "model/gguf_file.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "util/errors.h"
#include "verify_contains.h"

using namespace servelab;
using namespace servelab::test;

class GgufTokenizerTest : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string file(const char* name) const { return dir_.filePath(QString::fromUtf8(name)).toStdString(); }
  std::string write(const char* name, const std::string& bytes) {
    const std::string path = file(name);
    write_bytes(path, bytes);
    return path;
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  // A SentencePiece vocabulary in GGUF metadata (tokenizer.ggml.model "llama", as llama.cpp's
  // converter writes Llama 2 and TinyLlama): a BPE model with byte fallback trained here, its
  // pieces, scores and types written into a crafted file, must encode every string exactly as
  // libsentencepiece does from the original .model file.
  void sentencepiece_vocabulary() {
    const std::string corpus_path = file("sp_corpus.txt");
    {
      std::ofstream out(corpus_path);
      for (int r = 0; r < 30; ++r)
        out << "the quick brown fox jumps over the lazy dog\nhello world, hello there  friend\n"
               "serving models is fun and fast 12345\ntokens and pieces make words\n";
    }
    const std::string prefix = file("sp_tiny");
    const auto status = sentencepiece::SentencePieceTrainer::Train(
        "--input=" + corpus_path + " --model_prefix=" + prefix +
        " --vocab_size=320 --model_type=bpe --byte_fallback=true --character_coverage=1.0"
        " --normalization_rule_name=identity --remove_extra_whitespaces=false --minloglevel=2");
    QVERIFY2(status.ok(), status.ToString().c_str());
    sentencepiece::SentencePieceProcessor sp;
    QVERIFY(sp.Load(prefix + ".model").ok());

    std::vector<std::string> pieces;
    std::vector<float> scores;
    std::vector<int32_t> types;
    int bytes = 0;
    for (int i = 0; i < sp.GetPieceSize(); ++i) {
      pieces.push_back(sp.IdToPiece(i));
      scores.push_back(sp.GetScore(i));
      types.push_back(sp.IsUnknown(i) ? 2 : sp.IsControl(i) ? 3 : sp.IsUnused(i) ? 5 : sp.IsByte(i) ? 6 : 1);
      bytes += sp.IsByte(i);
    }
    QCOMPARE(bytes, 256);
    auto vocabulary_file = [&](const char* name, std::vector<std::string> extra,
                               const std::vector<int32_t>& token_types = {}) {
      Crafted c;
      c.kvs = {kv_str("general.architecture", "llama"),
               kv_str("tokenizer.ggml.model", "llama"),
               kv_strings("tokenizer.ggml.tokens", pieces),
               kv_floats("tokenizer.ggml.scores", scores),
               kv_ints("tokenizer.ggml.token_type", token_types.empty() ? types : token_types),
               kv_u32("tokenizer.ggml.unknown_token_id", 0),
               kv_u32("tokenizer.ggml.bos_token_id", 1),
               kv_u32("tokenizer.ggml.eos_token_id", 2),
               kv_bool("tokenizer.ggml.add_bos_token", true)};
      for (std::string& e : extra) c.kvs.push_back(std::move(e));
      return write(name, c.bytes());
    };
    const std::string path = vocabulary_file("sp_vocab.gguf", {});
    const std::unique_ptr<Tokenizer> tok = load_gguf_tokenizer(GgufFile::open(path));
    QCOMPARE(tok->kind(), std::string("sentencepiece"));
    QCOMPARE(tok->vocab_size(), sp.GetPieceSize());
    QCOMPARE(tok->bos_id(), std::optional<int32_t>(1));
    QCOMPARE(tok->eos_id(), std::optional<int32_t>(2));
    QVERIFY(tok->add_bos());
    QVERIFY(std::find(tok->stop_ids().begin(), tok->stop_ids().end(), 2) != tok->stop_ids().end());
    const char* texts[] = {"hello world",
                           "the lazy fox serves tokens",
                           "  two leading spaces and  double  ones ",
                           "line one\nline two\n\ttabbed",
                           "digits 0123456789 and 42",
                           "日本 🐍 and café: bytes the vocabulary lacks",
                           "helloworld hellothere",
                           ""};
    for (const char* text : texts) {
      std::vector<int> want;
      QVERIFY(sp.Encode(text, &want).ok());
      const std::vector<int32_t> got = tok->encode(text);
      QCOMPARE(std::vector<int>(got.begin(), got.end()), want);
      QCOMPARE(tok->decode(got), std::string(text));
    }
    // Without add_space_prefix the first word gets no "▁", as a model trained that way expects.
    const std::unique_ptr<Tokenizer> bare = load_gguf_tokenizer(GgufFile::open(
        vocabulary_file("sp_noprefix.gguf", {kv_bool("tokenizer.ggml.add_space_prefix", false)})));
    QVERIFY(bare->encode("hello") != tok->encode("hello"));
    QCOMPARE(bare->decode(bare->encode("hello")), std::string("hello"));

    // Inconsistent vocabularies: one line naming the file and what is wrong.
    auto refusal = [&](const char* name, std::vector<std::string> kvs, const char* model = "llama") {
      Crafted c;
      c.kvs = {kv_str("general.architecture", "llama"), kv_str("tokenizer.ggml.model", model)};
      for (std::string& e : kvs) c.kvs.push_back(std::move(e));
      const std::string p = write(name, c.bytes());
      try {
        load_gguf_tokenizer(GgufFile::open(p));
      } catch (const TokenizerError& e) {
        return std::string(e.what());
      }
      return std::string("<no TokenizerError>");
    };
    std::vector<float> short_scores(scores.begin(), scores.end() - 1);
    std::string e = refusal("sp_scores.gguf", {kv_strings("tokenizer.ggml.tokens", pieces),
                                               kv_floats("tokenizer.ggml.scores", short_scores),
                                               kv_ints("tokenizer.ggml.token_type", types)});
    VERIFY_CONTAINS(e, "sp_scores.gguf");
    VERIFY_CONTAINS(e, "320 pieces but 319 scores");
    e = refusal("sp_noscores.gguf",
                {kv_strings("tokenizer.ggml.tokens", pieces), kv_ints("tokenizer.ggml.token_type", types)});
    VERIFY_CONTAINS(e, "tokenizer.ggml.scores is missing");
    std::vector<int32_t> bad_types = types;
    bad_types[7] = 9;
    e = refusal("sp_type.gguf",
                {kv_strings("tokenizer.ggml.tokens", pieces), kv_floats("tokenizer.ggml.scores", scores),
                 kv_ints("tokenizer.ggml.token_type", bad_types)});
    VERIFY_CONTAINS(e, "token 7 has type 9");
    std::vector<int32_t> no_unknown = types;
    no_unknown[0] = 1;
    e = refusal("sp_unk.gguf",
                {kv_strings("tokenizer.ggml.tokens", pieces), kv_floats("tokenizer.ggml.scores", scores),
                 kv_ints("tokenizer.ggml.token_type", no_unknown)});
    VERIFY_CONTAINS(e, "no piece of the unknown type");
    // llama.cpp's Gemma converter types <unk> as a control token and names it by id: that is the
    // unknown piece (a real Gemma 3 file is written so); a normal piece named so is not.
    std::vector<int32_t> unk_control = types;
    unk_control[0] = 3;
    const std::string gemma_like = vocabulary_file("sp_unk_control.gguf", {}, unk_control);
    const std::unique_ptr<Tokenizer> gemma_tok = load_gguf_tokenizer(GgufFile::open(gemma_like));
    QCOMPARE(gemma_tok->encode("hello world"), tok->encode("hello world"));
    e = refusal(
        "sp_unk_normal.gguf",
        {kv_strings("tokenizer.ggml.tokens", pieces), kv_floats("tokenizer.ggml.scores", scores),
         kv_ints("tokenizer.ggml.token_type", no_unknown), kv_u32("tokenizer.ggml.unknown_token_id", 0)});
    VERIFY_CONTAINS(e, "no piece of the unknown type");
    e = refusal("sp_bos.gguf",
                {kv_strings("tokenizer.ggml.tokens", pieces), kv_floats("tokenizer.ggml.scores", scores),
                 kv_ints("tokenizer.ggml.token_type", types), kv_u32("tokenizer.ggml.bos_token_id", 10)});
    VERIFY_CONTAINS(e, "the bos token 10");
    VERIFY_CONTAINS(e, "is not a control token");
    e = refusal("sp_range.gguf",
                {kv_strings("tokenizer.ggml.tokens", pieces), kv_floats("tokenizer.ggml.scores", scores),
                 kv_ints("tokenizer.ggml.token_type", types), kv_u32("tokenizer.ggml.eos_token_id", 5000)});
    VERIFY_CONTAINS(e, "tokenizer.ggml.eos_token_id 5000 is outside the vocabulary of 320");
    e = refusal("sp_model.gguf", {}, "t5");
    VERIFY_CONTAINS(e, "tokenizer.ggml.model \"t5\" is not supported");
  }
};

QTEST_GUILESS_MAIN(GgufTokenizerTest)
#include "test_gguf_tokenizer.moc"

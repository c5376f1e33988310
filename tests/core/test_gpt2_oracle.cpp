// Oracle parity (llm.c style): our GPT-2 forward and generation against what Hugging Face
// transformers computes on the same checkpoints (written by tests/oracle/make_gpt2_fixtures.py),
// in each key layout, with and without the KV cache, single and as a left-padded batch.
#include <c10/core/InferenceMode.h>

#include <QtTest>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "generate/generator.h"
#include "model/gpt2_model.h"
#include "model/safetensors_file.h"
#include "test_support.h"

using namespace servelab;
using servelab::test::max_abs_diff;
namespace fs = std::filesystem;

namespace {

struct Case {
  std::unique_ptr<Gpt2Model> model;
  nlohmann::json ref;
  std::map<std::string, at::Tensor> tensors;
};

at::Tensor to_tensor(const StTensor& t) {
  return at::from_blob(const_cast<std::byte*>(t.data), t.shape, at::kFloat).clone();
}

}  // namespace

class TestGpt2Oracle : public QObject {
  Q_OBJECT

  std::string dir_;

  Case load(const QString& layout, AttentionBackend backend = AttentionBackend::Sdpa) {
    const fs::path d = fs::path(dir_) / layout.toStdString();
    Case c;
    Gpt2Config cfg = parse_gpt2_config((d / "config.json").string());
    c.model = std::make_unique<Gpt2Model>(
        cfg, load_gpt2_weights((d / "model.safetensors").string(), cfg, at::Device(at::kCPU), at::kFloat));
    c.model->set_attention_backend(backend);
    std::ifstream(d / "reference.json") >> c.ref;
    SafetensorsFile ref = SafetensorsFile::open((d / "reference.safetensors").string());
    for (const auto& t : ref.tensors()) c.tensors[t.name] = to_tensor(t);
    return c;
  }

  std::vector<std::vector<int32_t>> prompts(const Case& c) {
    return c.ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  }

  void layouts() {
    QTest::addColumn<QString>("layout");
    QTest::addColumn<int>("backend");
    for (const char* l : {"prefixed", "unprefixed", "untied"}) {
      QTest::newRow((std::string(l) + "/sdpa").c_str())
          << QString(l) << static_cast<int>(AttentionBackend::Sdpa);
      QTest::newRow((std::string(l) + "/manual").c_str())
          << QString(l) << static_cast<int>(AttentionBackend::Manual);
    }
  }

 private Q_SLOTS:
  void initTestCase() {
    dir_ = test::env_or_empty("SERVELAB_ORACLE_DIR");
    if (dir_.empty() || !fs::exists(fs::path(dir_) / "prefixed" / "reference.json"))
      QSKIP(
          "oracle fixtures not found: SERVELAB_ORACLE_DIR is unset or empty. They are written by "
          "tests/oracle/make_gpt2_fixtures.py (CTest runs it first when .venv has transformers).");
  }

  void full_logits_match_hf_data() { layouts(); }
  void full_logits_match_hf() {
    QFETCH(QString, layout);
    QFETCH(int, backend);
    c10::InferenceMode guard;
    Case c = load(layout, static_cast<AttentionBackend>(backend));
    auto ps = prompts(c);
    for (size_t i = 0; i < ps.size(); ++i) {
      at::Tensor ids = at::tensor(std::vector<int64_t>(ps[i].begin(), ps[i].end())).unsqueeze(0);
      at::Tensor pos = at::arange(ids.size(1)).unsqueeze(0);
      at::Tensor logits = c.model->forward({ids, pos, at::Tensor(), true}).squeeze(0);
      const double d = max_abs_diff(logits, c.tensors.at("logits_" + std::to_string(i)));
      QVERIFY2(d < 1e-4, qPrintable(QString("prompt %1: max |logit diff| = %2").arg(i).arg(d)));
    }
  }

  void kv_cache_logits_match_hf_data() { layouts(); }
  void kv_cache_logits_match_hf() {
    // Prefill two tokens, then feed the rest one at a time through the cache: every step's
    // logits must equal the full-sequence logits HF computed for that position.
    QFETCH(QString, layout);
    QFETCH(int, backend);
    c10::InferenceMode guard;
    Case c = load(layout, static_cast<AttentionBackend>(backend));
    const auto p = prompts(c)[0];
    const at::Tensor ref = c.tensors.at("logits_0");
    KvCache cache = c.model->make_cache(1, static_cast<int64_t>(p.size()));
    at::Tensor ids = at::tensor(std::vector<int64_t>(p.begin(), p.end())).unsqueeze(0);
    at::Tensor out =
        c.model->forward({ids.narrow(1, 0, 2), at::arange(2).unsqueeze(0), at::Tensor(), true}, &cache);
    QVERIFY(max_abs_diff(out.squeeze(0), ref.narrow(0, 0, 2)) < 1e-4);
    for (int64_t t = 2; t < static_cast<int64_t>(p.size()); ++t) {
      at::Tensor l = c.model->forward(
          {ids.narrow(1, t, 1), at::full({1, 1}, t, at::kLong), at::Tensor(), false}, &cache);
      const double d = max_abs_diff(l.squeeze(0), ref[t]);
      QVERIFY2(d < 1e-4, qPrintable(QString("position %1: max |logit diff| = %2").arg(t).arg(d)));
    }
    QCOMPARE(cache.length(), static_cast<int64_t>(p.size()));
  }

  void greedy_tokens_match_hf_data() {
    QTest::addColumn<QString>("layout");
    QTest::addColumn<bool>("kv_cache");
    for (const char* l : {"prefixed", "unprefixed", "untied"}) {
      QTest::newRow((std::string(l) + "/cache").c_str()) << QString(l) << true;
      QTest::newRow((std::string(l) + "/no-cache").c_str()) << QString(l) << false;
    }
  }
  void greedy_tokens_match_hf() {
    QFETCH(QString, layout);
    QFETCH(bool, kv_cache);
    Case c = load(layout);
    test::IdTokenizer tok(static_cast<int32_t>(c.model->config().vocab_size),
                          static_cast<int32_t>(c.model->config().eos_token_id));
    GenerateOptions o;
    o.max_new_tokens = c.ref["new_tokens"].get<int64_t>();
    o.use_kv_cache = kv_cache;
    o.stop_at_eos = false;
    const auto ps = prompts(c);
    // One by one, as HF generate() does it.
    for (size_t i = 0; i < ps.size(); ++i) {
      GenerateResult g = generate(*c.model, tok, {ps[i]}, o);
      QCOMPARE(g.sequences[0].generated_ids, c.ref["single"][i].get<std::vector<int32_t>>());
    }
    // All together as one left-padded batch (the seeds' loop): same tokens as alone.
    GenerateResult b = generate(*c.model, tok, ps, o);
    for (size_t i = 0; i < ps.size(); ++i) {
      QCOMPARE(b.sequences[i].generated_ids, c.ref["batch"]["tokens"][i].get<std::vector<int32_t>>());
      QCOMPARE(b.sequences[i].generated_ids, c.ref["single"][i].get<std::vector<int32_t>>());
    }
  }

  void padded_batch_matches_hf_data() { layouts(); }
  void padded_batch_matches_hf() {
    QFETCH(QString, layout);
    QFETCH(int, backend);
    c10::InferenceMode guard;
    Case c = load(layout, static_cast<AttentionBackend>(backend));
    const auto ps = prompts(c);
    PaddedBatch pb = left_pad(ps, static_cast<int32_t>(c.model->config().eos_token_id));
    auto as_rows = [](const at::Tensor& t) {
      std::vector<std::vector<int64_t>> rows;
      for (int64_t r = 0; r < t.size(0); ++r) {
        at::Tensor row = t[r].contiguous();
        rows.emplace_back(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
      }
      return rows;
    };
    QCOMPARE(as_rows(pb.input_ids), c.ref["batch"]["input_ids"].get<std::vector<std::vector<int64_t>>>());
    QCOMPARE(as_rows(pb.attention_mask),
             c.ref["batch"]["attention_mask"].get<std::vector<std::vector<int64_t>>>());
    at::Tensor logits = c.model->forward({pb.input_ids, pb.position_ids, pb.attention_mask, false});
    const double d = max_abs_diff(logits, c.tensors.at("batch_last_logits"));
    QVERIFY2(d < 1e-4, qPrintable(QString("max |logit diff| = %1").arg(d)));
  }
};

QTEST_GUILESS_MAIN(TestGpt2Oracle)
#include "test_gpt2_oracle.moc"

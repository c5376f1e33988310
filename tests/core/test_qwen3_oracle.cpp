// Qwen3 and Qwen2 parity: the models the architecture registry builds from Hugging Face folders
// against transformers' Qwen3ForCausalLM / Qwen2ForCausalLM on tiny random checkpoints
// (tests/oracle/make_qwen3_fixtures.py): QK-norm, an explicit head_dim, grouped-query attention,
// Qwen3 with and without attention biases, Qwen2's q/k/v biases; full logits, the KV cache token by
// token, greedy tokens alone and as a left-padded batch, continuous batching and paged KV equal to
// solo; the same weights as a qwen3 GGUF file (llama.cpp's names, dequantized and as stored); and
// the registry's other hooks on Qwen3 (blocked GEMMs, quantization, LoRA's names).
#include <c10/core/InferenceMode.h>

#include <QtTest>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "batching_oracle.h"
#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "lora/lora_adapter.h"
#include "model/architecture.h"
#include "model/blocked_linear.h"
#include "model/gguf_file.h"
#include "model/llama_config.h"
#include "model/llama_model.h"
#include "oracle_case.h"

using namespace servelab;
using servelab::test::max_abs_diff;
namespace fs = std::filesystem;

namespace {

constexpr const char* kCases[] = {"qwen3_gqa", "qwen3_bias", "qwen2_bias"};

using Case = test::OracleCase;
using test::check_full_logits;
using test::row_ids;

}  // namespace

class TestQwen3Oracle : public QObject {
  Q_OBJECT

  std::string dir_;

  Case load(const QString& name, AttentionBackend backend = AttentionBackend::Sdpa) {
    return test::load_oracle_case(fs::path(dir_) / name.toStdString(), backend);
  }

 private Q_SLOTS:
  void initTestCase() {
    dir_ = test::env_or_empty("SERVELAB_QWEN3_ORACLE_DIR");
    if (dir_.empty() || !fs::exists(fs::path(dir_) / "qwen3_gqa" / "reference.json"))
      QSKIP(
          "Qwen3 oracle fixtures not found: SERVELAB_QWEN3_ORACLE_DIR is unset or empty. They are written by "
          "tests/oracle/make_qwen3_fixtures.py (CTest runs it first when .venv has transformers).");
  }

  void registry_picks_the_record() {
    Case q3 = load("qwen3_gqa");
    QCOMPARE(QString::fromStdString(q3.arch->name), QString("qwen3"));
    QCOMPARE(QString::fromStdString(q3.model->shape().architecture), QString("qwen3"));
    QVERIFY(&architecture_of(*q3.model) == q3.arch);
    const auto& l3 = dynamic_cast<const LlamaModel&>(*q3.model);
    QVERIFY(l3.config().qk_norm);
    QCOMPARE(l3.config().head_dim, int64_t{16});  // not hidden_size / heads (6)
    QVERIFY(!l3.weights().layers[0].b[0].defined());
    // Our parameter count is Hugging Face's (the QK-norm weights included).
    QCOMPARE(l3.weights().parameter_count(), l3.config().num_parameters());
    Case q2 = load("qwen2_bias");
    QCOMPARE(QString::fromStdString(q2.arch->name), QString("llama"));
    const auto& l2 = dynamic_cast<const LlamaModel&>(*q2.model);
    QVERIFY(!l2.config().qk_norm && l2.config().attention_bias && !l2.config().o_bias);
    // A model_type no record loads names itself and the supported ones.
    const std::string msg =
        test::error_of(ErrorKind::ModelFormat, [] { architecture_for_model_type("mamba", "somewhere"); });
    QVERIFY2(msg.find("\"mamba\"") != std::string::npos && msg.find("qwen3") != std::string::npos,
             msg.c_str());
  }

  void full_logits_match_hf_data() { test::add_backend_rows(kCases); }
  void full_logits_match_hf() {
    test::check_full_logits_row([this](const QString& n, AttentionBackend b) { return load(n, b); });
  }

  void kv_cache_and_batch_match_hf_data() {
    QTest::addColumn<QString>("name");
    for (const char* n : kCases) QTest::newRow(n) << QString(n);
  }
  void kv_cache_and_batch_match_hf() {
    QFETCH(QString, name);
    c10::InferenceMode guard;
    test::check_kv_cache_and_batch(load(name));
  }

  void greedy_tokens_match_hf_data() { kv_cache_and_batch_match_hf_data(); }
  void greedy_tokens_match_hf() {
    QFETCH(QString, name);
    test::check_greedy(load(name));
  }

  void continuous_batching_equals_solo_data() {
    QTest::addColumn<int>("kv");
    QTest::newRow("slot-kv") << static_cast<int>(KvStrategy::SlotKv);
    QTest::newRow("paged") << static_cast<int>(KvStrategy::Paged);
  }
  void continuous_batching_equals_solo() {
    QFETCH(int, kv);
    Case c = load("qwen3_gqa");
    const test::IdTokenizer tok = c.id_tokenizer();
    const auto ps = c.prompts();
    std::vector<int64_t> budgets;
    BatchRunResult r = test::run_staggered_queue(*c.model, tok, ps, c.ref["new_tokens"].get<int64_t>(),
                                                 static_cast<KvStrategy>(kv), &budgets);
    QCOMPARE(r.requests.size(), ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      std::vector<int32_t> expected = c.single(i);
      expected.resize(static_cast<size_t>(budgets[i]));
      QCOMPARE(r.requests[i].generated_ids, expected);
    }
  }

  void gguf_matches_hf_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<bool>("as_stored");
    for (const char* n : {"qwen3_gqa", "qwen3_bias"}) {
      QTest::newRow((std::string(n) + "/dequantized").c_str()) << QString(n) << false;
      QTest::newRow((std::string(n) + "/as-stored").c_str()) << QString(n) << true;
    }
  }
  void gguf_matches_hf() {
    // The fixture's F32 GGUF (general.architecture qwen3) through the record GGUF files pick.
    QFETCH(QString, name);
    QFETCH(bool, as_stored);
    Case c = load(name);
    const GgufFile file = GgufFile::open((fs::path(dir_) / name.toStdString() / "model.gguf").string());
    const Architecture& arch = architecture_for_gguf(file.get_string("general.architecture"), file.path());
    QCOMPARE(QString::fromStdString(arch.name), QString("qwen3"));
    std::unique_ptr<Model> m;
    {
      c10::InferenceMode guard;
      std::string run_as;
      m = as_stored ? arch.load_gguf_as_stored(file, &run_as, false)
                    : arch.load_gguf(file, at::Device(at::kCPU), at::kFloat);
      QCOMPARE(m->parameter_count(), c.model->parameter_count());
      check_full_logits(*m, c);
    }
    const test::IdTokenizer tok = c.id_tokenizer();
    GenerateResult b = generate(*m, tok, c.prompts(), c.greedy());
    for (size_t i = 0; i < c.prompts().size(); ++i) QCOMPARE(b.sequences[i].generated_ids, c.single(i));
  }

  void blocked_gemms_match_hf() {
    // The blocked fp32 GEMMs over any model's matrices (what --gemm auto runs on the CPU): the
    // same logits.
    c10::InferenceMode guard;
    Case c = load("qwen3_bias");
    std::unique_ptr<Model> blocked = pack_blocked_model(*c.model);
    QVERIFY(blocked && blocked->kernels() && blocked->kernels()->holds_dense_weights());
    check_full_logits(*blocked, c);
  }

  void quantization_through_the_record() {
    // int8 per-channel through the record's quantizer stays close to the fp32 logits, and the
    // quantization experiment's view lists the QK-norm weights among the kept tensors.
    c10::InferenceMode guard;
    Case c = load("qwen3_gqa");
    QuantSpec spec = parse_quant_mode("int8-channel");
    spec.exec = QuantExec::DequantOnce;
    std::unique_ptr<Model> q = c.arch->quantize(*c.model, spec, GemmBackend::Aten);
    const auto p = c.prompts()[0];
    at::Tensor logits =
        q->forward({row_ids(p), at::arange(static_cast<int64_t>(p.size())).unsqueeze(0), at::Tensor(), true})
            .squeeze(0);
    const double d = max_abs_diff(logits, c.tensors.at("logits_0"));
    QVERIFY2(d < 0.5, qPrintable(QString("int8: max |logit diff| = %1").arg(d)));
    const QuantTarget t = c.arch->quant_target(*c.model);
    bool has_q_norm = false;
    for (const auto& [name, w] : t.named) has_q_norm |= name == "model.layers.0.self_attn.q_norm.weight";
    QVERIFY(has_q_norm);
  }

  void lora_names_come_from_the_record() {
    Case c = load("qwen3_gqa");
    const LoraTarget t = lora_target(*c.model);
    QCOMPARE(QString::fromStdString(t.display), QString("Qwen3"));
    QCOMPARE(QString::fromStdString(t.hf_root + t.module_path(2, LinearSlot::K)),
             QString("model.layers.2.self_attn.k_proj"));
    QCOMPARE(t.projection(LinearSlot::Q).out, int64_t{8 * 16});
  }
};

QTEST_GUILESS_MAIN(TestQwen3Oracle)
#include "test_qwen3_oracle.moc"

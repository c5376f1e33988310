// Llama-family parity: our LlamaModel against Hugging Face's LlamaForCausalLM on tiny random
// checkpoints (tests/oracle/make_llama_fixtures.py): grouped-query attention, tied and untied heads,
// biases, llama3 and linear rope scaling, sharded safetensors; full logits, the KV cache fed token
// by token, greedy tokens alone and as a left-padded batch, and continuous batching equal to solo.
#include <c10/core/InferenceMode.h>

#include <QtTest>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "batching_oracle.h"
#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "model/blocked_linear.h"
#include "model/engine.h"
#include "model/llama_model.h"
#include "model/safetensors_file.h"
#include "oracle_case.h"
#include "test_support.h"
#include "util/cpu_features.h"
#include "util/device.h"

using namespace servelab;
using servelab::test::max_abs_diff;
namespace fs = std::filesystem;

namespace {

constexpr const char* kCases[] = {"tied_gqa", "untied_bias", "llama3_rope", "linear_rope"};

struct Case {
  std::unique_ptr<LlamaModel> model;
  nlohmann::json ref;
  std::map<std::string, at::Tensor> tensors;
  std::vector<std::vector<int32_t>> prompts() const {
    return ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  }
  std::vector<int32_t> single(size_t i) const { return ref["single"][i].get<std::vector<int32_t>>(); }
};

}  // namespace

class TestLlamaOracle : public QObject {
  Q_OBJECT

  std::string dir_;

  Case load(const QString& name, AttentionBackend backend = AttentionBackend::Sdpa,
            at::Device device = at::Device(at::kCPU)) {
    const fs::path d = fs::path(dir_) / name.toStdString();
    Case c;
    LlamaConfig cfg = parse_llama_config(d.string());
    c.model = std::make_unique<LlamaModel>(cfg, load_llama_safetensors(d.string(), cfg, device, at::kFloat));
    c.model->set_attention_backend(backend);
    std::ifstream(d / "reference.json") >> c.ref;
    SafetensorsFile ref = SafetensorsFile::open((d / "reference.safetensors").string());
    for (const auto& t : ref.tensors())
      c.tensors[t.name] = at::from_blob(const_cast<std::byte*>(t.data), t.shape, at::kFloat).clone();
    return c;
  }

  static test::IdTokenizer id_tokenizer(const Case& c) {
    return test::IdTokenizer(static_cast<int32_t>(c.model->shape().vocab_size), c.ref["eos"].get<int32_t>());
  }

  static GenerateOptions greedy(const Case& c, bool kv_cache) {
    GenerateOptions o;
    o.max_new_tokens = c.ref["new_tokens"].get<int64_t>();
    o.use_kv_cache = kv_cache;
    o.stop_at_eos = false;
    return o;
  }

  static void cases_by_backend() { test::add_backend_rows(kCases); }

 private Q_SLOTS:
  void initTestCase() {
    dir_ = test::env_or_empty("SERVELAB_LLAMA_ORACLE_DIR");
    if (dir_.empty() || !fs::exists(fs::path(dir_) / "tied_gqa" / "reference.json"))
      QSKIP(
          "Llama oracle fixtures not found: SERVELAB_LLAMA_ORACLE_DIR is unset or empty. They are written by "
          "tests/oracle/make_llama_fixtures.py (CTest runs it first when .venv has transformers).");
  }

  void config_reads_what_hf_wrote() {
    const LlamaConfig gqa = parse_llama_config((fs::path(dir_) / "tied_gqa").string());
    QCOMPARE(gqa.n_head, int64_t{9});
    QCOMPARE(gqa.n_kv_head, int64_t{3});
    QVERIFY(gqa.tie_word_embeddings);
    const LlamaConfig l3 = parse_llama_config((fs::path(dir_) / "llama3_rope").string());
    QCOMPARE(QString::fromStdString(l3.rope_scaling.type), QString("llama3"));
    QCOMPARE(l3.rope_scaling.original_context, int64_t{16});
    const LlamaConfig bias = parse_llama_config((fs::path(dir_) / "untied_bias").string());
    QVERIFY(bias.attention_bias && bias.o_bias && bias.mlp_bias && !bias.tie_word_embeddings);
    // Our parameter count is Hugging Face's.
    for (const char* n : kCases) {
      Case c = load(n);
      QCOMPARE(c.model->weights().parameter_count(), c.model->config().num_parameters());
    }
  }

  void full_logits_match_hf_data() { cases_by_backend(); }
  void full_logits_match_hf() {
    QFETCH(QString, name);
    QFETCH(int, backend);
    c10::InferenceMode guard;
    Case c = load(name, static_cast<AttentionBackend>(backend));
    const auto ps = c.prompts();
    for (size_t i = 0; i < ps.size(); ++i) {
      at::Tensor ids = at::tensor(std::vector<int64_t>(ps[i].begin(), ps[i].end())).unsqueeze(0);
      at::Tensor logits =
          c.model->forward({ids, at::arange(ids.size(1)).unsqueeze(0), at::Tensor(), true}).squeeze(0);
      const double d = max_abs_diff(logits, c.tensors.at("logits_" + std::to_string(i)));
      QVERIFY2(d < 1e-4, qPrintable(QString("prompt %1: max |logit diff| = %2").arg(i).arg(d)));
    }
  }

  void kv_cache_logits_match_hf_data() { cases_by_backend(); }
  void kv_cache_logits_match_hf() {
    // Prefill two tokens, then one at a time through the cache (which holds 3 KV heads, not 9).
    QFETCH(QString, name);
    QFETCH(int, backend);
    c10::InferenceMode guard;
    Case c = load(name, static_cast<AttentionBackend>(backend));
    const auto p = c.prompts()[0];
    const at::Tensor ref = c.tensors.at("logits_0");
    KvCache cache = c.model->make_cache(1, static_cast<int64_t>(p.size()));
    QCOMPARE(cache.keys().size(2), c.model->config().n_kv_head);
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
  }

  void padded_batch_matches_hf_data() { cases_by_backend(); }
  void padded_batch_matches_hf() {
    QFETCH(QString, name);
    QFETCH(int, backend);
    c10::InferenceMode guard;
    Case c = load(name, static_cast<AttentionBackend>(backend));
    PaddedBatch pb = left_padded_batch(c.prompts(), c.ref["eos"].get<int32_t>());
    at::Tensor logits = c.model->forward({pb.input_ids, pb.position_ids, pb.attention_mask, false});
    const double d = max_abs_diff(logits, c.tensors.at("batch_last_logits"));
    QVERIFY2(d < 1e-4, qPrintable(QString("max |logit diff| = %1").arg(d)));
  }

  void greedy_tokens_match_hf_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<bool>("kv_cache");
    for (const char* n : kCases) {
      QTest::newRow((std::string(n) + "/cache").c_str()) << QString(n) << true;
      QTest::newRow((std::string(n) + "/no-cache").c_str()) << QString(n) << false;
    }
  }
  void greedy_tokens_match_hf() {
    QFETCH(QString, name);
    QFETCH(bool, kv_cache);
    Case c = load(name);
    const test::IdTokenizer tok = id_tokenizer(c);
    const GenerateOptions o = greedy(c, kv_cache);
    const auto ps = c.prompts();
    for (size_t i = 0; i < ps.size(); ++i)
      QCOMPARE(generate(*c.model, tok, {ps[i]}, o).sequences[0].generated_ids, c.single(i));
    GenerateResult b = generate(*c.model, tok, ps, o);
    for (size_t i = 0; i < ps.size(); ++i) {
      QCOMPARE(b.sequences[i].generated_ids, c.ref["batch"]["tokens"][i].get<std::vector<int32_t>>());
      QCOMPARE(b.sequences[i].generated_ids, c.single(i));
    }
  }

  void continuous_batching_equals_solo_data() {
    QTest::addColumn<int>("kv");
    QTest::newRow("slot-kv") << static_cast<int>(KvStrategy::SlotKv);
    QTest::newRow("merge-filter") << static_cast<int>(KvStrategy::NaiveMergeFilter);
  }
  void continuous_batching_equals_solo() {
    // Requests of different lengths join and leave a running batch of 2 over GQA caches: each one's
    // greedy tokens are what it gets alone (HF's).
    QFETCH(int, kv);
    Case c = load("tied_gqa");
    const test::IdTokenizer tok = id_tokenizer(c);
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

  void cuda_matches_hf_data() { cases_by_backend(); }
  void cuda_matches_hf() {
    // On a GPU in fp32: full logits within 1e-3 of HF's (CPU fp32) and HF's greedy tokens, alone and
    // as a padded batch, through the GQA KV cache.
    if (!cuda_available()) QSKIP("no CUDA device here: the Llama CUDA parity rows run on a GPU machine");
    QFETCH(QString, name);
    QFETCH(int, backend);
    Case c = load(name, static_cast<AttentionBackend>(backend), at::Device(at::kCUDA));
    const auto ps = c.prompts();
    try {
      c10::InferenceMode guard;
      for (size_t i = 0; i < ps.size(); ++i) {
        at::Tensor ids = at::tensor(std::vector<int64_t>(ps[i].begin(), ps[i].end())).unsqueeze(0);
        at::Tensor logits = c.model->forward({ids, at::arange(ids.size(1)).unsqueeze(0), at::Tensor(), true})
                                .squeeze(0)
                                .cpu();
        const double d = max_abs_diff(logits, c.tensors.at("logits_" + std::to_string(i)));
        QVERIFY2(d < 1e-3, qPrintable(QString("prompt %1: max |logit diff| = %2").arg(i).arg(d)));
      }
    } catch (const std::exception& e) {
      QFAIL(e.what());  // QtTest would only say "unhandled exception"
    }
    const test::IdTokenizer tok = id_tokenizer(c);
    GenerateResult b;
    try {
      b = generate(*c.model, tok, ps, greedy(c, true));
    } catch (const std::exception& e) {
      QFAIL(e.what());
    }
    for (size_t i = 0; i < ps.size(); ++i) QCOMPARE(b.sequences[i].generated_ids, c.single(i));
  }

  void blocked_gemms_match_hf_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<int>("isa");
    for (const char* n : kCases)
      for (const Isa isa : {Isa::Avx512, Isa::Avx2, Isa::Generic})
        QTest::newRow((std::string(n) + "/" + isa_name(isa)).c_str()) << QString(n) << static_cast<int>(isa);
  }
  void blocked_gemms_match_hf() {
    // The blocked fp32 GEMV/GEMM over a Llama's projections and head (--gemm auto on the CPU in
    // fp32), under each ISA: full logits, a left-padded batch and the KV cache token by token (the
    // decode GEMV) within 1e-4 of HF, and the plain matrices given back bit for bit.
    QFETCH(QString, name);
    QFETCH(int, isa);
    if (!cpu_supports(static_cast<Isa>(isa)))
      QSKIP(qPrintable(QString("this CPU has no ") + isa_name(static_cast<Isa>(isa))));
    const test::IsaScope isa_scope(static_cast<Isa>(isa));
    c10::InferenceMode guard;
    Case c = load(name);
    const std::unique_ptr<LlamaModel> blocked = pack_blocked_linears(*c.model);
    QVERIFY(blocked->kernels() && blocked->kernels()->holds_dense_weights());
    QVERIFY(!blocked->weights().layers[0].w[0].defined());  // the kernels hold the matrices
    const auto dense = blocked->dense_weights().named_tensors(), plain = c.model->weights().named_tensors();
    QCOMPARE(dense.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i)
      QVERIFY2(at::equal(dense[i].second, plain[i].second), dense[i].first.c_str());
    const auto ps = c.prompts();
    for (size_t i = 0; i < ps.size(); ++i) {
      at::Tensor ids = at::tensor(std::vector<int64_t>(ps[i].begin(), ps[i].end())).unsqueeze(0);
      at::Tensor logits =
          blocked->forward({ids, at::arange(ids.size(1)).unsqueeze(0), at::Tensor(), true}).squeeze(0);
      const double d = max_abs_diff(logits, c.tensors.at("logits_" + std::to_string(i)));
      QVERIFY2(d < 1e-4, qPrintable(QString("prompt %1: max |logit diff| = %2").arg(i).arg(d)));
    }
    PaddedBatch pb = left_padded_batch(ps, c.ref["eos"].get<int32_t>());
    const double db =
        max_abs_diff(blocked->forward({pb.input_ids, pb.position_ids, pb.attention_mask, false}),
                     c.tensors.at("batch_last_logits"));
    QVERIFY2(db < 1e-4, qPrintable(QString("batch: max |logit diff| = %1").arg(db)));
    const auto p = ps[0];
    KvCache cache = blocked->make_cache(1, static_cast<int64_t>(p.size()));
    at::Tensor ids = at::tensor(std::vector<int64_t>(p.begin(), p.end())).unsqueeze(0);
    blocked->forward({ids.narrow(1, 0, 2), at::arange(2).unsqueeze(0), at::Tensor(), true}, &cache);
    for (int64_t t = 2; t < static_cast<int64_t>(p.size()); ++t) {
      at::Tensor l = blocked->forward(
          {ids.narrow(1, t, 1), at::full({1, 1}, t, at::kLong), at::Tensor(), false}, &cache);
      const double d = max_abs_diff(l.squeeze(0), c.tensors.at("logits_0")[t]);
      QVERIFY2(d < 1e-4, qPrintable(QString("position %1: max |logit diff| = %2").arg(t).arg(d)));
    }
    // Kernels already present (these) are not packed again.
    QVERIFY_THROWS_EXCEPTION(InputError, pack_blocked_linears(*blocked));
  }

  void engine_loads_llama_folders() {
    // A Llama folder through the Engine, as the CLI and the app load it: shape, info and the refusals
    // of what is built for GPT-2 only so far.
    const fs::path d = fs::path(dir_) / "tied_gqa";
    const std::string msg =
        test::error_of(ErrorKind::Tokenizer, [&] { Engine::load_folder(d.string(), {}); });
    QVERIFY2(msg.find("tokenizer") != std::string::npos, msg.c_str());
  }
};

QTEST_GUILESS_MAIN(TestLlamaOracle)
#include "test_llama_oracle.moc"

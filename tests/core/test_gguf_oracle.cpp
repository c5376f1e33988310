// GGUF Llama parity: our GGUF loader (llama_config_from_gguf, load_llama_gguf: dequantize, undo the
// Q/K row permutation) and LlamaModel against Hugging Face transformers loading the very same files
// (tests/oracle/make_gguf_llama_fixtures.py writes them with the `gguf` package the way llama.cpp's
// converter does: tiny random Llamas, GQA 4 over 2, one tensor type per file for the matrices
// (F32, F16, Q8_0, Q4_0, Q4_1, Q5_0, Q4_K, Q6_K) and a Q4_K_M-like mix, tied and untied heads).
// The oracle is the dequantized weights as HF holds them: the weights themselves, full logits, the
// KV cache fed token by token, a left-padded batch, greedy tokens alone and batched with and
// without the cache, and continuous batching equal to solo. Were transformers to refuse a file,
// the script falls back to an HF model over gguf-py's dequantization and reference.json says so
// (the suite prints which oracle each case used). GPT-2 files too (llama.cpp's gpt2 architecture,
// Q8_0 and F32), which transformers loads itself: the engine's logits and greedy tokens against its.
#include <c10/core/InferenceMode.h>

#include <QtTest>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "batching_oracle.h"
#include "experiments/quantization.h"
#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "model/engine.h"
#include "model/gguf_file.h"
#include "model/gpt2_gguf.h"
#include "model/llama_gguf.h"
#include "model/llama_model.h"
#include "model/safetensors_file.h"
#include "oracle_case.h"
#include "quant/dequant_cpu.h"
#include "quant/quantized_llama.h"
#include "test_support.h"

using namespace servelab;
using servelab::test::max_abs_diff;
namespace fs = std::filesystem;

namespace {

constexpr const char* kCases[] = {"f32",  "f16",  "q8_0", "q4_0",        "q4_1",
                                  "q5_0", "q4_k", "q6_k", "mixed_untied"};
// HF and we compute the same fp32 graph over the same weights in a different order of operations.
constexpr double kLogitTolerance = 1e-4;
using TypeCounts = std::map<std::string, int64_t>;  // ggml type name -> tensors

struct Case {
  std::unique_ptr<LlamaModel> model;
  TypeCounts file_types;
  nlohmann::json ref;
  std::map<std::string, at::Tensor> tensors;
  std::vector<std::vector<int32_t>> prompts() const {
    return ref["prompts"].get<std::vector<std::vector<int32_t>>>();
  }
  std::vector<int32_t> single(size_t i) const { return ref["single"][i].get<std::vector<int32_t>>(); }
};

}  // namespace

class TestGgufOracle : public QObject {
  Q_OBJECT

  std::string dir_;

  fs::path gguf_path(const QString& name) const { return fs::path(dir_) / name.toStdString() / "model.gguf"; }

  // stored: the file's blocks kept as they are and run by the JIT kernels (what the engine does on
  // the CPU in fp32), instead of dequantized at load.
  Case load(const QString& name, AttentionBackend backend = AttentionBackend::Sdpa, bool stored = false,
            std::string* run_as = nullptr) {
    const fs::path d = fs::path(dir_) / name.toStdString();
    Case c;
    const GgufFile file = GgufFile::open(gguf_path(name).string());
    const LlamaConfig cfg = llama_config_from_gguf(file);
    c.model = stored ? load_llama_gguf_as_stored(file, cfg, run_as)
                     : std::make_unique<LlamaModel>(cfg, load_llama_gguf(file, cfg, at::kCPU, at::kFloat));
    c.model->set_attention_backend(backend);
    c.file_types = gguf_tensor_type_counts(file);
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

  // Requests of different lengths join and leave a running batch of 2: each one's greedy tokens
  // are what it gets alone (HF's), cut to its budget.
  static void staggered_queue_equals_solo(const Case& c, KvStrategy kv) {
    const auto ps = c.prompts();
    std::vector<int64_t> budgets;
    BatchRunResult r = test::run_staggered_queue(*c.model, id_tokenizer(c), ps,
                                                 c.ref["new_tokens"].get<int64_t>(), kv, &budgets);
    QCOMPARE(r.requests.size(), ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      std::vector<int32_t> expected = c.single(i);
      expected.resize(static_cast<size_t>(budgets[i]));
      QCOMPARE(r.requests[i].generated_ids, expected);
    }
  }

  static void cases() {
    QTest::addColumn<QString>("name");
    for (const char* n : kCases) QTest::newRow(n) << QString(n);
  }

  static void cases_by_backend() { test::add_backend_rows(kCases); }

 private Q_SLOTS:
  void initTestCase() {
    // One thread: these models are tiny, and two OpenMP threads spinning on a busy 2-core machine
    // (ctest -j2) made the suite 10 times slower (27 s instead of 2).
    set_engine_threads(1);
    dir_ = test::env_or_empty("SERVELAB_GGUF_LLAMA_ORACLE_DIR");
    if (dir_.empty() || !fs::exists(fs::path(dir_) / "mixed_untied" / "reference.json"))
      QSKIP(
          "GGUF Llama oracle fixtures not found: SERVELAB_GGUF_LLAMA_ORACLE_DIR is unset or empty. They are "
          "written by tests/oracle/make_gguf_llama_fixtures.py (CTest runs it first when .venv has "
          "transformers and gguf).");
  }

  void config_and_types_from_the_file_data() { cases(); }
  void config_and_types_from_the_file() {
    QFETCH(QString, name);
    Case c = load(name);
    qInfo("%s: oracle: %s", qPrintable(name), c.ref["oracle"].get<std::string>().c_str());
    const LlamaConfig& cfg = c.model->config();
    QCOMPARE(cfg.n_layer, int64_t{2});
    QCOMPARE(cfg.hidden_size, int64_t{256});
    QCOMPARE(cfg.intermediate_size, int64_t{512});
    QCOMPARE(cfg.n_head, int64_t{4});
    QCOMPARE(cfg.n_kv_head, int64_t{2});
    QCOMPARE(cfg.head_dim, int64_t{64});
    QCOMPARE(cfg.vocab_size, int64_t{320});
    QCOMPARE(cfg.context, int64_t{128});
    QCOMPARE(cfg.rope_theta, 50000.0);
    QCOMPARE(cfg.rms_norm_eps, static_cast<double>(1e-5f));
    QCOMPARE(cfg.bos_token_id, int64_t{1});
    QCOMPARE(cfg.eos_token_id(), int64_t{2});
    QCOMPARE(cfg.tie_word_embeddings, c.ref["tied"].get<bool>());
    QCOMPARE(c.model->lm_head_tied(), c.ref["tied"].get<bool>());
    QCOMPARE(c.file_types, c.ref["tensor_types"].get<TypeCounts>());
    QCOMPARE(c.model->parameter_count(), cfg.num_parameters());
  }

  void weights_are_hfs_data() { cases(); }
  void weights_are_hfs() {
    // Dequantized and un-permuted, our weights are the very values HF loaded (both dequantize
    // exactly: every product of the block formulas is exact in fp32).
    QFETCH(QString, name);
    Case c = load(name);
    const LlamaWeights& w = c.model->weights();
    const auto check = [&](const char* ref_name, const at::Tensor& ours) {
      const at::Tensor& theirs = c.tensors.at(ref_name);
      QCOMPARE(ours.sizes().vec(), theirs.sizes().vec());
      const double d = max_abs_diff(ours, theirs);
      QVERIFY2(d == 0.0, qPrintable(QString("%1: max |diff| = %2").arg(ref_name).arg(d)));
    };
    check("weight.blk.0.attn_q", w.layers[0].w[0]);
    check("weight.blk.0.attn_k", w.layers[0].w[1]);
    check("weight.blk.0.ffn_down", w.layers[0].w[6]);
    check("weight.token_embd", w.embed);
    if (!c.ref["tied"].get<bool>()) check("weight.output", w.lm_head);
  }

  void full_logits_match_hf_data() { cases_by_backend(); }
  void full_logits_match_hf() {
    QFETCH(QString, name);
    QFETCH(int, backend);
    c10::InferenceMode guard;
    Case c = load(name, static_cast<AttentionBackend>(backend));
    const auto ps = c.prompts();
    double worst = 0, range = 0;
    for (size_t i = 0; i < ps.size(); ++i) {
      at::Tensor ids = at::tensor(std::vector<int64_t>(ps[i].begin(), ps[i].end())).unsqueeze(0);
      at::Tensor logits =
          c.model->forward({ids, at::arange(ids.size(1)).unsqueeze(0), at::Tensor(), true}).squeeze(0);
      const at::Tensor& ref = c.tensors.at("logits_" + std::to_string(i));
      const double d = max_abs_diff(logits, ref);
      worst = std::max(worst, d);
      range = std::max(range, ref.abs().max().item<double>());
      QVERIFY2(d < kLogitTolerance, qPrintable(QString("prompt %1: max |logit diff| = %2").arg(i).arg(d)));
    }
    qInfo("%s: max |logit diff| %.3g over logits up to %.3g", qPrintable(name), worst, range);
  }

  void kv_cache_logits_match_hf_data() { cases_by_backend(); }
  void kv_cache_logits_match_hf() {
    // Prefill two tokens, then one at a time through the cache (which holds 2 KV heads, not 4).
    QFETCH(QString, name);
    QFETCH(int, backend);
    c10::InferenceMode guard;
    Case c = load(name, static_cast<AttentionBackend>(backend));
    const auto p = c.prompts()[0];
    const at::Tensor ref = c.tensors.at("logits_0");
    KvCache cache = c.model->make_cache(1, static_cast<int64_t>(p.size()));
    QCOMPARE(cache.keys().size(2), int64_t{2});
    at::Tensor ids = at::tensor(std::vector<int64_t>(p.begin(), p.end())).unsqueeze(0);
    at::Tensor out =
        c.model->forward({ids.narrow(1, 0, 2), at::arange(2).unsqueeze(0), at::Tensor(), true}, &cache);
    QVERIFY(max_abs_diff(out.squeeze(0), ref.narrow(0, 0, 2)) < kLogitTolerance);
    for (int64_t t = 2; t < static_cast<int64_t>(p.size()); ++t) {
      at::Tensor l = c.model->forward(
          {ids.narrow(1, t, 1), at::full({1, 1}, t, at::kLong), at::Tensor(), false}, &cache);
      const double d = max_abs_diff(l.squeeze(0), ref[t]);
      QVERIFY2(d < kLogitTolerance, qPrintable(QString("position %1: max |logit diff| = %2").arg(t).arg(d)));
    }
  }

  void padded_batch_matches_hf_data() { cases(); }
  void padded_batch_matches_hf() {
    QFETCH(QString, name);
    c10::InferenceMode guard;
    Case c = load(name);
    PaddedBatch pb = left_padded_batch(c.prompts(), c.ref["eos"].get<int32_t>());
    QCOMPARE(pb.input_ids.size(1), int64_t{7});
    at::Tensor logits = c.model->forward({pb.input_ids, pb.position_ids, pb.attention_mask, false});
    const double d = max_abs_diff(logits, c.tensors.at("batch_last_logits"));
    QVERIFY2(d < kLogitTolerance, qPrintable(QString("max |logit diff| = %1").arg(d)));
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
    // HF's top two logits are at least 1e-3 apart along every greedy path here (the script checks),
    // ten times the logit tolerance: the tokens must be identical.
    QFETCH(QString, name);
    QFETCH(bool, kv_cache);
    Case c = load(name);
    QVERIFY(c.ref["hf_greedy_min_top2_gap"].get<double>() > 10 * kLogitTolerance);
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
    QTest::addColumn<QString>("name");
    QTest::addColumn<int>("kv");
    for (const char* n : kCases) {
      QTest::newRow((std::string(n) + "/slot-kv").c_str())
          << QString(n) << static_cast<int>(KvStrategy::SlotKv);
      QTest::newRow((std::string(n) + "/merge-filter").c_str())
          << QString(n) << static_cast<int>(KvStrategy::NaiveMergeFilter);
    }
  }
  void continuous_batching_equals_solo() {
    // Requests of different lengths join and leave a running batch of 2 over GQA caches: each one's
    // greedy tokens are what it gets alone (HF's).
    QFETCH(QString, name);
    QFETCH(int, kv);
    Case c = load(name);
    staggered_queue_equals_solo(c, static_cast<KvStrategy>(kv));
  }

  void stored_blocks_are_the_files_values_data() { cases(); }
  void stored_blocks_are_the_files_values() {
    // Q4_0, Q4_1, Q5_0, Q8_0, Q4_K (int4 groups of 32) and Q6_K (int8 groups of 16) repacked for
    // our kernels (and F16/F32 kept) dequantize to the very values of the file's own block formulas;
    // Q5_1 and Q5_K have no kernel of ours and are refused.
    QFETCH(QString, name);
    const GgufFile file = GgufFile::open(gguf_path(name).string());
    int checked = 0;
    for (const GgufTensor& t : file.tensors()) {
      if (t.ne.size() != 2) continue;
      const std::optional<QuantizedTensor> q = ggml_as_stored(t);
      QCOMPARE(q.has_value(), t.type != GgmlType::Q5_K && t.type != GgmlType::Q5_1);
      if (!q) continue;
      std::vector<float> values = gguf_dequantize(t);
      const at::Tensor want = at::from_blob(values.data(), t.shape(), at::kFloat);
      QVERIFY2(at::equal(q->dequantize(at::kFloat), want), t.name.c_str());
      // The fused kernels' row blocks too (the JIT path's conversion).
      if (fused_dequant_supported(*q)) {
        at::Tensor block = at::empty({3, q->cols()});
        dequantize_rows_cpu(*q, 1, block);
        QVERIFY2(at::equal(block, want.narrow(0, 1, 3)), t.name.c_str());
      }
      ++checked;
    }
    QVERIFY(checked > 0);
  }

  void stored_model_matches_hf_data() { cases(); }
  void stored_model_matches_hf() {
    // The model run on the stored blocks: full logits, a left-padded batch, greedy tokens alone and
    // batched through the KV cache, and continuous batching, all as HF's (the kernels sum in another
    // order than addmm: the same tolerance).
    QFETCH(QString, name);
    c10::InferenceMode guard;
    std::string run_as;
    Case c = load(name, AttentionBackend::Sdpa, true, &run_as);
    qInfo("%s runs as: %s", qPrintable(name), run_as.c_str());
    QVERIFY(c.model->kernels() != nullptr);
    for (const auto& [type, n] : c.file_types)
      if (type != "F32") QVERIFY2(run_as.find(type + " as ") != std::string::npos, run_as.c_str());
    const auto ps = c.prompts();
    for (size_t i = 0; i < ps.size(); ++i) {
      at::Tensor ids = at::tensor(std::vector<int64_t>(ps[i].begin(), ps[i].end())).unsqueeze(0);
      at::Tensor logits =
          c.model->forward({ids, at::arange(ids.size(1)).unsqueeze(0), at::Tensor(), true}).squeeze(0);
      const double d = max_abs_diff(logits, c.tensors.at("logits_" + std::to_string(i)));
      QVERIFY2(d < kLogitTolerance, qPrintable(QString("prompt %1: max |logit diff| = %2").arg(i).arg(d)));
    }
    PaddedBatch pb = left_padded_batch(ps, c.ref["eos"].get<int32_t>());
    const double d = max_abs_diff(c.model->forward({pb.input_ids, pb.position_ids, pb.attention_mask, false}),
                                  c.tensors.at("batch_last_logits"));
    QVERIFY2(d < kLogitTolerance, qPrintable(QString("batch: max |logit diff| = %1").arg(d)));
    const test::IdTokenizer tok = id_tokenizer(c);
    const GenerateOptions o = greedy(c, true);
    GenerateResult b = generate(*c.model, tok, ps, o);
    for (size_t i = 0; i < ps.size(); ++i) {
      QCOMPARE(generate(*c.model, tok, {ps[i]}, o).sequences[0].generated_ids, c.single(i));
      QCOMPARE(b.sequences[i].generated_ids, c.single(i));
    }
    staggered_queue_equals_solo(c, KvStrategy::SlotKv);
  }

  void engine_loads_the_files_data() {
    // auto: the blocks as stored on this CPU in fp32; dequant-once: dequantized at load.
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("exec");
    for (const char* n : kCases)
      for (const char* x : {"auto", "dequant-once"})
        QTest::newRow((std::string(n) + "/" + x).c_str()) << QString(n) << QString(x);
  }
  void engine_loads_the_files() {
    // Through the Engine, as the CLI and the app load a .gguf: the file's tokenizer (a 320-token
    // byte-level BPE), the types it holds, and the same greedy tokens.
    QFETCH(QString, name);
    EngineOptions opts;
    QFETCH(QString, exec);
    opts.quant_exec = exec.toStdString();
    const std::unique_ptr<Engine> e = Engine::load(gguf_path(name).string(), opts);
    nlohmann::json ref;
    std::ifstream(fs::path(dir_) / name.toStdString() / "reference.json") >> ref;
    const nlohmann::json info = e->info();
    QCOMPARE(info["architecture"].get<std::string>(), std::string("llama"));
    QCOMPARE(info["format"].get<std::string>(), std::string("gguf"));
    QCOMPARE(info["random_weights"].get<bool>(), false);
    QCOMPARE(info["lm_head_tied"].get<bool>(), ref["tied"].get<bool>());
    QCOMPARE(info["file_tensor_types"].get<TypeCounts>(), ref["tensor_types"].get<TypeCounts>());
    const std::string run_as = info["file_tensors_run_as"].get<std::string>();
    QCOMPARE(run_as.rfind("dequantized once", 0) == 0, exec == "dequant-once");
    QCOMPARE(e->tokenizer().vocab_size(), 320);
    QCOMPARE(e->tokenizer().eos_id(), std::optional<int32_t>(2));
    const std::string text = "The quick brown fox jumped over the lazy dog.";
    const std::vector<int32_t> ids = e->tokenizer().encode(text);
    QVERIFY2(ids.size() < text.size(), "the file's merges were not applied");
    QCOMPARE(e->tokenizer().decode(ids), text);
    GenerateOptions o;
    o.max_new_tokens = ref["new_tokens"].get<int64_t>();
    o.stop_at_eos = false;
    const auto prompt = ref["prompts"][0].get<std::vector<int32_t>>();
    QCOMPARE(generate(e->model(), e->tokenizer(), {prompt}, o).sequences[0].generated_ids,
             ref["single"][0].get<std::vector<int32_t>>());
    if (active_isa() == Isa::Generic) return;
    if (exec != "dequant-once") {
      // As stored, the Quantization tab's fp32 reference is the file dequantized and run by the
      // blocked fp32 kernels (as a dequant-once load runs it), not aten's slower GEMV: the modes'
      // speed-ups are measured against fp32 at its best. Same tokens; the table names the kernel.
      const std::shared_ptr<const Model> reference = e->dense_reference();
      QVERIFY(reference && reference->kernels() && reference->kernels()->holds_dense_weights());
      QCOMPARE(generate(*reference, e->tokenizer(), {prompt}, o).sequences[0].generated_ids,
               ref["single"][0].get<std::vector<int32_t>>());
      QuantizationParams p;
      p.modes = {"int4-g32"};
      p.prompts = {"The quick brown fox"};
      p.new_tokens = 2;
      p.measure_speed = false;
      const QuantizationResult r = run_quantization(*e, p);
      QCOMPARE(r.modes.size(), size_t{2});
      QVERIFY2(r.modes[0].kernel.find("blocked") != std::string::npos, r.modes[0].kernel.c_str());
      return;
    }
    // Dequantized at load, the plain fp32 matrices run the blocked GEMV/GEMM (--gemm auto); the
    // experiments still get plain tensors back, and our own quantization starts from them.
    QVERIFY2(info["gemm"].get<std::string>().find("blocked") != std::string::npos, info.dump().c_str());
    const std::shared_ptr<const Model> dense = e->dense_reference();
    QVERIFY(dense && dense->kernels() && dense->kernels()->holds_dense_weights());
    QCOMPARE(generate(*dense, e->tokenizer(), {prompt}, o).sequences[0].generated_ids,
             ref["single"][0].get<std::vector<int32_t>>());
    e->quantize(parse_quant_mode("int8-channel"));
    QCOMPARE(e->quantization().scheme, QuantScheme::PerChannelInt8);
    QCOMPARE(generate(e->model(), e->tokenizer(), {prompt}, o).sequences[0].generated_ids.size(),
             static_cast<size_t>(o.max_new_tokens));
    EngineOptions aten = opts;
    aten.gemm = "aten";
    QCOMPARE(Engine::load(gguf_path(name).string(), aten)->info()["gemm"].get<std::string>(),
             std::string("aten linear"));
    aten.gemm = "onednn";
    QVERIFY_THROWS_EXCEPTION(InputError, Engine::load(gguf_path(name).string(), aten));
  }
  void gpt2_file_matches_hf_data() {
    QTest::addColumn<QString>("name");
    for (const char* n : {"gpt2_q8_0", "gpt2_f32"}) QTest::newRow(n) << QString(n);
  }
  void gpt2_file_matches_hf() {
    // A GPT-2 GGUF through the Engine: the gpt2.* config, the Conv1D matrices transposed back, the
    // file's tokenizer, and HF's logits (every position) and greedy tokens.
    QFETCH(QString, name);
    const fs::path d = fs::path(dir_) / name.toStdString();
    if (!fs::exists(d / "reference.json")) QSKIP("no GPT-2 GGUF fixtures (older fixture folder)");
    const std::unique_ptr<Engine> e = Engine::load((d / "model.gguf").string(), EngineOptions());
    nlohmann::json ref;
    std::ifstream(d / "reference.json") >> ref;
    const nlohmann::json info = e->info();
    QCOMPARE(info["architecture"].get<std::string>(), std::string("gpt2"));
    QCOMPARE(info["format"].get<std::string>(), std::string("gguf"));
    QCOMPARE(info["file_tensor_types"].get<TypeCounts>(), ref["tensor_types"].get<TypeCounts>());
    QVERIFY(info["file_tensors_run_as"].get<std::string>().rfind("dequantized once", 0) == 0);
    QCOMPARE(info["lm_head_tied"].get<bool>(), true);  // output.weight is the embedding written again
    QCOMPARE(e->tokenizer().vocab_size(), 320);
    QCOMPARE(e->shape().context, int64_t{1024});
    SafetensorsFile tensors = SafetensorsFile::open((d / "reference.safetensors").string());
    auto reference = [&](const std::string& n) {
      const StTensor* t = tensors.find(n);
      return at::from_blob(const_cast<std::byte*>(t->data), t->shape, at::kFloat).clone();
    };
    c10::InferenceMode guard;
    {  // The reader's own weights (the engine hands its matrices to the packed GEMM kernels).
      const GgufFile file = GgufFile::open((d / "model.gguf").string());
      const Gpt2Weights w = load_gpt2_gguf(file, gpt2_config_from_gguf(file), at::kCPU, at::kFloat);
      QCOMPARE(max_abs_diff(w.layers[0].c_attn_weight, reference("weight.blk.0.attn_qkv")), 0.0);
    }
    const auto prompts = ref["prompts"].get<std::vector<std::vector<int32_t>>>();
    for (size_t i = 0; i < prompts.size(); ++i) {
      at::Tensor ids = at::tensor(std::vector<int64_t>(prompts[i].begin(), prompts[i].end())).unsqueeze(0);
      const at::Tensor logits =
          e->model().forward({ids, at::arange(ids.size(1)).unsqueeze(0), at::Tensor(), true}).squeeze(0);
      const double diff = max_abs_diff(logits, reference("logits_" + std::to_string(i)));
      QVERIFY2(diff < kLogitTolerance,
               qPrintable(QString("prompt %1: max |logit diff| = %2").arg(i).arg(diff)));
      GenerateOptions o;
      o.max_new_tokens = ref["new_tokens"].get<int64_t>();
      o.stop_at_eos = false;
      QCOMPARE(generate(e->model(), e->tokenizer(), {prompts[i]}, o).sequences[0].generated_ids,
               ref["single"][i].get<std::vector<int32_t>>());
    }
    EngineOptions native;
    native.quant_exec = "native";
    bool refused = false;
    try {
      Engine::load((d / "model.gguf").string(), native);
    } catch (const InputError& err) {
      refused = std::string(err.what()).find("--quant-exec native needs --quant") != std::string::npos;
    }
    QVERIFY(refused);
  }
};

QTEST_GUILESS_MAIN(TestGgufOracle)
#include "test_gguf_oracle.moc"

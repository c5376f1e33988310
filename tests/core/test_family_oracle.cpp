// Parity of the architectures added to the registry after Qwen3 against transformers, on tiny random
// checkpoints (tests/oracle/make_family_fixtures.py) whose sliding window (8 positions) is shorter
// than the longer prompts (20 and 17 tokens, 8 more generated): Mistral and Qwen2 with a sliding
// window, Gemma 2 (soft-capping, (1 + w) norms around each block, GeGLU, alternating windows),
// Gemma 3 text (QK-norm, two rope bases) and Phi-3 (fused projections split at load, partial
// rotary). Full logits (SDPA and the manual attention), the KV cache token by token, the padded
// batch, greedy tokens alone and batched, continuous batching over slot KV and paged KV (in place
// and gathered) with and without chunked prefill, and the course's merge/filter, equal to solo; the
// blocked GEMMs and int8 quantization through each record; every eos id of config.json
// stopping generation, and what is refused by name.
#include <c10/core/InferenceMode.h>

#include <QtTest>
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "batching_oracle.h"
#include "generate/continuous_batching.h"
#include "lora/lora_adapter.h"
#include "lora/multi_lora.h"
#include "model/blocked_linear.h"
#include "model/engine.h"
#include "model/gguf_file.h"
#include "model/llama_model.h"
#include "model/safetensors_file.h"
#include "oracle_case.h"

using namespace servelab;
namespace fs = std::filesystem;

namespace {

constexpr const char* kCases[] = {"mistral_window", "qwen2_window", "gemma2", "gemma3", "phi3"};

const LlamaConfig& config_of(const test::OracleCase& c) {
  return dynamic_cast<const LlamaModel&>(*c.model).config();
}

}  // namespace

class TestFamilyOracle : public QObject {
  Q_OBJECT

  std::string dir_;

  test::OracleCase load(const QString& name, AttentionBackend backend = AttentionBackend::Sdpa) {
    return test::load_oracle_case(fs::path(dir_) / name.toStdString(), backend);
  }

  void add_cases() {
    QTest::addColumn<QString>("name");
    for (const char* n : kCases) QTest::newRow(n) << QString(n);
  }

  // A copy of a case's folder with config.json edited, for the refusals.
  std::string edited(const QString& name, const std::function<void(nlohmann::json&)>& edit) {
    const fs::path from = fs::path(dir_) / name.toStdString();
    const fs::path to = fs::path(dir_) / (name.toStdString() + "_edited");
    fs::create_directories(to);
    nlohmann::json j;
    std::ifstream(from / "config.json") >> j;
    edit(j);
    std::ofstream(to / "config.json") << j.dump();
    fs::copy_file(from / "model.safetensors", to / "model.safetensors", fs::copy_options::overwrite_existing);
    return to.string();
  }

 private Q_SLOTS:
  void initTestCase() {
    dir_ = test::env_or_empty("SERVELAB_FAMILY_ORACLE_DIR");
    if (dir_.empty() || !fs::exists(fs::path(dir_) / "phi3" / "reference.json"))
      QSKIP(
          "family oracle fixtures not found: SERVELAB_FAMILY_ORACLE_DIR is unset or empty. They are written "
          "by tests/oracle/make_family_fixtures.py (CTest runs it first when .venv has transformers).");
  }

  void registry_reads_each_config() {
    {
      test::OracleCase c = load("mistral_window");
      QCOMPARE(QString::fromStdString(c.arch->name), QString("llama"));
      QCOMPARE(config_of(c).sliding_window, int64_t{8});
      QCOMPARE(config_of(c).window_of(2), int64_t{8});
    }
    {
      // use_sliding_window with max_window_layers 1: layer 0 global, the others windowed.
      test::OracleCase c = load("qwen2_window");
      const LlamaConfig& q = config_of(c);
      QCOMPARE(q.window_of(0), int64_t{0});
      QCOMPARE(q.window_of(1), int64_t{8});
    }
    {
      test::OracleCase c = load("gemma2");
      const LlamaConfig& g = config_of(c);
      QCOMPARE(QString::fromStdString(c.arch->name), QString("gemma2"));
      QCOMPARE(QString::fromStdString(c.model->shape().architecture), QString("gemma2"));
      QVERIFY(&architecture_of(*c.model) == c.arch);
      QVERIFY(g.gemma_norms && !g.qk_norm);
      QCOMPARE(QString::fromStdString(g.hidden_act), QString("gelu_pytorch_tanh"));
      QCOMPARE(g.attn_logit_softcap, 2.0);
      QCOMPARE(g.final_logit_softcap, 5.0);
      QCOMPARE(g.window_of(0), int64_t{8});
      QCOMPARE(g.window_of(1), int64_t{0});
    }
    {
      test::OracleCase c = load("gemma3");
      const LlamaConfig& g = config_of(c);
      QCOMPARE(QString::fromStdString(c.arch->name), QString("gemma3"));
      QVERIFY(g.gemma_norms && g.qk_norm);
      QCOMPARE(g.rope_theta, 1000000.0);
      QCOMPARE(g.local_rope_theta, 10000.0);
      QCOMPARE(g.window_of(2), int64_t{0});
      QCOMPARE(g.window_of(3), int64_t{8});
    }
    {
      test::OracleCase c = load("phi3");
      QCOMPARE(QString::fromStdString(c.arch->name), QString("phi3"));
      QCOMPARE(config_of(c).rotary_dim, int64_t{8});
      QCOMPARE(config_of(c).window_of(0), int64_t{8});
    }
  }

  void parameters_counted_as_hf_does_data() { add_cases(); }
  void parameters_counted_as_hf_does() {
    QFETCH(QString, name);
    test::OracleCase c = load(name);
    const auto& m = dynamic_cast<const LlamaModel&>(*c.model);
    QCOMPARE(m.weights().parameter_count(), c.ref["num_parameters"].get<int64_t>());
    QCOMPARE(m.config().num_parameters(), c.ref["num_parameters"].get<int64_t>());
  }

  void full_logits_match_hf_data() { test::add_backend_rows(kCases); }
  void full_logits_match_hf() {
    test::check_full_logits_row([this](const QString& n, AttentionBackend b) { return load(n, b); });
  }

  void kv_cache_and_batch_match_hf_data() { add_cases(); }
  void kv_cache_and_batch_match_hf() {
    QFETCH(QString, name);
    c10::InferenceMode guard;
    test::check_kv_cache_and_batch(load(name));
  }

  void greedy_tokens_match_hf_data() { add_cases(); }
  void greedy_tokens_match_hf() {
    QFETCH(QString, name);
    test::check_greedy(load(name));
  }

  void continuous_batching_equals_solo_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<int>("kv");
    QTest::addColumn<int>("kernel");
    QTest::addColumn<int>("chunk");
    for (const char* n : kCases)
      for (int chunk : {0, 6}) {
        const std::string c = chunk ? "/chunked" : "";
        QTest::newRow((std::string(n) + "/slot-kv" + c).c_str())
            << QString(n) << static_cast<int>(KvStrategy::SlotKv) << 0 << chunk;
        QTest::newRow((std::string(n) + "/paged" + c).c_str())
            << QString(n) << static_cast<int>(KvStrategy::Paged)
            << static_cast<int>(PagedAttentionKernel::InPlace) << chunk;
        QTest::newRow((std::string(n) + "/paged-gather" + c).c_str())
            << QString(n) << static_cast<int>(KvStrategy::Paged)
            << static_cast<int>(PagedAttentionKernel::Gather) << chunk;
      }
    for (const char* n : kCases)  // the course's merge/filter (whole prompts only)
      QTest::newRow((std::string(n) + "/merge-filter").c_str())
          << QString(n) << static_cast<int>(KvStrategy::NaiveMergeFilter) << 0 << 0;
  }
  void continuous_batching_equals_solo() {
    // Requests join and leave a running batch, prompts in chunks of 6 tokens where chunked (a
    // chunk then attends to earlier chunks through the window), blocks of 4 positions for paged KV.
    QFETCH(QString, name);
    QFETCH(int, kv);
    QFETCH(int, kernel);
    QFETCH(int, chunk);
    test::OracleCase c = load(name);
    const auto ps = c.prompts();
    BatchOptions o;
    o.max_num_batched_tokens = chunk;
    o.paged_attention = static_cast<PagedAttentionKernel>(kernel);
    o.kv_block_size = 4;
    std::vector<int64_t> budgets;
    BatchRunResult r =
        test::run_staggered_queue(*c.model, c.id_tokenizer(), ps, c.ref["new_tokens"].get<int64_t>(),
                                  static_cast<KvStrategy>(kv), &budgets, o);
    QCOMPARE(r.requests.size(), ps.size());
    for (size_t i = 0; i < ps.size(); ++i) {
      std::vector<int32_t> expected = c.single(i);
      expected.resize(static_cast<size_t>(budgets[i]));
      QCOMPARE(r.requests[i].generated_ids, expected);
    }
  }

  void blocked_gemms_and_quantization_data() { add_cases(); }
  void blocked_gemms_and_quantization() {
    // The blocked fp32 GEMMs over the model's matrices give HF's logits; int8 per-channel through
    // the record's quantizer stays near them.
    QFETCH(QString, name);
    c10::InferenceMode guard;
    test::OracleCase c = load(name);
    test::check_full_logits(*pack_blocked_model(*c.model), c);
    QuantSpec spec = parse_quant_mode("int8-channel");
    spec.exec = QuantExec::DequantOnce;
    const std::unique_ptr<Model> q = c.arch->quantize(*c.model, spec, GemmBackend::Aten);
    // These random checkpoints (weights of scale 0.3, untied heads quantized too) amplify int8's
    // error over 20 positions: up to 15% of the largest logit; a wrong wiring is far off.
    const auto p = c.prompts()[0];
    const at::Tensor logits =
        q->forward(
             {test::row_ids(p), at::arange(static_cast<int64_t>(p.size())).unsqueeze(0), at::Tensor(), true})
            .squeeze(0);
    const at::Tensor& ref = c.tensors.at("logits_0");
    const double d = test::max_abs_diff(logits, ref), top = ref.abs().max().item<double>();
    QVERIFY2(d < 0.2 * top, qPrintable(QString("int8: max |logit diff| = %1 of %2").arg(d).arg(top)));
  }

  void every_eos_id_stops_generation() {
    // config.json's eos_token_id as a list: the second id (here the greedy continuation's first
    // token) ends generation although the tokenizer names only the first.
    test::OracleCase c = load("mistral_window");
    const int32_t first = c.single(0)[0];
    const std::string dir = edited("mistral_window", [&](nlohmann::json& j) {
      j["eos_token_id"] = {c.ref["eos"], first};
    });
    const std::unique_ptr<Model> m =
        architecture_for_model_type("mistral", dir).load_folder(dir, at::Device(at::kCPU), at::kFloat);
    QCOMPARE(m->shape().eos_token_ids.size(), size_t{2});
    GenerateOptions o = c.greedy();
    o.stop_at_eos = true;
    const GenerateResult r = generate(*m, c.id_tokenizer(), {c.prompts()[0]}, o);
    QVERIFY(!r.sequences[0].generated_ids.empty());
    QCOMPARE(r.sequences[0].generated_ids.back(), first);
    QCOMPARE(r.sequences[0].generated_ids.size(), size_t{1});
    QCOMPARE(QString::fromStdString(r.sequences[0].finish_reason), QString("eos"));
  }

  void phi3_peft_adapter_on_fused_modules() {
    // PEFT writes Phi-3 adapters on the checkpoint's fused modules (self_attn.qkv_proj,
    // mlp.gate_up_proj) that the model splits at load: each lora_B splits the same way, so the
    // logits equal peft's with the adapter, under every multi-LoRA strategy.
    test::OracleCase c = load("phi3");
    const fs::path d = fs::path(dir_) / "phi3";
    if (!fs::exists(d / "adapter" / "adapter_config.json"))
      QSKIP("no Phi-3 adapter in the fixtures (peft missing)");
    c10::InferenceMode guard;
    AdapterSource source;
    source.name = "fused";
    source.peft_dir = (d / "adapter").string();
    const std::shared_ptr<const LoraAdapter> lora = load_adapter(source, *c.model);
    std::vector<std::string> modules = lora->modules();
    std::sort(modules.begin(), modules.end());
    QCOMPARE(modules.size(), size_t{3 * 6});  // q, k, v, o, gate, up in each of the 3 layers
    SafetensorsFile ref = SafetensorsFile::open((d / "reference_lora.safetensors").string());
    const auto prompts = c.prompts();
    for (size_t i = 0; i < prompts.size(); ++i) {
      const StTensor* want = nullptr;
      for (const auto& t : ref.tensors())
        if (t.name == "logits_" + std::to_string(i)) want = &t;
      QVERIFY(want);
      const at::Tensor theirs =
          at::from_blob(const_cast<std::byte*>(want->data), want->shape, at::kFloat).clone();
      // The adapter matters: peft's logits are not the base's.
      QVERIFY(test::max_abs_diff(theirs, c.tensors.at("logits_" + std::to_string(i))) > 1e-2);
      const std::vector<int64_t> ids(prompts[i].begin(), prompts[i].end());
      const int64_t T = static_cast<int64_t>(ids.size());
      for (const auto& strategy : multi_lora_strategy_names()) {
        LoraBatch batch({lora.get()}, parse_multi_lora_strategy(strategy));
        ForwardInput in;
        in.input_ids = at::tensor(ids, at::kLong).view({1, T});
        in.position_ids = at::arange(T, at::kLong).view({1, T});
        in.all_logits = true;
        in.lora = &batch;
        const double diff = test::max_abs_diff(c.model->forward(in)[0], theirs);
        QVERIFY2(diff < 1e-4,
                 (strategy + " prompt " + std::to_string(i) + ": " + std::to_string(diff)).c_str());
      }
    }
    // On a model that has no fused modules (Mistral), the adapter is refused, naming the module.
    const std::string msg = test::error_of(ErrorKind::ModelFormat, [&] {
      AdapterSource on_llama;
      on_llama.name = "x";
      on_llama.peft_dir = (d / "adapter").string();
      load_adapter(on_llama, *load("mistral_window").model);
    });
    // peft writes target_modules as a set: whichever fused module comes first is named.
    QVERIFY2((msg.find("\"qkv_proj\"") != std::string::npos ||
              msg.find("\"gate_up_proj\"") != std::string::npos) &&
                 msg.find("is not a Llama projection") != std::string::npos,
             msg.c_str());
  }

  void gguf_files_match_hf_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<bool>("as_stored");
    for (const char* n : {"gemma2_gguf", "gemma3_gguf", "phi3_gguf"}) {
      QTest::newRow((std::string(n) + "/dequantized").c_str()) << QString(n) << false;
      // Phi-3's fused matrices are split from dequantized weights: its blocks do not run as stored.
      if (std::string(n) != "phi3_gguf")
        QTest::newRow((std::string(n) + "/as stored").c_str()) << QString(n) << true;
    }
  }
  void gguf_files_match_hf() {
    // A GGUF file written as llama.cpp's converter writes it (Gemma's norms as 1 + w, Phi-3's fused
    // matrices and partial rotary as rope.dimension_count, the window and its pattern from the
    // metadata) loads to the model transformers ran: the config the checkpoint's own reader gives,
    // the same logits and the same greedy tokens; through the engine too, tokenizer included.
    QFETCH(QString, name);
    QFETCH(bool, as_stored);
    c10::InferenceMode guard;
    test::OracleCase c = load(name);
    const fs::path path = fs::path(dir_) / name.toStdString() / "model.gguf";
    const GgufFile f = GgufFile::open(path.string());
    const Architecture& arch = architecture_for_gguf(f.get_string("general.architecture"), path.string());
    QCOMPARE(arch.name, c.arch->name);
    std::string run_as;
    std::unique_ptr<Model> m = as_stored ? arch.load_gguf_as_stored(f, &run_as, false)
                                         : arch.load_gguf(f, at::Device(at::kCPU), at::kFloat);
    const LlamaConfig& got = dynamic_cast<const LlamaModel&>(*m).config();
    const LlamaConfig want = config_of(c);  // a copy: the folder's model is replaced below
    QCOMPARE(got.head_dim, want.head_dim);
    QCOMPARE(got.rotary_dim, want.rotary_dim);
    QCOMPARE(got.rope_theta, want.rope_theta);
    QCOMPARE(got.local_rope_theta, want.local_rope_theta);
    QCOMPARE(got.qk_norm, want.qk_norm);
    QCOMPARE(got.gemma_norms, want.gemma_norms);
    QCOMPARE(QString::fromStdString(got.hidden_act), QString::fromStdString(want.hidden_act));
    QCOMPARE(got.query_pre_attn_scalar, want.query_pre_attn_scalar);
    QCOMPARE(got.attn_logit_softcap, want.attn_logit_softcap);
    QCOMPARE(got.final_logit_softcap, want.final_logit_softcap);
    QCOMPARE(got.tie_word_embeddings, want.tie_word_embeddings);
    for (int64_t l = 0; l < want.n_layer; ++l) QCOMPARE(got.window_of(l), want.window_of(l));
    c.model = std::move(m);
    test::check_full_logits(*c.model, c);
    test::check_greedy(c);
    const std::unique_ptr<Engine> e = Engine::load(path.string(), EngineOptions{});
    QCOMPARE(QString::fromStdString(e->shape().architecture), QString::fromStdString(want.architecture));
    QVERIFY(e->tokenizer().vocab_size() == want.vocab_size);
  }

  void unsupported_features_are_refused_by_name_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("value");
    QTest::addColumn<QString>("expected");
    QTest::newRow("phi3 longrope") << "phi3"
                                   << "rope_parameters"
                                   << R"({"rope_type": "longrope", "rope_theta": 10000.0})"
                                   << "\"longrope\"";
    QTest::newRow("phi3 su") << "phi3"
                             << "rope_scaling"
                             << R"({"type": "su"})"
                             << "\"su\"";
    QTest::newRow("gemma3 bidirectional") << "gemma3"
                                          << "use_bidirectional_attention"
                                          << "true"
                                          << "use_bidirectional_attention";
    QTest::newRow("gemma2 chunked layers")
        << "gemma2"
        << "layer_types"
        << R"(["chunked_attention", "full_attention", "sliding_attention"])"
        << "\"chunked_attention\"";
    QTest::newRow("gemma2 activation") << "gemma2"
                                       << "hidden_activation"
                                       << R"("relu")"
                                       << "\"relu\"";
  }
  void unsupported_features_are_refused_by_name() {
    QFETCH(QString, name);
    QFETCH(QString, key);
    QFETCH(QString, value);
    QFETCH(QString, expected);
    const std::string dir = edited(name, [&](nlohmann::json& j) {
      if (key == "rope_scaling") j.erase("rope_parameters");
      j[key.toStdString()] = nlohmann::json::parse(value.toStdString());
    });
    const Architecture& arch = architecture_for_model_type(read_model_type(dir), dir);
    const std::string msg = test::error_of(ErrorKind::ModelFormat,
                                           [&] { arch.load_folder(dir, at::Device(at::kCPU), at::kFloat); });
    QVERIFY2(msg.find(expected.toStdString()) != std::string::npos, msg.c_str());
  }
};

QTEST_GUILESS_MAIN(TestFamilyOracle)
#include "test_family_oracle.moc"

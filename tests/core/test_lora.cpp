// LoRA and multi-LoRA (issue 6): the layer's formula, the three multi-LoRA strategies against each
// other, PEFT adapters against peft itself (tests/oracle/make_lora_fixtures.py), merging, adapters
// per request in continuous batching, bad adapter folders, the experiment and the CLI.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <QTemporaryDir>
#include <QtTest>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "experiments/multi_lora.h"
#include "generate/continuous_batching.h"
#include "generate/generation.h"
#include "lora/adapter_cache.h"
#include "lora/lora_adapter.h"
#include "lora/multi_lora.h"
#include "model/blocked_linear.h"
#include "model/engine.h"
#include "model/gpt2_model.h"
#include "model/packed_linear.h"
#include "model/safetensors_file.h"
#include "test_support.h"
#include "util/cpu_features.h"

using namespace servelab;
namespace fs = std::filesystem;

namespace {

at::Tensor randn(std::vector<int64_t> shape, at::Generator& g) {
  return at::randn(shape, g, at::TensorOptions().dtype(at::kFloat));
}

// An adapter of one layer with the given rank on one slot, A and B random.
std::shared_ptr<LoraAdapter> one_slot_adapter(const std::string& name, int64_t in, int64_t out, int64_t rank,
                                              double scale, at::Generator& g) {
  auto a = std::make_shared<LoraAdapter>(name, 1);
  // Sizes as in a real adapter: x A of order |x|, a delta of order 0.1.
  a->set(0, LinearSlot::Fc, randn({in, rank}, g) / std::sqrt(static_cast<double>(in)),
         randn({rank, out}, g) * 0.1, scale);
  return a;
}

at::Tensor reference_delta(const std::vector<const LoraAdapter*>& rows, const at::Tensor& x, int64_t T) {
  // Row by row, straight from the definition: x_b (s A_b B_b), or zero without an adapter.
  std::vector<at::Tensor> parts;
  for (size_t b = 0; b < rows.size(); ++b) {
    at::Tensor xb = x.narrow(0, static_cast<int64_t>(b) * T, T);
    if (!rows[b]) {
      parts.push_back(at::zeros({T, 0}, x.options()));
      continue;
    }
    const LoraWeights& w = rows[b]->weights(0, LinearSlot::Fc);
    parts.push_back(at::mm(xb, at::mm(w.a, w.b) * w.scale));
  }
  const int64_t out = rows[0] ? rows[0]->weights(0, LinearSlot::Fc).b.size(1) : 0;
  at::Tensor y = at::zeros({x.size(0), out}, x.options());
  for (size_t b = 0; b < rows.size(); ++b)
    if (rows[b]) y.narrow(0, static_cast<int64_t>(b) * T, T).copy_(parts[b]);
  return y;
}

}  // namespace

class TestLora : public QObject {
  Q_OBJECT

  std::string oracle_;
  QTemporaryDir tmp_;

  void require_oracle() {
    if (oracle_.empty() || !fs::exists(fs::path(oracle_) / "reference.json"))
      QSKIP(
          "LoRA oracle fixtures missing: run tests/oracle/make_lora_fixtures.py (CTest runs it first as "
          "lora_oracle_fixtures; it needs the project venv with torch, transformers and peft)");
  }
  std::string base_dir() const { return (fs::path(oracle_) / "base").string(); }
  std::string adapter_dir(const std::string& name) const {
    return (fs::path(oracle_) / "adapters" / name).string();
  }
  nlohmann::json reference() const {
    std::ifstream f(fs::path(oracle_) / "reference.json");
    return nlohmann::json::parse(f);
  }
  static EngineOptions aten_fp32() {
    EngineOptions o;
    o.gemm = "aten";
    return o;
  }
  static at::Tensor all_logits(const Model& m, const std::vector<int64_t>& ids, const LoraBatch* lora) {
    const int64_t T = static_cast<int64_t>(ids.size());
    ForwardInput in;
    in.input_ids = at::tensor(ids, at::kLong).view({1, T});
    in.position_ids = at::arange(T, at::kLong).view({1, T});
    in.all_logits = true;
    in.lora = lora;
    return m.forward(in).select(0, 0);
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    oracle_ = test::env_or_empty("SERVELAB_LORA_ORACLE_DIR");
  }

  // ---- the arithmetic ------------------------------------------------------------------------

  void names_round_trip() {
    for (const auto& n : multi_lora_strategy_names())
      QCOMPARE(std::string(multi_lora_strategy_name(parse_multi_lora_strategy(n))), n);
    QVERIFY(test::error_of(ErrorKind::Input, [] { parse_multi_lora_strategy("bgmv"); }).find("'bgmv'") !=
            std::string::npos);
    for (const auto& m : lora_module_names()) QCOMPARE(std::string(lora_module_name(lora_slot(m))), m);
    QVERIFY(test::error_of(ErrorKind::Input, [] { lora_slot("attn.q_proj"); }).find("attn.q_proj") !=
            std::string::npos);
  }

  void lora_layer_equals_merged_weight() {
    // y = x W + b + s x A B must equal x (W + s A B) + b, for every strategy.
    c10::InferenceMode guard;
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(1);
    const int64_t in = 24, out = 40, T = 3;
    auto ad = one_slot_adapter("a", in, out, 4, 0.75, g);
    const at::Tensor W = randn({in, out}, g), bias = randn({out}, g), x = randn({2 * T, in}, g);
    const LoraWeights& w = ad->weights(0, LinearSlot::Fc);
    const at::Tensor expected = at::addmm(bias, x, W + at::mm(w.a, w.b) * w.scale);
    for (const auto& s : multi_lora_strategy_names()) {
      LoraBatch batch({ad.get(), ad.get()}, parse_multi_lora_strategy(s));
      const at::Tensor y = batch.apply(0, LinearSlot::Fc, x, at::addmm(bias, x, W));
      QVERIFY2(test::max_abs_diff(y, expected) < 1e-4, s.c_str());
    }
  }

  void strategies_agree_on_mixed_batches_data() {
    QTest::addColumn<int>("tokens");
    QTest::addColumn<int>("isa");  // the segmented kernel's build for each ISA (util/cpu_features.h)
    for (const Isa isa : {Isa::Avx512, Isa::Avx2, Isa::Generic}) {
      const std::string i = std::string(", ") + isa_name(isa);
      const int n = static_cast<int>(isa);
      QTest::newRow(("decode (1 token per row)" + i).c_str()) << 1 << n;
      QTest::newRow(("prefill (5 tokens per row)" + i).c_str()) << 5 << n;
      QTest::newRow(("long prefill (40 tokens: GEMM segments)" + i).c_str()) << 40 << n;
    }
  }
  void strategies_agree_on_mixed_batches() {
    // Rows without an adapter, ranks 2, 4 and 8, an adapter shared by non-adjacent rows.
    QFETCH(int, tokens);
    QFETCH(int, isa);
    if (!cpu_supports(static_cast<Isa>(isa))) QSKIP("this CPU lacks the ISA");
    const test::IsaScope isa_scope(static_cast<Isa>(isa));
    c10::InferenceMode guard;
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(2);
    const int64_t in = 48, out = 80, T = tokens;
    auto r2 = one_slot_adapter("r2", in, out, 2, 1.0, g);
    auto r4 = one_slot_adapter("r4", in, out, 4, 2.0, g);
    auto r8 = one_slot_adapter("r8", in, out, 8, 0.5, g);
    const std::vector<const LoraAdapter*> rows = {r4.get(), nullptr, r2.get(), r4.get(),
                                                  r8.get(), nullptr, r8.get()};
    const int64_t B = static_cast<int64_t>(rows.size());
    const at::Tensor x = randn({B * T, in}, g), base = randn({B * T, out}, g);
    const at::Tensor expected = base + reference_delta(rows, x, T);
    // The gathered stack holds more adapters than the batch uses, in another order (as a run's does).
    auto unused = one_slot_adapter("unused", in, out, 3, 1.0, g);
    auto stack = std::make_shared<const LoraStack>(
        std::vector<const LoraAdapter*>{r8.get(), unused.get(), r2.get(), r4.get()});
    for (const auto& s : multi_lora_strategy_names()) {
      LoraBatch batch(rows, parse_multi_lora_strategy(s), s == "gathered" ? stack : nullptr);
      QCOMPARE(batch.distinct_adapters(), int64_t{3});
      const at::Tensor y = batch.apply(0, LinearSlot::Fc, x, base.clone());
      QVERIFY2(test::max_abs_diff(y, expected) < 1e-5,
               (s + ": " + std::to_string(test::max_abs_diff(y, expected))).c_str());
      // A slot no adapter wraps is left alone.
      const at::Tensor other = randn({B * T, out}, g);
      QVERIFY(at::equal(batch.apply(0, LinearSlot::Attn, x, other.clone()), other));
    }
    // A batch of base rows only has nothing to do.
    QVERIFY(!LoraBatch({nullptr, nullptr}, MultiLoraStrategy::Segmented).any());
    // Rows that do not divide the input are an error, not a silent misalignment.
    LoraBatch two({r2.get(), r4.get()}, MultiLoraStrategy::Segmented);
    QVERIFY(test::error_of(ErrorKind::Input, [&] {
              two.apply(0, LinearSlot::Fc, randn({3, in}, g), randn({3, out}, g));
            }).find("2 rows") != std::string::npos);
  }

  void random_adapters_are_seeded() {
    c10::InferenceMode guard;
    Gpt2Config c;
    c.n_layer = 2;
    c.n_embd = 32;
    c.n_head = 2;
    AdapterSource s;
    s.name = "x";
    s.rank = 4;
    s.seed = 5;
    s.modules = {"attn.c_attn", "mlp.c_proj"};
    auto a = make_random_lora(c, s, at::kCPU, at::kFloat), b = make_random_lora(c, s, at::kCPU, at::kFloat);
    QVERIFY(at::equal(a->weights(1, LinearSlot::MlpProj).b, b->weights(1, LinearSlot::MlpProj).b));
    QCOMPARE(a->modules().size(), size_t{4});
    QVERIFY(!a->weights(0, LinearSlot::Fc).defined());
    // |A| + |B| per matrix: c_attn 4 (32 + 96), mlp.c_proj 4 (128 + 32), two layers.
    QCOMPARE(a->parameters(), int64_t{2 * (4 * (32 + 96) + 4 * (128 + 32))});
    const AdapterInfo info = a->info();
    QCOMPARE(info.base_parameters, int64_t{2 * (32 * 96 + 128 * 32)});
    QCOMPARE(info.scale, 16.0 / 4.0);
    s.seed = 6;
    QVERIFY(!at::equal(make_random_lora(c, s, at::kCPU, at::kFloat)->weights(0, LinearSlot::Attn).a,
                       a->weights(0, LinearSlot::Attn).a));
    s.rank = 0;
    QVERIFY(test::error_of(ErrorKind::Input, [&] {
              make_random_lora(c, s, at::kCPU, at::kFloat);
            }).find("rank") != std::string::npos);
    s.rank = 4;
    s.modules = {"lm_head"};
    QVERIFY(test::error_of(ErrorKind::Input, [&] {
              make_random_lora(c, s, at::kCPU, at::kFloat);
            }).find("lm_head") != std::string::npos);
  }

  // ---- PEFT adapters against peft ----------------------------------------------------------

  void peft_logits_match_peft_data() {
    QTest::addColumn<QString>("adapter");
    for (const char* n : {"all", "attn_r2", "rslora", "regex", "layers"}) QTest::newRow(n) << QString(n);
  }
  void peft_logits_match_peft() {
    require_oracle();
    QFETCH(QString, adapter);
    const std::string name = adapter.toStdString();
    c10::InferenceMode guard;
    auto engine = Engine::load_folder(base_dir(), aten_fp32());
    const Gpt2Model& m = engine->model_as<Gpt2Model>();
    auto lora = load_peft_lora(adapter_dir(name), m.config(), m.device(), m.dtype(), name);
    const nlohmann::json ref = reference();
    const nlohmann::json& r = ref["adapters"][name];
    // What the adapter wraps and its scale, as peft reports them.
    std::vector<std::string> ours;
    for (const std::string& mod : lora->modules()) ours.push_back("transformer." + mod);
    std::sort(ours.begin(), ours.end());
    QCOMPARE(ours, r["targets"].get<std::vector<std::string>>());
    QVERIFY(std::abs(lora->info().scale - r["scale"].get<double>()) < 1e-9);
    SafetensorsFile logits_file =
        SafetensorsFile::open((fs::path(oracle_) / "reference.safetensors").string());
    const auto prompts = ref["prompts"].get<std::vector<std::vector<int64_t>>>();
    for (size_t i = 0; i < prompts.size(); ++i) {
      for (const auto& s : multi_lora_strategy_names()) {
        LoraBatch batch({lora.get()}, parse_multi_lora_strategy(s));
        const at::Tensor ours_logits = all_logits(m, prompts[i], &batch);
        const StTensor& t = logits_file.at(name + "." + std::to_string(i) + ".logits");
        at::Tensor theirs = at::empty(t.shape, at::kFloat);
        std::memcpy(theirs.data_ptr(), t.data, t.nbytes);
        const double d = test::max_abs_diff(ours_logits, theirs);
        QVERIFY2(d < 1e-4, (s + " prompt " + std::to_string(i) + ": " + std::to_string(d)).c_str());
      }
    }
    // Greedy continuations equal peft's, every prompt alone and all three as one padded batch.
    const auto greedy = r["greedy"].get<std::vector<std::vector<int32_t>>>();
    GenerateOptions o;
    o.max_new_tokens = static_cast<int64_t>(greedy[0].size());
    o.stop_at_eos = false;
    std::vector<std::vector<int32_t>> ps;
    for (const auto& p : prompts) ps.emplace_back(p.begin(), p.end());
    o.adapters.assign(ps.size(), lora);
    GenerateResult g = generate(m, engine->tokenizer(), ps, o);
    for (size_t i = 0; i < ps.size(); ++i) QCOMPARE(g.sequences[i].generated_ids, greedy[i]);
  }

  void merged_equals_unmerged() {
    require_oracle();
    c10::InferenceMode guard;
    auto engine = Engine::load_folder(base_dir(), aten_fp32());
    const Gpt2Model& m = engine->model_as<Gpt2Model>();
    auto lora = load_peft_lora(adapter_dir("all"), m.config(), m.device(), m.dtype());
    const Gpt2Weights original = m.dense_weights();
    Gpt2Weights merged = original;
    merge_lora(merged, *lora, +1.0);
    const Gpt2Model merged_model(m.config(), merged);
    const std::vector<int64_t> ids = {5, 17, 99, 250, 3, 42};
    LoraBatch batch({lora.get()}, MultiLoraStrategy::Segmented);
    QVERIFY(test::max_abs_diff(all_logits(merged_model, ids, nullptr), all_logits(m, ids, &batch)) < 1e-4);
    // And peft's own merge_and_unload.
    SafetensorsFile logits_file =
        SafetensorsFile::open((fs::path(oracle_) / "reference.safetensors").string());
    const auto prompts = reference()["prompts"].get<std::vector<std::vector<int64_t>>>();
    const StTensor& t = logits_file.at("all.0.merged_logits");
    at::Tensor theirs = at::empty(t.shape, at::kFloat);
    std::memcpy(theirs.data_ptr(), t.data, t.nbytes);
    QVERIFY(test::max_abs_diff(all_logits(merged_model, prompts[0], nullptr), theirs) < 1e-4);
    // Unmerging gives the base weights back.
    merge_lora(merged, *lora, -1.0);
    for (size_t l = 0; l < merged.layers.size(); ++l) {
      QVERIFY(test::max_abs_diff(merged.layers[l].c_attn_weight, original.layers[l].c_attn_weight) < 1e-6);
      QVERIFY(test::max_abs_diff(merged.layers[l].mlp_proj_weight, original.layers[l].mlp_proj_weight) <
              1e-6);
    }
    QVERIFY(test::max_abs_diff(all_logits(Gpt2Model(m.config(), merged), ids, nullptr),
                               all_logits(m, ids, nullptr)) < 1e-5);
  }

  void onednn_and_quantized_bases_take_adapters() {
    // LoRA adds to whatever computes x W: the prepacked oneDNN GEMMs, our blocked kernels and a
    // quantized base too.
    require_oracle();
    c10::InferenceMode guard;
    auto aten = Engine::load_folder(base_dir(), aten_fp32());
    EngineOptions q;
    q.quant = "int8-channel";
    q.quant_exec = "jit";
    auto quant = Engine::load_folder(base_dir(), q);
    auto lora =
        load_peft_lora(adapter_dir("all"), aten->model_as<Gpt2Model>().config(), at::kCPU, at::kFloat);
    const std::vector<int64_t> ids = {1, 2, 3, 4, 200};
    LoraBatch batch({lora.get()}, MultiLoraStrategy::Segmented);
    const at::Tensor ref = all_logits(aten->model(), ids, &batch);
    for (const std::string gemm : {"onednn", "blocked"}) {
      const bool here = gemm == "onednn" ? packed_linear_available(at::kCPU, at::kFloat)
                                         : blocked_linear_available(at::kCPU, at::kFloat);
      if (!here) continue;  // blocked needs AVX-512, onednn a libtorch with oneDNN
      EngineOptions packed;
      packed.gemm = gemm;
      auto e = Engine::load_folder(base_dir(), packed);
      QVERIFY2(test::max_abs_diff(all_logits(e->model(), ids, &batch), ref) < 1e-3, gemm.c_str());
    }
    const at::Tensor qd = all_logits(quant->model(), ids, &batch);
    QVERIFY(test::max_abs_diff(qd, ref) < 0.5);  // int8 weights drift a little, the delta is the same
    // The adapter still changes the quantized model's output (it is applied, not lost).
    QVERIFY(test::max_abs_diff(qd, all_logits(quant->model(), ids, nullptr)) > 1e-2);
    // Merging needs dense weights.
    Gpt2Weights w = quant->model_as<Gpt2Model>().weights();
    QVERIFY(test::error_of(ErrorKind::Input, [&] { merge_lora(w, *lora); }).find("quantized") !=
            std::string::npos);
  }

  void bad_adapter_folders_data() {
    QTest::addColumn<QString>("kase");
    QTest::addColumn<QString>("culprit");
    if (oracle_.empty() || !fs::exists(fs::path(oracle_) / "bad" / "cases.json")) {
      QTest::newRow("fixtures missing") << QString() << QString();
      return;
    }
    std::ifstream f(fs::path(oracle_) / "bad" / "cases.json");
    const nlohmann::json cases = nlohmann::json::parse(f);
    for (const auto& [k, v] : cases.items())
      QTest::newRow(k.c_str()) << QString::fromStdString(k) << QString::fromStdString(v.get<std::string>());
  }
  void bad_adapter_folders() {
    require_oracle();
    QFETCH(QString, kase);
    QFETCH(QString, culprit);
    auto engine = Engine::load_folder(base_dir(), aten_fp32());
    const Gpt2Model& m = engine->model_as<Gpt2Model>();
    const std::string dir = (fs::path(oracle_) / "bad" / kase.toStdString()).string();
    const std::string msg = test::error_of(ErrorKind::ModelFormat,
                                           [&] { load_peft_lora(dir, m.config(), m.device(), m.dtype()); });
    QVERIFY2(msg.find(culprit.toStdString()) != std::string::npos, msg.c_str());
  }

  void adapter_for_another_model_is_refused() {
    // A PEFT folder trained for a wider GPT-2: the shapes name the tensor and the width.
    require_oracle();
    Gpt2Config wide;
    wide.n_layer = 2;
    wide.n_embd = 64;
    wide.n_head = 2;
    const std::string msg = test::error_of(
        ErrorKind::ModelFormat, [&] { load_peft_lora(adapter_dir("all"), wide, at::kCPU, at::kFloat); });
    QVERIFY2(msg.find("lora_A.weight") != std::string::npos && msg.find("64") != std::string::npos,
             msg.c_str());
    QVERIFY(test::error_of(ErrorKind::ModelFormat, [&] {
              load_peft_lora((fs::path(oracle_) / "nowhere").string(), wide, at::kCPU, at::kFloat);
            }).find("nowhere") != std::string::npos);
  }

  // ---- serving: adapters per request --------------------------------------------------------

  void continuous_batching_gives_each_request_its_adapter_alone_data() {
    QTest::addColumn<QString>("strategy");
    QTest::addColumn<int>("kv");
    QTest::addColumn<int>("capacity");
    for (const char* s : {"loop", "gathered", "segmented"}) {
      QTest::newRow((std::string(s) + ", slot KV, cache 2").c_str()) << QString(s) << 0 << 2;
    }
    QTest::newRow("segmented, merge/filter, cache 0 (all)") << QString("segmented") << 1 << 0;
  }
  void continuous_batching_gives_each_request_its_adapter_alone() {
    require_oracle();
    QFETCH(QString, strategy);
    QFETCH(int, kv);
    QFETCH(int, capacity);
    c10::InferenceMode guard;
    auto engine = Engine::load_folder(base_dir(), aten_fp32());
    const Gpt2Model& m = engine->model_as<Gpt2Model>();
    BatchOptions o;
    o.max_batch = 3;
    o.kv = kv == 0 ? KvStrategy::SlotKv : KvStrategy::NaiveMergeFilter;
    o.lora_strategy = parse_multi_lora_strategy(strategy.toStdString());
    o.adapter_cache_capacity = capacity;
    for (const char* n : {"all", "attn_r2", "rslora"}) {
      AdapterSource s;
      s.name = n;
      s.peft_dir = adapter_dir(n);
      o.adapters.push_back(s);
    }
    AdapterSource rnd;
    rnd.name = "random-r3";
    rnd.rank = 3;
    rnd.seed = 9;
    o.adapters.push_back(rnd);
    const std::vector<std::string> names = {"all", "",       "attn_r2", "random-r3",
                                            "all", "rslora", "",        "random-r3"};
    std::vector<BatchRequest> reqs;
    for (size_t i = 0; i < names.size(); ++i) {
      BatchRequest r;
      for (size_t k = 0; k < 3 + i % 4; ++k) r.prompt_ids.push_back(static_cast<int32_t>(10 + 7 * i + 3 * k));
      r.max_new_tokens = 3 + static_cast<int64_t>(i % 3) * 2;
      r.stop_at_eos = false;
      r.adapter = names[i];
      reqs.push_back(r);
    }
    const BatchRunResult run = run_continuous_batching(m, engine->tokenizer(), reqs, o);
    std::map<std::string, std::shared_ptr<const LoraAdapter>> solo;
    for (const AdapterSource& s : o.adapters) solo[s.name] = load_adapter(s, m);
    bool mixed_step = false;
    for (const BatchStep& s : run.steps) mixed_step = mixed_step || s.adapters_in_step >= 2;
    QVERIFY(mixed_step);  // requests with different adapters really shared steps
    for (size_t i = 0; i < reqs.size(); ++i) {
      GenerateOptions g;
      g.max_new_tokens = reqs[i].max_new_tokens;
      g.stop_at_eos = false;
      if (!names[i].empty()) g.adapters = {solo[names[i]]};
      const GenerateResult alone = generate(m, engine->tokenizer(), {reqs[i].prompt_ids}, g);
      QCOMPARE(run.requests[i].adapter, names[i]);
      QVERIFY2(run.requests[i].generated_ids == alone.sequences[0].generated_ids,
               ("request " + std::to_string(i)).c_str());
    }
    const AdapterCacheStats& c = run.adapter_cache;
    QCOMPARE(c.capacity, capacity == 0 ? int64_t{4} : int64_t{capacity});
    QCOMPARE(c.loads + c.hits, int64_t{6});  // one acquire per request with an adapter
    if (capacity == 2) {
      QVERIFY(c.evictions > 0);
      QVERIFY(c.resident <= 2);
    } else {
      QCOMPARE(c.evictions, int64_t{0});
      QCOMPARE(c.loads, int64_t{4});
    }
  }

  void adapter_cache_evicts_least_recently_used_unpinned() {
    c10::InferenceMode guard;
    Gpt2Config c;
    c.n_layer = 1;
    c.n_embd = 16;
    c.n_head = 2;
    c.n_positions = 32;
    c.vocab_size = 50;
    const Gpt2Model m(c, make_random_gpt2_weights(c, 1, at::kCPU, at::kFloat));
    std::vector<AdapterSource> srcs;
    for (int i = 0; i < 3; ++i) {
      AdapterSource s;
      s.name = "a" + std::to_string(i);
      s.rank = 2;
      s.seed = static_cast<uint64_t>(i);
      srcs.push_back(s);
    }
    AdapterCache cache(m, srcs, 2);
    auto name_of = [](const std::shared_ptr<const LoraAdapter>& a) {
      return a ? a->name() : std::string("<none>");
    };
    QCOMPARE(name_of(cache.acquire("a0")), std::string("a0"));  // load
    QCOMPARE(name_of(cache.acquire("a1")), std::string("a1"));  // load
    cache.release("a0");
    cache.release("a1");
    QCOMPARE(name_of(cache.acquire("a0")), std::string("a0"));  // hit: a1 is now the least recently used
    QCOMPARE(name_of(cache.acquire("a2")), std::string("a2"));  // load, evicts a1
    std::vector<std::string> resident;
    for (const LoraAdapter* a : cache.resident()) resident.push_back(a->name());
    QCOMPARE(resident, (std::vector<std::string>{"a0", "a2"}));
    QVERIFY(cache.acquire("a1") == nullptr);  // a0 and a2 are pinned: the request must wait
    cache.release("a2");
    QCOMPARE(name_of(cache.acquire("a1")), std::string("a1"));  // evicts a2, the only unpinned one
    const AdapterCacheStats st = cache.stats();
    QCOMPARE(st.loads, int64_t{4});
    QCOMPARE(st.hits, int64_t{1});
    QCOMPARE(st.evictions, int64_t{2});
    QCOMPARE(st.resident, int64_t{2});
    QCOMPARE(st.resident_bytes, 2 * cache.resident().front()->bytes());
    // The gathered stack follows the resident set.
    QCOMPARE(cache.stack()->index_of(cache.resident().back()), int64_t{2});
    QVERIFY(test::error_of(ErrorKind::Input, [&] { cache.acquire("zz"); }).find("'zz'") != std::string::npos);
    QVERIFY(test::error_of(ErrorKind::Input, [&] { AdapterCache(m, srcs, -1); }).find("capacity") !=
            std::string::npos);
    auto dup = srcs;
    dup.push_back(srcs[0]);
    QVERIFY(test::error_of(ErrorKind::Input, [&] { AdapterCache(m, dup, 0); }).find("'a0'") !=
            std::string::npos);
  }

  void bad_requests_are_refused() {
    require_oracle();
    auto engine = Engine::load_folder(base_dir(), aten_fp32());
    BatchOptions o;
    BatchRequest r;
    r.prompt_ids = {1, 2, 3};
    r.adapter = "ghost";
    QVERIFY(test::error_of(ErrorKind::Input, [&] {
              run_continuous_batching(engine->model(), engine->tokenizer(), {r}, o);
            }).find("'ghost'") != std::string::npos);
    AdapterSource s;
    s.name = "a";
    o.adapters = {s};
    o.adapter_cache_capacity = -2;
    r.adapter = "a";
    QVERIFY(test::error_of(ErrorKind::Input, [&] {
              run_continuous_batching(engine->model(), engine->tokenizer(), {r}, o);
            }).find("capacity") != std::string::npos);
    // generate(): one adapter per prompt or none.
    GenerateOptions g;
    g.adapters = {nullptr, nullptr};
    QVERIFY(test::error_of(ErrorKind::Input, [&] {
              generate(engine->model(), engine->tokenizer(), {{1, 2, 3}}, g);
            }).find("2 adapters given for 1 prompts") != std::string::npos);
  }

  // ---- the experiment and the CLI ----------------------------------------------------------

  void experiment_toy_and_gpt2() {
    require_oracle();
    auto engine = Engine::load_folder(base_dir(), aten_fp32());
    MultiLoraParams p;
    p.workload = "toy";
    p.toy_samples = 5;
    p.batch_sizes = {1, 4};
    MultiLoraResult toy = run_multi_lora(*engine, p);
    QCOMPARE(toy.points.size(), size_t{8});  // base + 3 strategies, 2 batch sizes
    QVERIFY(toy.strategies_agree);
    QCOMPARE(toy.shapes.at(0).ratio, 2.0 * 2 * 10 / 100);

    p.workload = "gpt2";
    p.batch_sizes = {1, 3};
    p.random_adapters = 3;
    p.random_rank = 4;
    p.assignment = "mixed";
    p.context = 4;
    p.decode_steps = 1;
    p.repeats = 1;
    p.prompt = "abc";
    p.new_tokens = 4;
    p.outputs_max = 2;
    struct Sink : ExperimentSink {
      std::map<std::string, int> points;
      void on_point(const std::string& s, double, double) override { ++points[s]; }
    } sink;
    ExperimentControl control;
    control.sink = &sink;
    MultiLoraResult r = run_multi_lora(*engine, p, control);
    QCOMPARE(r.points.size(), size_t{8});
    QCOMPARE(sink.points["segmented"], 2);
    QVERIFY(r.strategies_agree);
    QVERIFY(r.max_strategy_difference < 1e-4);
    QCOMPARE(r.outputs.size(), size_t{3});  // base + 2 adapters
    QCOMPARE(r.outputs[0].adapter, std::string());
    QCOMPARE(r.adapters.size(), size_t{3});
    QCOMPARE(r.shapes.size(), size_t{4});
    QCOMPARE(r.shapes[0].ab_parameters, int64_t{4 * (32 + 96)});
    // Each output is what generate() gives with that adapter alone.
    GenerateOptions g;
    g.max_new_tokens = 4;
    g.stop_at_eos = false;
    AdapterSource first;
    first.name = "rand-r4-1";
    first.rank = 4;
    first.alpha = 8;
    first.seed = 1;
    g.adapters = {load_adapter(first, engine->model())};
    const auto ids = engine->tokenizer().encode("abc");
    QCOMPARE(generate(engine->model(), engine->tokenizer(), {ids}, g).sequences[0].generated_ids,
             r.outputs[1].tokens);

    // Bad parameters and a stop request.
    p.assignment = "zigzag";
    QVERIFY(test::error_of(ErrorKind::Input, [&] { run_multi_lora(*engine, p); }).find("zigzag") !=
            std::string::npos);
    p.assignment = "rows";
    p.row_adapters = {"nobody"};
    QVERIFY(test::error_of(ErrorKind::Input, [&] { run_multi_lora(*engine, p); }).find("'nobody'") !=
            std::string::npos);
    p.assignment = "distinct";
    p.batch_sizes = {0};
    QVERIFY(test::error_of(ErrorKind::Input, [&] { run_multi_lora(*engine, p); }).find("batch size") !=
            std::string::npos);
    p.batch_sizes = {1};
    std::atomic<bool> stop{true};
    control.cancel = &stop;
    QVERIFY(test::error_of(ErrorKind::Cancelled, [&] { run_multi_lora(*engine, p, control); }) !=
            "<no exception>");
  }

  void cli_lora_commands() {
    require_oracle();
    const QString base = QString::fromStdString(base_dir());
    const QString all = QString::fromStdString(adapter_dir("all"));
    // generate --adapter.
    test::CliRun g = test::run_cli(SERVELAB_CLI, {"generate", "--model", base, "--prompt", "hello",
                                                  "--adapter", all, "--max-new-tokens", "3", "--json"});
    QVERIFY2(g.code == 0, qPrintable(g.err));
    const nlohmann::json line = nlohmann::json::parse(g.out.toStdString());
    QCOMPARE(line["adapter"].get<std::string>(), std::string("all"));
    QCOMPARE(line["generated_ids"].size(), size_t{3});
    // Per-prompt adapters in one batch, one of them the base model.
    test::CliRun b =
        test::run_cli(SERVELAB_CLI, {"generate", "--model", base, "--prompt", "ab", "--prompt", "cd",
                                     "--adapter", all, "--adapter", "none", "--batch", "--json"});
    QVERIFY2(b.code == 0, qPrintable(b.err));
    QVERIFY(b.out.contains("\"adapter\":\"\""));
    // Wrong number of --adapter options, a bad folder: one line, exit 1.
    test::CliRun n = test::run_cli(SERVELAB_CLI, {"generate", "--model", base, "--prompt", "a", "--prompt",
                                                  "b", "--prompt", "c", "--adapter", all, "--adapter", all});
    QCOMPARE(n.code, 1);
    QVERIFY(n.err.contains("2 --adapter options for 3 prompts"));
    const QString bad = QString::fromStdString((fs::path(oracle_) / "bad" / "dora").string());
    test::CliRun d = test::run_cli(SERVELAB_CLI, {"lora", "describe", "--model", base, bad});
    QCOMPARE(d.code, 1);
    QVERIFY(d.err.contains("use_dora"));
    QCOMPARE(d.err.count('\n'), 1);
    test::CliRun ok = test::run_cli(SERVELAB_CLI, {"lora", "describe", "--model", base, all});
    QVERIFY2(ok.code == 0, qPrintable(ok.err));
    QVERIFY(ok.out.contains("\"rank\":4"));
    // lora bench (the course's toy) and lora serve with a small cache.
    test::CliRun t = test::run_cli(SERVELAB_CLI, {"lora", "bench", "--model", base, "--workload", "toy",
                                                  "--samples", "3", "--batch-sizes", "1,2", "--json"});
    QVERIFY2(t.code == 0, qPrintable(t.err));
    QCOMPARE(nlohmann::json::parse(t.out.toStdString())["points"].size(), size_t{8});
    test::CliRun s = test::run_cli(SERVELAB_CLI, {"lora",
                                                  "serve",
                                                  "--model",
                                                  base,
                                                  "--prompt",
                                                  "abc",
                                                  "--requests",
                                                  "6",
                                                  "--adapters",
                                                  "3",
                                                  "--rank",
                                                  "2",
                                                  "--cache-capacity",
                                                  "2",
                                                  "--max-batch",
                                                  "2",
                                                  "--new-tokens",
                                                  "2",
                                                  "--base-every",
                                                  "3",
                                                  "--json"});
    QVERIFY2(s.code == 0, qPrintable(s.err));
    const nlohmann::json serve = nlohmann::json::parse(s.out.toStdString());
    QCOMPARE(serve["adapter_cache"]["capacity"].get<int>(), 2);
    QCOMPARE(serve["requests"][2]["adapter"].get<std::string>(), std::string());
    test::CliRun u =
        test::run_cli(SERVELAB_CLI, {"lora", "bench", "--model", base, "--strategies", "loop,bgmv"});
    QCOMPARE(u.code, 1);
    QVERIFY(u.err.contains("bgmv"));
  }
};

QTEST_GUILESS_MAIN(TestLora)
#include "test_lora.moc"

// LoRA on the Llama family: PEFT adapters on a tiny random LlamaForCausalLM against peft's own
// logits and greedy tokens (tests/oracle/make_lora_fixtures.py, OUT/llama), one adapter per row and
// mixed batches under every multi-LoRA strategy, merging, adapters per request in continuous
// batching, random adapters from the projection table, and the CLI's lora commands on a Llama.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <QtTest>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "generate/continuous_batching.h"
#include "generate/generation.h"
#include "lora/lora_adapter.h"
#include "lora/multi_lora.h"
#include "model/engine.h"
#include "model/llama_model.h"
#include "model/safetensors_file.h"
#include "test_support.h"

using namespace servelab;
namespace fs = std::filesystem;

namespace {

constexpr const char* kAdapters[] = {"all", "subset", "rslora"};

}  // namespace

class TestLoraLlama : public QObject {
  Q_OBJECT

  std::string dir_;  // OUT/llama
  std::unique_ptr<LlamaModel> model_;
  nlohmann::json ref_;
  std::map<std::string, at::Tensor> logits_;

  void require_oracle() {
    if (!model_)
      QSKIP(
          "LoRA oracle fixtures missing: run tests/oracle/make_lora_fixtures.py (CTest runs it first as "
          "lora_oracle_fixtures; it needs the project venv with torch, transformers and peft)");
  }
  std::string base_dir() const { return (fs::path(dir_) / "base").string(); }
  std::string adapter_dir(const std::string& name) const {
    return (fs::path(dir_) / "adapters" / name).string();
  }
  std::vector<std::vector<int64_t>> prompts() const {
    return ref_["prompts"].get<std::vector<std::vector<int64_t>>>();
  }
  std::vector<int32_t> greedy(const std::string& adapter, size_t prompt) const {
    const nlohmann::json& g = adapter.empty() ? ref_["base"]["greedy"] : ref_["adapters"][adapter]["greedy"];
    return g[prompt].get<std::vector<int32_t>>();
  }
  // peft's logits for a prompt: "base" or an adapter's name.
  const at::Tensor& theirs(const std::string& name, size_t prompt, const char* kind = "logits") const {
    return logits_.at(name + "." + std::to_string(prompt) + "." + kind);
  }
  test::IdTokenizer tokenizer() const {
    return test::IdTokenizer(static_cast<int32_t>(model_->shape().vocab_size), 2);
  }
  std::shared_ptr<const LoraAdapter> load(const std::string& name) const {
    AdapterSource s;
    s.name = name;
    s.peft_dir = adapter_dir(name);
    return load_adapter(s, *model_);
  }
  // Every position's logits of `rows` copies of ids, row b with rows_lora's adapter b.
  static at::Tensor batch_logits(const Model& m, const std::vector<int64_t>& ids, int64_t rows,
                                 const LoraBatch* lora) {
    const int64_t T = static_cast<int64_t>(ids.size());
    ForwardInput in;
    in.input_ids = at::tensor(ids, at::kLong).view({1, T}).expand({rows, T}).contiguous();
    in.position_ids = at::arange(T, at::kLong).view({1, T}).expand({rows, T}).contiguous();
    in.all_logits = true;
    in.lora = lora;
    return m.forward(in);
  }

 private Q_SLOTS:
  void initTestCase() {
    const std::string root = test::env_or_empty("SERVELAB_LORA_ORACLE_DIR");
    if (root.empty()) return;
    dir_ = (fs::path(root) / "llama").string();
    if (!fs::exists(fs::path(dir_) / "reference.json")) return;
    LlamaConfig cfg = parse_llama_config(base_dir());
    model_ = std::make_unique<LlamaModel>(cfg, load_llama_safetensors(base_dir(), cfg, at::kCPU, at::kFloat));
    std::ifstream(fs::path(dir_) / "reference.json") >> ref_;
    SafetensorsFile f = SafetensorsFile::open((fs::path(dir_) / "reference.safetensors").string());
    for (const StTensor& t : f.tensors())
      logits_[t.name] = at::from_blob(const_cast<std::byte*>(t.data), t.shape, at::kFloat).clone();
  }

  void base_matches_transformers() {
    // The oracle's base first: a mismatch here is the model's, not LoRA's.
    require_oracle();
    c10::InferenceMode guard;
    const auto ps = prompts();
    for (size_t i = 0; i < ps.size(); ++i)
      QVERIFY(test::max_abs_diff(batch_logits(*model_, ps[i], 1, nullptr)[0], theirs("base", i)) < 1e-4);
  }

  void peft_logits_match_peft_data() {
    QTest::addColumn<QString>("adapter");
    for (const char* n : kAdapters) QTest::newRow(n) << QString(n);
  }
  void peft_logits_match_peft() {
    require_oracle();
    QFETCH(QString, adapter);
    const std::string name = adapter.toStdString();
    c10::InferenceMode guard;
    auto lora = load(name);
    const nlohmann::json& r = ref_["adapters"][name];
    // What the adapter wraps and its scale, as peft reports them.
    std::vector<std::string> ours;
    for (const std::string& mod : lora->modules()) ours.push_back("model." + mod);
    std::sort(ours.begin(), ours.end());
    QCOMPARE(ours, r["targets"].get<std::vector<std::string>>());
    QVERIFY(std::abs(lora->info().scale - r["scale"].get<double>()) < 1e-9);
    QCOMPARE(lora->max_rank(), r["r"].get<int64_t>());
    const auto ps = prompts();
    for (size_t i = 0; i < ps.size(); ++i) {
      for (const auto& s : multi_lora_strategy_names()) {
        LoraBatch batch({lora.get()}, parse_multi_lora_strategy(s));
        const double d = test::max_abs_diff(batch_logits(*model_, ps[i], 1, &batch)[0], theirs(name, i));
        QVERIFY2(d < 1e-4, (s + " prompt " + std::to_string(i) + ": " + std::to_string(d)).c_str());
      }
    }
    // Greedy continuations equal peft's, every prompt alone and all three as one padded batch.
    GenerateOptions o;
    o.max_new_tokens = ref_["new_tokens"].get<int64_t>();
    o.stop_at_eos = false;
    std::vector<std::vector<int32_t>> batch;
    for (const auto& p : ps) batch.emplace_back(p.begin(), p.end());
    const test::IdTokenizer tok = tokenizer();
    for (size_t i = 0; i < batch.size(); ++i) {
      o.adapters = {lora};
      QCOMPARE(generate(*model_, tok, {batch[i]}, o).sequences[0].generated_ids, greedy(name, i));
    }
    o.adapters.assign(batch.size(), lora);
    GenerateResult g = generate(*model_, tok, batch, o);
    for (size_t i = 0; i < batch.size(); ++i) QCOMPARE(g.sequences[i].generated_ids, greedy(name, i));
  }

  void mixed_batches_match_peft_data() {
    QTest::addColumn<QString>("strategy");
    for (const auto& s : multi_lora_strategy_names()) QTest::newRow(s.c_str()) << QString::fromStdString(s);
  }
  void mixed_batches_match_peft() {
    // One forward pass whose rows use different adapters or none: each row is peft's for its adapter.
    require_oracle();
    QFETCH(QString, strategy);
    c10::InferenceMode guard;
    std::map<std::string, std::shared_ptr<const LoraAdapter>> a;
    for (const char* n : kAdapters) a[n] = load(n);
    const std::vector<std::string> names = {"subset", "", "all", "rslora", "", "subset", "all"};
    std::vector<const LoraAdapter*> rows;
    for (const auto& n : names) rows.push_back(n.empty() ? nullptr : a[n].get());
    // The gathered stack holds the run's adapters in another order than the rows meet them.
    auto stack = std::make_shared<const LoraStack>(
        std::vector<const LoraAdapter*>{a["rslora"].get(), a["all"].get(), a["subset"].get()});
    LoraBatch batch(rows, parse_multi_lora_strategy(strategy.toStdString()), stack);
    QCOMPARE(batch.distinct_adapters(), int64_t{3});
    const auto ps = prompts();
    for (size_t i = 0; i < ps.size(); ++i) {
      const at::Tensor out = batch_logits(*model_, ps[i], static_cast<int64_t>(rows.size()), &batch);
      for (size_t b = 0; b < rows.size(); ++b) {
        const double d =
            test::max_abs_diff(out[static_cast<int64_t>(b)], theirs(names[b].empty() ? "base" : names[b], i));
        QVERIFY2(
            d < 1e-4,
            ("prompt " + std::to_string(i) + " row " + std::to_string(b) + ": " + std::to_string(d)).c_str());
      }
    }
    // generate() with a different adapter per prompt, the prompts padded into one batch.
    GenerateOptions o;
    o.max_new_tokens = ref_["new_tokens"].get<int64_t>();
    o.stop_at_eos = false;
    o.lora_strategy = parse_multi_lora_strategy(strategy.toStdString());
    const std::vector<std::string> per_prompt = {"all", "", "rslora"};
    std::vector<std::vector<int32_t>> batch_prompts;
    for (size_t i = 0; i < ps.size(); ++i) {
      batch_prompts.emplace_back(ps[i].begin(), ps[i].end());
      o.adapters.push_back(per_prompt[i].empty() ? nullptr : a[per_prompt[i]]);
    }
    GenerateResult g = generate(*model_, tokenizer(), batch_prompts, o);
    for (size_t i = 0; i < ps.size(); ++i) QCOMPARE(g.sequences[i].generated_ids, greedy(per_prompt[i], i));
  }

  void merged_equals_peft_merge() {
    require_oracle();
    c10::InferenceMode guard;
    auto lora = load("all");
    LlamaWeights merged = model_->weights();
    merge_lora(merged, *lora, +1.0);
    const LlamaModel merged_model(model_->config(), merged);
    const auto ps = prompts();
    QVERIFY(test::max_abs_diff(batch_logits(merged_model, ps[0], 1, nullptr)[0],
                               theirs("all", 0, "merged_logits")) < 1e-4);
    // The base model's own tensors are untouched, and unmerging gives them back.
    QVERIFY(test::max_abs_diff(batch_logits(*model_, ps[0], 1, nullptr)[0], theirs("base", 0)) < 1e-4);
    merge_lora(merged, *lora, -1.0);
    for (size_t l = 0; l < merged.layers.size(); ++l)
      for (size_t k = 0; k < kLlamaProjections; ++k)
        QVERIFY(test::max_abs_diff(merged.layers[l].w[k], model_->weights().layers[l].w[k]) < 1e-5);
  }

  void quantized_llama_fuses_projections_and_takes_adapters_data() {
    QTest::addColumn<QString>("mode");
    // This Llama is 72 wide: no int4 groups of 32 (the GGUF oracle runs fused Q4_0/Q4_1 matrices).
    for (const char* m : {"int8-channel", "fp16", "bf16"}) QTest::newRow(m) << QString(m);
  }
  void quantized_llama_fuses_projections_and_takes_adapters() {
    // The JIT kernels hold q, k and v (and gate, up) as one matrix each and run each group as one
    // product: it must equal one product per matrix, and the model on it must equal the same
    // weights dequantized once, LoRA deltas (added per slot to the split output) included.
    require_oracle();
    QFETCH(QString, mode);
    c10::InferenceMode guard;
    EngineOptions o;
    o.quant = mode.toStdString();
    o.quant_exec = "jit";
    auto jit = Engine::load_folder(base_dir(), o);
    o.quant_exec = "dequant-once";
    auto once = Engine::load_folder(base_dir(), o);
    const LinearKernels* k = jit->model().kernels();
    QVERIFY(k);
    at::manual_seed(5);
    for (int64_t rows : {1, 3, 9}) {
      const at::Tensor x = at::randn({rows, model_->shape().n_embd});
      for (const std::vector<LinearSlot>& slots :
           {std::vector<LinearSlot>{LinearSlot::Q, LinearSlot::K, LinearSlot::V},
            std::vector<LinearSlot>{LinearSlot::Gate, LinearSlot::Up}}) {
        const at::Tensor fused = k->linear_fused(1, slots, x);
        QVERIFY(fused.defined());
        std::vector<at::Tensor> parts;
        for (LinearSlot s : slots) parts.push_back(k->linear(1, s, x, {}));
        QVERIFY2(test::max_abs_diff(fused, at::cat(parts, 1)) < 1e-5, std::to_string(rows).c_str());
      }
      // Only the groups it holds: any other set runs slot by slot.
      QVERIFY(!k->linear_fused(1, {LinearSlot::Q, LinearSlot::K}, x).defined());
    }
    auto lora = load("all");
    LoraBatch batch({lora.get(), lora.get()}, MultiLoraStrategy::Segmented);
    for (const auto& p : prompts()) {
      const at::Tensor with = batch_logits(jit->model(), p, 2, &batch);
      QVERIFY(test::max_abs_diff(with, batch_logits(once->model(), p, 2, &batch)) < 1e-4);
      const at::Tensor without = batch_logits(jit->model(), p, 2, nullptr);
      QVERIFY(test::max_abs_diff(without, batch_logits(once->model(), p, 2, nullptr)) < 1e-4);
      QVERIFY(test::max_abs_diff(with, without) > 1e-3);  // the adapter is applied, not lost
    }
  }

  void continuous_batching_gives_each_request_its_adapter_alone_data() {
    QTest::addColumn<QString>("strategy");
    QTest::addColumn<int>("capacity");
    for (const auto& s : multi_lora_strategy_names())
      QTest::newRow(s.c_str()) << QString::fromStdString(s) << 2;
    QTest::newRow("segmented, cache 0 (all)") << QString("segmented") << 0;
  }
  void continuous_batching_gives_each_request_its_adapter_alone() {
    require_oracle();
    QFETCH(QString, strategy);
    QFETCH(int, capacity);
    c10::InferenceMode guard;
    BatchOptions o;
    o.max_batch = 3;
    o.lora_strategy = parse_multi_lora_strategy(strategy.toStdString());
    o.adapter_cache_capacity = capacity;
    for (const char* n : kAdapters) {
      AdapterSource s;
      s.name = n;
      s.peft_dir = adapter_dir(n);
      o.adapters.push_back(s);
    }
    AdapterSource rnd;  // every projection of the table (no modules named)
    rnd.name = "random-r3";
    rnd.rank = 3;
    rnd.seed = 9;
    o.adapters.push_back(rnd);
    const std::vector<std::string> names = {"all", "",       "subset", "random-r3",
                                            "all", "rslora", "",       "random-r3"};
    std::vector<BatchRequest> reqs;
    for (size_t i = 0; i < names.size(); ++i) {
      BatchRequest r;
      r.prompt_ids.push_back(1);
      for (size_t k = 0; k < 2 + i % 4; ++k)
        r.prompt_ids.push_back(static_cast<int32_t>(10 + 37 * i + 3 * k));
      r.max_new_tokens = 3 + static_cast<int64_t>(i % 3) * 2;
      r.stop_at_eos = false;
      r.adapter = names[i];
      reqs.push_back(r);
    }
    const test::IdTokenizer tok = tokenizer();
    const BatchRunResult run = run_continuous_batching(*model_, tok, reqs, o);
    std::map<std::string, std::shared_ptr<const LoraAdapter>> solo;
    for (const AdapterSource& s : o.adapters) solo[s.name] = load_adapter(s, *model_);
    bool mixed_step = false;
    for (const BatchStep& s : run.steps) mixed_step = mixed_step || s.adapters_in_step >= 2;
    QVERIFY(mixed_step);  // requests with different adapters really shared steps
    for (size_t i = 0; i < reqs.size(); ++i) {
      GenerateOptions g;
      g.max_new_tokens = reqs[i].max_new_tokens;
      g.stop_at_eos = false;
      if (!names[i].empty()) g.adapters = {solo[names[i]]};
      const GenerateResult alone = generate(*model_, tok, {reqs[i].prompt_ids}, g);
      QCOMPARE(run.requests[i].adapter, names[i]);
      QVERIFY2(run.requests[i].generated_ids == alone.sequences[0].generated_ids,
               ("request " + std::to_string(i)).c_str());
    }
    QCOMPARE(run.adapter_cache.loads + run.adapter_cache.hits, int64_t{6});
  }

  void random_adapters_use_the_projection_table() {
    require_oracle();
    c10::InferenceMode guard;
    const LoraTarget t = lora_target(*model_);
    QCOMPARE(t.architecture, std::string("llama"));
    QCOMPARE(t.projections.size(), kLlamaProjections);
    AdapterSource s;
    s.name = "r";
    s.rank = 4;
    s.alpha = 8;
    s.seed = 3;
    auto every = load_adapter(s, *model_);  // no modules: all seven in both layers
    QCOMPARE(every->modules().size(), size_t{14});
    QCOMPARE(every->modules().front(), std::string("layers.0.self_attn.q_proj"));
    // |A| + |B| from the table's shapes: q 72->72, k and v 72->24, o 72->72, gate and up 72->120,
    // down 120->72, rank 4, two layers.
    const int64_t per_layer = 4 * ((72 + 72) + 2 * (72 + 24) + (72 + 72) + 2 * (72 + 120) + (120 + 72));
    QCOMPARE(every->parameters(), 2 * per_layer);
    QVERIFY(!at::equal(every->weights(1, LinearSlot::Down).b,
                       load_adapter(s, *model_)->weights(0, LinearSlot::Down).b));
    QVERIFY(at::equal(every->weights(1, LinearSlot::Down).b,
                      load_adapter(s, *model_)->weights(1, LinearSlot::Down).b));
    // It runs and changes the output.
    const auto ids = prompts()[0];
    LoraBatch batch({every.get()}, MultiLoraStrategy::Segmented);
    QVERIFY(test::max_abs_diff(batch_logits(*model_, ids, 1, &batch),
                               batch_logits(*model_, ids, 1, nullptr)) > 1e-2);
    // PEFT-style short names pick table entries; GPT-2's names are refused, naming Llama's.
    s.modules = {"q_proj", "mlp.down_proj"};
    auto two = load_adapter(s, *model_);
    QCOMPARE(two->modules(),
             (std::vector<std::string>{"layers.0.self_attn.q_proj", "layers.0.mlp.down_proj",
                                       "layers.1.self_attn.q_proj", "layers.1.mlp.down_proj"}));
    s.modules = {"attn.c_attn"};
    const std::string msg = test::error_of(ErrorKind::Input, [&] { load_adapter(s, *model_); });
    QVERIFY2(msg.find("attn.c_attn") != std::string::npos && msg.find("Llama") != std::string::npos &&
                 msg.find("self_attn.q_proj") != std::string::npos,
             msg.c_str());
  }

  void gpt2_adapters_are_refused_on_llama() {
    // A GPT-2 PEFT folder names modules a Llama does not have: the config's target says so.
    require_oracle();
    const std::string gpt2_all = (fs::path(dir_).parent_path() / "adapters" / "all").string();
    const std::string msg = test::error_of(ErrorKind::ModelFormat, [&] {
      load_peft_lora(gpt2_all, lora_target(*model_), at::kCPU, at::kFloat);
    });
    QVERIFY2(msg.find("c_attn") != std::string::npos && msg.find("Llama") != std::string::npos, msg.c_str());
    // And a Llama folder on a GPT-2.
    Gpt2Config c;
    c.n_layer = 2;
    c.n_embd = 72;
    c.n_head = 9;
    const std::string back = test::error_of(
        ErrorKind::ModelFormat, [&] { load_peft_lora(adapter_dir("all"), c, at::kCPU, at::kFloat); });
    // Which of the seven it names first follows target_modules' order in the file (a Python set's).
    QVERIFY2(back.find("_proj\" is not a GPT-2 projection") != std::string::npos, back.c_str());
  }

  void cli_lora_commands_on_llama() {
    require_oracle();
    const QString base = QString::fromStdString(base_dir());
    test::CliRun d = test::run_cli(
        SERVELAB_CLI, {"lora", "describe", "--model", base, QString::fromStdString(adapter_dir("subset"))});
    QVERIFY2(d.code == 0, qPrintable(d.err));
    const nlohmann::json info = nlohmann::json::parse(d.out.toStdString());
    QCOMPARE(info["rank"].get<int>(), 4);
    QCOMPARE(info["modules"].size(), size_t{6});
    test::CliRun b = test::run_cli(SERVELAB_CLI, {"lora", "bench", "--model", base, "--batch-sizes", "1,2",
                                                  "--repeats", "1", "--decode-steps", "2", "--adapters", "2",
                                                  "--rank", "4", "--new-tokens", "2", "--json"});
    QVERIFY2(b.code == 0, qPrintable(b.err));
    const nlohmann::json bench = nlohmann::json::parse(b.out.toStdString());
    QCOMPARE(bench["workload"].get<std::string>(), std::string("gpt2"));
    QCOMPARE(bench["architecture"].get<std::string>(), std::string("llama"));
    QCOMPARE(bench["shapes"].size(), kLlamaProjections);
    QCOMPARE(bench["shapes"][0]["module"].get<std::string>(), std::string("self_attn.q_proj"));
    QVERIFY(bench["strategies_agree"].get<bool>());
    test::CliRun s = test::run_cli(
        SERVELAB_CLI, {"lora", "serve", "--model", base, "--prompt", "abc", "--requests", "4", "--adapters",
                       "2", "--rank", "2", "--max-batch", "2", "--new-tokens", "2", "--json"});
    QVERIFY2(s.code == 0, qPrintable(s.err));
    QCOMPARE(nlohmann::json::parse(s.out.toStdString())["requests"].size(), size_t{4});
  }
};

QTEST_GUILESS_MAIN(TestLoraLlama)
#include "test_lora_llama.moc"

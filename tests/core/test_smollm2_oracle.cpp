// The built-in model itself (SmolLM2-135M-Instruct, Q4_1 GGUF; docs/models.md) against Hugging
// Face transformers loading the very same file in fp32 (tests/oracle/make_smollm2_fixtures.py, a
// CTest fixture): our tokenizer's ids, full logits for the course prompts and the chat-formatted
// "What is deep learning?", the KV cache fed token by token, and greedy tokens alone and batched.
// Then what the Engine says and does with the built-in model: its info(), a KV cache of 3 KV heads,
// generation ending on <|im_end|> (2) and <|endoftext|> (0), and prompts beyond the 8192-position
// context refused with an InputError naming it. Where the opt-in Gemma 3 270M is installed, it
// against HF the same way (gemma3_270m_matches_hf).
#include <c10/core/InferenceMode.h>

#include <QElapsedTimer>
#include <QtTest>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "model/engine.h"
#include "model/llama_model.h"
#include "model/safetensors_file.h"
#include "test_support.h"
#include "tokenizer/prompt.h"

using namespace servelab;
using servelab::test::max_abs_diff;
namespace fs = std::filesystem;

namespace {

const std::string kModel = SERVELAB_SOURCE_DIR "/.venv/share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf";
// HF disagrees with itself by about 1e-4 on these logits (range -31..38: prefill against cached
// decode, SDPA against eager, 1 thread against 2); we are held to 1e-3.
constexpr double kLogitTolerance = 1e-3;
// With every logit within kLogitTolerance of HF's, two candidates can swap only where HF's top two
// are less than twice that apart: only there may our greedy tokens part from HF's.
constexpr double kNearTie = 2 * kLogitTolerance;

// The model with one token's logit raised far above every other: greedy generation picks it at
// every step (SmolLM2 itself never predicts <|endoftext|> on a short prompt).
class ForcedToken final : public Model {
 public:
  ForcedToken(const Model& inner, int32_t id)
      : Model(inner.shape(), inner.projections(), nullptr), inner_(inner), id_(id) {}
  at::Tensor forward(const ForwardInput& in, KvCache* cache) const override {
    return inner_.forward(in, cache).index_fill(-1, at::tensor({int64_t{id_}}), 1e4);
  }
  at::Device device() const override { return inner_.device(); }
  at::ScalarType dtype() const override { return inner_.dtype(); }
  int64_t resident_bytes() const override { return inner_.resident_bytes(); }
  int64_t parameter_count() const override { return inner_.parameter_count(); }
  bool lm_head_tied() const override { return inner_.lm_head_tied(); }
  std::vector<std::pair<std::string, at::Tensor>> named_tensors() const override {
    return inner_.named_tensors();
  }
  nlohmann::json config_json() const override { return inner_.config_json(); }
  std::unique_ptr<Model> with_kernels(const LinearKernelFactory& make) const override {
    return inner_.with_kernels(make);
  }

 private:
  const Model& inner_;
  int32_t id_;
};

struct Prompt {
  std::string kind, text;
  std::vector<int32_t> ids, greedy;
  std::vector<double> gaps;  // HF's top-1 minus top-2 logit at each greedy step
  int64_t new_tokens = 0;
};

std::vector<int64_t> as_int64(const std::vector<int32_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

class TestSmolLM2Oracle : public QObject {
  Q_OBJECT

  std::unique_ptr<Engine> engine_;
  std::vector<Prompt> prompts_;
  nlohmann::json ref_;
  std::map<std::string, at::Tensor> logits_;
  std::string no_reference_;  // why the HF reference is absent ("" when present)

  // Our greedy tokens against HF's: identical, or parting first at a step where HF's top two are
  // within kNearTie (then nothing after it is compared).
  static void check_greedy(const Prompt& p, const std::vector<int32_t>& ours, const char* how) {
    QCOMPARE(ours.size(), p.greedy.size());
    for (size_t s = 0; s < ours.size(); ++s) {
      if (ours[s] == p.greedy[s]) continue;
      QVERIFY2(p.gaps[s] < kNearTie,
               qPrintable(QString("%1, %2 prompt: token %3 is %4, HF's %5, and HF's top two "
                                  "are %6 apart")
                              .arg(how, QString::fromStdString(p.kind))
                              .arg(s)
                              .arg(ours[s])
                              .arg(p.greedy[s])
                              .arg(p.gaps[s])));
      qInfo("%s, %s prompt: parts from HF at token %zu, a near tie (HF's top two %.2g apart)", how,
            p.kind.c_str(), s, p.gaps[s]);
      return;
    }
  }

  static GenerateOptions greedy(int64_t new_tokens, bool cache = true) {
    GenerateOptions o;
    o.max_new_tokens = new_tokens;
    o.stop_at_eos = false;
    o.use_kv_cache = cache;
    return o;
  }

 private Q_SLOTS:
  void initTestCase() {
    if (!fs::exists(kModel))
      QSKIP(qPrintable(
          QString::fromStdString("the built-in model is absent (scripts/bootstrap installs it): " + kModel)));
    // One thread: two OpenMP threads spinning on a busy 2-core machine (ctest -j2) cost far more than
    // they give on a model this small.
    EngineOptions o;
    o.threads = 1;
    QElapsedTimer t;
    t.start();
    engine_ = Engine::load_gguf(kModel, o);
    qInfo("Engine::load_gguf: %.1f s", t.elapsed() / 1000.0);

    const std::string dir = test::env_or_empty("SERVELAB_SMOLLM2_ORACLE_DIR");
    if (dir.empty()) {
      no_reference_ =
          "SERVELAB_SMOLLM2_ORACLE_DIR is unset: HF's reference is written by "
          "tests/oracle/make_smollm2_fixtures.py (CTest runs it first)";
    } else if (std::ifstream skipped(fs::path(dir) / "skipped.txt"); skipped) {
      std::getline(skipped, no_reference_);
      no_reference_ = "HF's reference was not written: " + no_reference_;
    } else if (!fs::exists(fs::path(dir) / "reference.json")) {
      no_reference_ = "HF's reference is absent from " + dir + " (run tests/oracle/make_smollm2_fixtures.py)";
    } else {
      std::ifstream(fs::path(dir) / "reference.json") >> ref_;
      for (const auto& j : ref_["prompts"])
        prompts_.push_back({j["kind"], j["text"], j["ids"].get<std::vector<int32_t>>(),
                            j["greedy"].get<std::vector<int32_t>>(), j["top2_gap"].get<std::vector<double>>(),
                            j["new_tokens"].get<int64_t>()});
      SafetensorsFile st = SafetensorsFile::open((fs::path(dir) / "reference.safetensors").string());
      for (const auto& t : st.tensors())
        logits_[t.name] = at::from_blob(const_cast<std::byte*>(t.data), t.shape, at::kFloat).clone();
      QCOMPARE(prompts_.size(), size_t{4});
    }
  }

  // ---- against HF ----

  void tokenizer_ids_are_hfs() {
    // HF's tokenizer from the same file, its pre-tokenizer corrected to llama.cpp's smollm
    // (docs/models.md); the chat prompt carries control tokens (<|im_start|>, <|im_end|>) and the default
    // system message HF's chat template inserts; a few more texts with digits, spaces and UTF-8.
    if (!no_reference_.empty()) QSKIP(no_reference_.c_str());
    for (const Prompt& p : prompts_) QCOMPARE(engine_->tokenizer().encode(p.text), p.ids);
    for (const auto& s : ref_["stop_prompts"])
      QCOMPARE(engine_->tokenizer().encode(s["text"].get<std::string>()),
               s["ids"].get<std::vector<int32_t>>());
    for (const auto& t : ref_["tokenizer_texts"]) {
      const std::string text = t["text"].get<std::string>();
      QVERIFY2(engine_->tokenizer().encode(text) == t["ids"].get<std::vector<int32_t>>(), text.c_str());
    }
    QVERIFY(ref_["tokenizer_texts"].size() >= 5);
    QCOMPARE(prompts_[0].ids, (std::vector<int32_t>{504, 2365, 6354, 16438, 25437, 690, 260}));
    QVERIFY(prompts_[3].text.find("You are a helpful AI assistant named SmolLM") != std::string::npos);
    QCOMPARE(prompts_[3].ids.front(), 1);  // <|im_start|>
  }

  void logits_match_hf() {
    if (!no_reference_.empty()) QSKIP(no_reference_.c_str());
    c10::InferenceMode guard;
    for (size_t i = 0; i < prompts_.size(); ++i) {
      const Prompt& p = prompts_[i];
      const at::Tensor ids = at::tensor(as_int64(p.ids)).unsqueeze(0);
      const at::Tensor logits = engine_->model()
                                    .forward({ids, at::arange(ids.size(1)).unsqueeze(0), at::Tensor(), true})
                                    .squeeze(0);
      const at::Tensor& ref = logits_.at("logits_" + std::to_string(i));
      QCOMPARE(logits.sizes().vec(), ref.sizes().vec());
      const double d = max_abs_diff(logits, ref);
      qInfo(
          "%s prompt (%zu tokens): max |logit diff| %.3g over logits up to %.3g; argmax agrees at %lld of "
          "%zu",
          p.kind.c_str(), p.ids.size(), d, ref.abs().max().item<double>(),
          static_cast<long long>(logits.argmax(-1).eq(ref.argmax(-1)).sum().item<int64_t>()), p.ids.size());
      QVERIFY2(
          d < kLogitTolerance,
          qPrintable(QString("%1 prompt: max |logit diff| = %2").arg(QString::fromStdString(p.kind)).arg(d)));
    }
  }

  void kv_cache_decode_matches_hf() {
    // The chat prompt: prefill its first half, then one token at a time through the cache (3 KV
    // heads of 30 layers), each position's logits against HF's prefill.
    if (!no_reference_.empty()) QSKIP(no_reference_.c_str());
    c10::InferenceMode guard;
    const Prompt& p = prompts_[3];
    const at::Tensor& ref = logits_.at("logits_3");
    const int64_t n = static_cast<int64_t>(p.ids.size()), half = n / 2;
    const at::Tensor ids = at::tensor(as_int64(p.ids)).unsqueeze(0);
    KvCache cache = engine_->model().make_cache(1, n);
    QCOMPARE(cache.keys().size(2), int64_t{3});
    at::Tensor out = engine_->model().forward(
        {ids.narrow(1, 0, half), at::arange(half).unsqueeze(0), at::Tensor(), true}, &cache);
    double worst = max_abs_diff(out.squeeze(0), ref.narrow(0, 0, half));
    for (int64_t t = half; t < n; ++t) {
      at::Tensor l = engine_->model().forward(
          {ids.narrow(1, t, 1), at::full({1, 1}, t, at::kLong), at::Tensor(), false}, &cache);
      worst = std::max(worst, max_abs_diff(l.squeeze(0), ref[t]));
    }
    qInfo("cached decode: max |logit diff| %.3g", worst);
    QVERIFY2(worst < kLogitTolerance, qPrintable(QString("max |logit diff| = %1").arg(worst)));
  }

  void greedy_tokens_match_hf() {
    // 16 new tokens for the course prompts, 40 for the chat one, generation not stopped at eos.
    if (!no_reference_.empty()) QSKIP(no_reference_.c_str());
    for (const Prompt& p : prompts_) {
      GenerateResult r = generate(engine_->model(), engine_->tokenizer(), {p.ids}, greedy(p.new_tokens));
      check_greedy(p, r.sequences[0].generated_ids, "alone");
      if (QTest::currentTestFailed()) return;
      if (p.kind == "chat")
        qInfo("chat answer: %s", engine_->tokenizer().decode(r.sequences[0].generated_ids).c_str());
    }
  }

  void greedy_batch_and_no_cache_match_hf() {
    // The three course prompts as one left-padded batch; the shortest one without the cache.
    if (!no_reference_.empty()) QSKIP(no_reference_.c_str());
    std::vector<std::vector<int32_t>> batch;
    for (size_t i = 0; i < 3; ++i) batch.push_back(prompts_[i].ids);
    GenerateResult b = generate(engine_->model(), engine_->tokenizer(), batch, greedy(16));
    for (size_t i = 0; i < 3; ++i) {
      check_greedy(prompts_[i], b.sequences[i].generated_ids, "batched");
      if (QTest::currentTestFailed()) return;
    }
    GenerateResult nc =
        generate(engine_->model(), engine_->tokenizer(), {prompts_[2].ids}, greedy(16, false));
    check_greedy(prompts_[2], nc.sequences[0].generated_ids, "without the cache");
  }

  // ---- an opt-in real checkpoint of another family ----

  // Gemma 3 270M as llama.cpp's Q4_K_M file (scripts/install_gemma3_270m; not installed by default)
  // against HF loading the same file (tests/oracle/make_gemma3_270m_fixtures.py): the tokenizer's
  // ids, greedy tokens through the KV cache with the file's blocks run as stored, and along HF's
  // greedy path the log-probabilities of HF's five most likely tokens, on a short prompt and on one
  // of 1,434 tokens, longer than the local layers' 512-position window.
  void gemma3_270m_matches_hf() {
    const std::string dir = test::env_or_empty("SERVELAB_GEMMA3_ORACLE_DIR");
    if (dir.empty()) QSKIP("SERVELAB_GEMMA3_ORACLE_DIR is unset (CTest sets it)");
    if (std::ifstream skipped(fs::path(dir) / "skipped.txt"); skipped) {
      std::string why;
      std::getline(skipped, why);
      QSKIP(qPrintable(QString::fromStdString(why)));
    }
    nlohmann::json ref;
    std::ifstream(fs::path(dir) / "reference.json") >> ref;
    EngineOptions o;
    o.threads = 1;
    const std::unique_ptr<Engine> gemma = Engine::load_gguf(ref["stamp"]["model"].get<std::string>(), o);
    QCOMPARE(QString::fromStdString(gemma->model().shape().architecture), QStringLiteral("gemma3"));
    c10::InferenceMode guard;
    for (const auto& j : ref["prompts"]) {
      const auto ids = j["ids"].get<std::vector<int32_t>>(), hf = j["greedy"].get<std::vector<int32_t>>();
      QCOMPARE(encode_prompt(gemma->tokenizer(), j["text"].get<std::string>()), ids);  // with its <bos>
      const GenerateResult r =
          generate(gemma->model(), gemma->tokenizer(), {ids}, greedy(static_cast<int64_t>(hf.size())));
      QCOMPARE(r.sequences[0].generated_ids, hf);
      std::vector<int32_t> path = ids;
      path.insert(path.end(), hf.begin(), hf.end());
      const at::Tensor all = at::tensor(as_int64(path)).unsqueeze(0);
      const at::Tensor logp =
          at::log_softmax(
              gemma->model().forward({all, at::arange(all.size(1)).unsqueeze(0), at::Tensor(), true}), -1)
              .squeeze(0);
      double worst = 0;
      for (size_t k = 0; k < hf.size(); ++k) {
        const auto& step = j["steps"][k];
        for (size_t t = 0; t < 5; ++t)
          worst = std::max(
              worst, std::abs(logp[static_cast<int64_t>(ids.size() + k - 1)][step["ids"][t].get<int64_t>()]
                                  .item<double>() -
                              step["logprobs"][t].get<double>()));
      }
      qInfo("Gemma 3 270M, %zu prompt tokens: greedy equal to HF's, log-probabilities within %.2g",
            ids.size(), worst);
      QVERIFY2(worst < kLogitTolerance, qPrintable(QString("log-probabilities %1 from HF's").arg(worst)));
    }
  }

  // ---- the Engine with the built-in model ----

  void builtin_engine_info() {
    QElapsedTimer t;
    t.start();
    const std::unique_ptr<Engine> e = Engine::load_builtin({});
    qInfo("Engine::load_builtin: %.1f s", t.elapsed() / 1000.0);
    const nlohmann::json info = e->info();
    QCOMPARE(info["model"].get<std::string>(), std::string("SmolLM2-135M-Instruct.Q4_1"));
    QCOMPARE(info["architecture"].get<std::string>(), std::string("llama"));
    QCOMPARE(info["format"].get<std::string>(), std::string("gguf"));
    QCOMPARE(info["random_weights"].get<bool>(), false);
    QCOMPARE(info["demo"].get<bool>(), false);
    QCOMPARE(info["lm_head_tied"].get<bool>(), true);
    QCOMPARE(info["dtype"].get<std::string>(), std::string("fp32"));
    using TypeCounts = std::map<std::string, int64_t>;
    const TypeCounts types = {{"F32", 61}, {"Q4_1", 210}, {"Q8_0", 1}};
    QCOMPARE(info["file_tensor_types"].get<TypeCounts>(), types);
    QCOMPARE(info["config"]["num_key_value_heads"].get<int64_t>(), int64_t{3});
    QCOMPARE(info["parameters"].get<int64_t>(), int64_t{134515008});
    QVERIFY(e->text_caveat().empty());
    QCOMPARE(e->model().parameter_count(), engine_->model().parameter_count());
  }

  void kv_cache_holds_three_kv_heads() {
    const Model& m = engine_->model();
    const int64_t per_token = 2 * 30 * 3 * 64 * 4;  // K and V, 30 layers, 3 KV heads of 64, fp32
    QCOMPARE(m.shape().n_head, int64_t{9});
    QCOMPARE(m.shape().n_kv_head, int64_t{3});
    QCOMPARE(m.shape().kv_bytes_per_token(engine_->dtype_bytes()), per_token);
    QCOMPARE(m.kv_cache_bytes(1, 1), per_token);
    QCOMPARE(m.kv_cache_bytes(2, 100), 200 * per_token);
    c10::InferenceMode guard;
    const KvCache cache = m.make_cache(2, 10);
    QCOMPARE(cache.keys().sizes().vec(), (std::vector<int64_t>{30, 2, 3, 10, 64}));
    QCOMPARE(cache.bytes(), 20 * per_token);
    GenerateResult r = generate(m, engine_->tokenizer(), {{504, 2365, 6354}}, greedy(2));
    QCOMPARE(r.kv_cache_bytes, 5 * per_token);
  }

  void generation_stops_on_im_end_and_endoftext() {
    const Tokenizer& tok = engine_->tokenizer();
    QCOMPARE(tok.stop_ids(), (std::vector<int32_t>{2, 0}));
    QCOMPARE(generation_stop_ids(engine_->model(), tok), (std::vector<int32_t>{2, 0}));
    GenerateOptions o;
    o.max_new_tokens = 6;
    const std::vector<int32_t> prompt = tok.encode("The rain in Spain falls");
    for (int32_t id : {2, 0}) {
      const ForcedToken forced(engine_->model(), id);
      GenerateResult r = generate(forced, tok, {prompt}, o);
      QCOMPARE(r.sequences[0].generated_ids, std::vector<int32_t>{id});
      QCOMPARE(r.sequences[0].finish_reason, std::string("eos"));
      QCOMPARE(r.sequences[0].text, std::string());
      o.stop_at_eos = false;  // the same run goes on when told not to stop
      QCOMPARE(generate(forced, tok, {prompt}, o).sequences[0].generated_ids, std::vector<int32_t>(6, id));
      o.stop_at_eos = true;
    }
    // <|im_start|> (1) is a control token but ends nothing.
    const ForcedToken im_start(engine_->model(), 1);
    GenerateResult r = generate(im_start, tok, {prompt}, o);
    QCOMPARE(r.sequences[0].generated_ids, std::vector<int32_t>(6, 1));
    QCOMPARE(r.sequences[0].finish_reason, std::string("length"));
    // And unforced: a finished assistant turn ("Yes.") is followed by <|im_end|> (HF agrees).
    const std::vector<int32_t> turn =
        tok.encode("<|im_start|>user\nSay yes.<|im_end|>\n<|im_start|>assistant\nYes.");
    GenerateResult y = generate(engine_->model(), tok, {turn}, o);
    QCOMPARE(y.sequences[0].generated_ids, std::vector<int32_t>{2});
    QCOMPARE(y.sequences[0].finish_reason, std::string("eos"));
    if (no_reference_.empty()) QCOMPARE(ref_["stop_prompts"][0]["next"].get<int32_t>(), 2);
  }

  void prompts_beyond_the_context_are_refused() {
    const Model& m = engine_->model();
    QCOMPARE(m.shape().context, int64_t{8192});
    std::string text;
    for (int i = 0; i < 8200; ++i) text += " the";
    const std::vector<int32_t> long_prompt = engine_->tokenizer().encode(text);
    QCOMPARE(long_prompt.size(), size_t{8200});
    GenerateOptions o;
    o.max_new_tokens = 1;
    const auto refused = [&](const std::vector<int32_t>& p) {
      return test::error_of(ErrorKind::Input, [&] { generate(m, engine_->tokenizer(), {p}, o); });
    };
    for (const std::string& msg :
         {refused(long_prompt),
          refused(std::vector<int32_t>(long_prompt.begin(), long_prompt.begin() + 8192))}) {
      QVERIFY2(msg.find("context of 8192") != std::string::npos, msg.c_str());
    }
    // 8191 + 1 fits: the check passes (the generation itself is not run: it would take minutes).
    check_generation_fits(m, {std::vector<int32_t>(long_prompt.begin(), long_prompt.begin() + 8191)}, o);
    // Continuous batching refuses it too.
    BatchRequest req;
    req.prompt_ids = long_prompt;
    req.max_new_tokens = 1;
    const std::string batched = test::error_of(
        ErrorKind::Input, [&] { run_continuous_batching(m, engine_->tokenizer(), {req}, BatchOptions{}); });
    QVERIFY2(batched.find("context of 8192") != std::string::npos, batched.c_str());
  }
};

QTEST_GUILESS_MAIN(TestSmolLM2Oracle)
#include "test_smollm2_oracle.moc"

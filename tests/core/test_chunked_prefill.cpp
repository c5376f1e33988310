// Chunked prefill and the multi-token forward it runs on: a prompt computed in chunks of any size,
// on slot KV and paged KV (any block size, after a cached prefix), gives the logits of a full
// forward; so do several tokens of a decoding request at once (speculative verification's step).
// Through the scheduler, every token budget gives each request its solo greedy tokens, batched,
// with arrivals, preemption and prefix caching. The token picker's sampling parameters do what
// their names say, and bad values are refused by name.
#include <c10/core/InferenceMode.h>

#include <QtTest>
#include <thread>

#include "cli_runner.h"
#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "generate/paged_kv_memory.h"
#include "generate/slot_kv_memory.h"
#include "generate/token_picker.h"
#include "model/gpt2_model.h"
#include "model/gpt2_weights.h"
#include "model/llama_model.h"
#include "serve/serve_scheduler.h"
#include "serve_clients.h"
#include "test_support.h"
#include "tiny_models.h"

using namespace servelab;

namespace {

std::vector<int32_t> prompt(int64_t len, int32_t salt) { return test::tiny_prompt(len, salt); }

test::IdTokenizer tok(300, 299);

at::Tensor full_forward(const Model& m, const std::vector<int32_t>& seq) {
  const int64_t n = static_cast<int64_t>(seq.size());
  ForwardInput in;
  in.input_ids = at::tensor(std::vector<int64_t>(seq.begin(), seq.end()), at::kLong).view({1, n});
  in.position_ids = at::arange(n, at::kLong).view({1, n});
  in.all_logits = true;
  return m.forward(in).squeeze(0);  // [n, vocab]
}

std::vector<int32_t> solo(const Model& m, const BatchRequest& r) { return test::solo_tokens(m, tok, r); }

std::unique_ptr<KvMemoryManager> layout(const Model& m, int kind, int64_t block_size) {
  if (kind == 0) return std::make_unique<SlotKvMemory>(m, 4, 96, 299);
  PagedKvConfig c;
  c.block_size = block_size;
  c.num_blocks = 4 * 96 / block_size + 4;
  c.prefix_caching = true;
  return std::make_unique<PagedKvMemory>(m, c, 299);
}

}  // namespace

class TestChunkedPrefill : public QObject {
  Q_OBJECT
  std::unique_ptr<Gpt2Model> gpt2_;
  std::unique_ptr<LlamaModel> llama_;

  const Model& model(int family) const {
    return family == 0 ? static_cast<const Model&>(*gpt2_) : static_cast<const Model&>(*llama_);
  }

 private Q_SLOTS:
  void initTestCase() {
    gpt2_ = test::tiny_gpt2();
    llama_ = test::tiny_llama();
  }

  void extend_in_chunks_equals_a_full_forward_data() {
    QTest::addColumn<int>("family");
    QTest::addColumn<int>("kind");
    QTest::addColumn<int>("block_size");
    for (int f : {0, 1}) {
      QTest::newRow(qPrintable(QString("%1 slot").arg(f ? "llama" : "gpt2"))) << f << 0 << 0;
      for (int b : {1, 4, 16})
        QTest::newRow(qPrintable(QString("%1 paged %2").arg(f ? "llama" : "gpt2").arg(b))) << f << 1 << b;
    }
  }
  void extend_in_chunks_equals_a_full_forward() {
    QFETCH(int, family);
    QFETCH(int, kind);
    QFETCH(int, block_size);
    c10::InferenceMode guard;
    const Model& m = model(family);
    for (int64_t chunk : {1, 3, 7, 40}) {
      std::unique_ptr<KvMemoryManager> kv = layout(m, kind, block_size);
      // Two requests chunked side by side in one forward, then a third sharing request 0's prompt.
      std::vector<std::vector<int32_t>> seq = {prompt(33, 1), prompt(19, 2), prompt(33, 1)};
      seq[2].insert(seq[2].end(), {7, 8, 9});
      for (int64_t id : {0, 1}) {
        QVERIFY(kv->reserve({id, &seq[static_cast<size_t>(id)], 8}));
        kv->commit(id, static_cast<int64_t>(seq[static_cast<size_t>(id)].size()));
      }
      std::vector<int64_t> done = {0, 0};
      while (done[0] < 33 || done[1] < 19) {
        std::vector<StepSegment> segs;
        for (int64_t id : {0, 1}) {
          const auto& s = seq[static_cast<size_t>(id)];
          const int64_t n = static_cast<int64_t>(s.size()), from = done[static_cast<size_t>(id)];
          if (from >= n) continue;
          const int64_t count = std::min(chunk, n - from);
          QCOMPARE(kv->computed(id), from);
          segs.push_back({id, std::vector<int32_t>(s.begin() + from, s.begin() + from + count),
                          from + count == n ? StepSegment::Logits::Last : StepSegment::Logits::None});
          done[static_cast<size_t>(id)] += count;
        }
        const at::Tensor logits = kv->extend(segs);
        int64_t row = 0;
        for (const StepSegment& sg : segs) {
          if (sg.logits != StepSegment::Logits::Last) continue;
          const auto& s = seq[static_cast<size_t>(sg.id)];
          const double diff =
              test::max_abs_diff(logits[row++], full_forward(m, s)[static_cast<int64_t>(s.size()) - 1]);
          QVERIFY2(diff < 1e-4,
                   qPrintable(QString("chunks of %1, request %2: %3").arg(chunk).arg(sg.id).arg(diff)));
        }
        if (!logits.defined()) QVERIFY(row == 0);
      }
      // Several tokens of a decoding request at once, a logits row per position (verification).
      std::vector<int32_t> more = {4, 5, 6, 7};
      QVERIFY(kv->grow_tokens(0, more));
      const at::Tensor all = kv->extend({{0, more, StepSegment::Logits::All}});
      std::vector<int32_t> whole = seq[0];
      whole.insert(whole.end(), more.begin(), more.end());
      const at::Tensor reference = full_forward(m, whole).narrow(0, 33, 4);
      QVERIFY2(test::max_abs_diff(all, reference) < 1e-4,
               qPrintable(QString("verification, chunks of %1").arg(chunk)));
      // A request after a cached prefix (paged) continues from it; slot KV computes it all.
      QVERIFY(kv->reserve({2, &seq[2], 8}));
      const int64_t cached = kv->computed(2);
      if (kind == 1) QCOMPARE(cached, (33 / block_size) * block_size);  // request 0's full blocks of the 33
      const at::Tensor l2 = kv->extend({{2, std::vector<int32_t>(seq[2].begin() + cached, seq[2].end())}});
      QVERIFY(test::max_abs_diff(l2[0], full_forward(m, seq[2])[35]) < 1e-4);
      kv->retire({0, 1, 2});
    }
  }

  void chunked_tokens_equal_solo_tokens_data() {
    QTest::addColumn<int>("family");
    QTest::addColumn<int>("kv");
    QTest::addColumn<int>("budget");
    QTest::addColumn<int>("max_batch");
    for (int f : {0, 1})
      for (int kv : {0, 1})
        for (int budget : {1, 5, 16, 64})
          QTest::newRow(qPrintable(
              QString("%1 %2 budget %3").arg(f ? "llama" : "gpt2").arg(kv ? "paged" : "slot").arg(budget)))
              << f << kv << budget << 4;
    // A pool small enough to preempt, with prefix caching.
    QTest::newRow("llama paged budget 8, preempting") << 1 << 2 << 8 << 6;
  }
  void chunked_tokens_equal_solo_tokens() {
    QFETCH(int, family);
    QFETCH(int, kv);
    QFETCH(int, budget);
    QFETCH(int, max_batch);
    const Model& m = model(family);
    std::vector<BatchRequest> rs;
    for (int64_t i = 0; i < 9; ++i) {
      BatchRequest r;
      if (i % 3 == 0) r.prompt_ids = prompt(20, 99);  // a shared system prompt
      const std::vector<int32_t> own = prompt(1 + (i * 7) % 23, static_cast<int32_t>(i));
      r.prompt_ids.insert(r.prompt_ids.end(), own.begin(), own.end());
      r.max_new_tokens = 2 + (i * 5) % 11;
      r.stop_at_eos = false;
      r.arrival_ms = i < 4 ? 0 : 1;    // the later ones join running requests
      if (i == 8) r.arrival_step = 3;  // and the last at a scheduler step
      rs.push_back(r);
    }
    BatchOptions o;
    o.max_batch = max_batch;
    o.kv = kv == 0 ? KvStrategy::SlotKv : KvStrategy::Paged;
    o.max_num_batched_tokens = budget;
    if (kv == 2) {
      o.kv_blocks = 14;  // the largest request (40 prompt + 10 new tokens) fits alone
      o.kv_block_size = 4;
    }
    const BatchRunResult run = run_continuous_batching(m, tok, rs, o);
    for (size_t i = 0; i < rs.size(); ++i) {
      QVERIFY2(run.requests[i].generated_ids == solo(m, rs[i]), qPrintable(QString("request %1").arg(i)));
    }
    for (const BatchStep& s : run.steps) {
      int64_t tokens = s.decode_tokens;
      for (const PrefillChunk& c : s.chunks) tokens += c.count;
      QVERIFY2(tokens <= budget, qPrintable(QString("step %1 computed %2 tokens").arg(s.step).arg(tokens)));
    }
    if (kv == 2) QVERIFY(run.preemptions > 0);
    QVERIFY(run.requests[8].admitted_step >= 3);
  }

  void the_server_chunks_prompts_with_solo_tokens_and_logprobs() {
    // Through the server's engine (paged KV, a budget of 6 tokens a step): every request's tokens
    // equal its solo run, its streamed log-probabilities equal a full forward's log-softmax, and a
    // budget outside [1, context] is refused by name.
    const Model& m = *llama_;
    ServeOptions so;
    so.max_batch = 3;
    so.max_total_tokens = 64;
    so.max_num_batched_tokens = 6;
    so.engine_on_caller = true;
    ServeScheduler scheduler(m, tok, so);
    std::vector<BatchRequest> rs;
    for (int64_t i = 0; i < 5; ++i) {
      BatchRequest r;
      r.prompt_ids = prompt(5 + 7 * i, static_cast<int32_t>(i + 20));
      r.max_new_tokens = 3 + i;
      r.stop_at_eos = false;
      rs.push_back(r);
    }
    const test::ServedRun run = test::serve_all(scheduler, rs);
    c10::InferenceMode guard;
    for (size_t i = 0; i < rs.size(); ++i) {
      QCOMPARE(run.results[i].generated_ids, solo(m, rs[i]));
      QCOMPARE(run.tokens[i].size(), run.results[i].generated_ids.size());
      QVERIFY(test::max_logprob_error(m, rs[i].prompt_ids, run.tokens[i]) < 1e-4);
    }
    for (int64_t bad : {int64_t{-1}, int64_t{97}}) {
      ServeOptions o = so;
      o.max_num_batched_tokens = bad;
      try {
        ServeScheduler refused(m, tok, o);
        QFAIL("a budget outside [1, context] accepted");
      } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains(QStringLiteral("max num batched tokens")), e.what());
      }
    }
  }

  void the_picker_does_what_each_parameter_says() {
    c10::InferenceMode guard;
    const Model& m = *llama_;
    BatchRequest r;
    r.prompt_ids = prompt(9, 4);
    r.max_new_tokens = 12;
    r.stop_at_eos = false;
    const std::vector<int32_t> greedy = solo(m, r);
    // Sampling restricted to one candidate is greedy, whatever the seed and temperature.
    for (auto shape : {0, 1}) {
      BatchRequest s = r;
      s.sampling.greedy = false;
      s.sampling.temperature = 1.7;
      s.sampling.seed = 123;
      if (shape == 0) s.sampling.top_k = 1;
      if (shape == 1) s.sampling.min_p = 1.0;
      QCOMPARE(solo(m, s), greedy);
    }
    // Plain sampling at a high temperature does not.
    BatchRequest hot = r;
    hot.sampling.greedy = false;
    hot.sampling.temperature = 5.0;
    hot.sampling.seed = 9;
    QVERIFY(solo(m, hot) != greedy);
    // A repetition penalty removes a forced repeat: on logits where the prompt's last token would
    // win, a strong penalty makes another token win.
    std::vector<float> logits(300, 0.0f);
    logits[17] = 3.0f;
    logits[18] = 2.0f;
    SamplingParams p;
    p.repetition_penalty = 2.0;
    const std::vector<int32_t> seen = {17};
    const at::Tensor l = at::from_blob(logits.data(), {1, 300}, at::kFloat).clone();
    Sampler sampler(p);
    QCOMPARE(pick_tokens(l, {{&p, &sampler, &seen, nullptr}}, "test")[0].id, int32_t{18});
    SamplingParams plain;
    QCOMPARE(pick_tokens(l, {{&plain, &sampler, &seen, nullptr}}, "test")[0].id, int32_t{17});
    // Presence and frequency penalties count the output only.
    SamplingParams pres;
    pres.presence_penalty = 1.5;
    const std::vector<int32_t> out = {17};
    QCOMPARE(pick_tokens(l, {{&pres, &sampler, nullptr, &out}}, "test")[0].id, int32_t{18});
    SamplingParams freq;
    freq.frequency_penalty = 0.4;
    const std::vector<int32_t> twice = {17, 17};
    const std::vector<int32_t> thrice = {17, 17, 17};
    QCOMPARE(pick_tokens(l, {{&freq, &sampler, nullptr, &twice}}, "test")[0].id, int32_t{17});  // 3 - 0.8 > 2
    QCOMPARE(pick_tokens(l, {{&freq, &sampler, nullptr, &thrice}}, "test")[0].id,
             int32_t{18});  // 3 - 1.2 < 2
    // Log-probabilities are the model's log-softmax, with the most likely alternatives in order.
    SamplingParams lp;
    lp.top_logprobs = 3;
    PickRow row{&lp, &sampler, nullptr, nullptr, nullptr, true};
    const PickedToken t = pick_tokens(l, {row}, "test")[0];
    const at::Tensor ref = at::log_softmax(l[0], -1);
    QVERIFY(std::abs(t.logprob - ref[17].item<float>()) < 1e-6);
    QCOMPARE(t.top.size(), size_t{3});
    QCOMPARE(t.top[0].first, int32_t{17});
    QCOMPARE(t.top[1].first, int32_t{18});
    QVERIFY(std::abs(t.top[1].second - ref[18].item<float>()) < 1e-6);
  }

  void generate_logprobs_equal_the_log_softmax_of_a_full_forward() {
    c10::InferenceMode guard;
    const Model& m = *gpt2_;
    GenerateOptions o;
    o.max_new_tokens = 6;
    o.stop_at_eos = false;
    o.logprobs = true;
    o.sampling.top_logprobs = 5;
    const std::vector<int32_t> p = prompt(11, 3);
    const GeneratedSequence s = generate(m, tok, {p}, o).sequences[0];
    std::vector<int32_t> seq = p;
    seq.insert(seq.end(), s.generated_ids.begin(), s.generated_ids.end());
    const at::Tensor ref = at::log_softmax(full_forward(m, seq), -1);
    for (size_t i = 0; i < s.generated_ids.size(); ++i) {
      const int64_t pos = static_cast<int64_t>(p.size() + i) - 1;
      QVERIFY(std::abs(s.logprobs[i] - ref[pos][s.generated_ids[i]].item<float>()) < 1e-4);
      QCOMPARE(s.top_logprobs[i].size(), size_t{5});
      QCOMPARE(s.top_logprobs[i][0].first, s.generated_ids[i]);  // greedy: the chosen one is the top one
    }
  }

  void bad_values_are_refused_by_name() {
    auto refused = [](std::function<void()> fn, const QString& name) {
      try {
        fn();
      } catch (const InputError& e) {
        QVERIFY2(QString(e.what()).contains(name), e.what());
        return;
      }
      QFAIL(qPrintable(name + " accepted"));
    };
    SamplingParams p;
    p.repetition_penalty = 0;
    refused([&] { p.validate(); }, "repetition penalty");
    p = {};
    p.presence_penalty = 2.5;
    refused([&] { p.validate(); }, "presence penalty");
    p = {};
    p.frequency_penalty = -3;
    refused([&] { p.validate(); }, "frequency penalty");
    p = {};
    p.top_logprobs = 21;
    refused([&] { p.validate(); }, "top logprobs");
    p = {};
    p.greedy = false;
    p.min_p = 1.5;
    refused([&] { p.validate(); }, "min-p");
    p = {};
    p.greedy = false;
    p.temperature = 1e-45;
    refused([&] { p.validate(); }, "1e-45");
    std::vector<BatchRequest> rs(1);
    rs[0].prompt_ids = {1, 2, 3};
    BatchOptions o;
    o.max_num_batched_tokens = 97;  // the tiny models' context is 96
    refused([&] { run_continuous_batching(*gpt2_, tok, rs, o); }, "max num batched tokens");
    o.max_num_batched_tokens = 8;
    o.kv = KvStrategy::NaiveMergeFilter;
    refused([&] { run_continuous_batching(*gpt2_, tok, rs, o); }, "merge/filter");
  }

  void the_cli_refuses_bad_budgets_in_one_line() {
    for (const QStringList& args :
         {QStringList{"generate", "--demo", "--prompt", "a", "--prompt", "b", "--max-num-batched-tokens",
                      "0"},
          QStringList{"generate", "--demo", "--prompt", "a", "--max-num-batched-tokens", "4", "--batch"},
          QStringList{"generate", "--demo", "--prompt", "a", "--repetition-penalty", "0"},
          QStringList{"generate", "--demo", "--prompt", "a", "--logprobs", "21"},
          QStringList{"generate", "--demo", "--prompt", "a", "--min-p", "0.5"}}) {
      const test::CliRun r = test::run_cli(SERVELAB_CLI, args);
      QVERIFY2(r.code == 1 || r.code == 2, qPrintable(args.join(' ') + ": exit " + QString::number(r.code)));
      QCOMPARE(r.err.trimmed().count('\n'), 0);
    }
  }
};

QTEST_GUILESS_MAIN(TestChunkedPrefill)
#include "test_chunked_prefill.moc"

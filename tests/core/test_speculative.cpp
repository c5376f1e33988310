// Speculative decoding on the scheduler core: prompt lookup's proposals, the KV memory taking
// rejected positions back (and paged KV never caching them), greedy speculation giving exactly
// plain greedy tokens (alone, batched, slot and paged KV, chunked, preempting, with a draft model
// that agrees and one that does not), the rejection rule keeping the target's distribution, and
// bad settings refused by name.
#include <c10/core/InferenceMode.h>

#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <thread>

#include "cli_runner.h"
#include "generate/block_manager.h"
#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "generate/ngram_proposer.h"
#include "generate/paged_kv_memory.h"
#include "generate/slot_kv_memory.h"
#include "generate/speculative.h"
#include "generate/token_constraint.h"
#include "serve/serve_scheduler.h"
#include "serve_clients.h"
#include "test_support.h"
#include "tiny_models.h"

using namespace servelab;

namespace {

test::IdTokenizer tok(300, 299);

std::vector<int32_t> solo(const Model& m, const BatchRequest& r) { return test::solo_tokens(m, tok, r); }

// A prompt that repeats itself, so that prompt lookup finds something to propose.
std::vector<int32_t> repeating(int64_t len, int32_t salt) {
  const std::vector<int32_t> unit = test::tiny_prompt(5 + salt % 4, salt);
  std::vector<int32_t> p;
  while (static_cast<int64_t>(p.size()) < len) p.push_back(unit[p.size() % unit.size()]);
  return p;
}

// A grammar with state: no token may share the previous token's residue mod 3 (the end-of-text id
// always may). It records every token it is advanced over, so a test can see that verification
// never advanced it over a rejected proposal.
class AlternatingResidues : public TokenConstraint {
 public:
  explicit AlternatingResidues(std::shared_ptr<std::vector<int32_t>> log) : log_(std::move(log)) {}
  void mask(float* logits, int64_t vocab) override {
    if (log_->empty()) return;
    for (int64_t t = 0; t < vocab; ++t)
      if (t != kEot && t % 3 == log_->back() % 3) logits[t] = -std::numeric_limits<float>::infinity();
  }
  bool accept(int32_t token) override {
    const bool ok = token == kEot || log_->empty() || token % 3 != log_->back() % 3;
    log_->push_back(token);
    return ok;
  }
  static constexpr int32_t kEot = 299;

 private:
  std::shared_ptr<std::vector<int32_t>> log_;
};

// Each request's tokens through a server (engine on this thread) where every request is under its
// own AlternatingResidues grammar; logs[i] gets what request i's grammar was advanced over.
std::vector<std::vector<int32_t>> serve_under_grammar(
    const Model& m, ServeOptions so, const std::vector<BatchRequest>& rs,
    std::vector<std::shared_ptr<std::vector<int32_t>>>& logs) {
  so.engine_on_caller = true;
  ServeScheduler scheduler(m, tok, so);
  std::vector<std::vector<int32_t>> out(rs.size());
  logs.clear();
  for (size_t i = 0; i < rs.size(); ++i) logs.push_back(std::make_shared<std::vector<int32_t>>());
  std::thread clients([&] {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (size_t i = 0; i < rs.size(); ++i)
      streams.push_back(scheduler.submit(rs[i], std::make_unique<AlternatingResidues>(logs[i])));
    for (size_t i = 0; i < streams.size(); ++i)
      for (;;) {
        RequestStream::Update u = streams[i]->take(std::chrono::milliseconds(60000));
        if (u.done) {
          out[i] = u.result.generated_ids;
          break;
        }
      }
    scheduler.stop_engine();
  });
  scheduler.run();
  clients.join();
  return out;
}

}  // namespace

class TestSpeculative : public QObject {
  Q_OBJECT
  std::unique_ptr<Gpt2Model> gpt2_, gpt2_other_;
  std::unique_ptr<LlamaModel> llama_;

  const Model& model(int family) const {
    return family == 0 ? static_cast<const Model&>(*gpt2_) : static_cast<const Model&>(*llama_);
  }

 private Q_SLOTS:
  void initTestCase() {
    gpt2_ = test::tiny_gpt2();
    gpt2_other_ = test::tiny_gpt2(77);
    llama_ = test::tiny_llama();
  }

  void prompt_lookup_proposes_what_followed_the_suffix() {
    // The longest suffix first, then the most recent earlier occurrence.
    QCOMPARE(ngram_propose({1, 2, 3, 4, 1, 2}, 2, 1, 3), (std::vector<int32_t>{3, 4}));
    QCOMPARE(ngram_propose({1, 2, 9, 5, 2, 7, 1, 2}, 3, 1, 3), (std::vector<int32_t>{9, 5, 2}));
    QCOMPARE(ngram_propose({5, 2, 7, 8, 2, 6, 2}, 1, 1, 2), (std::vector<int32_t>{6}));
    // Cut where the tokens end, nothing without a match, nothing below min_n.
    QCOMPARE(ngram_propose({1, 2, 3, 1, 2}, 8, 1, 4), (std::vector<int32_t>{3, 1, 2}));
    QVERIFY(ngram_propose({1, 2, 3, 4}, 4, 1, 4).empty());
    QVERIFY(ngram_propose({7, 1, 2, 8, 2}, 4, 2, 4).empty());
    QVERIFY(ngram_propose({7}, 4, 1, 4).empty());
  }

  void block_manager_truncation_frees_and_uncaches() {
    BlockManager bm(8, 4, true);
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6};
    QVERIFY(bm.allocate(0, prompt, 0).has_value());
    for (int32_t t : {7, 8, 9, 10, 11}) QVERIFY(bm.append(0, t));  // 11 tokens: blocks 0, 1 full
    const std::vector<int64_t> table = bm.block_table(0);
    QCOMPARE(static_cast<int64_t>(table.size()), int64_t{3});
    QVERIFY(bm.is_cached(table[1]));
    const int64_t available = bm.available_blocks();
    bm.truncate(0, 7);  // proposals 8..11 rejected: block 1 cut into, block 2 gone
    QCOMPARE(bm.length(0), int64_t{7});
    QCOMPARE(static_cast<int64_t>(bm.block_table(0).size()), int64_t{2});
    QVERIFY(bm.is_cached(table[0]));
    QVERIFY(!bm.is_cached(table[1]));
    QCOMPARE(bm.available_blocks(), available + 1);
    // The sequence grows again from there and seals its real tokens.
    for (int32_t t : {20, 21}) QVERIFY(bm.append(0, t));
    QVERIFY(bm.is_cached(bm.block_table(0)[1]));
    QCOMPARE(test::error_of(ErrorKind::Input, [&] { bm.truncate(0, 0); }).empty(), false);
    QCOMPARE(test::error_of(ErrorKind::Input, [&] { bm.truncate(0, 99); }).empty(), false);
  }

  void rejected_positions_never_enter_the_prefix_cache() {
    c10::InferenceMode guard;
    PagedKvConfig c;
    c.block_size = 4;
    c.num_blocks = 16;
    PagedKvMemory kv(*gpt2_, c, 299);
    const std::vector<int32_t> p = test::tiny_prompt(6, 3);
    QVERIFY(kv.reserve({0, &p, 10}));
    kv.commit(0, 6);
    kv.extend({{0, p}});
    // The last token and four proposals: positions 6..10, block 1 fills with proposals.
    const std::vector<int32_t> fed = {50, 51, 52, 53, 54};
    QVERIFY(kv.grow_tokens(0, fed));
    kv.extend({{0, fed, StepSegment::Logits::All}});
    QCOMPARE(kv.computed(0), int64_t{11});
    kv.truncate(0, 7);  // only the last token was kept
    QCOMPARE(kv.computed(0), int64_t{7});
    const std::vector<int64_t> table = kv.blocks().block_table(0);
    QCOMPARE(static_cast<int64_t>(table.size()), int64_t{2});
    QVERIFY(!kv.blocks().is_cached(table[1]));
    // A request with the rejected tokens as its prompt finds only block 0 cached.
    std::vector<int32_t> q = p;
    q.insert(q.end(), fed.begin(), fed.end());
    q.push_back(1);
    QVERIFY(kv.reserve({1, &q, 2}));
    QCOMPARE(kv.computed(1), int64_t{4});
  }

  void greedy_speculation_equals_plain_greedy_data() {
    QTest::addColumn<int>("family");
    QTest::addColumn<int>("kv");
    QTest::addColumn<int>("method");  // 0 ngram, 1 draft = target, 2 draft = another model
    QTest::addColumn<int>("k");
    QTest::addColumn<int>("budget");
    for (int f : {0, 1})
      for (int kv : {0, 1})
        for (int k : {1, 3, 8})
          QTest::newRow(qPrintable(
              QString("%1 %2 ngram k %3").arg(f ? "llama" : "gpt2").arg(kv ? "paged" : "slot").arg(k)))
              << f << kv << 0 << k << 0;
    QTest::newRow("gpt2 paged ngram k 4, budget 6 (chunked)") << 0 << 1 << 0 << 4 << 6;
    QTest::newRow("llama paged ngram k 4, preempting") << 1 << 2 << 0 << 4 << 0;
    QTest::newRow("gpt2 slot, the target as its own draft k 4") << 0 << 0 << 1 << 4 << 0;
    QTest::newRow("gpt2 paged, the target as its own draft k 4") << 0 << 1 << 1 << 4 << 0;
    QTest::newRow("gpt2 paged, another model drafts k 3") << 0 << 1 << 2 << 3 << 0;
    QTest::newRow("gpt2 slot, another model drafts k 2, budget 5") << 0 << 0 << 2 << 2 << 5;
  }
  void greedy_speculation_equals_plain_greedy() {
    QFETCH(int, family);
    QFETCH(int, kv);
    QFETCH(int, method);
    QFETCH(int, k);
    QFETCH(int, budget);
    const Model& m = model(family);
    std::vector<BatchRequest> rs;
    for (int64_t i = 0; i < 6; ++i) {
      BatchRequest r;
      r.prompt_ids = i % 2 ? repeating(12 + 3 * i, static_cast<int32_t>(i))
                           : test::tiny_prompt(8 + i, static_cast<int32_t>(i));
      r.max_new_tokens = 4 + (i * 5) % 13;
      r.stop_at_eos = false;
      r.arrival_ms = i < 3 ? 0 : 1;
      rs.push_back(r);
    }
    BatchOptions o;
    o.max_batch = 4;
    o.kv = kv == 0 ? KvStrategy::SlotKv : KvStrategy::Paged;
    o.max_num_batched_tokens = budget;
    if (kv == 2) {
      o.kv_blocks = 12;
      o.kv_block_size = 4;
    }
    o.speculative.method = method == 0 ? SpeculativeMethod::Ngram : SpeculativeMethod::DraftModel;
    o.speculative.num_speculative_tokens = k;
    o.speculative.draft_model = method == 1 ? &m : method == 2 ? gpt2_other_.get() : nullptr;
    const BatchRunResult run = run_continuous_batching(m, tok, rs, o);
    for (size_t i = 0; i < rs.size(); ++i)
      QVERIFY2(run.requests[i].generated_ids == solo(m, rs[i]), qPrintable(QString("request %1").arg(i)));
    const SpecDecodeStats& st = run.speculative;
    QVERIFY(st.num_drafts > 0);
    QVERIFY(st.num_accepted_tokens <= st.num_draft_tokens);
    int64_t verified = 0, accepted = 0;
    for (const BatchStep& s : run.steps) {
      int64_t tokens = s.decode_tokens;
      for (const SpecRow& row : s.speculation) {
        QVERIFY(row.accepted >= 0 && row.accepted <= static_cast<int64_t>(row.proposed.size()));
        QVERIFY(static_cast<int64_t>(row.proposed.size()) <= k);
        tokens += static_cast<int64_t>(row.proposed.size());
        verified += static_cast<int64_t>(row.proposed.size());
        accepted += row.accepted;
      }
      for (const PrefillChunk& c : s.chunks) tokens += c.count;
      if (budget > 0)
        QVERIFY2(tokens <= budget, qPrintable(QString("step %1: %2 tokens").arg(s.step).arg(tokens)));
    }
    QCOMPARE(verified, st.num_draft_tokens);
    QCOMPARE(accepted, st.num_accepted_tokens);
    // The target drafting for itself agrees with itself every time.
    if (method == 1) QCOMPARE(st.num_accepted_tokens, st.num_draft_tokens);
    if (kv == 2) QVERIFY(run.preemptions > 0);
  }

  void speculation_with_adapters_keeps_each_adapters_tokens_data() {
    QTest::addColumn<int>("kv");
    QTest::addColumn<bool>("draft");
    QTest::newRow("slot, ngram") << 0 << false;
    QTest::newRow("paged, ngram") << 1 << false;
    QTest::newRow("paged, the base model drafts") << 1 << true;
  }
  void speculation_with_adapters_keeps_each_adapters_tokens() {
    // Requests with two random LoRA adapters and none share steps; the target verifies each row
    // with its request's adapter, so every request gets the tokens of the same run without
    // speculation (a base-model draft only lowers the acceptance).
    QFETCH(int, kv);
    QFETCH(bool, draft);
    std::vector<BatchRequest> rs;
    for (int32_t i = 0; i < 6; ++i) {
      BatchRequest r;
      r.prompt_ids = repeating(10 + 2 * i, i);
      r.max_new_tokens = 10;
      r.stop_at_eos = false;
      r.adapter = i % 3 == 0 ? "" : i % 3 == 1 ? "a" : "b";
      rs.push_back(r);
    }
    rs.push_back(rs[1]);
    rs.back().adapter.clear();
    BatchOptions o;
    o.max_batch = 4;
    o.kv = kv ? KvStrategy::Paged : KvStrategy::SlotKv;
    for (const char* name : {"a", "b"}) {
      AdapterSource a;
      a.name = name;
      a.seed = name[0] == 'a' ? 3 : 4;
      a.alpha = 64;  // strong enough to change the tokens
      o.adapters.push_back(a);
    }
    const BatchRunResult plain = run_continuous_batching(*llama_, tok, rs, o);
    o.speculative.method = draft ? SpeculativeMethod::DraftModel : SpeculativeMethod::Ngram;
    o.speculative.draft_model = draft ? llama_.get() : nullptr;
    o.speculative.num_speculative_tokens = 3;
    const BatchRunResult spec = run_continuous_batching(*llama_, tok, rs, o);
    for (size_t i = 0; i < rs.size(); ++i)
      QVERIFY2(
          spec.requests[i].generated_ids == plain.requests[i].generated_ids,
          qPrintable(QString("request %1 (adapter '%2')").arg(i).arg(QString::fromStdString(rs[i].adapter))));
    // The adapter does change the tokens (request 6 is request 1 without it).
    QVERIFY(plain.requests[6].generated_ids != plain.requests[1].generated_ids);
    QVERIFY(spec.speculative.num_drafts > 0);
  }

  void speculation_accepts_and_rejects_in_these_runs() {
    // The equality above means something only if both verdicts happen: over a run of prompt
    // lookup on repeating prompts, some proposals are accepted and some rejected.
    std::vector<BatchRequest> rs;
    for (int32_t i = 0; i < 4; ++i) {
      BatchRequest r;
      r.prompt_ids = repeating(24, i);
      r.max_new_tokens = 20;
      r.stop_at_eos = false;
      rs.push_back(r);
    }
    BatchOptions o;
    o.speculative.method = SpeculativeMethod::Ngram;
    const BatchRunResult run = run_continuous_batching(*gpt2_, tok, rs, o);
    QVERIFY(run.speculative.num_accepted_tokens > 0);
    QVERIFY(run.speculative.num_accepted_tokens < run.speculative.num_draft_tokens);
    QVERIFY(run.speculative.mean_accepted_length() > 1.0);
    int64_t per_position = 0;
    for (int64_t n : run.speculative.accepted_per_position) per_position += n;
    QCOMPARE(per_position, run.speculative.num_accepted_tokens);
    // A verifying step's cost counts every position it fed: each row's last token and its proposals,
    // each at least what one position at the start costs and at most one after 64 cached positions
    // (prompts of 24 and 20 new tokens).
    const StepCostModel cost = gpt2_->cost_model();
    int verifying = 0;
    for (const BatchStep& s : run.steps) {
      if (s.speculation.empty() || s.prefill_tokens > 0) continue;
      ++verifying;
      double fed = static_cast<double>(s.decode_tokens);
      for (const SpecRow& row : s.speculation) fed += static_cast<double>(row.proposed.size());
      QVERIFY(s.cost.flops >= fed * cost.forward({{0, 1, 1}}).flops);
      QVERIFY(s.cost.flops <= fed * cost.forward({{64, 1, 1}}).flops);
    }
    QVERIFY(verifying > 0);
  }

  void a_stop_string_inside_an_accepted_run_cuts_there() {
    // The target drafting for itself accepts everything, so the stop lands inside accepted runs.
    BatchRequest r;
    r.prompt_ids = repeating(16, 2);
    r.max_new_tokens = 24;
    r.stop_at_eos = false;
    const std::vector<int32_t> plain = solo(*gpt2_, r);
    r.stop_strings = {tok.token_bytes(plain[5]) + tok.token_bytes(plain[6])};
    BatchOptions o;
    BatchRunResult want = run_continuous_batching(*gpt2_, tok, {r}, o);
    o.speculative.method = SpeculativeMethod::DraftModel;
    o.speculative.draft_model = gpt2_.get();
    o.speculative.num_speculative_tokens = 8;
    BatchRunResult got = run_continuous_batching(*gpt2_, tok, {r}, o);
    QCOMPARE(QString::fromStdString(got.requests[0].text), QString::fromStdString(want.requests[0].text));
    QCOMPARE(QString::fromStdString(got.requests[0].finish_reason), QString("stop"));
    QCOMPARE(got.requests[0].generated_ids, want.requests[0].generated_ids);
  }

  void the_rejection_rule_keeps_the_target_distribution_data() {
    QTest::addColumn<bool>("point_mass");
    QTest::newRow("a draft model's q") << false;
    QTest::newRow("prompt lookup (q a point mass)") << true;
  }
  void the_rejection_rule_keeps_the_target_distribution() {
    // Over a 5-token vocabulary: the first token of a verified row (accepted proposal or the
    // rejection's redraw) is distributed as the target's p, whatever the draft's q. 20,000 seeded
    // draws; each frequency within 0.015 of p (over 4 standard deviations at these sizes).
    QFETCH(bool, point_mass);
    c10::InferenceMode guard;
    const at::Tensor logits = at::tensor({1.0f, 0.2f, -0.5f, 2.0f, 0.0f}).view({1, 5});
    const at::Tensor p = logits.softmax(-1)[0];
    const at::Tensor q = at::tensor({0.1f, 0.5f, 0.3f, 0.05f, 0.05f});
    SamplingParams params;
    params.greedy = false;
    params.seed = 7;
    Sampler target(params);
    at::Generator draft_gen = at::detail::createCPUGenerator(11);
    const at::Tensor rows = at::cat({logits, logits});  // row 0 verifies, row 1 the bonus
    const int n = 20000;
    std::vector<int> counts(5, 0);
    int accepted = 0;
    for (int i = 0; i < n; ++i) {
      const int32_t d =
          point_mass ? 1 : static_cast<int32_t>(at::multinomial(q, 1, false, draft_gen).item<int64_t>());
      const PickRow row{&params, &target, nullptr, nullptr};
      const Verification v =
          verify_proposal(rows, {d}, point_mass ? at::Tensor() : q.view({1, 5}), row, "test");
      ++counts[static_cast<size_t>(v.tokens.front().id)];
      accepted += static_cast<int>(v.accepted);
    }
    for (int t = 0; t < 5; ++t) {
      const double f = counts[static_cast<size_t>(t)] / static_cast<double>(n);
      QVERIFY2(std::abs(f - p[t].item<double>()) < 0.015,
               qPrintable(QString("token %1: %2 drawn, p %3").arg(t).arg(f).arg(p[t].item<double>())));
    }
    QVERIFY(accepted > 0 && accepted < n);
  }

  void a_draft_model_sampling_keeps_the_target_distribution() {
    // End to end, the draft model's sampled path: 2,000 seeded requests sampled at temperature 1
    // over the 4 most likely tokens, plainly and with another model drafting 2 tokens a step. Each
    // request's first token comes from the prompt's logits (the same in both runs); its second and
    // third from verification: their distributions over the requests must be the target's. Total
    // variation between the two runs stays under 0.1 (about 0.05 expected from sampling alone);
    // the draft model's own distribution, what accepting every proposal would give, is far off.
    const int n = 2000;
    std::vector<BatchRequest> rs;
    for (int i = 0; i < n; ++i) {
      BatchRequest r;
      r.prompt_ids = test::tiny_prompt(7, 5);
      r.max_new_tokens = 3;
      r.stop_at_eos = false;
      r.sampling.greedy = false;
      r.sampling.top_k = 4;
      r.sampling.seed = static_cast<uint64_t>(1000 + i);
      rs.push_back(r);
    }
    BatchOptions o;
    o.max_batch = 64;
    const BatchRunResult plain = run_continuous_batching(*gpt2_, tok, rs, o);
    const BatchRunResult drafts_only = run_continuous_batching(*gpt2_other_, tok, rs, o);
    o.speculative.method = SpeculativeMethod::DraftModel;
    o.speculative.num_speculative_tokens = 2;
    o.speculative.draft_model = gpt2_other_.get();
    const BatchRunResult spec = run_continuous_batching(*gpt2_, tok, rs, o);
    QVERIFY(spec.speculative.num_accepted_tokens > 0);
    QVERIFY(spec.speculative.num_accepted_tokens < spec.speculative.num_draft_tokens);
    const auto tv = [n](const BatchRunResult& a, const BatchRunResult& b, size_t at) {
      std::map<int32_t, int> ca, cb;
      for (int i = 0; i < n; ++i) {
        ++ca[a.requests[static_cast<size_t>(i)].generated_ids.at(at)];
        ++cb[b.requests[static_cast<size_t>(i)].generated_ids.at(at)];
      }
      std::set<int32_t> ids;
      for (const auto& [t, c] : ca) ids.insert(t);
      for (const auto& [t, c] : cb) ids.insert(t);
      double d = 0;
      for (int32_t t : ids) d += std::abs(ca[t] - cb[t]) / static_cast<double>(n);
      return d / 2;
    };
    for (size_t i = 0; i < 3; ++i)
      QCOMPARE(spec.requests[i].generated_ids.front(), plain.requests[i].generated_ids.front());
    for (size_t at : {size_t{1}, size_t{2}}) {
      const double d = tv(plain, spec, at), off = tv(plain, drafts_only, at);
      qInfo("token %zu: total variation %.3f against plain sampling, %.3f for the draft's own", at, d, off);
      QVERIFY2(d < 0.1, qPrintable(QString("token %1: total variation %2").arg(at).arg(d)));
      QVERIFY2(off > 0.3,
               qPrintable(QString("the draft's own distribution is too close to tell: %1").arg(off)));
    }
  }

  void bad_settings_are_refused_by_name() {
    BatchRequest r;
    r.prompt_ids = test::tiny_prompt(6, 1);
    r.max_new_tokens = 4;
    auto refused = [&](BatchOptions o, const QString& words) {
      const QString e = QString::fromStdString(
          test::error_of(ErrorKind::Input, [&] { run_continuous_batching(*gpt2_, tok, {r}, o); }));
      QVERIFY2(e.contains(words), qPrintable(e));
    };
    BatchOptions o;
    o.speculative.method = SpeculativeMethod::Ngram;
    o.speculative.num_speculative_tokens = 0;
    refused(o, "num speculative tokens (k) must be in [1, 16], got 0");
    o.speculative.num_speculative_tokens = 17;
    refused(o, "got 17");
    o.speculative.num_speculative_tokens = 4;
    o.speculative.prompt_lookup_min = 5;
    refused(o, "prompt lookup min");
    o.speculative.prompt_lookup_min = 1;
    o.kv = KvStrategy::NaiveMergeFilter;
    refused(o, "speculative decoding needs slot or paged KV");
    o.kv = KvStrategy::SlotKv;
    o.speculative.method = SpeculativeMethod::DraftModel;
    refused(o, "needs a draft model");
    LlamaConfig c;
    c.vocab_size = 320;
    c.hidden_size = 16;
    c.intermediate_size = 16;
    c.n_layer = 1;
    c.n_head = 2;
    c.n_kv_head = 2;
    c.head_dim = 8;
    c.context = 96;
    LlamaTensorFetch fetch = [](const std::string&, const std::vector<int64_t>& shape, bool optional) {
      return optional ? at::Tensor() : at::ones(shape) * 0.1;
    };
    const LlamaModel other(c, assemble_llama_weights(c, fetch));
    o.speculative.draft_model = &other;
    refused(o, "the draft model's vocabulary (320 tokens) is not the target's (300)");
    QCOMPARE(test::error_of(ErrorKind::Input, [] { parse_speculative_method("eagle"); }),
             std::string("speculative method must be ngram, draft or off, got 'eagle'"));
  }

  void the_server_speculates_with_plain_tokens_logprobs_and_metrics() {
    // Through the server's engine (paged KV, the target drafting for itself so that several tokens
    // come out of one step): every request's tokens equal its solo run, their log-probabilities a
    // full forward's log-softmax, tokens of one step are marked as such, and /metrics counts the
    // proposals under vLLM's names.
    const Model& m = *gpt2_;
    ServeOptions so;
    so.max_batch = 3;
    so.max_total_tokens = 64;
    so.engine_on_caller = true;
    so.speculative.method = SpeculativeMethod::DraftModel;
    so.speculative.draft_model = gpt2_.get();
    so.speculative.num_speculative_tokens = 3;
    ServeScheduler scheduler(m, tok, so);
    std::vector<BatchRequest> rs;
    for (int64_t i = 0; i < 5; ++i) {
      BatchRequest r;
      r.prompt_ids = repeating(6 + 5 * i, static_cast<int32_t>(i + 20));
      r.max_new_tokens = 5 + 2 * i;
      r.stop_at_eos = false;
      rs.push_back(r);
    }
    const test::ServedRun run = test::serve_all(scheduler, rs);
    c10::InferenceMode guard;
    int64_t joined = 0;
    for (size_t i = 0; i < rs.size(); ++i) {
      QCOMPARE(run.results[i].generated_ids, solo(m, rs[i]));
      QCOMPARE(run.tokens[i].size(), run.results[i].generated_ids.size());
      QVERIFY(test::max_logprob_error(m, rs[i].prompt_ids, run.tokens[i]) < 1e-4);
      for (const ServeToken& t : run.tokens[i]) joined += t.with_previous ? 1 : 0;
    }
    const ServeMetrics metrics = scheduler.metrics();
    QVERIFY(metrics.spec_decode.num_drafts > 0);
    QCOMPARE(metrics.spec_decode.num_accepted_tokens, metrics.spec_decode.num_draft_tokens);
    QVERIFY(joined > 0);
    const QString text = QString::fromStdString(prometheus_text(metrics, "tiny"));
    QVERIFY(text.contains(QString("vllm:spec_decode_num_draft_tokens_total{model_name=\"tiny\"} %1")
                              .arg(metrics.spec_decode.num_draft_tokens)));
    QVERIFY(text.contains(
        "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"tiny\",position=\"0\"}"));
  }

  void speculation_under_a_grammar_data() {
    QTest::addColumn<int>("method");  // 0 ngram, 1 draft = target, 2 draft = another model
    QTest::addColumn<bool>("greedy");
    QTest::newRow("ngram k 4, greedy") << 0 << true;
    QTest::newRow("the target drafts k 4, greedy") << 1 << true;
    QTest::newRow("another model drafts k 4, greedy") << 2 << true;
    QTest::newRow("another model drafts k 4, sampled") << 2 << false;
  }
  void speculation_under_a_grammar() {
    // Requests under a stateful grammar speculate too. The drafter does not know the grammar, so
    // some proposals are forbidden and must be rejected; verification masks each row in the state
    // the accepted proposals left. Greedy: the same tokens as plain decoding under the grammar.
    // Both: every token obeys the grammar, and the grammar was advanced over exactly the tokens
    // the request got (never over a rejected proposal).
    QFETCH(int, method);
    QFETCH(bool, greedy);
    const Model& m = *gpt2_;
    std::vector<BatchRequest> rs;
    for (int64_t i = 0; i < 4; ++i) {
      BatchRequest r;
      r.prompt_ids = repeating(10 + 4 * i, static_cast<int32_t>(i + 40));
      r.max_new_tokens = 9 + 3 * i;
      r.sampling.greedy = greedy;
      r.sampling.temperature = 0.8;
      r.sampling.seed = 1000 + static_cast<uint64_t>(i);
      rs.push_back(r);
    }
    ServeOptions so;
    so.max_batch = 3;
    so.max_total_tokens = 64;
    std::vector<std::shared_ptr<std::vector<int32_t>>> plain_logs, spec_logs;
    const auto plain = serve_under_grammar(m, so, rs, plain_logs);
    so.speculative.method = method == 0 ? SpeculativeMethod::Ngram : SpeculativeMethod::DraftModel;
    so.speculative.num_speculative_tokens = 4;
    so.speculative.draft_model = method == 1 ? &m : method == 2 ? gpt2_other_.get() : nullptr;
    const auto spec = serve_under_grammar(m, so, rs, spec_logs);
    for (size_t i = 0; i < rs.size(); ++i) {
      const QString where = QString("request %1").arg(i);
      QVERIFY2(!spec[i].empty(), qPrintable(where));
      if (greedy) QVERIFY2(spec[i] == plain[i], qPrintable(where));
      QVERIFY2(*spec_logs[i] == spec[i],
               qPrintable(where + ": the grammar saw other tokens than the output"));
      for (size_t t = 1; t < spec[i].size(); ++t)
        QVERIFY2(spec[i][t] == AlternatingResidues::kEot || spec[i][t] % 3 != spec[i][t - 1] % 3,
                 qPrintable(where + QString(": token %1 breaks the grammar").arg(t)));
    }
  }

  void the_cli_speculates_with_plain_greedy_tokens() {
    // GPT-2 small's shape with random weights: prompt lookup, and the int4 copy drafting for its
    // fp32 self, each give the tokens of plain decoding and report their counters.
    const QStringList base{"generate",         "--demo", "--prompt", "one two three one two three one two",
                           "--max-new-tokens", "12",     "--json"};
    const test::CliRun plain = test::run_cli(SERVELAB_CLI, base + QStringList{"--max-num-seqs", "1"});
    QVERIFY2(plain.code == 0, qPrintable(plain.err));
    const QJsonObject want = QJsonDocument::fromJson(plain.out.toUtf8()).object();
    for (const QStringList& extra : {QStringList{"--speculative", "ngram", "--num-speculative-tokens", "3"},
                                     QStringList{"--speculative", "draft", "--draft-model", "int4"}}) {
      const test::CliRun r = test::run_cli(SERVELAB_CLI, base + extra);
      QVERIFY2(r.code == 0, qPrintable(r.err));
      const QJsonObject got = QJsonDocument::fromJson(r.out.toUtf8()).object();
      QCOMPARE(got["generated_ids"], want["generated_ids"]);
      const QJsonObject spec = got["speculative"].toObject();
      QCOMPARE(spec["method"].toString(), extra[1]);
      QVERIFY(spec.contains("num_accepted_tokens") && spec.contains("acceptance_rate"));
    }
  }

  void the_cli_refuses_bad_speculation_in_one_line() {
    const QStringList base{"generate", "--demo", "--prompt", "a"};
    for (const QStringList& extra :
         {QStringList{"--speculative", "ngram", "--num-speculative-tokens", "0"},
          QStringList{"--speculative", "ngram", "--num-speculative-tokens", "17"},
          QStringList{"--speculative", "eagle"}, QStringList{"--prompt-lookup-max", "3"},
          QStringList{"--speculative", "ngram", "--draft-model", "int4"},
          QStringList{"--speculative", "ngram", "--batch"},
          QStringList{"--speculative", "draft", "--draft-model", "/nonexistent/model.gguf"}}) {
      const test::CliRun r = test::run_cli(SERVELAB_CLI, base + extra);
      QVERIFY2(r.code == 1 || r.code == 2, qPrintable(extra.join(' ') + ": exit " + QString::number(r.code)));
      QCOMPARE(r.err.trimmed().count('\n'), 0);
    }
    const test::CliRun k = test::run_cli(SERVELAB_CLI, {"bench", "speculative", "--demo", "--k", "2,0"});
    QCOMPARE(k.code, 1);
    QVERIFY2(k.err.contains("--k takes numbers in [1, 16], got '0'"), qPrintable(k.err));
  }
};

QTEST_GUILESS_MAIN(TestSpeculative)
#include "test_speculative.moc"

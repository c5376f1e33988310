// The scheduler core alone, against a paged KV layout that computes nothing: its block manager is
// real, and every position a plan runs is "written" as a fingerprint of the request's tokens up to
// it. Random queues (arrivals, prompt and output lengths, budgets, pool sizes, shared prefixes)
// keep every invariant: a step never computes more tokens than its budget, decodes come before
// prompt chunks, chunks continue where the request stopped, every request finishes, preemption
// and retirement return every block, and a prefix-cache hit only ever reads positions that hold
// that request's own keys by the end of the step.
#include <QtTest>
#include <map>
#include <random>
#include <set>

#include "experiments/roofline_point.h"
#include "generate/block_manager.h"
#include "generate/continuous_batching.h"
#include "generate/scheduler_core.h"
#include "util/errors.h"

using namespace servelab;

namespace {

uint64_t fingerprint(int64_t adapter, const std::vector<int32_t>& tokens, int64_t upto) {
  uint64_t h = 1469598103934665603ULL ^ static_cast<uint64_t>(adapter);
  for (int64_t i = 0; i <= upto; ++i)
    h = (h ^ static_cast<uint64_t>(tokens[static_cast<size_t>(i)] + 7)) * 1099511628211ULL;
  return h;
}

// Paged KV bookkeeping with a simulated pool: what each slot holds.
class FakePagedKv : public KvBookkeeping {
 public:
  FakePagedKv(int64_t blocks, int64_t block_size, bool prefix_caching)
      : blocks_(blocks, block_size, prefix_caching), pool_(static_cast<size_t>(blocks * block_size), 0) {}

  std::string never_fits(const PrefillRequest& r) const override {
    const int64_t prompt = static_cast<int64_t>(r.prompt_ids->size());
    const int64_t need = blocks_.blocks_for(std::max<int64_t>(prompt, prompt + r.max_new_tokens - 1));
    return need > blocks_.num_blocks() ? "needs " + std::to_string(need) + " blocks" : std::string();
  }
  bool reserve(const PrefillRequest& r) override {
    const std::optional<int64_t> cached =
        blocks_.allocate(r.id, *r.prompt_ids, r.adapter_key, /*seal_now=*/false);
    if (!cached) return false;
    computed_[r.id] = *cached;
    adapter_[r.id] = r.adapter_key;
    hits_[r.id] = *cached;
    return true;
  }
  int64_t computed(int64_t id) const override { return computed_.at(id); }
  void commit(int64_t id, int64_t positions) override { blocks_.seal_upto(id, positions); }
  bool grow(int64_t id, int32_t token) override {
    if (blocks_.length(id) > computed_.at(id)) return true;
    return blocks_.append(id, token);
  }
  void retire(const std::vector<int64_t>& ids) override {
    for (int64_t id : ids) {
      blocks_.free(id, computed_.at(id));
      computed_.erase(id);
      adapter_.erase(id);
      hits_.erase(id);
    }
  }
  // The plan ran: positions [from, to) of the request (its tokens) are written.
  void write(int64_t id, const std::vector<int32_t>& tokens, int64_t from, int64_t to) {
    const std::vector<int64_t>& table = blocks_.block_table(id);
    const int64_t bs = blocks_.block_size();
    for (int64_t p = from; p < to; ++p)
      pool_[static_cast<size_t>(table[static_cast<size_t>(p / bs)] * bs + p % bs)] =
          fingerprint(adapter_.at(id), tokens, p);
    computed_[id] = to;
  }
  // Whether the request's first n positions hold its own keys.
  bool holds(int64_t id, const std::vector<int32_t>& tokens, int64_t n) const {
    const std::vector<int64_t>& table = blocks_.block_table(id);
    const int64_t bs = blocks_.block_size();
    for (int64_t p = 0; p < n; ++p)
      if (pool_[static_cast<size_t>(table[static_cast<size_t>(p / bs)] * bs + p % bs)] !=
          fingerprint(adapter_.at(id), tokens, p))
        return false;
    return true;
  }
  int64_t hits(int64_t id) const { return hits_.at(id); }
  const BlockManager& blocks() const { return blocks_; }

 private:
  BlockManager blocks_;
  std::vector<uint64_t> pool_;
  std::map<int64_t, int64_t> computed_, adapter_, hits_;
};

struct Spec {
  std::vector<int32_t> prompt;
  int64_t max_new = 1;
  double arrival = 0;
  int64_t adapter = 0;
};

// What a queue cost: steps (schedule calls that ran something), positions computed (prompt chunks
// and decode rows), preemptions.
struct QueueStats {
  int64_t steps = 0;
  int64_t positions = 0;
  int64_t preemptions = 0;
};

// Runs a queue to the end the way the experiments and the server do, checking the invariants on
// the way (QVERIFY: the caller checks QTest::currentTestFailed()). budget 0: no budget (two
// schedule calls per step).
void run_queue(const std::vector<Spec>& specs, FakePagedKv& kv, SchedulerConfig config, std::mt19937& rng,
               QueueStats* out = nullptr) {
  QueueStats local;
  QueueStats& stats = out ? *out : local;
  SchedulerCore core(kv, config);
  for (size_t i = 0; i < specs.size(); ++i)
    core.add(static_cast<int64_t>(i), specs[i].prompt, specs[i].max_new, specs[i].arrival, specs[i].adapter);
  std::set<int64_t> finished;
  const bool chunked = config.max_num_batched_tokens > 0;
  int64_t steps = 0;
  auto execute = [&](const SchedulePlan& plan) {
    std::set<int64_t> seen;
    for (int64_t id : plan.decode) {
      QVERIFY2(seen.insert(id).second, "a request scheduled twice in one plan");
      const SchedulerCore::Request& r = core.request(id);
      QVERIFY2(!r.prefilling(), "a prefilling request decodes");
      QCOMPARE(r.computed, static_cast<int64_t>(r.tokens.size()) - 1);
    }
    for (const ScheduledChunk& c : plan.prefill) {
      QVERIFY2(seen.insert(c.id).second, "a request scheduled twice in one plan");
      const SchedulerCore::Request& r = core.request(c.id);
      QCOMPARE(c.start, r.computed);
      QVERIFY(c.count >= 1);
      QCOMPARE(c.last, c.start + c.count == r.prefill_to);
      QVERIFY(c.start + c.count <= r.prefill_to);
    }
    for (const auto& [id, why] : plan.rejected) finished.insert(id);
    stats.positions += plan.tokens();
    stats.preemptions += static_cast<int64_t>(plan.preempted.size());
    if (plan.tokens() > 0) ++stats.steps;
    // Run: every scheduled position is written, then tokens are picked.
    for (int64_t id : plan.decode) {
      const SchedulerCore::Request& r = core.request(id);
      kv.write(id, r.tokens, r.computed, r.computed + 1);
    }
    for (const ScheduledChunk& c : plan.prefill)
      kv.write(c.id, core.request(c.id).tokens, c.start, c.start + c.count);
    // A prefix-cache hit reads only positions that hold this request's own keys now.
    for (int64_t id : plan.admitted)
      QVERIFY2(kv.holds(id, core.request(id).tokens, kv.hits(id)),
               qPrintable("request " + QString::number(id) + " read a cached prefix nobody wrote"));
    core.ran(plan);
    std::vector<int64_t> sampled = plan.decode;
    for (const ScheduledChunk& c : plan.prefill)
      if (c.last) sampled.push_back(c.id);
    for (int64_t id : sampled) {
      core.append(id, static_cast<int32_t>(rng() % 50));
      const SchedulerCore::Request& r = core.request(id);
      if (r.generated() >= r.max_new_tokens) {
        core.finish(id);
        finished.insert(id);
      }
    }
  };
  while (!core.idle()) {
    QVERIFY2(++steps < 200000, "the queue never drained: a request waits forever");
    const double now = static_cast<double>(steps);
    const SchedulePlan plan = core.schedule(now, true, chunked);
    if (chunked) QVERIFY2(plan.tokens() <= config.max_num_batched_tokens, "a step exceeded its token budget");
    // Decodes come first: a budget that ran out leaves prompt chunks out, never a decode for them.
    if (chunked && !plan.prefill.empty()) {
      int64_t decoding = 0;
      for (int64_t id : core.running())
        if (!core.request(id).prefilling()) ++decoding;
      QVERIFY(static_cast<int64_t>(plan.decode.size()) == decoding);
    }
    QVERIFY(static_cast<int64_t>(core.running().size()) <= config.max_num_seqs);
    execute(plan);
    if (QTest::currentTestFailed()) return;
    if (!chunked) {
      const SchedulePlan decodes = core.schedule(now, false, true);
      QVERIFY(decodes.prefill.empty());
      execute(decodes);
      if (QTest::currentTestFailed()) return;
    }
  }
  QCOMPARE(static_cast<int64_t>(finished.size()), static_cast<int64_t>(specs.size()));
  // Everything back: blocks nobody references (free, or kept for the prefix cache).
  QCOMPARE(kv.blocks().used_blocks(), int64_t{0});
}

}  // namespace

class TestSchedulerCore : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void random_queues_keep_every_invariant() {
    for (int trial = 0; trial < 300; ++trial) {
      std::mt19937 rng(static_cast<uint32_t>(trial));
      auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
      const int64_t block_size = std::vector<int64_t>{1, 4, 16}[static_cast<size_t>(pick(0, 2))];
      // Prompts share a few prefixes so that the prefix cache is busy.
      std::vector<std::vector<int32_t>> prefixes(3);
      for (auto& p : prefixes)
        for (int64_t i = 0, n = pick(0, 48); i < n; ++i) p.push_back(static_cast<int32_t>(pick(0, 4)));
      std::vector<Spec> specs(static_cast<size_t>(pick(1, 14)));
      int64_t largest = 0;
      for (Spec& s : specs) {
        s.prompt = prefixes[static_cast<size_t>(pick(0, 2))];
        for (int64_t i = 0, n = pick(1, 80); i < n; ++i) s.prompt.push_back(static_cast<int32_t>(pick(0, 9)));
        s.max_new = pick(1, 24);
        s.arrival = static_cast<double>(pick(0, 30));
        s.adapter = pick(0, 1);
        largest = std::max<int64_t>(largest, static_cast<int64_t>(s.prompt.size()) + s.max_new);
      }
      // Pools from one largest request (heavy preemption) to plenty; budgets from 1 token to none.
      const int64_t blocks = (largest + block_size - 1) / block_size + pick(0, 3) * pick(0, 40);
      SchedulerConfig config;
      config.max_num_seqs = pick(1, 8);
      config.max_num_batched_tokens = std::vector<int64_t>{0, 1, 7, 32, 128}[static_cast<size_t>(pick(0, 4))];
      FakePagedKv kv(blocks, block_size, pick(0, 3) > 0);
      run_queue(specs, kv, config, rng);
      if (QTest::currentTestFailed()) {
        qWarning("trial %d: %zu requests, %lld blocks of %lld, max seqs %lld, budget %lld", trial,
                 specs.size(), static_cast<long long>(blocks), static_cast<long long>(block_size),
                 static_cast<long long>(config.max_num_seqs),
                 static_cast<long long>(config.max_num_batched_tokens));
        return;
      }
    }
  }

  void without_a_budget_whole_prompts_then_everyone_decodes() {
    FakePagedKv kv(64, 16, false);
    SchedulerCore core(kv, {4, 0});
    core.add(0, std::vector<int32_t>(40, 1), 3, 0);
    core.add(1, std::vector<int32_t>(300, 2), 3, 0);
    SchedulePlan admit = core.schedule(0, true, false);
    QCOMPARE(admit.admitted, (std::vector<int64_t>{0, 1}));
    QCOMPARE(admit.prefill.size(), size_t{2});
    QCOMPARE(admit.prefill[1].count, int64_t{300});
    QVERIFY(admit.prefill[1].last && admit.decode.empty());
    core.ran(admit);
    core.append(0, 5);
    core.append(1, 6);
    // The just-admitted decode in the same step (the course's prefill, merge, decode).
    const SchedulePlan decode = core.schedule(0, false, true);
    QCOMPARE(decode.decode, (std::vector<int64_t>{0, 1}));
    QVERIFY(decode.prefill.empty());
  }

  void a_budget_schedules_decodes_first_then_chunks() {
    FakePagedKv kv(256, 16, false);
    SchedulerCore core(kv, {8, 128});
    for (int64_t i = 0; i < 4; ++i) core.add(i, std::vector<int32_t>(10, 1), 100, 0);
    SchedulePlan first = core.schedule(0, true, true);
    QCOMPARE(first.prefill.size(), size_t{4});  // 40 tokens: all four prompts whole
    core.ran(first);
    for (int64_t i = 0; i < 4; ++i) core.append(i, 3);
    core.add(4, std::vector<int32_t>(1000, 2), 10, 1);
    // Four decodes, then the long prompt in chunks of what is left: 124, 124, ... tokens.
    int64_t done = 0;
    for (int step = 0; done < 1000; ++step) {
      const SchedulePlan plan = core.schedule(1, true, true);
      QCOMPARE(plan.decode.size(), size_t{4});
      QCOMPARE(plan.prefill.size(), size_t{1});
      QCOMPARE(plan.prefill[0].start, done);
      QCOMPARE(plan.prefill[0].count, std::min<int64_t>(124, 1000 - done));
      QCOMPARE(plan.tokens(), std::min<int64_t>(128, 4 + 1000 - done));
      done += plan.prefill[0].count;
      QCOMPARE(plan.prefill[0].last, done == 1000);
      core.ran(plan);
      for (int64_t id : plan.decode) core.append(id, 3);
    }
    core.append(4, 7);
    const SchedulePlan after = core.schedule(2, true, true);
    QCOMPARE(after.decode.size(), size_t{5});
  }

  void a_budget_smaller_than_the_batch_leaves_later_decodes_waiting() {
    FakePagedKv kv(64, 4, false);
    SchedulerCore core(kv, {4, 2});
    for (int64_t i = 0; i < 4; ++i) core.add(i, {1}, 5, 0);
    const SchedulePlan a = core.schedule(0, true, true);
    QCOMPARE(a.admitted, (std::vector<int64_t>{0, 1}));  // one token each: the budget holds two
    core.ran(a);
    core.append(0, 1);
    core.append(1, 1);
    const SchedulePlan b = core.schedule(1, true, true);
    QCOMPARE(b.decode, (std::vector<int64_t>{0, 1}));
    QVERIFY(b.prefill.empty() && b.admitted.empty());
  }

  void preemption_takes_the_latest_admitted_and_returns_its_blocks() {
    // Two requests of 4 prompt positions in a pool of 3 blocks of 4: the second's decode needs a
    // block the pool does not have, so the latest admitted is preempted and waits at the head.
    FakePagedKv kv(3, 4, false);
    SchedulerCore core(kv, {4, 0});
    core.add(0, {1, 2, 3, 4}, 8, 0);
    core.add(1, {5, 6, 7, 8}, 8, 0);
    core.add(2, {9}, 1, 5);
    SchedulePlan admit = core.schedule(0, true, false);
    QCOMPARE(admit.admitted.size(), size_t{2});
    for (const ScheduledChunk& c : admit.prefill)
      kv.write(c.id, core.request(c.id).tokens, c.start, c.start + c.count);
    core.ran(admit);
    core.append(0, 1);
    core.append(1, 1);
    const SchedulePlan decode = core.schedule(0, false, true);
    QCOMPARE(decode.decode, (std::vector<int64_t>{0}));
    QCOMPARE(decode.preempted, (std::vector<int64_t>{1}));
    QCOMPARE(core.waiting().front(), int64_t{1});
    QCOMPARE(kv.blocks().used_blocks(), int64_t{2});
    // Readmitted later, it prefills its prompt and the token it had.
    QCOMPARE(core.request(1).tokens.size(), size_t{5});
    QCOMPARE(core.request(1).preemptions, int64_t{1});
  }

  // test_serve's tight pool: 16 requests, 8 at a time, in 8 blocks of 16 positions, each needing
  // up to 6 of them. A preempted request recomputes its positions when it comes back; a scheduler
  // that readmitted it while the pool was still too small for everyone would preempt it again a
  // few steps later, over and over (thrashing), and the queue would cost several times its
  // positions. Latest-admitted-first preemption costs these queues 1.3-1.7x their positions, and
  // 1.2-1.4x with prefix caching, which keeps a preempted request's full blocks for its return.
  void a_tight_pool_does_not_thrash() {
    for (uint32_t seed = 0; seed < 20; ++seed) {
      std::mt19937 rng(seed);
      auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
      std::vector<Spec> specs(16);
      int64_t needed = 0;
      for (Spec& s : specs) {
        for (int64_t i = 0, n = pick(5, 40); i < n; ++i)
          s.prompt.push_back(static_cast<int32_t>(pick(0, 999)));
        s.max_new = pick(20, 60);
        needed += static_cast<int64_t>(s.prompt.size()) + s.max_new - 1;
      }
      for (const int64_t budget : {int64_t{0}, int64_t{64}}) {
        for (const bool caching : {false, true}) {
          FakePagedKv kv(8, 16, caching);
          QueueStats stats;
          run_queue(specs, kv, {8, budget}, rng, &stats);
          if (QTest::currentTestFailed()) return;
          const QString what = QString(
                                   "seed %1, budget %2, prefix caching %3: %4 positions computed for %5 "
                                   "needed, %6 preemptions")
                                   .arg(seed)
                                   .arg(budget)
                                   .arg(caching)
                                   .arg(stats.positions)
                                   .arg(needed)
                                   .arg(stats.preemptions);
          QVERIFY2(stats.preemptions > 0, qPrintable(what + ": the pool is meant to be too small"));
          QVERIFY2(stats.positions <= 2 * needed, qPrintable(what + ": more than 2x, thrashing"));
          QVERIFY2(stats.preemptions <= 2 * static_cast<int64_t>(specs.size()), qPrintable(what));
        }
      }
    }
  }

  void a_request_that_can_never_fit_is_rejected_and_the_queue_goes_on() {
    FakePagedKv kv(2, 4, false);
    SchedulerCore core(kv, {4, 0});
    core.add(0, std::vector<int32_t>(20, 1), 4, 0);
    core.add(1, {1, 2}, 2, 0);
    const SchedulePlan plan = core.schedule(0, true, false);
    QCOMPARE(plan.rejected.size(), size_t{1});
    QCOMPARE(plan.rejected[0].first, int64_t{0});
    QCOMPARE(plan.admitted, (std::vector<int64_t>{1}));
    QVERIFY(!core.has(0));
  }

  void bad_configurations_are_refused_by_name() {
    FakePagedKv kv(2, 4, false);
    try {
      SchedulerCore core(kv, {0, 0});
      QFAIL("max num seqs 0 accepted");
    } catch (const InputError& e) {
      QVERIFY(QString(e.what()).contains("max num seqs"));
    }
    try {
      SchedulerCore core(kv, {4, -1});
      QFAIL("a negative budget accepted");
    } catch (const InputError& e) {
      QVERIFY(QString(e.what()).contains("max num batched tokens"));
    }
  }

  // A run's steps on the roofline, one point per kind of step: prefill only, decode at n rows,
  // verification at n rows (positions a step on average), prompt chunks beside decode rows; each
  // kind's FLOPs, bytes and time summed over its steps, per step. Steps that ran nothing are left out.
  void steps_grouped_by_kind_on_the_roofline() {
    auto step = [](int64_t prefill, int64_t decode, double ms, double flops, double bytes) {
      BatchStep s;
      s.prefill_tokens = prefill;
      s.decode_tokens = decode;
      s.ms = ms;
      s.cost.flops = flops;
      s.cost.weight_bytes = bytes;
      return s;
    };
    std::vector<BatchStep> steps;
    steps.push_back(step(12, 0, 4, 120, 10));      // a whole prompt
    BatchStep admission = step(12, 1, 2, 60, 10);  // a prompt admitted with its last token as a row
    admission.admitted = {3};
    admission.running = 1;
    steps.push_back(admission);
    steps.push_back(step(0, 2, 2, 20, 10));  // two rows decode
    steps.push_back(step(0, 2, 4, 22, 12));
    steps.push_back(step(0, 1, 1, 10, 10));  // one row left
    BatchStep verify = step(0, 1, 3, 40, 11);
    verify.speculation.push_back({0, {5, 6, 7}, 2});  // the row's token and three proposals
    steps.push_back(verify);
    BatchStep verify2 = step(0, 1, 5, 20, 11);
    verify2.speculation.push_back({0, {5}, 0});
    steps.push_back(verify2);
    BatchStep chunk = step(8, 1, 6, 90, 10);  // a chunk beside a running request's decode row
    chunk.running = 2;
    steps.push_back(chunk);
    steps.push_back(step(0, 1, 0, 0, 0));  // nothing ran: left out
    const std::vector<RooflinePoint> points = roofline_points(steps, "int4-g32");
    QCOMPARE(points.size(), size_t{5});
    QCOMPARE(QString::fromStdString(points[0].label), QStringLiteral("prefill 13 tokens"));  // (12 + 13) / 2
    QCOMPARE(points[0].flops, 90.0);
    QCOMPARE(points[0].ms, 3.0);
    QCOMPARE(QString::fromStdString(points[1].label), QStringLiteral("decode batch 2"));
    QCOMPARE(points[1].rows, int64_t{2});
    QCOMPARE(points[1].flops, 21.0);  // (20 + 22) / 2
    QCOMPARE(points[1].bytes, 11.0);
    QCOMPARE(points[1].ms, 3.0);
    QCOMPARE(points[1].intensity(), 21.0 / 11.0);
    QCOMPARE(points[1].flop_s(), 21.0 / 3e-3);
    QCOMPARE(QString::fromStdString(points[2].label), QStringLiteral("decode batch 1"));
    QCOMPARE(points[3].kind, std::string("verify"));
    QCOMPARE(points[3].positions, int64_t{3});  // (4 + 2) / 2 steps
    QCOMPARE(QString::fromStdString(points[3].label), QStringLiteral("verify batch 1, 3 positions a step"));
    QCOMPARE(points[3].flops, 30.0);
    QCOMPARE(points[3].ms, 4.0);
    QCOMPARE(points[4].kind, std::string("mixed"));
    QCOMPARE(points[4].positions, int64_t{9});
    for (const RooflinePoint& p : points) QCOMPARE(p.quant, std::string("int4-g32"));
    QVERIFY(roofline_points({}, "none").empty());
  }
};

QTEST_GUILESS_MAIN(TestSchedulerCore)
#include "test_scheduler_core.moc"

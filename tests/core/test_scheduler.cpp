// Continuous batching against the plain generate(): every request's greedy tokens equal its solo
// generation whatever the batch around it does, for both KV memory layouts and the static
// baseline; capacity edges, metrics, cancellation, arrivals and bad input.
#include <c10/core/InferenceMode.h>
#include <httplib.h>

#include <QTemporaryDir>
#include <QtTest>
#include <numeric>
#include <thread>

#include "experiments/course_benchmark.h"
#include "experiments/sync_vs_continuous.h"
#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "generate/kv_memory_manager.h"
#include "generate/static_batching.h"
#include "model/engine.h"
#include "model/gpt2_model.h"
#include "model/gpt2_weights.h"
#include "model/model_export.h"
#include "serve/serve_scheduler.h"
#include "serve/serve_session.h"
#include "test_support.h"

using namespace servelab;
using servelab::test::error_of;

namespace {

Gpt2Config tiny_config() {
  Gpt2Config c;
  c.vocab_size = 300;
  c.n_positions = 32;
  c.n_embd = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.bos_token_id = c.eos_token_id = 299;
  return c;
}

std::vector<int32_t> prompt(int64_t len, int32_t salt) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < len; ++i) p.push_back(static_cast<int32_t>((salt * 37 + i * 11) % 290));
  return p;
}

// Mixed prompt lengths and token budgets, more requests than slots.
std::vector<BatchRequest> mixed_requests(int64_t n) {
  std::vector<BatchRequest> rs;
  for (int64_t i = 0; i < n; ++i) {
    BatchRequest r;
    r.prompt_ids = prompt(1 + (i * 5) % 9, static_cast<int32_t>(i));
    r.max_new_tokens = i % 4 == 0 ? 12 : 1 + (i * 3) % 6;
    r.stop_at_eos = false;
    rs.push_back(r);
  }
  return rs;
}

class Recorder : public BatchSink {
 public:
  std::vector<int64_t> admitted, retired;
  int64_t tokens = 0, steps = 0;
  void on_admit(int64_t id, int64_t, int64_t, double) override { admitted.push_back(id); }
  void on_token(int64_t, int32_t, const std::string&, int64_t, double) override { ++tokens; }
  void on_retire(const RequestResult& r) override { retired.push_back(r.id); }
  void on_step(const BatchStep&) override { ++steps; }
};

class CancelAfterSteps : public BatchSink {
 public:
  CancelAfterSteps(std::atomic<bool>& flag, int steps) : flag_(flag), left_(steps) {}
  void on_step(const BatchStep&) override {
    if (--left_ == 0) flag_ = true;
  }

 private:
  std::atomic<bool>& flag_;
  int left_;
};

}  // namespace

class TestScheduler : public QObject {
  Q_OBJECT
  Gpt2Config config_ = tiny_config();
  std::unique_ptr<Gpt2Model> model_;
  test::IdTokenizer tok_{300, 299};

  std::vector<int32_t> solo(const BatchRequest& r) {
    GenerateOptions o;
    o.max_new_tokens = r.max_new_tokens;
    o.stop_at_eos = r.stop_at_eos;
    o.stop_strings = r.stop_strings;
    o.report_top = 0;
    return generate(*model_, tok_, {r.prompt_ids}, o).sequences[0].generated_ids;
  }

  void check_equals_solo(const std::vector<BatchRequest>& rs, const BatchRunResult& got) {
    QCOMPARE(got.requests.size(), rs.size());
    for (size_t i = 0; i < rs.size(); ++i) {
      QCOMPARE(got.requests[i].id, static_cast<int64_t>(i));
      QCOMPARE(got.requests[i].generated_ids, solo(rs[i]));
      QCOMPARE(got.requests[i].prompt_ids, rs[i].prompt_ids);
    }
  }

  void check_metrics(const std::vector<BatchRequest>& rs, const BatchRunResult& r, int64_t max_batch) {
    int64_t tokens = 0, calls = 0, rows = 0, most = 0, copied = 0;
    for (const RequestResult& q : r.requests) {
      tokens += static_cast<int64_t>(q.generated_ids.size());
      QCOMPARE(q.token_ms.size(), q.generated_ids.size());
      QVERIFY(std::is_sorted(q.token_ms.begin(), q.token_ms.end()));
      QVERIFY(q.admitted_ms >= rs[static_cast<size_t>(q.id)].arrival_ms);
      QVERIFY(q.slot >= 0 && q.slot < max_batch);
      QVERIFY(q.finished_step >= q.admitted_step);
      QCOMPARE(static_cast<int64_t>(q.generated_ids.size()) <= rs[static_cast<size_t>(q.id)].max_new_tokens,
               true);
    }
    for (const BatchStep& s : r.steps) {
      calls += s.forward_calls;
      copied += s.kv_copy_bytes;
      rows += (s.admitted.empty() ? 0 : static_cast<int64_t>(s.admitted.size())) + s.decode_tokens;
      most = std::max({most, s.decode_tokens, static_cast<int64_t>(s.admitted.size())});
      QVERIFY(s.running <= max_batch);
      QVERIFY(s.forward_calls == (s.admitted.empty() ? 0 : 1) + (s.decode_tokens > 0 ? 1 : 0));
    }
    // Two requests running at the same time never share a batch place (both memories).
    for (const RequestResult& a : r.requests)
      for (const RequestResult& b : r.requests)
        if (a.id < b.id && a.slot == b.slot)
          QVERIFY2(
              a.finished_step < b.admitted_step || b.finished_step < a.admitted_step,
              qPrintable(QString("requests %1 and %2 overlap in place %3").arg(a.id).arg(b.id).arg(a.slot)));
    QCOMPARE(r.generated_tokens, tokens);
    QCOMPARE(r.inference_calls, calls);
    QCOMPARE(r.kv_copy_bytes, copied);  // the run's total is its steps' (admissions and retirements)
    QCOMPARE(r.max_batch, most);
    QVERIFY(std::abs(r.average_batch - static_cast<double>(rows) / static_cast<double>(calls)) < 1e-9);
    // Continuous batching: every forward row yields one token, so rows = tokens.
    QCOMPARE(rows, tokens);
  }

 private Q_SLOTS:
  void initTestCase() {
    model_ = std::make_unique<Gpt2Model>(config_, make_random_gpt2_weights(config_, 7, at::kCPU, at::kFloat));
  }

  void greedy_equals_solo_data() {
    QTest::addColumn<int>("strategy");
    QTest::addColumn<int>("max_batch");
    for (int s : {0, 1})
      for (int b : {1, 3, 8}) {
        const std::string name =
            std::string(kv_strategy_name(static_cast<KvStrategy>(s))) + " batch " + std::to_string(b);
        QTest::newRow(name.c_str()) << s << b;
      }
  }
  void greedy_equals_solo() {
    QFETCH(int, strategy);
    QFETCH(int, max_batch);
    auto rs = mixed_requests(11);
    BatchOptions o;
    o.max_batch = max_batch;
    o.kv = static_cast<KvStrategy>(strategy);
    Recorder rec;
    BatchRunResult r = run_continuous_batching(*model_, tok_, rs, o, &rec);
    check_equals_solo(rs, r);
    check_metrics(rs, r, max_batch);
    QVERIFY(!r.cancelled);
    QCOMPARE(rec.admitted.size(), rs.size());
    QCOMPARE(rec.retired.size(), rs.size());
    QCOMPARE(rec.tokens, r.generated_tokens);
    QCOMPARE(rec.steps, static_cast<int64_t>(r.steps.size()));
    for (const RequestResult& q : r.requests) QCOMPARE(q.finish_reason, std::string("length"));
    QCOMPARE(r.max_batch, std::min<int64_t>(max_batch, 11));
  }

  void serve_engine_runs_on_the_callers_thread() {
    // The app's Serving tab runs the server's engine on its own engine thread (one OpenMP team per
    // process): requests submitted from other threads are served by run() on this one, with
    // their solo tokens, until stop_engine(); a scheduler with its own engine thread refuses run().
    ServeOptions so;
    so.max_batch = 3;
    so.max_total_tokens = 32;
    so.engine_on_caller = true;
    ServeScheduler scheduler(*model_, tok_, so);
    auto rs = mixed_requests(5);
    std::vector<std::vector<int32_t>> got(rs.size());
    std::thread clients([&] {
      std::vector<std::shared_ptr<RequestStream>> streams;
      for (const BatchRequest& r : rs) streams.push_back(scheduler.submit(r));
      for (size_t i = 0; i < streams.size(); ++i) {
        for (;;) {
          RequestStream::Update u = streams[i]->take(std::chrono::milliseconds(60000));
          if (u.done) {
            got[i] = u.result.generated_ids;
            break;
          }
        }
      }
      scheduler.stop_engine();
    });
    scheduler.run();  // returns once the client thread stops it
    clients.join();
    for (size_t i = 0; i < rs.size(); ++i) QCOMPARE(got[i], solo(rs[i]));
    QCOMPARE(scheduler.stats().finished, static_cast<int64_t>(rs.size()));

    ServeOptions own = so;
    own.engine_on_caller = false;
    ServeScheduler threaded(*model_, tok_, own);
    QVERIFY(error_of(ErrorKind::Input, [&] { threaded.run(); }).find("engine_on_caller") !=
            std::string::npos);
  }

  void serve_session_answers_while_the_model_loads() {
    // `serve` binds before loading: until attach() /health says 503 "loading" and every route
    // answers 503 with Retry-After in its API's error shape; then the routes answer, and stop()
    // drains the scheduler and ends the server.
    HttpServerOptions ho;
    ho.port = 0;
    ho.threads = 4;
    ServeSession session(ho);
    QVERIFY(session.url().rfind("http://127.0.0.1:", 0) == 0);
    QVERIFY(session.scheduler() == nullptr);
    httplib::Client client("127.0.0.1", session.port());
    auto health = client.Get("/health");
    QVERIFY(health);
    QCOMPARE(health->status, 503);
    QCOMPARE(QByteArray::fromStdString(health->body), QByteArray(R"({"status":"loading"})"));
    auto openai = client.Post("/v1/completions", R"({"prompt": "x"})", "application/json");
    QVERIFY(openai);
    QCOMPARE(openai->status, 503);
    QCOMPARE(openai->get_header_value("Retry-After"), std::string("5"));
    QVERIFY(openai->body.find(R"("type":"server_error")") != std::string::npos);
    auto lorax = client.Post("/generate", R"({"inputs": "x"})", "application/json");
    QVERIFY(lorax);
    QCOMPARE(lorax->status, 503);
    QVERIFY(lorax->body.find(R"("error_type":"loading")") != std::string::npos);

    ServeOptions so;
    so.max_batch = 2;
    so.max_total_tokens = 32;
    ServeScheduler& scheduler = session.attach(*model_, tok_, so, "tiny", "{}");
    QCOMPARE(session.scheduler(), &scheduler);
    health = client.Get("/health");
    QVERIFY(health);
    QCOMPARE(health->status, 200);
    auto detok = client.Post("/detokenize", R"({"tokens": [1, 22]})", "application/json");
    QVERIFY(detok);
    QCOMPARE(detok->status, 200);
    QCOMPARE(QByteArray::fromStdString(detok->body), QByteArray(R"({"prompt":"<1><22>"})"));
    auto models = client.Get("/v1/models");
    QVERIFY(models);
    QVERIFY(models->body.find(R"("id":"tiny")") != std::string::npos);
    // A request held by the scheduler when the session stops without grace is cancelled by the drain.
    BatchRequest held;
    held.prompt_ids = prompt(3, 1);
    held.max_new_tokens = 20;
    held.stop_at_eos = false;
    std::shared_ptr<RequestStream> stream = scheduler.submit(held);
    QCOMPARE(session.stop(std::chrono::milliseconds(0)) + scheduler.stats().finished, int64_t{1});
    QCOMPARE(session.stop(std::chrono::milliseconds(0)), int64_t{0});  // once only
    QVERIFY(!client.Get("/health"));                                   // nothing listens any more
  }

  void kv_managers_match_full_forward() {
    // Logits, not just argmax: each manager's prefill and decode rows equal a cache-free forward
    // of the request's whole sequence, through admissions into holes, skipped rows and retirement.
    c10::InferenceMode guard;
    auto full = [&](std::vector<int32_t> seq) {
      const int64_t n = static_cast<int64_t>(seq.size());
      ForwardInput in;
      in.input_ids = at::tensor(std::vector<int64_t>(seq.begin(), seq.end()), at::kLong).view({1, n});
      in.position_ids = at::arange(n, at::kLong).view({1, n});
      return model_->forward(in).squeeze(0);
    };
    for (KvStrategy s : {KvStrategy::SlotKv, KvStrategy::NaiveMergeFilter}) {
      auto kv = make_kv_memory_manager(s, *model_, 3, 16, 299);
      std::vector<std::vector<int32_t>> seq = {prompt(3, 1), prompt(7, 2), prompt(1, 3), prompt(4, 4)};
      std::vector<PrefillRequest> first = {{0, &seq[0], 8}, {1, &seq[1], 8}, {2, &seq[2], 8}};
      // Bytes of one cached position of one request: keys and values of every layer.
      const int64_t per_position = 2 * model_->config().n_layer * model_->config().n_embd * 4;
      at::Tensor l = kv->prefill(first);
      for (int64_t i = 0; i < 3; ++i)
        QVERIFY(test::max_abs_diff(l[i], full(seq[static_cast<size_t>(i)])) < 1e-4);
      // Slot KV moves only the admitted prompts into their slots (3 + 7 + 1 positions); the
      // course's merge also copies the padding it puts in front of the shorter prompts.
      const int64_t first_copy = kv->take_copy_stats().bytes;
      if (s == KvStrategy::SlotKv)
        QCOMPARE(first_copy, 11 * per_position);
      else
        QCOMPARE(first_copy, 3 * 7 * per_position);
      auto step = [&](std::vector<int64_t> ids, std::vector<int32_t> tokens) {
        at::Tensor logits = kv->decode(ids, tokens);
        for (size_t i = 0; i < ids.size(); ++i) {
          auto& q = seq[static_cast<size_t>(ids[i])];
          q.push_back(tokens[i]);
          QVERIFY2(test::max_abs_diff(logits[static_cast<int64_t>(i)], full(q)) < 1e-4,
                   qPrintable(QString("%1 request %2").arg(kv_strategy_name(s)).arg(ids[i])));
        }
      };
      step({2, 0}, {5, 9});  // request 1 skips a step
      step({0, 1, 2}, {11, 12, 13});
      QCOMPARE(kv->take_copy_stats().bytes, int64_t{0});  // decoding writes in place
      kv->retire({0});
      const int64_t retire_copy = kv->take_copy_stats().bytes;
      std::vector<PrefillRequest> second = {{3, &seq[3], 8}};
      at::Tensor l3 = kv->prefill(second);
      QVERIFY(test::max_abs_diff(l3[0], full(seq[3])) < 1e-4);
      const int64_t admit_copy = kv->take_copy_stats().bytes;
      if (s == KvStrategy::SlotKv) {
        // Retiring frees a slot; a lone admission prefills straight into its slot.
        QCOMPARE(retire_copy, int64_t{0});
        QCOMPARE(admit_copy, int64_t{0});
      } else {
        // filter_batch gathers the two rows that stay (9 padded positions each, after the 7-token
        // prompt and two steps); merge_batches copies them again plus the new 4-token request.
        QCOMPARE(retire_copy, 2 * 9 * per_position);
        QCOMPARE(admit_copy, (2 * 9 + 4) * per_position);
      }
      // The freed batch place is reused; merge/filter's physical rows moved, its places did not.
      QCOMPARE(kv->slot_of(3), int64_t{0});
      QCOMPARE(kv->slot_of(1), int64_t{1});
      QCOMPARE(kv->slot_of(2), int64_t{2});
      step({3, 1, 2}, {21, 22, 23});
      kv->retire({1, 2});
      step({3}, {31});
    }
  }

  void static_baseline_equals_solo() {
    auto rs = mixed_requests(11);
    BatchOptions o;
    o.max_batch = 4;
    BatchRunResult r = run_static_batching(*model_, tok_, rs, o);
    check_equals_solo(rs, r);
    QCOMPARE(r.method, std::string("synchronous"));
    // Batches of 4, 4, 3; each runs its longest request's 12 tokens.
    QCOMPARE(r.inference_calls, int64_t{36});
    QCOMPARE(r.max_batch, int64_t{4});
    int64_t tokens = 0;
    for (const RequestResult& q : r.requests) {
      tokens += static_cast<int64_t>(q.generated_ids.size());
      QCOMPARE(q.token_ms.size(), q.generated_ids.size());
      QCOMPARE(q.slot, q.id % 4);
    }
    QCOMPARE(r.generated_tokens, tokens);
    QVERIFY(std::abs(r.average_batch - 11.0 * 12 / 36) < 1e-9);
  }

  void capacity_edges() {
    for (KvStrategy s : {KvStrategy::SlotKv, KvStrategy::NaiveMergeFilter}) {
      std::vector<BatchRequest> rs(6);
      // Fills the context exactly: 20 + 12 = 32 positions.
      rs[0].prompt_ids = prompt(20, 1);
      rs[0].max_new_tokens = 12;
      // Several finishing on the same step, one of them after a single token.
      for (size_t i = 1; i < 4; ++i) {
        rs[i].prompt_ids = prompt(static_cast<int64_t>(i) * 2, static_cast<int32_t>(i));
        rs[i].max_new_tokens = 3;
      }
      rs[4].prompt_ids = prompt(5, 9);
      rs[4].max_new_tokens = 1;
      rs[5].prompt_ids = prompt(1, 4);
      rs[5].max_new_tokens = 1;
      for (auto& r : rs) r.stop_at_eos = false;
      BatchOptions o;
      o.max_batch = 4;
      o.kv = s;
      BatchRunResult r = run_continuous_batching(*model_, tok_, rs, o);
      check_equals_solo(rs, r);
      check_metrics(rs, r, 4);
      QCOMPARE(r.requests[0].generated_ids.size(), size_t{12});
      QCOMPARE(r.requests[4].generated_ids.size(), size_t{1});
      // Requests 1..3 were admitted together and retired together.
      QCOMPARE(r.steps[0].admitted, (std::vector<int64_t>{0, 1, 2, 3}));
      const int64_t fin = r.requests[1].finished_step;
      QCOMPARE(r.requests[2].finished_step, fin);
      QCOMPARE(r.requests[3].finished_step, fin);
      // A request that wants one token never reaches a decode step.
      const BatchStep& admit4 = r.steps[static_cast<size_t>(r.requests[4].admitted_step)];
      QCOMPARE(r.requests[4].finished_step, r.requests[4].admitted_step);
      QVERIFY(std::find(admit4.retired.begin(), admit4.retired.end(), int64_t{4}) != admit4.retired.end());
    }
  }

  void stops_on_eos_and_stop_strings() {
    // Learn the greedy tokens, then make one of them the EOS / a stop string.
    auto rs = mixed_requests(6);
    for (auto& r : rs) r.max_new_tokens = 8;
    const auto base = solo(rs[2]);
    test::IdTokenizer eos_tok(300, base[3]);
    rs[2].stop_at_eos = true;
    const auto three = solo(rs[3]);
    rs[3].stop_strings = {"<" + std::to_string(three[2]) + ">"};
    for (KvStrategy s : {KvStrategy::SlotKv, KvStrategy::NaiveMergeFilter}) {
      BatchOptions o;
      o.max_batch = 3;
      o.kv = s;
      BatchRunResult r = run_continuous_batching(*model_, eos_tok, rs, o);
      QCOMPARE(r.requests[2].finish_reason, std::string("eos"));
      const auto eos_at = std::find(base.begin(), base.end(), base[3]);
      QCOMPARE(r.requests[2].generated_ids, std::vector<int32_t>(base.begin(), eos_at + 1));
      QCOMPARE(r.requests[3].finish_reason, std::string("stop"));
      QCOMPARE(r.requests[3].generated_ids.size(),
               static_cast<size_t>(std::find(three.begin(), three.end(), three[2]) - three.begin() + 1));
      QVERIFY(!QString::fromStdString(r.requests[3].text)
                   .contains(QString::fromStdString(rs[3].stop_strings[0])));
    }
  }

  void cancel_keeps_finished_and_partial() {
    for (KvStrategy s : {KvStrategy::SlotKv, KvStrategy::NaiveMergeFilter}) {
      auto rs = mixed_requests(10);
      std::atomic<bool> cancel{false};
      CancelAfterSteps sink(cancel, 5);
      BatchOptions o;
      o.max_batch = 3;
      o.kv = s;
      o.cancel = &cancel;
      BatchRunResult r = run_continuous_batching(*model_, tok_, rs, o, &sink);
      QVERIFY(r.cancelled);
      QCOMPARE(r.steps.size(), size_t{5});
      int finished = 0, partial = 0, untouched = 0;
      for (size_t i = 0; i < rs.size(); ++i) {
        const RequestResult& q = r.requests[i];
        const auto full = solo(rs[i]);
        if (q.finish_reason == "length") {
          ++finished;
          QCOMPARE(q.generated_ids, full);
        } else {
          QCOMPARE(q.finish_reason, std::string("cancelled"));
          QVERIFY(q.generated_ids.size() < full.size());
          QCOMPARE(q.generated_ids,
                   std::vector<int32_t>(full.begin(), full.begin() + q.generated_ids.size()));
          (q.generated_ids.empty() ? untouched : partial)++;
        }
      }
      QVERIFY(finished > 0);
      QVERIFY(partial > 0);
      QVERIFY(untouched > 0);
    }
    // The static baseline too: the batch in flight keeps its tokens so far.
    auto rs = mixed_requests(10);
    std::atomic<bool> cancel{false};
    CancelAfterSteps sink(cancel, 15);
    BatchOptions o;
    o.max_batch = 4;
    o.cancel = &cancel;
    BatchRunResult r = run_static_batching(*model_, tok_, rs, o, &sink);
    QVERIFY(r.cancelled);
    QCOMPARE(r.requests[0].finish_reason, std::string("length"));
    QCOMPARE(r.requests[4].finish_reason, std::string("cancelled"));
    QCOMPARE(r.requests[4].generated_ids.size(), size_t{3});
    QCOMPARE(r.requests[9].generated_ids.size(), size_t{0});
  }

  void arrivals_are_respected() {
    auto rs = mixed_requests(6);
    for (size_t i = 0; i < rs.size(); ++i) rs[i].arrival_ms = i < 3 ? 0.0 : 30.0 * static_cast<double>(i);
    for (KvStrategy s : {KvStrategy::SlotKv, KvStrategy::NaiveMergeFilter}) {
      BatchOptions o;
      o.max_batch = 4;
      o.kv = s;
      BatchRunResult r = run_continuous_batching(*model_, tok_, rs, o);
      check_equals_solo(rs, r);
      for (const RequestResult& q : r.requests) {
        QVERIFY(q.admitted_ms >= q.arrival_ms);
        QVERIFY(r.steps[static_cast<size_t>(q.admitted_step)].start_ms >= q.arrival_ms);
        QCOMPARE(q.queue_wait_ms, q.admitted_ms - q.arrival_ms);
        QVERIFY(q.ttft_ms >= q.queue_wait_ms);
      }
      // Later arrivals are admitted in arrival order.
      for (size_t i = 4; i < rs.size(); ++i)
        QVERIFY(r.requests[i].admitted_step >= r.requests[i - 1].admitted_step);
    }
    BatchOptions o;
    o.max_batch = 3;
    BatchRunResult st = run_static_batching(*model_, tok_, rs, o);
    for (const RequestResult& q : st.requests) QVERIFY(q.admitted_ms >= q.arrival_ms);
  }

  void sampling_is_per_request_and_seeded() {
    auto rs = mixed_requests(5);
    for (size_t i = 0; i < rs.size(); ++i) {
      rs[i].sampling.greedy = false;
      rs[i].sampling.seed = 100 + i;
      rs[i].sampling.top_k = 20;
    }
    BatchOptions o;
    o.max_batch = 2;
    BatchRunResult a = run_continuous_batching(*model_, tok_, rs, o);
    o.max_batch = 5;
    o.kv = KvStrategy::NaiveMergeFilter;
    BatchRunResult b = run_continuous_batching(*model_, tok_, rs, o);
    for (size_t i = 0; i < rs.size(); ++i) QCOMPARE(a.requests[i].generated_ids, b.requests[i].generated_ids);
  }

  void experiments_report_the_course_fields() {
    // Tiny runs of both experiments on a tiny model folder with the GPT-2 tokenizer.
    const std::string shared = test::env_or_empty("SERVELAB_SHARED");
    QTemporaryDir tmp;
    const std::string dir = tmp.filePath("tiny").toStdString();
    export_random_gpt2_folder(dir, tiny_gpt2_config(), 3, shared.empty() ? "" : shared + "/data/gpt2");
    auto engine = Engine::load_folder(dir, {});

    SyncVsContinuousParams sp;
    sp.requests = 6;
    sp.max_batch = 2;
    sp.long_every = 3;
    sp.long_tokens = 6;
    sp.short_tokens = 2;
    sp.prompt_tokens_min = 2;
    sp.prompt_tokens_max = 7;
    sp.warmup = false;
    SyncVsContinuousResult svc = run_sync_vs_continuous(*engine, sp);
    QVERIFY(svc.same_tokens);
    const nlohmann::json j = svc.to_json();
    QCOMPARE(j["experiment"].get<std::string>(), std::string("sync-vs-continuous"));
    QCOMPARE(j["methods"].size(), size_t{3});
    for (const auto& m : j["methods"]) {
      QCOMPARE(m["generated_tokens"].get<int64_t>(), int64_t{2 * 6 + 4 * 2});
      for (const char* k : {"p50", "p90", "p99"}) {
        QVERIFY(m["ttft_ms"].contains(k));
        QVERIFY(m["latency_ms"].contains(k));
      }
      QCOMPARE(m["latency_ms"]["all"].size(), size_t{6});
    }
    // Synchronous: 3 batches of 2, each as long as its long request: 6 + 2 + 6 calls... rows
    // [0,1] (6), [2,3] (6), [4,5] (2).
    QCOMPARE(j["methods"][0]["inference_calls"].get<int64_t>(), int64_t{14});
    QCOMPARE(j["runs"][1]["requests"].size(), size_t{6});

    // Paged KV as a fourth method, under a budget of 12 blocks of 4 positions: the same tokens, and
    // every step's pool snapshot (what the GUI's KV memory view draws) is 12 blocks.
    const int64_t block_bytes = engine->model().kv_cache_bytes(1, 4);
    sp.paged = true;
    sp.kv_block_size = 4;
    sp.kv_budget_mb = static_cast<double>(12 * block_bytes + block_bytes / 2) / 1e6;
    SyncVsContinuousResult paged = run_sync_vs_continuous(*engine, sp);
    QVERIFY(paged.same_tokens);
    QCOMPARE(paged.runs.size(), size_t{4});
    QVERIFY(!paged.runs[3].steps.empty());
    for (const BatchStep& s : paged.runs[3].steps) {
      QCOMPARE(s.kv_blocks_total, int64_t{12});
      int64_t held = 0;
      for (const KvBlockTable& t : s.kv_block_tables) held += static_cast<int64_t>(t.blocks.size());
      QVERIFY(held >= s.kv_blocks_used);  // shared blocks appear in several tables
    }
    for (const BatchStep& s : paged.runs[1].steps) QVERIFY(s.kv_block_tables.empty());
    sp.kv_budget_mb = static_cast<double>(block_bytes / 2) / 1e6;
    QVERIFY(QString::fromStdString(error_of(ErrorKind::Input, [&] {
              run_sync_vs_continuous(*engine, sp);
            })).contains("holds no block"));
    // One budget for both memories: slot KV gets the slots 2.5 of the longest request's fit, paged
    // KV runs without and then with prefix caching on that many bytes of blocks.
    int64_t longest = 0;
    for (const BatchRequest& r : make_sync_vs_continuous_requests(*engine, sp))
      longest = std::max(longest, static_cast<int64_t>(r.prompt_ids.size()) + r.max_new_tokens);
    sp.max_batch = 6;
    sp.kv_budget_mb = 2.5 * static_cast<double>(engine->model().kv_cache_bytes(1, longest)) / 1e6;
    sp.slots_in_budget = true;
    sp.paged_uncached_too = true;
    SyncVsContinuousResult budget = run_sync_vs_continuous(*engine, sp);
    QVERIFY(budget.same_tokens);
    QCOMPARE(budget.runs.size(), size_t{5});
    QCOMPARE(budget.runs[3].method, std::string("continuous (paged KV, no prefix cache)"));
    QCOMPARE(budget.runs[4].method, std::string("continuous (paged KV + prefix cache)"));
    for (size_t m = 0; m < 3; ++m) QCOMPARE(budget.runs[m].max_batch, int64_t{2});
    QCOMPARE(budget.runs[1].max_running, int64_t{2});
    QCOMPARE(budget.runs[3].prefix_hit_tokens, int64_t{0});
    QVERIFY(budget.runs[3].max_running > 2);  // short requests hold few blocks
    const nlohmann::json bj = budget.to_json();
    QCOMPARE(bj["runs"][4]["prefix_hit_tokens"].get<int64_t>(), budget.runs[4].prefix_hit_tokens);
    QCOMPARE(bj["runs"][1]["max_running"].get<int64_t>(), int64_t{2});
    sp.kv_budget_mb = 0.5 * static_cast<double>(engine->model().kv_cache_bytes(1, longest)) / 1e6;
    QVERIFY(QString::fromStdString(error_of(ErrorKind::Input, [&] {
              run_sync_vs_continuous(*engine, sp);
            })).contains("holds no slot KV slot"));
    sp.max_batch = 2;
    sp.slots_in_budget = false;
    sp.paged_uncached_too = false;
    sp.paged = false;

    CourseBenchmarkParams bp;
    bp.queries = 5;
    bp.new_tokens = 4;
    bp.max_batch = 2;
    bp.warmup = false;
    CourseBenchmarkResult sb = run_course_benchmark(*engine, bp);
    QVERIFY(sb.same_tokens);
    const nlohmann::json t = sb.to_json();
    QCOMPARE(t["rows"].size(), size_t{2});
    for (const auto& row : t["rows"])
      for (const char* k : {"method", "queries", "time_s", "throughput_vs_baseline", "max_batch", "avg_batch",
                            "tokens", "inference_calls"})
        QVERIFY2(row.contains(k), k);
    QCOMPARE(t["rows"][0]["inference_calls"].get<int64_t>(), int64_t{20});
    QCOMPARE(t["rows"][0]["tokens"].get<int64_t>(), int64_t{20});
    QCOMPARE(t["rows"][1]["tokens"].get<int64_t>(), int64_t{20});
    QCOMPARE(t["rows"][1]["max_batch"].get<int64_t>(), int64_t{2});
    // Waves of two: 2 x (1 prefill + 3 decodes), then the last query alone (1 + 3).
    QCOMPARE(t["rows"][1]["inference_calls"].get<int64_t>(), int64_t{12});
  }

  void bad_input_is_named() {
    auto run = [&](std::vector<BatchRequest> rs, int64_t batch) {
      return QString::fromStdString(error_of(ErrorKind::Input, [&] {
        BatchOptions o;
        o.max_batch = batch;
        run_continuous_batching(*model_, tok_, rs, o);
      }));
    };
    auto rs = mixed_requests(3);
    QVERIFY(run(rs, 0).contains("max batch must be at least 1, got 0"));
    QVERIFY(run({}, 2).contains("no requests"));
    auto bad = rs;
    bad[1].prompt_ids.clear();
    QVERIFY(run(bad, 2).contains("request 2 has an empty prompt"));
    bad = rs;
    bad[2].max_new_tokens = 0;
    QVERIFY(run(bad, 2).contains("request 3: max new tokens must be at least 1, got 0"));
    bad = rs;
    bad[0].prompt_ids = prompt(20, 1);
    bad[0].max_new_tokens = 13;
    QVERIFY(run(bad, 2).contains("13 new tokens that exceeds the context of 32"));
    bad = rs;
    bad[0].prompt_ids[0] = 300;
    QVERIFY(run(bad, 2).contains("token id 300"));
    bad = rs;
    bad[1].arrival_ms = -5;
    QVERIFY(run(bad, 2).contains("request 2: arrival time"));
    bad = rs;
    bad[0].sampling.greedy = false;
    bad[0].sampling.temperature = 0;
    QVERIFY(run(bad, 2).contains("temperature"));
    QVERIFY(QString::fromStdString(error_of(ErrorKind::Input, [&] {
              BatchOptions o;
              o.max_batch = -1;
              run_static_batching(*model_, tok_, rs, o);
            })).contains("got -1"));
  }
};

QTEST_GUILESS_MAIN(TestScheduler)
#include "test_scheduler.moc"

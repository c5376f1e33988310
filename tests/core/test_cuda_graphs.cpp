// CUDA graphs for decode steps (model/decode_graphs.h). The buckets, the reasons graphs do not run
// and the eager step run everywhere; the graph rows need a GPU and skip without one, saying so:
// replayed graphs must equal the eager decode (the same greedy tokens, fp32 logits within 1e-5)
// across buckets, with batch sizes between buckets, after admissions and retirements.
#include <c10/core/InferenceMode.h>

#include <QtTest>

#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "generate/slot_kv_memory.h"
#include "model/decode_graphs.h"
#include "test_support.h"
#include "tiny_models.h"
#include "util/device.h"

using namespace servelab;

namespace {

test::IdTokenizer tok(300, 299);

// Argmax of each row.
std::vector<int64_t> argmax_rows(const at::Tensor& logits) {
  const at::Tensor a = logits.argmax(-1).to(at::kCPU);
  return std::vector<int64_t>(a.data_ptr<int64_t>(), a.data_ptr<int64_t>() + a.numel());
}

std::vector<std::unique_ptr<Model>> tiny_models_on(at::Device device) {
  std::vector<std::unique_ptr<Model>> models;
  const Gpt2Config c = test::tiny_gpt2_shape(600);
  models.push_back(std::make_unique<Gpt2Model>(c, make_random_gpt2_weights(c, 7, device, at::kFloat)));
  models.push_back(test::tiny_llama(11, 600, at::kFloat, device));
  return models;
}

// Requests of several lengths, arriving over the run, so that the running batch grows and shrinks
// through sizes between the buckets (3, 5, 6, 7).
std::vector<BatchRequest> arriving_requests() {
  std::vector<BatchRequest> rs;
  for (int i = 0; i < 9; ++i) {
    BatchRequest r;
    r.prompt_ids = test::tiny_prompt(3 + (i * 7) % 11, i);
    r.max_new_tokens = 4 + (i * 5) % 13;
    r.stop_at_eos = false;
    r.arrival_step = i < 3 ? 0 : 2 * i;
    rs.push_back(r);
  }
  return rs;
}

}  // namespace

class TestCudaGraphs : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void buckets_hold_each_batch() {
    QCOMPARE(graph_batch_buckets(128), (std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128}));
    QCOMPARE(graph_batch_buckets(6), (std::vector<int64_t>{1, 2, 4, 6}));
    QCOMPARE(graph_batch_buckets(1), (std::vector<int64_t>{1}));
    QCOMPARE(graph_batch_bucket(1, 128), int64_t{1});
    QCOMPARE(graph_batch_bucket(3, 128), int64_t{4});
    QCOMPARE(graph_batch_bucket(33, 128), int64_t{64});
    QCOMPARE(graph_batch_bucket(5, 6), int64_t{6});
    QCOMPARE(graph_batch_bucket(129, 128), int64_t{0});  // eager
    QCOMPARE(graph_width_bucket(1, 4096), int64_t{256});
    QCOMPARE(graph_width_bucket(257, 4096), int64_t{512});
    QCOMPARE(graph_width_bucket(257, 300), int64_t{300});
    QCOMPARE(graph_width_bucket(40, 100), int64_t{100});
  }

  void reasons_graphs_do_not_run() {
    auto models = tiny_models_on(at::kCPU);
    Model& m = *models[0];
    QVERIFY(cuda_graphs_unavailable(m).find("need a GPU") != std::string::npos);
    m.set_cuda_graphs(false, 16);
    QCOMPARE(cuda_graphs_unavailable(m), std::string("switched off (--cuda-graphs off)"));
    QCOMPARE(m.cuda_graph_max_batch(), int64_t{16});
    // A copy of the model (its kernels rebuilt) runs the same way.
    QVERIFY(!m.with_kernels([](LinearMatrices&) {
                return std::shared_ptr<const LinearKernels>();
              })->cuda_graphs());
    QVERIFY(m.take_graphed_cache(1, 32) == nullptr);
    // generate() says why its decode steps ran eagerly.
    GenerateOptions o;
    o.max_new_tokens = 3;
    o.report_top = 0;
    const GenerateResult g = generate(m, tok, {test::tiny_prompt(5, 1)}, o);
    QCOMPARE(g.cuda_graphs.replays, int64_t{0});
    QCOMPARE(g.cuda_graphs.unavailable, std::string("switched off (--cuda-graphs off)"));
  }

  void eager_step_equals_the_slot_decode() {
    // Where graphs cannot run, DecodeGraphs::step runs the same step eagerly over the step's own
    // sizes: its logits equal the slot memory's decode of the same rows bit for bit, on both
    // families (rows in any slot order, one slot sitting the step out).
    c10::InferenceMode guard;
    for (auto& owned : tiny_models_on(at::kCPU)) {
      const Model& m = *owned;
      SlotKvMemory a(m, 4, 64, 299), b(m, 4, 64, 299);
      std::vector<std::vector<int32_t>> prompts = {test::tiny_prompt(5, 1), test::tiny_prompt(9, 2),
                                                   test::tiny_prompt(3, 3)};
      for (int64_t id = 0; id < 3; ++id) {
        a.prefill({{id, &prompts[static_cast<size_t>(id)], 8}});
        b.prefill({{id, &prompts[static_cast<size_t>(id)], 8}});
      }
      // b's cache, read through a DecodeGraphs over a second cache filled the same way.
      KvCache cache = m.make_cache(4, 64);
      for (int64_t id = 0; id < 3; ++id) {
        ForwardInput in;
        const auto& p = prompts[static_cast<size_t>(id)];
        const int64_t n = static_cast<int64_t>(p.size());
        in.input_ids = at::tensor(std::vector<int64_t>(p.begin(), p.end()), at::kLong).view({1, n});
        in.position_ids = at::arange(n, at::kLong).view({1, n});
        KvCache row = cache.rows(id, 1);
        m.forward(in, &row);
      }
      DecodeGraphs graphs(m, cache);
      const at::Tensor want = a.decode({2, 0}, {17, 23});
      const at::Tensor got = graphs.step({{17, 2, 3, 3, 0}, {23, 0, 5, 5, 0}});
      QCOMPARE(got.sizes(), want.sizes());
      QVERIFY(at::equal(got, want));
      QCOMPARE(graphs.stats().eager_steps, int64_t{1});
      QCOMPARE(graphs.stats().replays, int64_t{0});
      // A row outside the cache is refused before anything runs.
      QVERIFY(test::error_of(ErrorKind::Input, [&] {
                graphs.step({{1, 4, 0, 0, 0}});
              }).find("outside the KV cache") != std::string::npos);
      QVERIFY(test::error_of(ErrorKind::Input, [&] {
                graphs.step({{1, 0, 64, 64, 0}});
              }).find("outside the KV cache") != std::string::npos);
    }
  }

  void cuda_replay_equals_eager_decode() {
    if (!cuda_available()) QSKIP("no CUDA device here: the CUDA graph rows run on a GPU machine");
    c10::InferenceMode guard;
    for (auto& owned : tiny_models_on(at::kCUDA)) {
      Model& m = *owned;
      // Two slot memories over the same model: `graphed` replays graphs, `eager` launches every
      // kernel; requests are admitted and retired between steps and the running rows go through
      // 1, 2, 3 and 5 rows (buckets 1, 2, 4 and 8).
      SlotKvMemory graphed(m, 8, 600, 299), eager(m, 8, 600, 299);
      std::map<int64_t, std::vector<int32_t>> seqs;
      int64_t next_id = 0;
      const auto admit = [&](int64_t len) {
        const int64_t id = next_id++;
        seqs[id] = test::tiny_prompt(len, static_cast<int32_t>(id) + 1);
        m.set_cuda_graphs(true, 8);
        const at::Tensor lg = graphed.prefill({{id, &seqs[id], 40}});
        m.set_cuda_graphs(false, 8);
        const at::Tensor le = eager.prefill({{id, &seqs[id], 40}});
        QVERIFY(at::equal(lg, le));
      };
      const auto retire = [&](int64_t id) {
        graphed.retire({id});
        eager.retire({id});
        seqs.erase(id);
      };
      admit(5);
      for (int step = 0; step < 24; ++step) {
        if (step == 2) admit(9);
        if (step == 4) admit(3);
        if (step == 6) retire(0);
        if (step == 8) {
          admit(12);  // takes the slot the retired request freed
          admit(4);
          admit(7);
        }
        if (step == 15) retire(2);
        std::vector<int64_t> ids;
        std::vector<int32_t> tokens;
        for (const auto& [id, s] : seqs) {
          ids.push_back(id);
          tokens.push_back(static_cast<int32_t>((s.back() * 31 + step) % 290));
        }
        m.set_cuda_graphs(true, 8);
        const at::Tensor lg = graphed.decode(ids, tokens).to(at::kCPU);
        m.set_cuda_graphs(false, 8);
        const at::Tensor le = eager.decode(ids, tokens).to(at::kCPU);
        const double diff = test::max_abs_diff(lg, le);
        QVERIFY2(diff < 1e-5, qPrintable(QString("%1 step %2 rows %3: max |graph - eager| %4")
                                             .arg(QString::fromStdString(m.shape().architecture))
                                             .arg(step)
                                             .arg(ids.size())
                                             .arg(diff)));
        QCOMPARE(argmax_rows(lg), argmax_rows(le));
        for (size_t i = 0; i < ids.size(); ++i) seqs[ids[i]].push_back(tokens[i]);
      }
      const DecodeGraphStats* st = graphed.graph_stats();
      QVERIFY(st != nullptr);
      QVERIFY2(st->fallback.empty(), st->fallback.c_str());
      QCOMPARE(st->replays, int64_t{24});
      QVERIFY2(st->captured >= 4, "buckets 1, 2, 4 and 8 each need a graph");
      QVERIFY(eager.graph_stats() == nullptr);
    }
  }

  void cuda_scheduler_and_generate_equal_eager() {
    if (!cuda_available()) QSKIP("no CUDA device here: the CUDA graph rows run on a GPU machine");
    for (auto& owned : tiny_models_on(at::kCUDA)) {
      Model& m = *owned;
      // Continuous batching with requests arriving and leaving: the same tokens as eager.
      BatchOptions o;
      o.max_batch = 7;
      m.set_cuda_graphs(false, 8);
      const BatchRunResult eager = run_continuous_batching(m, tok, arriving_requests(), o);
      m.set_cuda_graphs(true, 8);
      const BatchRunResult graphed = run_continuous_batching(m, tok, arriving_requests(), o);
      QCOMPARE(graphed.requests.size(), eager.requests.size());
      for (size_t i = 0; i < eager.requests.size(); ++i)
        QCOMPARE(graphed.requests[i].generated_ids, eager.requests[i].generated_ids);
      // generate(): a left-padded batch of 3 (bucket 4); the second run reuses the first's graphs.
      GenerateOptions g;
      g.max_new_tokens = 12;
      g.stop_at_eos = false;
      g.report_top = 0;
      const std::vector<std::vector<int32_t>> prompts = {test::tiny_prompt(4, 1), test::tiny_prompt(9, 2),
                                                         test::tiny_prompt(6, 3)};
      m.set_cuda_graphs(false, 8);
      const GenerateResult e = generate(m, tok, prompts, g);
      QVERIFY(!e.cuda_graphs.unavailable.empty());
      m.set_cuda_graphs(true, 8);
      const GenerateResult first = generate(m, tok, prompts, g);
      const GenerateResult second = generate(m, tok, prompts, g);
      for (size_t r = 0; r < prompts.size(); ++r) {
        QCOMPARE(first.sequences[r].generated_ids, e.sequences[r].generated_ids);
        QCOMPARE(second.sequences[r].generated_ids, e.sequences[r].generated_ids);
      }
      QVERIFY2(first.cuda_graphs.fallback.empty(), first.cuda_graphs.fallback.c_str());
      QCOMPARE(first.cuda_graphs.replays, int64_t{11});
      QVERIFY(first.cuda_graphs.captured >= 1);
      QCOMPARE(second.cuda_graphs.replays, int64_t{11});
      QCOMPARE(second.cuda_graphs.captured, int64_t{0});
    }
  }
};

QTEST_GUILESS_MAIN(TestCudaGraphs)
#include "test_cuda_graphs.moc"

// Paged KV memory (generate/paged_kv_memory) against the plain generate() and slot KV: every
// request's greedy tokens equal its solo run for both model families, both decode attention
// kernels, any block size, budgets that force preemption, prefix caching, adapters, arrivals and
// cancellation; logits equal a cache-free forward step by step; budget errors name the request.
#include <c10/core/InferenceMode.h>

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>
#include <map>

#include "cli_runner.h"
#include "experiments/paged_kv.h"
#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "generate/paged_kv_memory.h"
#include "lora/lora_adapter.h"
#include "model/engine.h"
#include "model/gpt2_model.h"
#include "model/gpt2_weights.h"
#include "model/llama_model.h"
#include "model/model_export.h"
#include "quant/quant_spec.h"
#include "quant/quantized_model.h"
#include "test_support.h"
#include "tiny_models.h"
#include "util/cpu_features.h"
#include "util/device.h"

using namespace servelab;

namespace {

Gpt2Config tiny_gpt2() { return test::tiny_gpt2_shape(64); }

// A tiny Llama with grouped-query attention and random weights, 64 positions.
std::unique_ptr<LlamaModel> tiny_llama(at::ScalarType dtype = at::kFloat, at::Device device = at::kCPU) {
  return test::tiny_llama(11, 64, dtype, device);
}

std::vector<int32_t> prompt(int64_t len, int32_t salt) { return test::tiny_prompt(len, salt); }

// Mixed lengths and budgets; every third request starts with the same 12-token system prompt.
std::vector<BatchRequest> mixed_requests(int64_t n) {
  std::vector<BatchRequest> rs;
  for (int64_t i = 0; i < n; ++i) {
    BatchRequest r;
    if (i % 3 == 0) r.prompt_ids = prompt(12, 99);
    const std::vector<int32_t> own = prompt(1 + (i * 5) % 9, static_cast<int32_t>(i));
    r.prompt_ids.insert(r.prompt_ids.end(), own.begin(), own.end());
    r.max_new_tokens = i % 4 == 0 ? 14 : 1 + (i * 3) % 6;
    r.stop_at_eos = false;
    rs.push_back(r);
  }
  return rs;
}

class Events : public BatchSink {
 public:
  std::vector<int64_t> preempted, hits;
  int64_t retired = 0;
  void on_preempt(int64_t id, int64_t, double) override { preempted.push_back(id); }
  void on_prefix_hit(int64_t id, int64_t, int64_t) override { hits.push_back(id); }
  void on_retire(const RequestResult&) override { ++retired; }
};

test::IdTokenizer tok(300, 299);

std::vector<int32_t> solo(const Model& m, const BatchRequest& r,
                          std::shared_ptr<const LoraAdapter> adapter = {}) {
  GenerateOptions o;
  o.max_new_tokens = r.max_new_tokens;
  o.stop_at_eos = r.stop_at_eos;
  o.report_top = 0;
  if (adapter) o.adapters = {adapter};
  return generate(m, tok, {r.prompt_ids}, o).sequences[0].generated_ids;
}

at::Tensor full_forward(const Model& m, const std::vector<int32_t>& seq, const LoraBatch* lora = nullptr) {
  const int64_t n = static_cast<int64_t>(seq.size());
  ForwardInput in;
  in.input_ids =
      at::tensor(std::vector<int64_t>(seq.begin(), seq.end()), at::kLong).view({1, n}).to(m.device());
  in.position_ids = at::arange(n, at::kLong).view({1, n}).to(m.device());
  in.lora = lora;
  return m.forward(in).squeeze(0);
}

}  // namespace

class TestPagedKv : public QObject {
  Q_OBJECT
  std::unique_ptr<Gpt2Model> gpt2_;
  std::unique_ptr<LlamaModel> llama_;

  const Model& model(int family) const {
    return family == 0 ? static_cast<const Model&>(*gpt2_) : static_cast<const Model&>(*llama_);
  }

  void check_equals_solo(const Model& m, const std::vector<BatchRequest>& rs, const BatchRunResult& got) {
    QCOMPARE(got.requests.size(), rs.size());
    for (size_t i = 0; i < rs.size(); ++i)
      QVERIFY2(got.requests[i].generated_ids == solo(m, rs[i]), qPrintable(QString("request %1").arg(i)));
  }

 private Q_SLOTS:
  void initTestCase() {
    const Gpt2Config c = tiny_gpt2();
    gpt2_ = std::make_unique<Gpt2Model>(c, make_random_gpt2_weights(c, 7, at::kCPU, at::kFloat));
    llama_ = tiny_llama();
  }

  void manager_matches_full_forward_data() {
    QTest::addColumn<int>("family");
    QTest::addColumn<int>("kernel");
    QTest::addColumn<int>("block_size");
    for (int f : {0, 1})
      for (int k : {1, 2})
        for (int b : {1, 4, 16})
          QTest::newRow(qPrintable(QString("%1 %2 blocks of %3")
                                       .arg(f == 0 ? "gpt2" : "llama")
                                       .arg(k == 1 ? "in place" : "gather")
                                       .arg(b)))
              << f << k << b;
  }
  void manager_matches_full_forward() {
    // Logits, not just argmax: prefill (prefix hits included) and every decode row equal a
    // cache-free forward of the whole sequence, through skipped rows, retirement and block reuse.
    QFETCH(int, family);
    QFETCH(int, kernel);
    QFETCH(int, block_size);
    c10::InferenceMode guard;
    const Model& m = model(family);
    PagedKvConfig cfg;
    cfg.num_blocks = 64 / block_size * 4;
    cfg.block_size = block_size;
    cfg.kernel = static_cast<PagedAttentionKernel>(kernel);
    PagedKvMemory kv(m, cfg, 299);
    std::vector<std::vector<int32_t>> seq = {prompt(9, 1), prompt(7, 2), prompt(1, 3), prompt(9, 1)};
    seq[3].insert(seq[3].end(), {5, 6, 7, 8, 9, 10, 11, 12});  // shares request 0's prompt
    std::vector<PrefillRequest> first = {{0, &seq[0], 20}, {1, &seq[1], 20}, {2, &seq[2], 20}};
    at::Tensor l = kv.prefill(first);
    for (int64_t i = 0; i < 3; ++i)
      QVERIFY(test::max_abs_diff(l[i], full_forward(m, seq[static_cast<size_t>(i)])) < 1e-4);
    auto step = [&](std::vector<int64_t> ids, std::vector<int32_t> tokens) {
      at::Tensor logits = kv.decode(ids, tokens);
      for (size_t i = 0; i < ids.size(); ++i) {
        auto& q = seq[static_cast<size_t>(ids[i])];
        q.push_back(tokens[i]);
        QVERIFY2(test::max_abs_diff(logits[static_cast<int64_t>(i)], full_forward(m, q)) < 1e-4,
                 qPrintable(QString("request %1 at %2").arg(ids[i]).arg(q.size())));
      }
    };
    step({2, 0}, {5, 9});  // request 1 skips a step
    step({0, 1, 2}, {11, 12, 13});
    QCOMPARE(kv.take_copy_stats().bytes, int64_t{0});  // nothing is ever moved
    kv.retire({1});
    std::vector<PrefillRequest> second = {{3, &seq[3], 8}};
    QVERIFY(kv.reserve(second[0]));
    // Request 3 found request 0's full prompt blocks cached (block size 1: all but its last token
    // of the shared 9, as later positions differ).
    const int64_t expect = block_size == 16 ? 0 : (9 / block_size) * block_size;
    QCOMPARE(kv.cached_tokens(3), expect);
    at::Tensor l3 = kv.prefill(second);
    QVERIFY(test::max_abs_diff(l3[0], full_forward(m, seq[3])) < 1e-4);
    for (int i = 0; i < 20; ++i)
      step({3, 0, 2}, {static_cast<int32_t>(21 + i), 22, static_cast<int32_t>(40 - i)});
    kv.retire({0, 2, 3});
    QCOMPARE(kv.blocks().used_blocks(), int64_t{0});
  }

  void prefill_packs_requests_end_to_end() {
    // A long prompt admitted with short suffixes over a cached system prompt: the forward runs over
    // their new positions laid end to end in one row, not a row each padded to the longest (which
    // cost the benchmark's 256-token shared prompt 10x its work), and every request's logits still
    // equal a full forward. Rows split only at the model's context and between adapters.
    c10::InferenceMode guard;
    using Shape = std::pair<int64_t, int64_t>;
    for (int family : {0, 1}) {
      const Model& m = model(family);
      PagedKvConfig cfg;
      cfg.num_blocks = 64;
      cfg.block_size = 4;
      PagedKvMemory kv(m, cfg, 299);
      std::vector<std::vector<int32_t>> seq = {prompt(16, 42), prompt(30, 9)};
      for (int i = 0; i < 4; ++i) {
        std::vector<int32_t> s = prompt(16, 42);
        const std::vector<int32_t> own = prompt(2 + i, 60 + i);
        s.insert(s.end(), own.begin(), own.end());
        seq.push_back(s);
      }
      kv.prefill({{0, &seq[0], 4}});  // caches the system prompt's four blocks
      QCOMPARE(kv.last_prefill_shape(), (Shape{1, 16}));
      kv.retire({0});
      std::vector<PrefillRequest> batch;
      for (int64_t i = 1; i < 6; ++i) batch.push_back({i, &seq[static_cast<size_t>(i)], 4});
      const at::Tensor l = kv.prefill(batch);
      for (int64_t i = 2; i < 6; ++i) QCOMPARE(kv.cached_tokens(i), int64_t{16});
      QCOMPARE(kv.last_prefill_shape(), (Shape{1, 30 + 2 + 3 + 4 + 5}));
      QCOMPARE(l.size(0), int64_t{5});
      for (int64_t i = 1; i < 6; ++i)
        QVERIFY2(test::max_abs_diff(l[i - 1], full_forward(m, seq[static_cast<size_t>(i)])) < 1e-4,
                 qPrintable(QString("request %1").arg(i)));
      kv.retire({1, 2, 3, 4, 5});
      // Three 30-token prompts in a 64-position context: two share a row, the third starts another.
      std::vector<std::vector<int32_t>> big = {prompt(30, 1), prompt(30, 2), prompt(30, 3)};
      const at::Tensor lb = kv.prefill({{10, &big[0], 4}, {11, &big[1], 4}, {12, &big[2], 4}});
      QCOMPARE(kv.last_prefill_shape(), (Shape{2, 60}));
      for (int64_t i = 0; i < 3; ++i)
        QVERIFY(test::max_abs_diff(lb[i], full_forward(m, big[static_cast<size_t>(i)])) < 1e-4);
    }
    // Adapters per request: a row per adapter, each request's logits those of its own adapter.
    AdapterSource src;
    src.name = "random-5";
    src.rank = 4;
    src.seed = 5;
    const std::shared_ptr<const LoraAdapter> adapter = load_adapter(src, *gpt2_);
    PagedKvConfig cfg;
    cfg.num_blocks = 64;
    cfg.block_size = 4;
    PagedKvMemory kv(*gpt2_, cfg, 299);
    KvMemoryManager::LoraRouting routing;
    routing.adapter_of = [&](int64_t id) { return id % 2 ? adapter.get() : nullptr; };
    kv.set_lora(routing);
    std::vector<std::vector<int32_t>> seq = {prompt(5, 1), prompt(9, 2), prompt(3, 3), prompt(7, 4)};
    std::vector<PrefillRequest> batch;
    for (int64_t i = 0; i < 4; ++i) batch.push_back({i, &seq[static_cast<size_t>(i)], 4});
    const at::Tensor l = kv.prefill(batch);
    QCOMPARE(kv.last_prefill_shape(), (Shape{2, 16}));
    const LoraBatch with({adapter.get()}, MultiLoraStrategy::Segmented);
    for (int64_t i = 0; i < 4; ++i)
      QVERIFY(test::max_abs_diff(
                  l[i], full_forward(*gpt2_, seq[static_cast<size_t>(i)], i % 2 ? &with : nullptr)) < 1e-4);
  }

  void greedy_equals_solo_and_slot_kv_data() {
    QTest::addColumn<int>("family");
    QTest::addColumn<int>("block_size");
    QTest::addColumn<int>("blocks");
    QTest::addColumn<bool>("caching");
    QTest::addColumn<int>("kernel");
    for (int f : {0, 1}) {
      const char* fam = f == 0 ? "gpt2" : "llama";
      QTest::newRow(qPrintable(QString("%1 ample, blocks of 4").arg(fam))) << f << 4 << 0 << true << 0;
      QTest::newRow(qPrintable(QString("%1 ample, no caching").arg(fam))) << f << 4 << 0 << false << 0;
      QTest::newRow(qPrintable(QString("%1 ample, gather").arg(fam))) << f << 8 << 0 << true << 2;
      // 20 blocks of 2 positions: the longest request (26 positions) alone needs 13.
      QTest::newRow(qPrintable(QString("%1 tight, blocks of 2").arg(fam))) << f << 2 << 20 << true << 0;
      QTest::newRow(qPrintable(QString("%1 tight, blocks of 1, no caching").arg(fam)))
          << f << 1 << 34 << false << 0;
    }
  }
  void greedy_equals_solo_and_slot_kv() {
    QFETCH(int, family);
    QFETCH(int, block_size);
    QFETCH(int, blocks);
    QFETCH(bool, caching);
    QFETCH(int, kernel);
    const Model& m = model(family);
    auto rs = mixed_requests(13);
    BatchOptions o;
    o.max_batch = 6;
    o.kv = KvStrategy::Paged;
    o.kv_block_size = block_size;
    o.kv_blocks = blocks;
    o.prefix_caching = caching;
    o.paged_attention = static_cast<PagedAttentionKernel>(kernel);
    Events ev;
    const BatchRunResult r = run_continuous_batching(m, tok, rs, o, &ev);
    check_equals_solo(m, rs, r);
    o.kv = KvStrategy::SlotKv;
    const BatchRunResult slot = run_continuous_batching(m, tok, rs, o);
    for (size_t i = 0; i < rs.size(); ++i)
      QCOMPARE(r.requests[i].generated_ids, slot.requests[i].generated_ids);
    QCOMPARE(r.method, std::string("continuous (paged KV)"));
    QCOMPARE(ev.retired, int64_t{13});
    int64_t preempted = 0, hits = 0;
    for (const BatchStep& s : r.steps) {
      preempted += static_cast<int64_t>(s.preempted.size());
      hits += s.prefix_hit_tokens;
      QVERIFY(s.kv_used_bytes <= s.kv_reserved_bytes);
      QVERIFY(s.kv_reserved_bytes <= s.kv_total_bytes);
      QVERIFY(s.kv_blocks_used + s.kv_blocks_cached <=
              (blocks ? blocks : s.kv_blocks_used + s.kv_blocks_cached));
    }
    QCOMPARE(r.preemptions, preempted);
    QCOMPARE(static_cast<int64_t>(ev.preempted.size()), preempted);
    QCOMPARE(r.prefix_hit_tokens, hits);
    if (blocks > 0) {
      QVERIFY2(r.preemptions > 0, "the tight budget should force preemption");
    } else {
      QCOMPARE(r.preemptions, int64_t{0});
    }
    if (caching) {
      QVERIFY(r.prefix_hit_tokens > 0);
      QVERIFY(!ev.hits.empty());
    } else {
      QCOMPARE(r.prefix_hit_tokens, int64_t{0});
    }
    for (const RequestResult& q : r.requests) QCOMPARE(q.finish_reason, std::string("length"));
  }

  void budget_too_small_for_a_request_fails_it_alone() {
    auto rs = mixed_requests(5);
    rs[2].prompt_ids = prompt(30, 5);
    rs[2].max_new_tokens = 4;  // 33 positions: 9 blocks of 4
    BatchOptions o;
    o.kv = KvStrategy::Paged;
    o.kv_block_size = 4;
    o.kv_blocks = 8;
    o.max_batch = 4;
    const BatchRunResult r = run_continuous_batching(*gpt2_, tok, rs, o);
    QCOMPARE(r.requests[2].finish_reason, std::string("error"));
    QVERIFY(r.requests[2].generated_ids.empty());
    QVERIFY2(QString::fromStdString(r.requests[2].error).contains("request 3 needs 9 KV blocks"),
             r.requests[2].error.c_str());
    QVERIFY(QString::fromStdString(r.requests[2].error).contains("the KV budget holds 8"));
    for (size_t i : {0, 1, 3, 4}) QCOMPARE(r.requests[i].generated_ids, solo(*gpt2_, rs[i]));
    // A bad budget on the command line is the caller's error.
    QVERIFY(QString::fromStdString(test::error_of(ErrorKind::Input, [&] {
              BatchOptions b = o;
              b.kv_blocks = -3;
              run_continuous_batching(*gpt2_, tok, rs, b);
            })).contains("KV blocks must be 0"));
  }

  void prefix_caching_hits_shared_system_prompt() {
    // Six requests behind one 16-token system prompt, one at a time: each after the first finds
    // the prompt's full blocks cached (blocks of 4: 16 positions), and outputs are unchanged.
    std::vector<BatchRequest> rs;
    for (int i = 0; i < 6; ++i) {
      BatchRequest r;
      r.prompt_ids = prompt(16, 42);
      const auto own = prompt(3 + i, 100 + i);
      r.prompt_ids.insert(r.prompt_ids.end(), own.begin(), own.end());
      r.max_new_tokens = 5;
      r.stop_at_eos = false;
      rs.push_back(r);
    }
    BatchOptions o;
    o.kv = KvStrategy::Paged;
    o.kv_block_size = 4;
    o.max_batch = 1;
    Events ev;
    const BatchRunResult cached = run_continuous_batching(*llama_, tok, rs, o, &ev);
    check_equals_solo(*llama_, rs, cached);
    QCOMPARE(cached.requests[0].cached_tokens, int64_t{0});
    for (size_t i = 1; i < rs.size(); ++i) QCOMPARE(cached.requests[i].cached_tokens, int64_t{16});
    QCOMPARE(cached.prefix_hit_tokens, int64_t{5 * 16});
    QCOMPARE(ev.hits, (std::vector<int64_t>{1, 2, 3, 4, 5}));
    o.prefix_caching = false;
    const BatchRunResult plain = run_continuous_batching(*llama_, tok, rs, o);
    QCOMPARE(plain.prefix_hit_tokens, int64_t{0});
    for (size_t i = 0; i < rs.size(); ++i)
      QCOMPARE(cached.requests[i].generated_ids, plain.requests[i].generated_ids);
  }

  void adapters_per_request_never_share_prefixes() {
    c10::InferenceMode guard;
    BatchOptions o;
    o.kv = KvStrategy::Paged;
    o.kv_block_size = 4;
    o.max_batch = 4;
    for (uint64_t seed : {3, 4}) {
      AdapterSource s;
      s.name = "random-" + std::to_string(seed);
      s.rank = 4;
      s.seed = seed;
      o.adapters.push_back(s);
    }
    const std::vector<std::string> names = {"", "random-3", "random-4", "random-3", "", "random-4"};
    std::vector<BatchRequest> rs;
    for (size_t i = 0; i < names.size(); ++i) {
      BatchRequest r;
      r.prompt_ids = prompt(13, 7);  // the same prompt for all: only equal adapters may share
      r.max_new_tokens = 4 + static_cast<int64_t>(i % 3);
      r.stop_at_eos = false;
      r.adapter = names[i];
      rs.push_back(r);
    }
    const BatchRunResult r = run_continuous_batching(*gpt2_, tok, rs, o);
    std::map<std::string, std::shared_ptr<const LoraAdapter>> loaded;
    for (const AdapterSource& s : o.adapters) loaded[s.name] = load_adapter(s, *gpt2_);
    for (size_t i = 0; i < rs.size(); ++i)
      QVERIFY2(
          r.requests[i].generated_ids == solo(*gpt2_, rs[i], names[i].empty() ? nullptr : loaded[names[i]]),
          qPrintable(QString("request %1").arg(i)));
    // The first request of each adapter computes the prompt; the second of each finds 12 cached.
    const std::vector<int64_t> expect = {0, 0, 0, 12, 12, 12};
    for (size_t i = 0; i < rs.size(); ++i) QCOMPARE(r.requests[i].cached_tokens, expect[i]);
  }

  void arrivals_and_cancellation() {
    auto rs = mixed_requests(8);
    for (size_t i = 0; i < rs.size(); ++i) rs[i].arrival_ms = i < 3 ? 0.0 : 20.0 * static_cast<double>(i);
    BatchOptions o;
    o.kv = KvStrategy::Paged;
    o.kv_block_size = 2;
    o.kv_blocks = 20;
    o.max_batch = 4;
    const BatchRunResult r = run_continuous_batching(*llama_, tok, rs, o);
    check_equals_solo(*llama_, rs, r);
    for (const RequestResult& q : r.requests) QVERIFY(q.admitted_ms >= q.arrival_ms);

    std::atomic<bool> cancel{false};
    class CancelAfter : public BatchSink {
     public:
      CancelAfter(std::atomic<bool>& f, int n) : flag(f), left(n) {}
      void on_step(const BatchStep&) override {
        if (--left == 0) flag = true;
      }
      std::atomic<bool>& flag;
      int left;
    } sink(cancel, 6);
    auto all_now = mixed_requests(8);
    o.cancel = &cancel;
    const BatchRunResult c = run_continuous_batching(*llama_, tok, all_now, o, &sink);
    QVERIFY(c.cancelled);
    int cancelled = 0;
    for (size_t i = 0; i < all_now.size(); ++i) {
      const auto full = solo(*llama_, all_now[i]);
      const auto& got = c.requests[i].generated_ids;
      QCOMPARE(got, std::vector<int32_t>(full.begin(), full.begin() + static_cast<ptrdiff_t>(got.size())));
      cancelled += c.requests[i].finish_reason == "cancelled" ? 1 : 0;
    }
    QVERIFY(cancelled > 0);
  }

  void half_precision_and_quantized_weights() {
    c10::InferenceMode guard;
    // fp16/bf16 Llama: the paged decode (in place, fp32 sums) and the gather path both stay within
    // half-precision rounding of a full forward.
    for (at::ScalarType dt : {at::kBFloat16, at::kHalf}) {
      auto m = tiny_llama(dt);
      // Logits of about 4: a few units in the last place of bf16 (8 bits) or fp16 (11 bits).
      const double tol = dt == at::kBFloat16 ? 0.125 : 0.02;
      for (PagedAttentionKernel k : {PagedAttentionKernel::InPlace, PagedAttentionKernel::Gather}) {
        PagedKvConfig cfg;
        cfg.num_blocks = 16;
        cfg.block_size = 4;
        cfg.kernel = k;
        PagedKvMemory kv(*m, cfg, 299);
        std::vector<int32_t> a = prompt(6, 1), b = prompt(9, 2);
        kv.prefill({{0, &a, 8}, {1, &b, 8}});
        for (int i = 0; i < 6; ++i) {
          at::Tensor l = kv.decode({0, 1}, {static_cast<int32_t>(i + 3), static_cast<int32_t>(i + 50)});
          a.push_back(i + 3);
          b.push_back(i + 50);
          QVERIFY(test::max_abs_diff(l[0].to(at::kFloat), full_forward(*m, a).to(at::kFloat)) < tol);
          QVERIFY(test::max_abs_diff(l[1].to(at::kFloat), full_forward(*m, b).to(at::kFloat)) < tol);
        }
      }
    }
    // Weights quantized to int8 (kept quantized, dequantized block by block): tokens equal solo.
    const Gpt2Config c = tiny_gpt2();
    auto q = build_quantized_model(quantize_gpt2(c, make_random_gpt2_weights(c, 7, at::kCPU, at::kFloat),
                                                 parse_quant_mode("int8-channel")),
                                   at::kFloat, QuantExec::Jit);
    auto rs = mixed_requests(7);
    BatchOptions o;
    o.kv = KvStrategy::Paged;
    o.kv_block_size = 4;
    o.kv_blocks = 24;
    o.max_batch = 5;
    check_equals_solo(*q, rs, run_continuous_batching(*q, tok, rs, o));
  }

  void cuda_gather_matches_full_forward_and_solo() {
    // On the GPU paged KV runs the gather kernel (the in-place one is CPU code): its logits equal a
    // full forward on the same device step by step, and a budget tight enough to preempt still gives
    // every request its solo tokens, for both families, in fp32 and (logits only) fp16.
    if (!cuda_available()) QSKIP("no CUDA device here: the paged KV CUDA rows run on a GPU machine");
    c10::InferenceMode guard;
    const at::Device cuda(at::kCUDA);
    const Gpt2Config c = tiny_gpt2();
    for (at::ScalarType dt : {at::kFloat, at::kHalf}) {
      const double tol = dt == at::kFloat ? 1e-4 : 0.02;
      std::vector<std::unique_ptr<Model>> models;
      models.push_back(std::make_unique<Gpt2Model>(c, make_random_gpt2_weights(c, 7, cuda, dt)));
      models.push_back(tiny_llama(dt, cuda));
      for (size_t f = 0; f < models.size(); ++f) {
        const Model* m = models[f].get();
        PagedKvConfig cfg;
        cfg.num_blocks = 24;
        cfg.block_size = 4;
        PagedKvMemory kv(*m, cfg, 299);
        QVERIFY(kv.kernel() == PagedAttentionKernel::Gather);
        std::vector<int32_t> a = prompt(6, 1), b = prompt(9, 2);
        at::Tensor l = kv.prefill({{0, &a, 12}, {1, &b, 12}});
        QVERIFY(test::max_abs_diff(l[0].to(at::kCPU, at::kFloat),
                                   full_forward(*m, a).to(at::kCPU, at::kFloat)) < tol);
        for (int i = 0; i < 10; ++i) {
          l = kv.decode({0, 1}, {static_cast<int32_t>(i + 3), static_cast<int32_t>(i + 50)});
          a.push_back(i + 3);
          b.push_back(i + 50);
          for (int64_t r = 0; r < 2; ++r)
            QVERIFY2(test::max_abs_diff(l[r].to(at::kCPU, at::kFloat),
                                        full_forward(*m, r == 0 ? a : b).to(at::kCPU, at::kFloat)) < tol,
                     qPrintable(QString("%1 row %2 step %3").arg(f == 0 ? "gpt2" : "llama").arg(r).arg(i)));
        }
        if (dt != at::kFloat) continue;  // near ties may part fp16 greedy runs; logits are checked above
        auto rs = mixed_requests(13);
        BatchOptions o;
        o.max_batch = 6;
        o.kv = KvStrategy::Paged;
        o.kv_block_size = 2;
        o.kv_blocks = 20;
        Events ev;
        const BatchRunResult r = run_continuous_batching(*m, tok, rs, o, &ev);
        QVERIFY2(r.preemptions > 0, "the tight budget should force preemption");
        check_equals_solo(*m, rs, r);
      }
    }
  }

  void experiment_and_cli_report_every_method() {
    const std::string shared = test::env_or_empty("SERVELAB_SHARED");
    QTemporaryDir tmp;
    const std::string dir = tmp.filePath("tiny").toStdString();
    export_random_gpt2_folder(dir, tiny_gpt2_config(), 3, shared.empty() ? "" : shared + "/data/gpt2");
    auto engine = Engine::load_folder(dir, {});
    PagedKvParams p;
    p.requests = 6;
    p.max_batch = 6;
    p.long_every = 3;
    p.long_tokens = 8;
    p.short_tokens = 3;
    p.prompt_tokens_min = 2;
    p.prompt_tokens_max = 6;
    p.shared_prefix_tokens = 16;
    p.block_size = 4;
    p.budget_blocks = 12;  // 48 positions: one slot of the longest request (16 + 6 + 8 = 30 at most)
    p.decode_batch = 2;
    p.decode_context = 8;
    p.decode_steps = 3;
    p.warmup = false;
    const PagedKvResult r = run_paged_kv(*engine, p);
    QCOMPARE(r.methods.size(), size_t{3});
    QCOMPARE(r.methods[0].method, std::string("slot KV"));
    QCOMPARE(r.methods[0].capacity_requests,
             r.budget_bytes / engine->model().kv_cache_bytes(1, r.longest_positions));
    QCOMPARE(r.methods[0].max_running, r.methods[0].capacity_requests);
    QCOMPARE(r.methods[1].kv_blocks, int64_t{12});
    QVERIFY(r.methods[1].max_running > r.methods[0].max_running);
    QCOMPARE(r.concurrency_ratio,
             static_cast<double>(r.methods[1].max_running) / static_cast<double>(r.methods[0].max_running));
    QCOMPARE(r.methods[1].prefix_hit_tokens, int64_t{0});
    QVERIFY(r.methods[2].prefix_hit_tokens >= 4);  // later requests find the system prompt's blocks
    QCOMPARE(r.methods[2].prefix_hit_rate, static_cast<double>(r.methods[2].prefix_hit_tokens) /
                                               static_cast<double>(r.methods[2].prompt_tokens));
    for (const PagedKvMethod& m : r.methods) {
      QVERIFY2(m.same_as_solo, m.method.c_str());
      QCOMPARE(m.generated_tokens, int64_t{2 * 8 + 4 * 3});
      QVERIFY(m.kv_peak_used_bytes <= m.kv_peak_reserved_bytes);
      QVERIFY(m.kv_peak_reserved_bytes <= m.kv_allocated_bytes);
      QVERIFY(m.kv_fragmentation >= 0 && m.kv_fragmentation < 1);
      QVERIFY(m.total_ms > 0 && m.ttft_p50 > 0 && m.ttft_p99 >= m.ttft_p50);
    }
    // Slot KV reserves its slot's whole length; blocks waste at most a block per request.
    QVERIFY(r.methods[0].kv_fragmentation > r.methods[1].kv_fragmentation);
    QVERIFY(r.decode.slot_ms > 0 && r.decode.paged_in_place_ms > 0 && r.decode.paged_gather_ms > 0);
    const nlohmann::json j = r.to_json();
    QCOMPARE(j["experiment"].get<std::string>(), std::string("paged-kv"));
    QCOMPARE(j["runs"].size(), size_t{3});
    QVERIFY(j["runs"][2]["kv_steps"].size() == r.runs[2].steps.size());

    // The CLI parses and prints; bad command lines exit 2, a budget too small for slot KV exits 1.
    const QString cli = SERVELAB_CLI;
    const QStringList base = {"bench",          "paged-kv", "--model",          QString::fromStdString(dir),
                              "--requests",     "3",        "--long-tokens",    "4",
                              "--short-tokens", "2",        "--block-size",     "4",
                              "--decode-batch", "2",        "--decode-context", "8",
                              "--decode-steps", "2"};
    test::CliRun ok = test::run_cli(cli, base + QStringList{"--budget-blocks", "12", "--json"});
    QVERIFY2(ok.code == 0, qPrintable(ok.err));
    const QJsonObject o = QJsonDocument::fromJson(ok.out.toUtf8()).object();
    QCOMPARE(o["methods"].toArray().size(), 3);
    for (const auto& m : o["methods"].toArray()) QVERIFY(m.toObject()["same_as_solo"].toBool());
    test::CliRun none = test::run_cli(cli, base);
    QCOMPARE(none.code, 2);
    QVERIFY2(none.err.contains("needs a KV budget"), qPrintable(none.err));
    test::CliRun both = test::run_cli(cli, base + QStringList{"--budget-blocks", "12", "--budget-mb", "3"});
    QCOMPARE(both.code, 2);
    test::CliRun small = test::run_cli(cli, base + QStringList{"--budget-blocks", "1"});
    QCOMPARE(small.code, 1);
    QVERIFY2(small.err.contains("holds no slot"), qPrintable(small.err));
    test::CliRun huge = test::run_cli(cli, base + QStringList{"--budget-mb", "1e300"});
    QCOMPARE(huge.code, 1);
    QVERIFY2(huge.err.contains("KV budget (MB)"), qPrintable(huge.err));
  }
};

QTEST_GUILESS_MAIN(TestPagedKv)
#include "test_paged_kv.moc"

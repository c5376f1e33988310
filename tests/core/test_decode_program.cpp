// The fused decode program (model/llama_decode_program): a Llama-family decode step run as one
// parallel region must give the op-by-op forward's logits bit for bit (the same kernels and loops
// in another order of calls), for every weight scheme the JIT kernels hold, 1 to 7 rows with and
// without padding, Qwen2's biases and Qwen3's QK norms, slot KV's per-row positions, paged KV's
// pool, both vector ISAs; steps of several new tokens per request (a speculative verification) must
// agree with the op-by-op forward; and every step it does not take must run op by op, with `info`
// saying why.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <QtTest>
#include <functional>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "generate/kv_memory_manager.h"
#include "model/llama_decode_program.h"
#include "model/llama_model.h"
#include "quant/dequant_cpu.h"
#include "quant/quantized_llama.h"
#include "test_support.h"
#include "tiny_models.h"
#include "util/cpu_features.h"

using namespace servelab;

namespace {

// A tiny random Llama whose matrices the decode GEMVs take (widths in multiples of 32), with the
// config's options set by `tweak` (biases, QK norms, a window).
LlamaModel tiny(const std::function<void(LlamaConfig&)>& tweak = {}, uint64_t seed = 7) {
  LlamaConfig c;
  c.vocab_size = 300;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 16;
  c.context = 64;
  c.eos_token_ids = {299};
  if (tweak) tweak(c);
  at::Generator gen = at::detail::createCPUGenerator(seed);
  LlamaTensorFetch fetch = [&](const std::string& name, const std::vector<int64_t>& shape, bool optional) {
    if (optional) return at::Tensor();
    at::Tensor t = at::randn(shape, gen) * 0.2;
    if (name.find("norm") != std::string::npos) t = 1.0 + t;
    return t;
  };
  return LlamaModel(c, assemble_llama_weights(c, fetch));
}

// The model on the JIT kernels over `mode`'s matrices (fp32 activations, or int8 ones: jit-int8).
std::unique_ptr<LlamaModel> jit(const LlamaModel& m, const std::string& mode,
                                QuantExec exec = QuantExec::Jit) {
  const QuantizedMatrices q = quantize_llama(m.config(), m.weights(), parse_quant_mode(mode));
  return build_quantized_llama(m.config(), m.weights(), q, at::kFloat, exec);
}

// A left-padded prompt batch through the dense cache, then `steps` greedy decode steps: every
// forward's logits, fused or op by op.
std::vector<at::Tensor> decode_logits(const LlamaModel& m, bool fused, int64_t rows, int64_t steps) {
  c10::InferenceMode guard;
  const_cast<LlamaModel&>(m).set_fused_decode(fused);
  const int64_t P = 6;
  at::Tensor ids = at::zeros({rows, P}, at::kLong), mask = at::ones({rows, P}, at::kLong),
             pos = at::zeros({rows, P}, at::kLong);
  for (int64_t b = 0; b < rows; ++b) {
    const int64_t pad = b % 3;  // rows 1, 2, 4, 5 are padded on the left
    for (int64_t t = 0; t < P; ++t) {
      ids[b][t] = t < pad ? 0 : (b * 41 + t * 13) % 290;
      mask[b][t] = t < pad ? 0 : 1;
      pos[b][t] = std::max<int64_t>(0, t - pad);
    }
  }
  KvCache cache = m.make_cache(rows, P + steps);
  ForwardInput in;
  in.input_ids = ids;
  in.position_ids = pos;
  in.key_mask = mask;
  std::vector<at::Tensor> out{m.forward(in, &cache)};
  for (int64_t s = 0; s < steps; ++s) {
    in.input_ids = out.back().argmax(-1).view({rows, 1});
    in.position_ids = in.position_ids.select(1, in.position_ids.size(1) - 1).view({rows, 1}) + 1;
    in.key_mask = at::cat({in.key_mask, at::ones({rows, 1}, at::kLong)}, 1);
    out.push_back(m.forward(in, &cache));
  }
  return out;
}

// max |a - b| / max |a|.
double relative_diff(const at::Tensor& a, const at::Tensor& b) {
  return test::max_abs_diff(a, b) / a.abs().max().item<double>();
}

// The most rows of a step the program takes over fp32 activations under the active ISA: the
// register GEMVs', or the tiled products' where those beat dequantize-once (tiled_max_rows).
int64_t program_rows() { return std::max(kFusedGemvMaxRows, tiled_max_rows(active_isa())); }

// fused: whether the program is to take the decode steps (past program_rows() it leaves them to
// the op-by-op forward, whose products then dequantize once).
void compare_fused_to_op_by_op(const LlamaModel& m, int64_t rows, int64_t steps = 4,
                               bool fused_steps = true) {
  const int64_t before = m.fused_decode_steps();
  const std::vector<at::Tensor> reference = decode_logits(m, false, rows, steps);
  QCOMPARE(m.fused_decode_steps(), before);
  const std::vector<at::Tensor> fused = decode_logits(m, true, rows, steps);
  QCOMPARE(m.fused_decode_steps(), before + (fused_steps ? steps : 0));  // every decode step, not the prompt
  for (size_t i = 0; i < reference.size(); ++i)
    QVERIFY2(at::equal(reference[i], fused[i]),
             qPrintable(
                 QString("forward %1 differs by %2").arg(i).arg(test::max_abs_diff(reference[i], fused[i]))));
}

}  // namespace

class TestDecodeProgram : public QObject {
  Q_OBJECT

 private Q_SLOTS:
  void initTestCase() {
    // The program splits every product between the region's threads: two, as CI's cores.
    at::set_num_threads(2);
    if (active_isa() == Isa::Generic)
      QSKIP("the decode program needs AVX2 or AVX-512 (this CPU has neither)");
  }

  void logits_equal_op_by_op_data() {
    QTest::addColumn<QString>("mode");
    QTest::addColumn<int>("rows");
    for (const char* mode : {"int4-g32", "int4-g64", "int8-channel", "zp-uint8", "fp16", "bf16"})
      // 1-7 rows: the register GEMVs; 8 and more: the tiled products (33: a last partial pass).
      for (int rows : {1, 3, 7, 8, 33})
        QTest::newRow(qPrintable(QString("%1 x%2").arg(mode).arg(rows))) << mode << rows;
  }
  void logits_equal_op_by_op() {
    QFETCH(QString, mode);
    QFETCH(int, rows);
    const auto m = jit(tiny(), mode.toStdString());
    QCOMPARE(QString::fromStdString(m->fused_decode_unavailable()), QString());
    compare_fused_to_op_by_op(*m, rows, 4, rows <= program_rows());
  }

  // jit-int8: the integer-activation kernels, their operand quantized per 32 columns in the region.
  void int8_activations_equal_op_by_op_data() {
    QTest::addColumn<QString>("isa");
    QTest::addColumn<int>("rows");
    for (const char* isa : {"avx512", "avx2"})
      // 12 and 32 rows: several passes of at most 7 rows.
      for (int rows : {1, 4, 7, 12, 32})
        QTest::newRow(qPrintable(QString("%1 x%2").arg(isa).arg(rows))) << isa << rows;
  }
  void int8_activations_equal_op_by_op() {
    QFETCH(QString, isa);
    QFETCH(int, rows);
    const Isa wanted = parse_isa(isa.toStdString());
    if (!cpu_supports(wanted)) QSKIP("this CPU lacks that ISA");
    const Isa was = active_isa();
    set_active_isa(wanted, "test");
    // Wide enough that the threads split every operand between them (in steps of 128 columns).
    const auto m = jit(tiny([](LlamaConfig& c) {
                         c.hidden_size = 320;
                         c.intermediate_size = 640;
                         c.head_dim = 80;
                       }),
                       "int4-g32", QuantExec::JitInt8);
    QCOMPARE(QString::fromStdString(m->fused_decode_unavailable()), QString());
    compare_fused_to_op_by_op(*m, rows);
    set_active_isa(was, "test");
  }

  // Qwen2's q/k/v biases, Qwen3's per-head norms, an attention scale of its own, an MLP with biases.
  void biases_and_qk_norms_equal_op_by_op() {
    const auto m = jit(tiny([](LlamaConfig& c) {
                         c.attention_bias = true;
                         c.o_bias = true;
                         c.mlp_bias = true;
                         c.qk_norm = true;
                         c.query_pre_attn_scalar = 24;
                       }),
                       "int4-g32");
    compare_fused_to_op_by_op(*m, 1);
    compare_fused_to_op_by_op(*m, 5);
    compare_fused_to_op_by_op(*m, 16, 4, 16 <= program_rows());
  }

  // Gemma 3: zero-centred norms (1 + w), a norm of each block's output before the residual,
  // GeGLU, per-head QK norms, a query scale of its own, and sliding layers with their own rotary
  // table, within their window. Gemma 2's final soft-capping is the logits' (after the program).
  void gemma_equals_op_by_op() {
    const auto m = jit(tiny([](LlamaConfig& c) {
                         c.n_layer = 3;
                         c.gemma_norms = true;
                         c.hidden_act = "gelu_pytorch_tanh";
                         c.qk_norm = true;
                         c.query_pre_attn_scalar = 24;
                         c.rope_theta = 1000000;
                         c.local_rope_theta = 10000;
                         c.sliding_window = 32;
                         c.sliding_layers = {true, false, true};  // layer 1 is global
                         c.final_logit_softcap = 30;
                       }),
                       "int4-g32");
    QCOMPARE(QString::fromStdString(m->fused_decode_unavailable()), QString());
    compare_fused_to_op_by_op(*m, 1);
    compare_fused_to_op_by_op(*m, 5);
    compare_fused_to_op_by_op(*m, 16, 4, 16 <= program_rows());
  }

  void avx2_equals_op_by_op() {
    if (!cpu_supports(Isa::Avx2)) QSKIP("this CPU has no AVX2");
    const Isa was = active_isa();
    set_active_isa(Isa::Avx2, "test");
    const auto m = jit(tiny(), "int4-g32");
    compare_fused_to_op_by_op(*m, 1);
    compare_fused_to_op_by_op(*m, 4);
    compare_fused_to_op_by_op(*m, 8);
    // Past AVX2's tiled rows the step is the op-by-op forward's (its products dequantize once).
    compare_fused_to_op_by_op(*m, 20, 4, false);
    set_active_isa(was, "test");
  }

  // Continuous batching on slot KV: each row writes its own cache row at its own position.
  // Continuous batching's decode steps run in the program: slot KV's through the cache, paged KV's
  // through the pool's places (KvStore::places) with the loops and slots of the in-place kernel;
  // the same tokens as op by op either way. Under the gather kernel, the paged experiment's
  // baseline, the store keeps its steps to itself.
  void continuous_batching_tokens_equal_op_by_op_data() {
    QTest::addColumn<int>("kv");
    QTest::addColumn<bool>("gather");
    QTest::newRow("slot") << static_cast<int>(KvStrategy::SlotKv) << false;
    QTest::newRow("paged") << static_cast<int>(KvStrategy::Paged) << false;
    QTest::newRow("paged, gather kernel") << static_cast<int>(KvStrategy::Paged) << true;
  }
  void continuous_batching_tokens_equal_op_by_op() {
    QFETCH(int, kv);
    QFETCH(bool, gather);
    const auto m = jit(tiny(), "int4-g32");
    test::IdTokenizer tok(300, 299);
    std::vector<BatchRequest> requests;
    for (int i = 0; i < 5; ++i) {
      BatchRequest r;
      r.prompt_ids = test::tiny_prompt(3 + 2 * i, i + 1);
      r.max_new_tokens = 6 + i;
      r.stop_at_eos = false;
      requests.push_back(r);
    }
    BatchOptions o;
    o.max_batch = 3;
    o.kv = static_cast<KvStrategy>(kv);
    o.kv_block_size = 4;
    if (gather) o.paged_attention = PagedAttentionKernel::Gather;
    auto tokens = [&](bool fused) {
      m->set_fused_decode(fused);
      std::vector<std::vector<int32_t>> t;
      for (const RequestResult& r : run_continuous_batching(*m, tok, requests, o).requests)
        t.push_back(r.generated_ids);
      return t;
    };
    const auto reference = tokens(false);
    const int64_t before = m->fused_decode_steps();
    QCOMPARE(tokens(true), reference);
    if (gather)
      QCOMPARE(m->fused_decode_steps(), before);
    else
      QVERIFY(m->fused_decode_steps() > before);
  }

  // Several new tokens per request after its prompt (a speculative verification, a late chunk)
  // through slot and paged KV: the program writes each token's key and value and lets it see the
  // positions up to its own. Its logits agree with the op-by-op forward's (whose attention is
  // libtorch's SDPA here, so not bit for bit), for every position asked, and so do the next
  // decode step's; a first prompt chunk, and more new tokens than a verification holds, stay op by op.
  void several_new_tokens_per_request_data() {
    QTest::addColumn<int>("kv");
    QTest::newRow("slot") << static_cast<int>(KvStrategy::SlotKv);
    QTest::newRow("paged") << static_cast<int>(KvStrategy::Paged);
  }
  void several_new_tokens_per_request() {
    QFETCH(int, kv);
    const auto m = jit(tiny(), "int4-g32");
    c10::InferenceMode guard;
    const std::vector<int32_t> a = test::tiny_prompt(5, 1), b = test::tiny_prompt(9, 2);
    PagedKvConfig paged;
    paged.block_size = 4;
    struct Run {
      at::Tensor extended, decoded;
      int64_t fused = 0;
    };
    auto run = [&](bool fused, int64_t extra) {
      m->set_fused_decode(fused);
      const int64_t before = m->fused_decode_steps();
      auto memory = make_kv_memory_manager(static_cast<KvStrategy>(kv), *m, 2, 48, 0, paged);
      memory->prefill({{0, &a, 30}, {1, &b, 30}});
      std::vector<StepSegment> segments = {{0, {11, 12, 13, 14}, StepSegment::Logits::All},
                                           {1, {21, 22, 23}, StepSegment::Logits::All}};
      for (int64_t i = 0; i < extra; ++i) segments[0].tokens.push_back(static_cast<int32_t>(30 + i));
      for (const StepSegment& sg : segments) memory->grow_tokens(sg.id, sg.tokens);
      Run r;
      r.extended = memory->extend(segments);
      r.decoded = memory->decode({0, 1}, {40, 41});
      r.fused = m->fused_decode_steps() - before;
      return r;
    };
    const Run reference = run(false, 0), fused = run(true, 0);
    QCOMPARE(fused.extended.sizes().vec(), (std::vector<int64_t>{7, 300}));
    QCOMPARE(fused.fused, int64_t{2});  // the extend and the decode; not the prompts
    QVERIFY2(relative_diff(reference.extended, fused.extended) < 1e-5,
             qPrintable(QString::number(relative_diff(reference.extended, fused.extended))));
    QVERIFY(relative_diff(reference.decoded, fused.decoded) < 1e-5);
    QCOMPARE(fused.extended.argmax(-1).equal(reference.extended.argmax(-1)), true);
    // Eighteen new tokens for one request: more than a verification holds, op by op.
    const Run many = run(true, LlamaDecodeProgram::kMaxNewTokens + 1 - 4);
    QCOMPARE(many.fused, int64_t{1});  // the decode step only
  }

  // Steps the program does not take run op by op and equal it: a window that cuts into the keys,
  // the portable ISA, the manual attention backend, more rows than the register kernels take.
  void steps_it_refuses_run_op_by_op() {
    {
      // A window of 8: the first decode steps see fewer keys and run fused, later ones op by op.
      const auto m = jit(tiny([](LlamaConfig& c) { c.sliding_window = 8; }), "int4-g32");
      const int64_t before = m->fused_decode_steps();
      const std::vector<at::Tensor> reference = decode_logits(*m, false, 2, 6);
      const std::vector<at::Tensor> fused = decode_logits(*m, true, 2, 6);
      for (size_t i = 0; i < reference.size(); ++i) QVERIFY(at::equal(reference[i], fused[i]));
      QCOMPARE(m->fused_decode_steps(), before + 2);  // keys 7 and 8; then 9 to 12 cut
    }
    const auto m = jit(tiny(), "int4-g32");
    {
      const Isa was = active_isa();
      set_active_isa(Isa::Generic, "test");
      const int64_t before = m->fused_decode_steps();
      decode_logits(*m, true, 1, 2);
      QCOMPARE(m->fused_decode_steps(), before);
      set_active_isa(was, "test");
    }
    {
      m->set_attention_backend(AttentionBackend::Manual);
      const int64_t before = m->fused_decode_steps();
      decode_logits(*m, true, 1, 2);
      QCOMPARE(m->fused_decode_steps(), before);
      m->set_attention_backend(AttentionBackend::Sdpa);
    }
    {
      const int64_t before = m->fused_decode_steps();
      decode_logits(*m, true, LlamaDecodeProgram::max_rows() + 1, 2);
      QCOMPARE(m->fused_decode_steps(), before);
    }
  }

  // Models it has no program for say why (info's fused_decode.why_not).
  void models_without_a_program_say_why() {
    const LlamaModel plain = tiny();
    QVERIFY(QString::fromStdString(plain.fused_decode_unavailable()).contains("plain libtorch tensors"));
    const auto gemma2 = jit(tiny([](LlamaConfig& c) {
                              c.gemma_norms = true;
                              c.hidden_act = "gelu_pytorch_tanh";
                              c.attn_logit_softcap = 50;
                            }),
                            "int4-g32");
    QVERIFY(QString::fromStdString(gemma2->fused_decode_unavailable()).contains("soft-capping"));
    const LlamaModel phi = tiny([](LlamaConfig& c) { c.rotary_dim = 8; });
    const auto partial = jit(phi, "int4-g32");
    QVERIFY(QString::fromStdString(partial->fused_decode_unavailable()).contains("partial rotary"));
    // A width the decode GEMVs do not take (columns in multiples of 32).
    const auto odd = jit(tiny([](LlamaConfig& c) { c.hidden_size = 48; }), "fp16");
    QVERIFY(QString::fromStdString(odd->fused_decode_unavailable()).contains("no decode GEMV"));
    const auto off = jit(plain, "int4-g32");
    off->set_fused_decode(false);
    QVERIFY(QString::fromStdString(off->fused_decode_unavailable()).contains("--fused-decode off"));
    QVERIFY(QString::fromStdString(test::tiny_gpt2()->fused_decode_unavailable()).contains("gpt2"));
  }

  // The CLI's switch and info's report.
  void cli_switch_and_info() {
    const auto fused = [](const test::CliRun& r) {
      return nlohmann::json::parse(r.out.toStdString()).at("fused_decode");
    };
    const test::CliRun on = test::run_cli(SERVELAB_CLI, {"info", "--threads", "1"});
    QCOMPARE(on.code, 0);
    QCOMPARE(fused(on).at("active").get<bool>(), true);
    const test::CliRun off = test::run_cli(SERVELAB_CLI, {"info", "--threads", "1", "--fused-decode", "off"});
    QCOMPARE(off.code, 0);
    QCOMPARE(fused(off).at("active").get<bool>(), false);
    QVERIFY(
        QString::fromStdString(fused(off).at("why_not").get<std::string>()).contains("--fused-decode off"));
    const test::CliRun bad = test::run_cli(SERVELAB_CLI, {"info", "--fused-decode", "maybe"});
    QCOMPARE(bad.code, 2);
    QVERIFY2(bad.err.contains("--fused-decode"), qPrintable(bad.err));
  }
};

QTEST_GUILESS_MAIN(TestDecodeProgram)
#include "test_decode_program.moc"

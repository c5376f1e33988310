// The engine as the faces use it: the built-in model, batching that equals solo generation, the
// course's padded tensors, sampling, stop conditions, cancellation, and every bad input a user can
// give, each answered by a typed error that names the culprit.
#include <c10/core/InferenceMode.h>

#include <QTemporaryDir>
#include <QtTest>
#include <filesystem>
#include <fstream>
#include <map>

#include "experiments/batch_sweep.h"
#include "experiments/kv_cache_timing.h"
#include "generate/generator.h"
#include "model/blocked_linear.h"
#include "model/engine.h"
#include "model/fused_cpu.h"
#include "model/gpt2_model.h"
#include "model/layers.h"
#include "model/model_export.h"
#include "model/packed_linear.h"
#include "model/safetensors_file.h"
#include "test_support.h"
#include "util/cpu_features.h"
#include "util/device.h"

using namespace servelab;
using servelab::test::error_of;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kCoursePrompts = {"The quick brown fox jumped over the",
                                                 "The rain in Spain falls", "What comes up must"};

std::vector<std::vector<int64_t>> rows(const at::Tensor& t) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < t.size(0); ++r) {
    at::Tensor row = t[r].contiguous();
    out.emplace_back(row.data_ptr<int64_t>(), row.data_ptr<int64_t>() + row.numel());
  }
  return out;
}

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

// A small HF-style GPT-2 folder written by our own writer: config.json + model.safetensors.
void write_tiny_model(const fs::path& dir, const Gpt2Config& c) {
  fs::create_directories(dir);
  save_gpt2_weights(make_random_gpt2_weights(c, 7, at::Device(at::kCPU), at::kFloat),
                    (dir / "model.safetensors").string());
  std::ofstream(dir / "config.json") << c.to_json().dump(2);
}

class CancelAfter : public GenerationSink {
 public:
  CancelAfter(std::atomic<bool>& flag, int tokens) : flag_(flag), left_(tokens) {}
  void on_token(const TokenEvent&) override {
    if (--left_ == 0) flag_ = true;
  }

 private:
  std::atomic<bool>& flag_;
  int left_;
};

}  // namespace

class TestEngine : public QObject {
  Q_OBJECT
  std::unique_ptr<Engine> demo_;
  std::string tokenizer_dir_;

  std::vector<std::vector<int32_t>> course_ids() {
    std::vector<std::vector<int32_t>> ids;
    for (const auto& s : kCoursePrompts) ids.push_back(demo_->tokenizer().encode(s));
    return ids;
  }

 private Q_SLOTS:
  void initTestCase() {
    // The real GPT-2 tokenizer: from ../shared when CI gives it, else the project's own copy.
    const std::string shared = test::env_or_empty("SERVELAB_SHARED");
    if (!shared.empty())
      tokenizer_dir_ = (fs::path(shared) / "data" / "gpt2").string();
    else
      qInfo("SERVELAB_SHARED unset: using the tokenizer scripts/bootstrap installed");
    demo_ = Engine::load_demo({}, tokenizer_dir_);
  }

  void demo_model_is_gpt2_small() {
    QCOMPARE(demo_->model_as<Gpt2Model>().dense_weights().parameter_count(), int64_t{124439808});
    QCOMPARE(demo_->model_as<Gpt2Model>().config().num_parameters(), int64_t{124439808});
    QVERIFY(demo_->is_demo());
    QVERIFY(QString::fromStdString(demo_->text_caveat()).contains("random weights"));
    const auto info = demo_->info();
    QCOMPARE(info["parameters"].get<int64_t>(), int64_t{124439808});
    QCOMPARE(info["weight_bytes"].get<int64_t>(), int64_t{124439808} * 4);
    // Deterministic: the same seed gives the same weights.
    auto again = Engine::load_demo({}, tokenizer_dir_);
    QVERIFY(at::equal(again->model_as<Gpt2Model>().dense_weights().layers[5].c_fc_weight,
                      demo_->model_as<Gpt2Model>().dense_weights().layers[5].c_fc_weight));
  }

  void packed_gemm_matches_aten_data() {
    QTest::addColumn<QString>("gemm");
    QTest::newRow("onednn") << "onednn";
    QTest::newRow("blocked") << "blocked";
  }
  void packed_gemm_matches_aten() {
    // oneDNN's prepacked GEMMs and our 16-channel blocks are layout changes, not a different model:
    // the weights come back bit for bit, logits agree to fp32 rounding (every position of one
    // prompt and of a left-padded batch) and greedy text is the same, alone and batched.
    QFETCH(QString, gemm);
    EngineOptions aten_opts, packed_opts;
    aten_opts.gemm = "aten";
    packed_opts.gemm = gemm.toStdString();
    std::string why;
    const bool available = gemm == "onednn" ? packed_linear_available(at::kCPU, at::kFloat, &why)
                                            : blocked_linear_available(at::kCPU, at::kFloat, &why);
    if (!available) {
      // Asked for explicitly, a backend that cannot run here is refused with the reason.
      const std::string e =
          error_of(ErrorKind::Input, [&] { Engine::load_demo(packed_opts, tokenizer_dir_); });
      QVERIFY2(e.find(why) != std::string::npos, e.c_str());
      QSKIP(why.c_str());
    }
    auto a = Engine::load_demo(aten_opts, tokenizer_dir_);
    auto d = Engine::load_demo(packed_opts, tokenizer_dir_);
    QCOMPARE(QString::fromStdString(a->info()["gemm"].get<std::string>()), QString("aten addmm"));
    QVERIFY(QString::fromStdString(d->info()["gemm"].get<std::string>())
                .contains(gemm == "onednn" ? "oneDNN" : "blocked"));
    QVERIFY(!d->model_as<Gpt2Model>().weights().layers[0].c_attn_weight.defined());  // released after packing
    const Gpt2Weights back = d->model_as<Gpt2Model>().dense_weights();
    for (size_t l : {size_t{0}, size_t{3}, size_t{11}}) {
      QVERIFY(at::equal(back.layers[l].c_attn_weight,
                        a->model_as<Gpt2Model>().weights().layers[l].c_attn_weight));
      QVERIFY(at::equal(back.layers[l].c_proj_weight,
                        a->model_as<Gpt2Model>().weights().layers[l].c_proj_weight));
      QVERIFY(
          at::equal(back.layers[l].c_fc_weight, a->model_as<Gpt2Model>().weights().layers[l].c_fc_weight));
      QVERIFY(at::equal(back.layers[l].mlp_proj_weight,
                        a->model_as<Gpt2Model>().weights().layers[l].mlp_proj_weight));
    }
    QVERIFY(at::equal(back.lm_head, a->model_as<Gpt2Model>().weights().lm_head));
    QVERIFY(at::equal(d->model().kernels()->dense_lm_head(), a->model_as<Gpt2Model>().weights().lm_head));
    // What the process holds: the plain parameters (the embedding keeps wte) plus the head's second
    // copy, whose last block of 16 the blocked layout pads (50257 -> 50272 rows).
    const auto& c = a->model_as<Gpt2Model>().config();
    const int64_t head_rows = gemm == "blocked" ? (c.vocab_size + 15) / 16 * 16 : c.vocab_size;
    QCOMPARE(d->info()["resident_weight_bytes"].get<int64_t>(),
             a->model_as<Gpt2Model>().weights().parameter_count() * 4 + head_rows * c.n_embd * 4);
    c10::InferenceMode guard;
    std::vector<std::vector<int32_t>> prompts;
    for (const char* p :
         {"The quick brown fox jumped over the", "The rain in Spain falls", "What comes up must"})
      prompts.push_back(a->tokenizer().encode(p));
    // Every position's logits, one prompt alone and the three left-padded into one batch.
    for (const auto& batch : {std::vector<std::vector<int32_t>>{prompts[1]}, prompts}) {
      const PaddedBatch b = left_padded_batch(batch, 50256);
      ForwardInput in{b.input_ids, b.position_ids, b.attention_mask, true};
      const at::Tensor la = a->model().forward(in), ld = d->model().forward(in);
      const double diff = test::max_abs_diff(la, ld);  // 4e-6 (oneDNN), 6e-6 (blocked) of logits up to 2.5
      QVERIFY2(diff <= 1e-4, qPrintable(QString("batch %1: max |diff| %2").arg(batch.size()).arg(diff)));
    }
    GenerateOptions o;
    o.max_new_tokens = 8;
    o.stop_at_eos = false;
    o.report_top = 3;
    const GenerateResult ga = generate(a->model(), a->tokenizer(), prompts, o);
    const GenerateResult gd = generate(d->model(), d->tokenizer(), prompts, o);
    for (size_t i = 0; i < prompts.size(); ++i) {
      QCOMPARE(gd.sequences[i].generated_ids, ga.sequences[i].generated_ids);
      for (size_t k = 0; k < ga.sequences[i].top.size(); ++k)
        QVERIFY(std::abs(gd.sequences[i].top[k][0].second - ga.sequences[i].top[k][0].second) < 1e-4);
      // Alone (batch 1: the GEMV at every step) the same tokens as in the batch.
      const GenerateResult alone = generate(d->model(), d->tokenizer(), {prompts[i]}, o);
      QCOMPARE(alone.sequences[0].generated_ids, ga.sequences[i].generated_ids);
    }
  }

  void gemm_backend_choice() {
    // auto: our blocked kernels where the ISA has vector kernels of ours (avx512, avx2), oneDNN's
    // under generic (chosen at load).
    auto e = Engine::load_demo({}, tokenizer_dir_);
    const std::string gemm = e->info()["gemm"].get<std::string>();
    for (const Isa isa : {Isa::Avx512, Isa::Avx2, Isa::Generic}) {
      if (!cpu_supports(isa)) continue;
      GemmBackend picked;
      {
        const test::IsaScope isa_scope(isa);
        picked = resolve_gemm_backend(GemmBackend::Auto, at::kCPU, at::kFloat);
      }
      if (isa != Isa::Generic)
        QVERIFY2(picked == GemmBackend::Blocked, isa_name(isa));
      else if (packed_linear_available(at::kCPU, at::kFloat))
        QVERIFY(picked == GemmBackend::OneDnn);
    }
    if (blocked_linear_available(at::kCPU, at::kFloat) && active_isa() != Isa::Generic)
      QVERIFY2(gemm.find("blocked") != std::string::npos, gemm.c_str());
    else if (packed_linear_available(at::kCPU, at::kFloat))
      QVERIFY2(gemm.find("oneDNN") != std::string::npos, gemm.c_str());
    QVERIFY(resolve_gemm_backend(GemmBackend::Auto, at::kCPU, at::kHalf) == GemmBackend::Aten);
    QVERIFY(gemm_backend_of(e->model()) == resolve_gemm_backend(GemmBackend::Auto, at::kCPU, at::kFloat));
    for (const char* name : {"aten", "onednn", "blocked", "auto"})
      QCOMPARE(std::string(gemm_backend_name(parse_gemm_backend(name))), std::string(name));
    // Both packed backends are fp32 CPU paths; an unknown name lists the choices.
    EngineOptions half;
    half.dtype = "fp16";
    half.gemm = "blocked";
    std::string msg = error_of(ErrorKind::Input, [&] { Engine::load_demo(half, tokenizer_dir_); });
    QVERIFY2(msg.find("--gemm blocked") != std::string::npos && msg.find("fp32") != std::string::npos,
             msg.c_str());
    EngineOptions bad;
    bad.gemm = "blas";
    msg = error_of(ErrorKind::Input, [&] { Engine::load_demo(bad, tokenizer_dir_); });
    QVERIFY2(msg.find("blas") != std::string::npos && msg.find("blocked") != std::string::npos, msg.c_str());
  }

  void fused_cpu_loops_equal_libtorch_data() {
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("width");
    for (int rows : {1, 3, 70})
      for (int width : {64, 576, 77})
        QTest::newRow(qPrintable(QString("%1x%2").arg(rows).arg(width))) << rows << width;
  }
  void fused_cpu_loops_equal_libtorch() {
    // The single-pass RMSNorm and rotary loops against the libtorch chains they replace (what CUDA
    // and half precision still run): a query laid out as the model makes it ([B, T, H, D]
    // transposed, not contiguous), positions that jump, odd widths.
    QFETCH(int, rows);
    QFETCH(int, width);
    c10::InferenceMode guard;
    at::manual_seed(rows * 1000 + width);
    const at::Tensor x = at::randn({rows, 2, width}) * 3;
    const at::Tensor w = at::randn({width});
    const at::Tensor chain =
        w * (x * at::rsqrt(x.pow(2).mean(-1, true) + 1e-5));  // the libtorch path of rms_norm()
    QVERIFY(fused_cpu::eligible(x));
    QVERIFY2(test::max_abs_diff(rms_norm(x, w, 1e-5), chain) < 1e-5,
             qPrintable(QString::number(test::max_abs_diff(rms_norm(x, w, 1e-5), chain))));
    const int64_t D = width % 2 ? width + 1 : width, B = 2, H = 3, T = rows, context = 300;
    const at::Tensor inv_freq =
        1.0 / at::pow(10000.0, at::arange(0, D, 2).to(at::kFloat) / static_cast<double>(D));
    const RotaryEmbedding rope(inv_freq, context, at::kCPU, at::kFloat);
    const at::Tensor q = at::randn({B, T, H, D}).transpose(1, 2);
    QVERIFY(T == 1 || !q.is_contiguous());
    const at::Tensor positions = at::randint(0, context, {B, T}, at::kLong);
    // rotate_half as Hugging Face writes it.
    const at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;
    const at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);
    const at::Tensor rotated = at::cat({-q.narrow(-1, D / 2, D / 2), q.narrow(-1, 0, D / 2)}, -1);
    const at::Tensor expected = q * emb.cos() + rotated * emb.sin();
    const at::Tensor got = rope.apply(q, positions);
    QVERIFY(got.is_contiguous());
    QVERIFY2(test::max_abs_diff(got, expected) < 1e-5,
             qPrintable(QString::number(test::max_abs_diff(got, expected))));
  }

  void course_padded_tensors() {
    // docs/course.md, lesson 2: the exact tensors the course shows for its three prompts.
    if (tokenizer_dir_.empty())
      QSKIP("SERVELAB_SHARED unset: the course check reads the real tokenizer from ../shared");
    auto ids = course_ids();
    QCOMPARE(ids[0], (std::vector<int32_t>{464, 2068, 7586, 21831, 11687, 625, 262}));
    PaddedBatch b = left_padded_batch(ids, 50256);
    QCOMPARE(rows(b.input_ids),
             (std::vector<std::vector<int64_t>>{{464, 2068, 7586, 21831, 11687, 625, 262},
                                                {50256, 50256, 464, 6290, 287, 8602, 8953},
                                                {50256, 50256, 50256, 2061, 2058, 510, 1276}}));
    QCOMPARE(rows(b.attention_mask),
             (std::vector<std::vector<int64_t>>{
                 {1, 1, 1, 1, 1, 1, 1}, {0, 0, 1, 1, 1, 1, 1}, {0, 0, 0, 1, 1, 1, 1}}));
    QCOMPARE(rows(b.position_ids), (std::vector<std::vector<int64_t>>{
                                       {0, 1, 2, 3, 4, 5, 6}, {1, 1, 0, 1, 2, 3, 4}, {1, 1, 1, 0, 1, 2, 3}}));
    // The same tensors as plain data, from the prompts' text: what the Batching tab shows.
    const PaddedPrompts t =
        pad_prompts(demo_->model(), demo_->tokenizer(),
                    {"The quick brown fox jumped over the", "The rain in Spain falls", "What comes up must"});
    QCOMPARE(t.pad_id, 50256);
    QCOMPARE(t.input_ids, rows(b.input_ids));
    QCOMPARE(t.attention_mask, rows(b.attention_mask));
    QCOMPARE(t.position_ids, rows(b.position_ids));
    QCOMPARE(t.pieces[0][1], std::string("\xc4\xa0quick"));  // "Ġquick"
    QCOMPARE(t.pieces[2][0], std::string());                 // padding has no piece
    QCOMPARE(error_of(ErrorKind::Input,
                      [&] {
                        pad_prompts(demo_->model(), demo_->tokenizer(), {"a", ""});
                      }),
             std::string("prompt 2 is empty: it needs at least one token"));
    QCOMPARE(error_of(ErrorKind::Input, [&] { pad_prompts(demo_->model(), demo_->tokenizer(), {}); }),
             std::string("no prompts given"));
  }

  void batch_equals_single_on_demo() {
    GenerateOptions o;
    o.max_new_tokens = 6;
    auto ids = course_ids();
    GenerateResult batch = generate(demo_->model(), demo_->tokenizer(), ids, o);
    o.use_kv_cache = false;
    GenerateResult batch_nc = generate(demo_->model(), demo_->tokenizer(), ids, o);
    o.use_kv_cache = true;
    for (size_t i = 0; i < ids.size(); ++i) {
      GenerateResult one = generate(demo_->model(), demo_->tokenizer(), {ids[i]}, o);
      QCOMPARE(batch.sequences[i].generated_ids, one.sequences[0].generated_ids);
      QCOMPARE(batch_nc.sequences[i].generated_ids, one.sequences[0].generated_ids);
      QCOMPARE(batch.sequences[i].text, one.sequences[0].text);
      QCOMPARE(one.sequences[0].top.size(), size_t{6});
      QCOMPARE(one.sequences[0].top[0].size(), size_t{5});
      QCOMPARE(one.sequences[0].top[0][0].first, one.sequences[0].generated_ids[0]);  // greedy = top-1
    }
    QCOMPARE(batch.step_ms.size(), size_t{6});
  }

  void sampling_is_seeded() {
    GenerateOptions o;
    o.max_new_tokens = 8;
    o.sampling = {false, 1.5, 0, 1.0, 42};
    auto ids = course_ids();
    auto a = generate(demo_->model(), demo_->tokenizer(), {ids[0]}, o).sequences[0].generated_ids;
    auto b = generate(demo_->model(), demo_->tokenizer(), {ids[0]}, o).sequences[0].generated_ids;
    QCOMPARE(a, b);
    o.sampling.seed = 43;
    auto c = generate(demo_->model(), demo_->tokenizer(), {ids[0]}, o).sequences[0].generated_ids;
    QVERIFY(a != c);
    // top-k 1 and a tiny top-p both leave only the argmax.
    GenerateOptions g;
    g.max_new_tokens = 5;
    auto greedy = generate(demo_->model(), demo_->tokenizer(), {ids[1]}, g).sequences[0].generated_ids;
    g.sampling = {false, 0.8, 1, 1.0, 3};
    QCOMPARE(generate(demo_->model(), demo_->tokenizer(), {ids[1]}, g).sequences[0].generated_ids, greedy);
    g.sampling = {false, 0.8, 0, 1e-6, 3};
    QCOMPARE(generate(demo_->model(), demo_->tokenizer(), {ids[1]}, g).sequences[0].generated_ids, greedy);
  }

  void stops_on_eos_and_stop_strings() {
    auto ids = course_ids();
    GenerateOptions o;
    o.max_new_tokens = 8;
    GenerateResult free_run = generate(demo_->model(), demo_->tokenizer(), {ids[1]}, o);
    const auto& first = free_run.sequences[0];
    QCOMPARE(first.finish_reason, std::string("length"));
    // A tokenizer whose EOS is the first greedy token: generation ends right there.
    test::IdTokenizer eos_first(50257, first.generated_ids[0]);
    GenerateResult e = generate(demo_->model(), eos_first, {ids[1]}, o);
    QCOMPARE(e.sequences[0].finish_reason, std::string("eos"));
    QCOMPARE(e.sequences[0].generated_ids.size(), size_t{1});
    QVERIFY(e.sequences[0].text.empty());
    // A stop string from inside the generated text cuts the text before it.
    const std::string piece = demo_->tokenizer().decode({first.generated_ids[1]});
    o.stop_strings = {piece};
    GenerateResult s = generate(demo_->model(), demo_->tokenizer(), {ids[1]}, o);
    QCOMPARE(s.sequences[0].finish_reason, std::string("stop"));
    QVERIFY(s.sequences[0].generated_ids.size() <= 2);
    QVERIFY(s.sequences[0].text.find(piece) == std::string::npos);
  }

  void cancel_stops_within_a_step_and_engine_stays_usable() {
    std::atomic<bool> cancel{false};
    CancelAfter sink(cancel, 3);
    GenerateOptions o;
    o.max_new_tokens = 50;
    o.cancel = &cancel;
    auto ids = course_ids();
    const std::string msg = error_of(
        ErrorKind::Cancelled, [&] { generate(demo_->model(), demo_->tokenizer(), {ids[0]}, o, &sink); });
    QVERIFY2(msg.find("after 3 tokens") != std::string::npos, msg.c_str());
    cancel = false;
    o.max_new_tokens = 2;
    QCOMPARE(generate(demo_->model(), demo_->tokenizer(), {ids[0]}, o).sequences[0].generated_ids.size(),
             size_t{2});
  }

  void bad_generation_input_data() {
    QTest::addColumn<int>("case_id");
    QTest::addColumn<QString>("expected");
    QTest::newRow("empty prompt") << 0 << "prompt 2 is empty";
    QTest::newRow("prompt longer than context") << 1 << "exceeds the context of 1024";
    QTest::newRow("zero new tokens") << 2 << "at least 1";
    QTest::newRow("impossible batch size") << 3 << "GiB of memory is available";
    QTest::newRow("temperature 0") << 4 << "temperature must be > 0";
    QTest::newRow("top-p above 1") << 5 << "top-p must be in (0, 1]";
    QTest::newRow("token id outside vocabulary") << 6 << "outside the vocabulary";
    QTest::newRow("no prompts") << 7 << "no prompts";
  }
  void bad_generation_input() {
    QFETCH(int, case_id);
    QFETCH(QString, expected);
    std::vector<std::vector<int32_t>> prompts = {{464, 2068}};
    GenerateOptions o;
    switch (case_id) {
      case 0:
        prompts.push_back({});
        break;
      case 1:
        prompts = {std::vector<int32_t>(1020, 464)};
        break;
      case 2:
        o.max_new_tokens = 0;
        break;
      case 3:
        prompts = std::vector<std::vector<int32_t>>(200000, std::vector<int32_t>(900, 464));
        break;
      case 4:
        o.sampling = {false, 0.0, 0, 1.0, 0};
        break;
      case 5:
        o.sampling = {false, 1.0, 0, 1.5, 0};
        break;
      case 6:
        prompts = {{464, 60000}};
        break;
      case 7:
        prompts.clear();
        break;
    }
    const std::string msg =
        error_of(ErrorKind::Input, [&] { generate(demo_->model(), demo_->tokenizer(), prompts, o); });
    QVERIFY2(msg.find(expected.toStdString()) != std::string::npos, msg.c_str());
  }

  void out_of_memory_is_a_typed_error_and_engine_survives() {
    // 38 PB of KV cache: the allocator refuses at once; the engine must say so and keep working.
    const std::string msg =
        error_of(ErrorKind::OutOfMemory, [&] { demo_->model().make_cache(1 << 20, 1 << 20); });
    QVERIFY2(msg.find("KV cache") != std::string::npos && msg.find("batch 1048576") != std::string::npos,
             msg.c_str());
    GenerateOptions o;
    o.max_new_tokens = 1;
    QCOMPARE(
        generate(demo_->model(), demo_->tokenizer(), {course_ids()[0]}, o).sequences[0].generated_ids.size(),
        size_t{1});
  }

  void invalid_utf8_prompt_is_a_tokenizer_error() {
    const std::string msg = error_of(ErrorKind::Tokenizer, [&] { demo_->tokenizer().encode("abc\xff\xfe"); });
    QVERIFY2(msg.find("UTF-8") != std::string::npos, msg.c_str());
  }

  void bad_device_and_dtype() {
    QVERIFY(error_of(ErrorKind::Input, [] { parse_device("tpu"); }).find("unknown device \"tpu\"") !=
            std::string::npos);
    QVERIFY(error_of(ErrorKind::Input, [] { parse_dtype("fp8"); }).find("unknown dtype \"fp8\"") !=
            std::string::npos);
    QVERIFY(error_of(ErrorKind::Input, [] { set_engine_threads(-2); }).find("-2") != std::string::npos);
    if (cuda_available()) QSKIP("CUDA is available here: the no-CUDA error cannot be provoked");
    QVERIFY(error_of(ErrorKind::Device, [] { parse_device("cuda"); }).find("CUDA is not available") !=
            std::string::npos);
  }

  void model_folder_errors() {
    QTemporaryDir tmp;
    const fs::path root(tmp.path().toStdString());
    const Gpt2Config c = tiny_config();
    // Missing folder, missing weights, only a pytorch_model.bin.
    QVERIFY(error_of(ErrorKind::ModelFormat, [&] {
              Engine::load_folder((root / "nope").string(), {});
            }).find("not found") != std::string::npos);
    fs::create_directories(root / "empty");
    QVERIFY(error_of(ErrorKind::ModelFormat, [&] {
              Engine::load_folder((root / "empty").string(), {});
            }).find("model.safetensors not found") != std::string::npos);
    fs::create_directories(root / "bin");
    std::ofstream(root / "bin" / "pytorch_model.bin") << "x";
    QVERIFY(error_of(ErrorKind::ModelFormat, [&] {
              Engine::load_folder((root / "bin").string(), {});
            }).find("pytorch_model.bin") != std::string::npos);

    // A good tiny model without tokenizer files: the weights load, the tokenizer is missing.
    write_tiny_model(root / "good", c);
    std::string msg =
        error_of(ErrorKind::Tokenizer, [&] { Engine::load_folder((root / "good").string(), {}); });
    QVERIFY2(msg.find("good") != std::string::npos, msg.c_str());

    // Truncated weights.
    write_tiny_model(root / "trunc", c);
    const fs::path w = root / "trunc" / "model.safetensors";
    fs::resize_file(w, fs::file_size(w) - 1000);
    msg = error_of(ErrorKind::ModelFormat, [&] { Engine::load_folder((root / "trunc").string(), {}); });
    QVERIFY2(msg.find("truncated") != std::string::npos && msg.find("model.safetensors") != std::string::npos,
             msg.c_str());

    // A config that disagrees with the tensors: the message names the tensor and both shapes.
    write_tiny_model(root / "shape", c);
    Gpt2Config wider = c;
    wider.n_embd = 64;
    std::ofstream(root / "shape" / "config.json") << wider.to_json().dump(2);
    msg = error_of(ErrorKind::ModelFormat, [&] { Engine::load_folder((root / "shape").string(), {}); });
    QVERIFY2(
        msg.find("wte.weight") != std::string::npos && msg.find("expected [300, 64]") != std::string::npos,
        msg.c_str());

    // A config missing a key.
    write_tiny_model(root / "cfg", c);
    auto j = c.to_json();
    j.erase("n_head");
    std::ofstream(root / "cfg" / "config.json") << j.dump(2);
    msg = error_of(ErrorKind::ModelFormat, [&] { Engine::load_folder((root / "cfg").string(), {}); });
    QVERIFY2(msg.find("n_head") != std::string::npos, msg.c_str());

    // A tensor with the wrong dtype (int64 where floats belong).
    write_tiny_model(root / "dtype", c);
    {
      SafetensorsFile f = SafetensorsFile::open((root / "dtype" / "model.safetensors").string());
      std::vector<StWriteTensor> out;
      std::vector<int64_t> ints(static_cast<size_t>(c.n_embd), 1);
      for (const auto& t : f.tensors()) {
        if (t.name == "transformer.ln_f.bias")
          out.push_back({t.name, StDType::I64, t.shape, ints.data(), ints.size() * 8});
        else
          out.push_back({t.name, t.dtype, t.shape, t.data, t.nbytes});
      }
      write_safetensors((root / "dtype" / "model2.safetensors").string(), out);
    }
    fs::rename(root / "dtype" / "model2.safetensors", root / "dtype" / "model.safetensors");
    msg = error_of(ErrorKind::ModelFormat, [&] { Engine::load_folder((root / "dtype").string(), {}); });
    QVERIFY2(msg.find("ln_f.bias") != std::string::npos && msg.find("I64") != std::string::npos, msg.c_str());

    // A tokenizer larger than the model's vocabulary.
    if (!tokenizer_dir_.empty()) {
      for (const char* f : {"vocab.json", "merges.txt"})
        fs::copy_file(fs::path(tokenizer_dir_) / f, root / "good" / f);
      msg = error_of(ErrorKind::ModelFormat, [&] { Engine::load_folder((root / "good").string(), {}); });
      QVERIFY2(msg.find("vocab_size is 300") != std::string::npos, msg.c_str());
    }
  }

  void export_and_reload_round_trip() {
    // The demo weights written as an HF folder load back bit for bit.
    QTemporaryDir tmp;
    const fs::path dir(tmp.path().toStdString());
    Gpt2Config c = tiny_config();
    write_tiny_model(dir, c);
    Gpt2Weights w =
        load_gpt2_weights((dir / "model.safetensors").string(), c, at::Device(at::kCPU), at::kFloat);
    Gpt2Weights ref = make_random_gpt2_weights(c, 7, at::Device(at::kCPU), at::kFloat);
    for (size_t i = 0; i < w.named_tensors().size(); ++i)
      QVERIFY(at::equal(w.named_tensors()[i].second, ref.named_tensors()[i].second));
    QVERIFY(w.lm_head_tied);
  }

  void exported_folders_load_back() {
    // export_random_gpt2_folder writes a complete HF folder (the tiny one the UI tests use).
    QTemporaryDir tmp;
    const std::string dir = tmp.filePath("tiny").toStdString();
    export_random_gpt2_folder(dir, tiny_gpt2_config(), 11, tokenizer_dir_);
    auto e = Engine::load_folder(dir, EngineOptions{});
    QVERIFY(e->model_as<Gpt2Model>().config() == tiny_gpt2_config());
    QCOMPARE(e->tokenizer().vocab_size(), 50257);
    QVERIFY(e->text_caveat().empty());
    // Unwritable destinations are input errors naming the path.
    QVERIFY(error_of(ErrorKind::Input, [&] {
              export_random_gpt2_folder("/proc/servelab-cannot-write", tiny_gpt2_config(), 1, tokenizer_dir_);
            }).find("/proc/servelab-cannot-write") != std::string::npos);
  }

  void reduced_precision_runs() {
    // fp16 / bf16 weights generate end to end on the CPU (parity is checked on CUDA).
    for (const char* dt : {"bf16", "fp16"}) {
      EngineOptions o;
      o.dtype = dt;
      auto e = Engine::load_demo(o, tokenizer_dir_);
      QCOMPARE(e->info()["weight_bytes"].get<int64_t>(), int64_t{124439808} * 2);
      GenerateOptions g;
      g.max_new_tokens = 2;
      auto r = generate(e->model(), e->tokenizer(), course_ids(), g);
      QCOMPARE(r.sequences[2].generated_ids.size(), size_t{2});
    }
  }

  void token_events_carry_top_probabilities() {
    // With every vocabulary entry reported, the probabilities of a step are a softmax: they sum to
    // 1, follow the logits' order, and the greedy token is the most likely one.
    QTemporaryDir tmp;
    const fs::path dir(tmp.path().toStdString());
    const Gpt2Config c = tiny_config();
    write_tiny_model(dir, c);
    Gpt2Model model(
        c, load_gpt2_weights((dir / "model.safetensors").string(), c, at::Device(at::kCPU), at::kFloat));
    class Events : public GenerationSink {
     public:
      std::vector<TokenEvent> tokens;
      void on_token(const TokenEvent& e) override { tokens.push_back(e); }
    } events;
    GenerateOptions o;
    o.max_new_tokens = 3;
    o.stop_at_eos = false;
    o.report_top = c.vocab_size;
    servelab::test::IdTokenizer tok(static_cast<int32_t>(c.vocab_size), 299);
    generate(model, tok, {{1, 2, 3}}, o, &events);
    QCOMPARE(events.tokens.size(), size_t{3});
    for (const TokenEvent& e : events.tokens) {
      QCOMPARE(e.top.size(), size_t(c.vocab_size));
      double sum = 0;
      for (size_t k = 0; k < e.top.size(); ++k) {
        sum += e.top[k].probability;
        if (k) QVERIFY(e.top[k].probability <= e.top[k - 1].probability);
        if (k) QVERIFY(e.top[k].logit <= e.top[k - 1].logit);
      }
      QVERIFY(std::abs(sum - 1.0) < 1e-4);
      QCOMPARE(e.top.front().id, e.id);
    }
  }

  void experiments_report_consistent_series() {
    KvCacheTimingParams p;
    p.new_tokens = 4;
    p.repeats = 1;
    p.warmup = false;
    KvCacheTimingResult r = run_kv_cache_timing(*demo_, p);
    QCOMPARE(r.cache_ms.size(), size_t{4});
    QCOMPARE(r.no_cache_ms.size(), size_t{4});
    QCOMPARE(r.tokens.size(), size_t{4});
    QCOMPARE(r.kv_cache_bytes, int64_t{2 * 12 * 12 * (7 + 4) * 64 * 4});
    QCOMPARE(r.kv_bytes_per_token, int64_t{2 * 12 * 768 * 4});
    // A prompt repeated to an exact length, streamed live and then replaced by the medians.
    class Recorder : public ExperimentSink {
     public:
      std::map<std::string, std::vector<std::pair<double, double>>> series;
      int resets = 0;
      double last_progress = 0;
      void on_point(const std::string& s, double x, double y) override { series[s].emplace_back(x, y); }
      void on_reset(const std::string& s) override {
        ++resets;
        series[s].clear();
      }
      void on_progress(double f, const std::string&) override { last_progress = f; }
    } rec;
    p.prompt_tokens = 20;
    p.repeats = 2;
    KvCacheTimingResult long_prompt = run_kv_cache_timing(*demo_, p, {&rec, nullptr});
    QCOMPARE(long_prompt.prompt_ids.size(), size_t{20});
    QCOMPARE(long_prompt.prompt_ids[7], long_prompt.prompt_ids[0]);  // the 7-token prompt, cycled
    QCOMPARE(rec.resets, 2 * 2 + 2);                                 // each run, then the medians
    QCOMPARE(rec.last_progress, 1.0);
    for (const auto& [name, pts] : rec.series) {
      const auto& medians = name == "with KV cache" ? long_prompt.cache_ms : long_prompt.no_cache_ms;
      QCOMPARE(pts.size(), size_t{4});
      for (size_t i = 0; i < pts.size(); ++i) QCOMPARE(pts[i].second, medians[i]);
    }
    p.prompt_tokens = -1;
    QVERIFY(error_of(ErrorKind::Input, [&] { run_kv_cache_timing(*demo_, p); }).find("prompt length") !=
            std::string::npos);
    BatchSweepParams b;
    b.batch_sizes = {1, 3};
    b.new_tokens = 2;
    b.repeats = 1;
    b.warmup = false;
    BatchSweepResult s = run_batch_sweep(*demo_, b);
    QCOMPARE(s.points.size(), size_t{2});
    QCOMPARE(s.points[1].batch_size, int64_t{3});
    QVERIFY(s.points[1].tokens_per_ms > 0);
    b.batch_sizes = {0};
    QVERIFY(error_of(ErrorKind::Input, [&] { run_batch_sweep(*demo_, b); }).find("at least 1") !=
            std::string::npos);
  }
};

QTEST_GUILESS_MAIN(TestEngine)
#include "test_engine.moc"

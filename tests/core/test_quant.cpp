// The quantization engine: the course's zero-point formula and the other quantizers on tensors
// whose answers are worked out by hand; the course's uint8 values and Hugging Face's memory
// footprint against a Python oracle (tests/oracle/make_quant_fixtures.py, run first as a CTest
// fixture); memory to the byte for every scheme; JIT = dequantize-once; the native kernels within
// the error their arithmetic implies; quantized models generating (single, batched, continuous);
// the experiment run_quantization; every bad input; and the CLI's quantize command.
#include <c10/core/InferenceMode.h>

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli_runner.h"
#include "experiments/quantization.h"
#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "model/blocked_linear.h"
#include "model/engine.h"
#include "model/gpt2_model.h"
#include "model/gpt2_weights.h"
#include "model/llama_model.h"
#include "model/model_export.h"
#include "model/safetensors_file.h"
#include "quant/dequant_cpu.h"
#include "quant/int8_activations.h"
#include "quant/quantized_llama.h"
#include "quant/quantized_model.h"
#include "quant/quantizer.h"
#include "test_support.h"
#include "util/cpu_features.h"

using namespace servelab;
using nlohmann::json;
using servelab::test::error_of;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kModes = {"zp-uint8",     "int4-g32", "int4-g64", "int4-g128",
                                         "int8-channel", "fp16",     "bf16"};
const std::vector<std::string> kCoursePrompts = {"The quick brown fox jumped over the",
                                                 "The rain in Spain falls", "What comes up must"};
// Prompts of the made-up vocabulary of small_config(), of different lengths.
const std::vector<std::vector<int32_t>> kIdPrompts = {
    {5, 17, 250, 3, 99, 42, 7}, {12, 280}, {64, 1, 77, 190}, {200, 201, 202, 11, 13}};

// Every scheme fits: rows of 128 (wte, wpe, c_attn, c_proj, c_fc stored [out, in]) and 512
// (mlp.c_proj) divide by 32, 64 and 128, and every matrix has a multiple of 16 rows (torch's int4
// CPU kernel needs that; see int4_native_with_gpt2_vocabulary for GPT-2's 50257).
Gpt2Config small_config() {
  Gpt2Config c;
  c.vocab_size = 304;
  c.n_positions = 32;
  c.n_embd = 128;
  c.n_layer = 2;
  c.n_head = 4;
  c.bos_token_id = c.eos_token_id = 303;
  return c;
}

// GPT-2's vocabulary (the engine, the experiment and the CLI encode text), 128 wide: the matrices
// dominate the parameters and every scheme fits.
Gpt2Config vocab_config() {
  Gpt2Config c = Gpt2Config::gpt2_small();
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 128;
  c.n_positions = 64;
  return c;
}

// A smooth deterministic pattern in [-amp, amp] (no global RNG).
at::Tensor pattern(int64_t n, double salt, double amp) {
  return at::sin(at::arange(n, at::kDouble) * 0.7311 + salt).to(at::kFloat) * amp;
}

// The demo's seeded weights with LayerNorms and biases moved off their constant init (1 and 0),
// so that every parameter has a real range to quantize; optionally an untied LM head.
Gpt2Weights test_weights(const Gpt2Config& c, uint64_t seed, bool tied) {
  c10::InferenceMode guard;
  Gpt2Weights w = make_random_gpt2_weights(c, seed, at::Device(at::kCPU), at::kFloat);
  double salt = static_cast<double>(seed);
  auto vec = [&](int64_t n, double base, double amp) {
    salt += 1.37;
    return pattern(n, salt, amp) + base;
  };
  const int64_t E = c.n_embd, I = c.inner_dim();
  for (auto& l : w.layers) {
    l.ln_1_weight = vec(E, 1.0, 0.1);
    l.ln_1_bias = vec(E, 0.0, 0.05);
    l.c_attn_bias = vec(3 * E, 0.0, 0.05);
    l.c_proj_bias = vec(E, 0.0, 0.05);
    l.ln_2_weight = vec(E, 1.0, 0.1);
    l.ln_2_bias = vec(E, 0.0, 0.05);
    l.c_fc_bias = vec(I, 0.0, 0.05);
    l.mlp_proj_bias = vec(E, 0.0, 0.05);
  }
  w.ln_f_weight = vec(E, 1.0, 0.1);
  w.ln_f_bias = vec(E, 0.0, 0.05);
  if (!tied) {
    w.lm_head = make_random_gpt2_weights(c, seed + 1000, at::Device(at::kCPU), at::kFloat).wte;
    w.lm_head_tied = false;
  }
  return w;
}

// The GPT-2 tokenizer: ../shared when CI gives it, else the one scripts/bootstrap installed ("" when
// neither is there).
std::string gpt2_tokenizer_dir() {
  const std::string shared = test::env_or_empty("SERVELAB_SHARED");
  if (!shared.empty() && fs::exists(fs::path(shared) / "data" / "gpt2" / "vocab.json"))
    return (fs::path(shared) / "data" / "gpt2").string();
  try {
    return default_tokenizer_dir();
  } catch (const Error&) {
    return "";
  }
}

// An HF folder of test_weights(config) with GPT-2's tokenizer files.
void write_folder(const fs::path& dir, const Gpt2Config& c, uint64_t seed, const std::string& tok) {
  fs::create_directories(dir);
  save_gpt2_weights(test_weights(c, seed, true), (dir / "model.safetensors").string());
  std::ofstream(dir / "config.json") << c.to_json().dump(2);
  for (const char* f : {"vocab.json", "merges.txt"})
    fs::copy_file(fs::path(tok) / f, dir / f, fs::copy_options::overwrite_existing);
}

// The parameters' shapes as the quantizers see them: matrices as stored, [out, in] (Conv1D
// weights transposed), and the 1-D parameters.
struct Layout {
  std::vector<std::pair<int64_t, int64_t>> matrices;
  std::vector<int64_t> vectors;
  int64_t matrix_elements() const {
    int64_t n = 0;
    for (auto [r, c] : matrices) n += r * c;
    return n;
  }
  int64_t matrix_rows() const {
    int64_t n = 0;
    for (auto [r, c] : matrices) n += r;
    return n;
  }
  int64_t vector_elements() const { return std::accumulate(vectors.begin(), vectors.end(), int64_t{0}); }
  int64_t tensors() const { return static_cast<int64_t>(matrices.size() + vectors.size()); }
};

Layout layout_of(const Gpt2Config& c, bool tied) {
  const int64_t E = c.n_embd, I = c.inner_dim(), V = c.vocab_size, P = c.n_positions;
  Layout l;
  l.matrices = {{V, E}, {P, E}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    l.matrices.insert(l.matrices.end(), {{3 * E, E}, {E, E}, {I, E}, {E, I}});
    l.vectors.insert(l.vectors.end(), {E, E, 3 * E, E, E, E, I, E});  // ln_1, biases, ln_2
  }
  l.vectors.insert(l.vectors.end(), {E, E});  // ln_f
  if (!tied) l.matrices.push_back({V, E});
  return l;
}

// What each scheme must take, from the shapes alone.
QuantizedBytes expected_bytes(const Layout& l, const QuantSpec& s) {
  QuantizedBytes b;
  const int64_t m = l.matrix_elements(), v = l.vector_elements();
  b.parameters = m + v;
  switch (s.scheme) {
    case QuantScheme::None:
      b.other = 4 * (m + v);
      break;
    case QuantScheme::ZeroPointUint8:  // every parameter: 1 byte each, fp32 scale + zero point each
      b.quantized = m + v;
      b.states = 8 * l.tensors();
      break;
    case QuantScheme::PerChannelInt8:  // 1 byte each, one fp32 scale per row
      b.quantized = m;
      b.states = 4 * l.matrix_rows();
      b.other = 4 * v;
      break;
    case QuantScheme::Int4Group:  // half a byte each, fp32 scale + minimum per group
      b.quantized = m / 2;
      b.states = 8 * (m / s.group_size);
      b.other = 4 * v;
      break;
    case QuantScheme::Int8Group:  // 1 byte each, one fp32 scale per group
      b.quantized = m;
      b.states = 4 * (m / s.group_size);
      b.other = 4 * v;
      break;
    case QuantScheme::Fp16:
    case QuantScheme::Bf16:
      b.quantized = 2 * m;
      b.other = 4 * v;
      break;
  }
  return b;
}

int64_t quantized_elements(const Layout& l, const QuantSpec& s) {
  if (s.scheme == QuantScheme::None) return 0;
  return l.matrix_elements() + (s.scheme == QuantScheme::ZeroPointUint8 ? l.vector_elements() : 0);
}

std::vector<int> ints(const at::Tensor& t) {
  at::Tensor c = t.to(at::kInt).contiguous().view({-1});
  return std::vector<int>(c.data_ptr<int>(), c.data_ptr<int>() + c.numel());
}

std::vector<float> floats(const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous().view({-1});
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Logits of every real (unpadded) position of the prompts run as one left-padded batch: [N, vocab].
at::Tensor batch_logits(const Model& m, const std::vector<std::vector<int32_t>>& prompts) {
  PaddedBatch b = left_padded_batch(prompts, static_cast<int32_t>(m.shape().eos_token_id));
  ForwardInput in;
  in.input_ids = b.input_ids;
  in.position_ids = b.position_ids;
  in.key_mask = b.attention_mask;
  in.all_logits = true;
  at::Tensor l = m.forward(in).to(at::kFloat);
  return l.masked_select(b.attention_mask.to(at::kBool).unsqueeze(-1)).view({-1, l.size(-1)});
}

// max |a - b| / max |a|.
double relative_diff(const at::Tensor& a, const at::Tensor& b) {
  return test::max_abs_diff(a, b) / a.abs().max().item<double>();
}

GenerateOptions greedy(int64_t tokens) {
  GenerateOptions o;
  o.max_new_tokens = tokens;
  o.stop_at_eos = false;
  o.report_top = 0;
  return o;
}

std::vector<int32_t> solo(const Gpt2Model& m, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                          int64_t tokens) {
  return generate(m, tok, {prompt}, greedy(tokens)).sequences.at(0).generated_ids;
}

struct ModeRecorder : QuantizationSink {
  std::vector<std::string> modes;
  std::atomic<bool>* cancel_after_first = nullptr;
  void on_mode(const QuantModeResult& m) override {
    modes.push_back(m.mode);
    if (cancel_after_first && modes.size() == 2) *cancel_after_first = true;  // after "none" and one mode
  }
};

// Every ISA of our kernels (util/cpu_features.h); the test rows of one this CPU lacks skip.
const std::vector<Isa> kIsas = {Isa::Avx512, Isa::Avx2, Isa::Generic};

using test::IsaScope;

}  // namespace

// The data row's ISA, forced for the test's scope; a skip where this CPU lacks it.
#define FORCE_DATA_ISA()                                                              \
  QFETCH(int, isa);                                                                   \
  if (!cpu_supports(static_cast<Isa>(isa)))                                           \
    QSKIP(qPrintable(QString("this CPU has no ") + isa_name(static_cast<Isa>(isa)))); \
  IsaScope isa_scope(static_cast<Isa>(isa))

class TestQuant : public QObject {
  Q_OBJECT

  std::string tokenizer_dir_;
  std::string oracle_dir_;
  QTemporaryDir tmp_;
  std::string vocab_dir_;  // an HF folder of vocab_config() with GPT-2's tokenizer
  Gpt2Config small_ = small_config();
  test::IdTokenizer id_tok_{304, 303};

  using Run = test::CliRun;
  Run cli(const QStringList& args) { return test::run_cli(SERVELAB_CLI, args); }

  void require_vocab_folder() {
    if (vocab_dir_.empty())
      QSKIP(
          "GPT-2 tokenizer files not found (SERVELAB_SHARED unset and scripts/bootstrap's copy missing): the "
          "engine, experiment and CLI checks encode text and are skipped");
  }

  QuantizedGpt2 quantize_small(const std::string& mode, bool tied = true, uint64_t seed = 3) {
    c10::InferenceMode guard;
    return quantize_gpt2(small_, test_weights(small_, seed, tied), parse_quant_mode(mode));
  }

 private Q_SLOTS:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    oracle_dir_ = test::env_or_empty("SERVELAB_QUANT_ORACLE_DIR");
    tokenizer_dir_ = gpt2_tokenizer_dir();
    if (!tokenizer_dir_.empty()) {
      vocab_dir_ = tmp_.filePath("vocab128").toStdString();
      write_folder(vocab_dir_, vocab_config(), 21, tokenizer_dir_);
    }
  }

  // ---- 1. The formulas on hand-made tensors ----------------------------------------------------

  void zero_point_by_hand() {
    // min 0, max 255: scale exactly 1 and zero point 0, so q is the value truncated.
    QuantizedTensor a = quantize_zero_point(at::tensor({0.f, 2.999f, 3.f, 100.49f, 254.5f, 255.f}));
    QCOMPARE(a.scheme, QuantScheme::ZeroPointUint8);
    QCOMPARE(a.values.scalar_type(), at::kByte);
    QCOMPARE(a.scale.dim(), int64_t{0});
    QCOMPARE(a.scale.item<float>(), 1.f);
    QCOMPARE(a.offset.item<float>(), 0.f);
    QCOMPARE(ints(a.values), (std::vector<int>{0, 2, 3, 100, 254, 255}));  // 2.999 -> 2: truncation
    // Negative values, shape kept: min -255, max 255, so scale = 510 / 255 = 2 and zero point -255.
    // (t + 255) / 2 = 2.499, 127.25, 127.5, 128, 0, 255.
    QuantizedTensor b =
        quantize_zero_point(at::tensor({-250.002f, -0.5f, 0.f, 1.f, -255.f, 255.f}).view({2, 3}));
    QCOMPARE(b.shape, (std::vector<int64_t>{2, 3}));
    QCOMPARE(b.scale.item<float>(), 2.f);
    QCOMPARE(b.offset.item<float>(), -255.f);
    QCOMPARE(ints(b.values), (std::vector<int>{2, 127, 127, 128, 0, 255}));
    QCOMPARE(floats(b.dequantize(at::kFloat)), (std::vector<float>{-251.f, -1.f, -1.f, 1.f, -255.f, 255.f}));
    QCOMPARE(b.value_bytes(), int64_t{6});
    QCOMPARE(b.state_bytes(), int64_t{8});
  }

  void zero_point_equals_the_formula_in_floats() {
    // Any scale: the formula evaluated element by element in plain float arithmetic, truncated.
    const std::vector<float> v = floats(pattern(4099, 0.3, 1.7) * pattern(4099, 2.0, 1.0) - 0.21f);
    QuantizedTensor q = quantize_zero_point(at::tensor(v));
    const float mn = *std::min_element(v.begin(), v.end()), mx = *std::max_element(v.begin(), v.end());
    const float scale = (mx - mn) / 255.f;
    QCOMPARE(q.scale.item<float>(), scale);
    QCOMPARE(q.offset.item<float>(), mn);
    const std::vector<int> got = ints(q.values);
    int truncated_below_half = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const float r = std::clamp((v[i] - mn) / scale, 0.f, 255.f);
      QCOMPARE(got[i], static_cast<int>(static_cast<uint8_t>(r)));
      if (r - std::floor(r) > 0.5f) ++truncated_below_half;  // rounding would have gone up
    }
    QVERIFY2(truncated_below_half > 1000, "the tensor must exercise truncation, not only exact steps");
  }

  void zero_point_round_trip_error() {
    // Truncation: 0 <= t - dequant < scale, so the bound is one full scale (not half of one, as
    // rounding would give), and on a dense tensor it is reached: the largest error is nearly a
    // scale and the mean is half a scale (rounding: nearly 0).
    const at::Tensor t = at::linspace(-1.3, 2.1, 100001, at::kFloat);
    QuantizedTensor q = quantize_zero_point(t);
    const double scale = q.scale.item<double>();
    QCOMPARE(scale, static_cast<double>((2.1f - -1.3f) / 255.f));
    const at::Tensor err = (t - q.dequantize(at::kFloat)).to(at::kDouble);
    const double slack = 4 * 1.2e-7 * 2.1;  // float rounding of q * scale + zero point
    QVERIFY2(err.min().item<double>() >= -slack, qPrintable(QString::number(err.min().item<double>())));
    QVERIFY2(err.max().item<double>() <= scale + slack,
             qPrintable(QString("max error %1 > scale %2").arg(err.max().item<double>()).arg(scale)));
    QVERIFY2(err.max().item<double>() >= 0.99 * scale,
             qPrintable(QString("max error %1 not near scale %2").arg(err.max().item<double>()).arg(scale)));
    const double mean = err.mean().item<double>() / scale;
    QVERIFY2(mean > 0.45 && mean < 0.55, qPrintable(QString("mean error %1 scales").arg(mean)));
  }

  void zero_point_constant_tensors() {
    // max = min: scale 0, q = 0, and the zero point alone gives the value back, with no 0 / 0.
    for (const at::Tensor& t : {at::full({3, 4}, 3.25f), at::zeros({5}), at::full({1}, -7.5f)}) {
      QuantizedTensor q = quantize_zero_point(t);
      QCOMPARE(q.scale.item<float>(), 0.f);
      QCOMPARE(q.offset.item<float>(), t.view({-1})[0].item<float>());
      QVERIFY(at::equal(q.values, at::zeros(t.sizes(), at::kByte)));
      const at::Tensor d = q.dequantize(at::kFloat);
      QVERIFY(at::isfinite(d).all().item<bool>());
      QVERIFY(at::equal(d, t));
    }
  }

  void per_channel_int8_by_hand() {
    // Row scale = max |row| / 127; q = round(t / scale). Row 1 is all zeros (scale 0, q 0).
    const at::Tensor m =
        at::tensor({2.54f, -1.f, 0.3f, -2.54f, 0.f, 0.f, 0.f, 0.f, -0.5f, 0.2f, 0.01f, 0.1f}).view({3, 4});
    QuantizedTensor q = quantize_per_channel_int8(m);
    QCOMPARE(q.values.scalar_type(), at::kChar);
    QCOMPARE(q.scale.sizes().vec(), (std::vector<int64_t>{3}));
    QCOMPARE(floats(q.scale), (std::vector<float>{2.54f / 127.f, 0.f, 0.5f / 127.f}));
    // 0.2 / (0.5 / 127) = 50.8 -> 51; 0.01 -> 2.54 -> 3; 0.1 -> 25.4 -> 25.
    QCOMPARE(ints(q.values), (std::vector<int>{127, -50, 15, -127, 0, 0, 0, 0, -127, 51, 3, 25}));
    QCOMPARE(q.value_bytes(), int64_t{12});
    QCOMPARE(q.state_bytes(), int64_t{12});
  }

  void per_channel_int8_error_bound() {
    // |err| <= scale / 2 per row (rounding), rows of very different magnitudes and a zero row.
    const int64_t rows = 9, cols = 1000;
    at::Tensor m =
        pattern(rows * cols, 0.5, 1.0).view({rows, cols}) * pattern(rows * cols, 1.9, 1.0).view({rows, cols});
    m = m * at::pow(10.0, at::arange(rows, at::kDouble).remainder(5) - 2).to(at::kFloat).unsqueeze(1);
    m[4].zero_();
    QuantizedTensor q = quantize_per_channel_int8(m);
    const at::Tensor err = (q.dequantize(at::kFloat) - m).abs().amax(1).to(at::kDouble);
    const at::Tensor scale = q.scale.to(at::kDouble);
    QVERIFY(at::isfinite(q.dequantize(at::kFloat)).all().item<bool>());
    QCOMPARE(q.scale[4].item<float>(), 0.f);
    QVERIFY(at::equal(q.values[4], at::zeros({cols}, at::kChar)));
    double tightest = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double s = scale[r].item<double>(), e = err[r].item<double>();
      QVERIFY2(e <= s * (0.5 + 1e-4),
               qPrintable(QString("row %1: error %2 > scale/2 = %3").arg(r).arg(e).arg(s / 2)));
      if (s > 0) tightest = std::max(tightest, e / s);
      if (s > 0) QCOMPARE(q.values[r].abs().max().item<int>(), 127);  // symmetric: the largest |value| is 127
    }
    QVERIFY2(tightest > 0.45, qPrintable(QString("largest error only %1 scales").arg(tightest)));
  }

  void int4_group_by_hand() {
    // One group of 4: min 0, max 1.5, scale 0.1; codes round(t / 0.1) = 0, 10, 5 (4.9), 15; packed
    // two per byte with the even column in the low nibble: 0 | 10 << 4 = 160, 5 | 15 << 4 = 245.
    QuantizedTensor q = quantize_int4_group(at::tensor({0.f, 1.f, 0.49f, 1.5f}).view({1, 4}), 4);
    QCOMPARE(q.values.sizes().vec(), (std::vector<int64_t>{1, 2}));
    QCOMPARE(ints(q.values), (std::vector<int>{160, 245}));
    QCOMPARE(ints(unpack_int4(q.values)), (std::vector<int>{0, 10, 5, 15}));
    QCOMPARE(q.scale.item<float>(), 1.5f / 15.f);
    QCOMPARE(q.offset.item<float>(), 0.f);
    QCOMPARE(q.value_bytes(), int64_t{2});
    QCOMPARE(q.state_bytes(), int64_t{8});
  }

  void int4_group_error_bound_data() {
    QTest::addColumn<int>("group");
    for (int g : {32, 64, 128}) QTest::newRow(("g" + std::to_string(g)).c_str()) << g;
  }
  void int4_group_error_bound() {
    // |err| <= scale / 2 per group; a constant group (scale 0) comes back exactly.
    QFETCH(int, group);
    const int64_t rows = 6, cols = 256, groups = cols / group;
    at::Tensor m =
        (pattern(rows * cols, 0.1, 1.0) * pattern(rows * cols, 4.0, 0.3) + 0.05f).view({rows, cols});
    m[2].narrow(0, group, group).fill_(0.75f);
    QuantizedTensor q = quantize_int4_group(m, group);
    QCOMPARE(q.values.sizes().vec(), (std::vector<int64_t>{rows, cols / 2}));
    QCOMPARE(q.scale.sizes().vec(), (std::vector<int64_t>{rows, groups}));
    QCOMPARE(q.offset.sizes().vec(), (std::vector<int64_t>{rows, groups}));
    QCOMPARE(q.value_bytes(), rows * cols / 2);
    QCOMPARE(q.state_bytes(), 8 * rows * groups);
    const at::Tensor d = q.dequantize(at::kFloat);
    QVERIFY(at::isfinite(d).all().item<bool>());
    const at::Tensor err = (d - m).abs().view({rows, groups, group}).amax(2).to(at::kDouble);
    const at::Tensor codes = unpack_int4(q.values);
    QCOMPARE(codes.max().item<int>(), 15);
    double tightest = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < groups; ++g) {
        const double s = q.scale[r][g].item<double>(), e = err[r][g].item<double>();
        const at::Tensor block = m[r].narrow(0, g * group, group);
        QCOMPARE(q.offset[r][g].item<float>(), block.min().item<float>());
        QCOMPARE(q.scale[r][g].item<float>(), (block.max().item<float>() - block.min().item<float>()) / 15.f);
        QVERIFY2(
            e <= s * (0.5 + 1e-4) + 1e-7,
            qPrintable(QString("row %1 group %2: error %3 > scale/2 = %4").arg(r).arg(g).arg(e).arg(s / 2)));
        if (s > 0) tightest = std::max(tightest, e / s);
      }
    QCOMPARE(q.scale[2][1].item<float>(), 0.f);  // the constant group
    QVERIFY(at::equal(d[2].narrow(0, group, group), m[2].narrow(0, group, group)));
    QVERIFY2(tightest > 0.4, qPrintable(QString("largest error only %1 scales").arg(tightest)));
  }

  void int4_group_size_must_divide_rows() {
    const std::string e = error_of(ErrorKind::Input, [] { quantize_int4_group(at::ones({4, 48}), 32); });
    QVERIFY2(contains(e, "group size 32") && contains(e, "rows of 48"), e.c_str());
    QVERIFY2(contains(error_of(ErrorKind::Input,
                               [] {
                                 quantize_int4_group(at::ones({4, 48}), 3);
                               }),
                      "even"),
             "odd group size");
    QVERIFY(
        contains(error_of(ErrorKind::Input, [] { quantize_int4_group(at::ones({48}), 16); }), "matrices"));
    // Through the model: the tiny GPT-2 is 32 wide, so its rows do not divide by 64; the message names
    // the mode and the parameter.
    const Gpt2Config c = tiny_gpt2_config();
    c10::InferenceMode guard;
    const Gpt2Weights w = make_random_gpt2_weights(c, 1, at::Device(at::kCPU), at::kFloat);
    const std::string m =
        error_of(ErrorKind::Input, [&] { quantize_gpt2(c, w, parse_quant_mode("int4-g64")); });
    QVERIFY2(contains(m, "int4-g64: transformer.wte.weight:") && contains(m, "group size 64") &&
                 contains(m, "rows of 32"),
             m.c_str());
  }

  void pack_unpack_int4_round_trip() {
    at::manual_seed(5);
    for (int64_t cols : {2, 34, 128}) {
      const at::Tensor codes = at::randint(0, 16, {7, cols}, at::kByte);
      const at::Tensor packed = pack_int4(codes);
      QCOMPARE(packed.sizes().vec(), (std::vector<int64_t>{7, cols / 2}));
      QCOMPARE(packed.scalar_type(), at::kByte);
      QVERIFY(at::equal(unpack_int4(packed), codes));
      // Column 2j in the low nibble, 2j + 1 in the high one.
      QVERIFY(at::equal(packed.bitwise_and(15), codes.slice(1, 0, cols, 2)));
      QVERIFY(at::equal(packed.bitwise_right_shift(4), codes.slice(1, 1, cols, 2)));
    }
    QVERIFY(contains(error_of(ErrorKind::Input, [] { pack_int4(at::zeros({2, 5}, at::kByte)); }), "even"));
  }

  // ---- 2. The course's quantization against Hugging Face (Python oracle) -------------------------

  void course_quantization_matches_hf_data() {
    QTest::addColumn<QString>("model");
    QTest::newRow("tied") << "tied";
    QTest::newRow("untied") << "untied";
  }
  void course_quantization_matches_hf() {
    QFETCH(QString, model);
    const fs::path dir = fs::path(oracle_dir_) / model.toStdString();
    if (oracle_dir_.empty() || !fs::exists(dir / "footprint.json"))
      QSKIP(
          "quantization oracle not found: SERVELAB_QUANT_ORACLE_DIR is unset or empty. It is written by "
          "tests/oracle/make_quant_fixtures.py (CTest runs it first when .venv has torch and transformers).");
    const json fp = json::parse(std::ifstream(dir / "footprint.json"));
    auto engine = Engine::load_folder(dir.string(), EngineOptions{});
    QCOMPARE(engine->model_as<Gpt2Model>().weights().lm_head_tied, model == "tied");
    c10::InferenceMode guard;
    const QuantizedGpt2 q =
        quantize_gpt2(engine->model_as<Gpt2Model>().config(), engine->model_as<Gpt2Model>().dense_weights(),
                      parse_quant_mode("zp-uint8"));
    // The same parameters, in the same order as HF's named_parameters().
    std::vector<std::string> names;
    for (const auto& p : q.parameters) names.push_back(p.name);
    QCOMPARE(names, fp["names"].get<std::vector<std::string>>());
    SafetensorsFile ref = SafetensorsFile::open((dir / "quant.safetensors").string());
    std::map<std::string, const StTensor*> by_name;
    for (const auto& t : ref.tensors()) by_name[t.name] = &t;
    int transposed = 0;
    for (const auto& p : q.parameters) {
      const StTensor& rq = *by_name.at(p.name + ".q");
      QCOMPARE(rq.dtype, StDType::U8);
      const at::Tensor want = at::from_blob(const_cast<std::byte*>(rq.data), rq.shape, at::kByte);
      // Ours are stored [out, in] for Conv1D weights: compare in the parameter's own layout.
      const at::Tensor got = p.tensor.transposed ? p.tensor.values.t() : p.tensor.values;
      transposed += p.tensor.transposed;
      QVERIFY2(got.sizes() == want.sizes(), p.name.c_str());
      const int64_t differ = got.ne(want).sum().item<int64_t>();
      QVERIFY2(differ == 0, qPrintable(QString("%1: %2 of %3 uint8 values differ from HF's")
                                           .arg(p.name.c_str())
                                           .arg(differ)
                                           .arg(got.numel())));
      float scale = 0, zero = 0;
      std::memcpy(&scale, by_name.at(p.name + ".scale")->data, 4);
      std::memcpy(&zero, by_name.at(p.name + ".zero_point")->data, 4);
      QVERIFY2(p.tensor.scale.item<float>() == scale, p.name.c_str());
      QVERIFY2(p.tensor.offset.item<float>() == zero, p.name.c_str());
      QVERIFY2(scale > 0,
               qPrintable(QString("%1 is constant: the oracle must test a real range").arg(p.name.c_str())));
    }
    QCOMPARE(transposed, 4 * static_cast<int>(engine->model_as<Gpt2Model>().config().n_layer));

    // Memory: ours against get_memory_footprint(), to the byte.
    QuantizationParams p;
    p.modes = {"zp-uint8"};
    p.prompts = {"hello there", "ab"};
    p.new_tokens = 2;
    p.measure_speed = false;
    const QuantizationResult r = run_quantization(*engine, p);
    const QuantMemory& m = r.modes.at(1).memory;
    QCOMPARE(m.fp32_bytes, fp["params_before"].get<int64_t>());
    QCOMPARE(m.quantized_bytes + m.other_bytes, fp["params_after"].get<int64_t>());
    QCOMPARE(hf_gpt2_buffer_bytes(engine->model_as<Gpt2Model>().config()),
             fp["course_buffer_bytes"].get<int64_t>());
    QCOMPARE(m.course_fp32_footprint_bytes, fp["course_before"].get<int64_t>());
    QCOMPARE(m.course_footprint_bytes, fp["course_after"].get<int64_t>());
    qInfo("%s: HF get_memory_footprint() with the course's buffers %lld -> %lld bytes (transformers %s)",
          qPrintable(model), static_cast<long long>(m.course_fp32_footprint_bytes),
          static_cast<long long>(m.course_footprint_bytes), fp["transformers"].get<std::string>().c_str());
  }

  void gpt2_small_course_footprint() {
    // docs/course.md, lesson 4: GPT-2 small as uint8 is 124,439,808 bytes of values; with GPT-2's mask
    // buffers HF's get_memory_footprint() says 137,022,768 (and 510,342,192 in fp32).
    if (tokenizer_dir_.empty()) QSKIP("the built-in model needs the GPT-2 tokenizer files");
    auto demo = Engine::load_demo(EngineOptions{}, tokenizer_dir_);
    c10::InferenceMode guard;
    QuantizedBytes b;
    {
      const QuantizedGpt2 q =
          quantize_gpt2(demo->model_as<Gpt2Model>().config(), demo->model_as<Gpt2Model>().dense_weights(),
                        parse_quant_mode("zp-uint8"));
      b = quantized_bytes(q);
    }
    const int64_t buffers = hf_gpt2_buffer_bytes(demo->model_as<Gpt2Model>().config());
    QCOMPARE(b.parameters, int64_t{124439808});
    QCOMPARE(b.quantized, int64_t{124439808});
    QCOMPARE(b.other, int64_t{0});
    QCOMPARE(b.states, int64_t{148 * 8});
    QCOMPARE(b.quantized + b.other + buffers, int64_t{137022768});
    QCOMPARE(demo->model_as<Gpt2Model>().dense_weights().parameter_count() * 4 + buffers, int64_t{510342192});
    const fs::path small = fs::path(oracle_dir_) / "gpt2_small_footprint.json";
    if (!oracle_dir_.empty() && fs::exists(small)) {
      const json fp = json::parse(std::ifstream(small));
      QCOMPARE(b.quantized + b.other, fp["params_after"].get<int64_t>());
      QCOMPARE(b.quantized + b.other + buffers, fp["course_after"].get<int64_t>());
      QCOMPARE(demo->model_as<Gpt2Model>().dense_weights().parameter_count() * 4 + buffers,
               fp["course_before"].get<int64_t>());
    } else {
      qInfo("quantization oracle absent: GPT-2 small checked against the course's figures only");
    }
  }

  // ---- 3. Memory to the byte --------------------------------------------------------------------

  void memory_bytes_every_scheme_data() {
    QTest::addColumn<QString>("mode");
    QTest::addColumn<bool>("tied");
    for (const auto& m : kModes) {
      QTest::newRow((m + "/tied").c_str()) << QString::fromStdString(m) << true;
      QTest::newRow((m + "/untied").c_str()) << QString::fromStdString(m) << false;
    }
    QTest::newRow("none/tied") << "none" << true;
  }
  void memory_bytes_every_scheme() {
    QFETCH(QString, mode);
    QFETCH(bool, tied);
    const QuantSpec spec = parse_quant_mode(mode.toStdString());
    const QuantizedGpt2 q = quantize_small(mode.toStdString(), tied);
    const QuantizedBytes got = quantized_bytes(q);
    const QuantizedBytes want = expected_bytes(layout_of(small_, tied), spec);
    QCOMPARE(got.parameters, want.parameters);
    QCOMPARE(got.quantized, want.quantized);
    QCOMPARE(got.states, want.states);
    QCOMPARE(got.other, want.other);
    QCOMPARE(got.total(), want.quantized + want.states + want.other);
    if (tied) QCOMPARE(got.parameters, small_.num_parameters());
    // What a JIT model holds: the quantized matrices and the rest in fp32 (the course's mode keeps its
    // 1-D parameters as dequantized fp32 tensors, so they count 4 bytes there instead of 1 + 8).
    if (spec.is_quantized()) {
      c10::InferenceMode guard;
      auto jit = build_quantized_model(q, at::kFloat, QuantExec::Jit);
      const Layout l = layout_of(small_, tied);
      const int64_t want_resident =
          spec.scheme == QuantScheme::ZeroPointUint8
              ? l.matrix_elements() + 8 * static_cast<int64_t>(l.matrices.size()) + 4 * l.vector_elements()
              : want.total();
      QCOMPARE(jit->resident_bytes(), want_resident);
      auto once = build_quantized_model(q, at::kFloat, QuantExec::DequantOnce);
      QCOMPARE(once->resident_bytes(), 4 * want.parameters);
    }
  }

  // ---- 4. JIT = dequantize-once; native close to it ------------------------------------------

  void jit_equals_dequant_once_data() {
    QTest::addColumn<QString>("mode");
    QTest::addColumn<bool>("tied");
    QTest::addColumn<qint64>("block");
    for (const auto& m : kModes) {
      QTest::newRow((m + "/default blocks").c_str()) << QString::fromStdString(m) << true << qint64{1 << 21};
      // 24 KiB of fp32: 48 rows of 128 a block, so the LM head's 304 rows run as 6 blocks and a partial one
      // of 16, c_fc's 512 as 10 and one of 32; mlp.c_proj (rows of 512) gets the 16-row minimum.
      QTest::newRow((m + "/48-row blocks").c_str()) << QString::fromStdString(m) << true << qint64{24576};
      QTest::newRow((m + "/untied/48-row blocks").c_str())
          << QString::fromStdString(m) << false << qint64{24576};
      // 1 byte: the 16-row minimum everywhere.
      QTest::newRow((m + "/16-row blocks").c_str()) << QString::fromStdString(m) << true << qint64{1};
    }
  }
  void jit_equals_dequant_once() {
    // The same dequantized weights, only computed a block at a time (and for int8-channel with the
    // scale applied after the product): equal up to fp32 summation order.
    QFETCH(QString, mode);
    QFETCH(bool, tied);
    QFETCH(qint64, block);
    const QuantizedGpt2 q = quantize_small(mode.toStdString(), tied);
    c10::InferenceMode guard;
    auto once = build_quantized_model(q, at::kFloat, QuantExec::DequantOnce);
    auto jit = build_quantized_model(q, at::kFloat, QuantExec::Jit, block);
    QVERIFY(once->kernels() == nullptr);
    QVERIFY(jit->kernels() != nullptr);
    QVERIFY(!jit->weights().wte.defined());  // no fp32 copy of the matrices
    QVERIFY(contains(jit->kernels()->description(), "JIT"));
    const at::Tensor a = batch_logits(*once, kIdPrompts), b = batch_logits(*jit, kIdPrompts);
    QCOMPARE(a.size(0), int64_t{18});
    const double rel = relative_diff(a, b);
    QVERIFY2(rel <= 1e-5,
             qPrintable(QString("JIT vs dequantize-once: max |diff| / max |logit| = %1").arg(rel)));
    // Those 28 rows (4 prompts padded to 7) take the fused kernel where the CPU has one; the blocks
    // run below 8 rows (one prompt) and above 128 (6 prompts of 24).
    std::vector<std::vector<int32_t>> many(6);
    for (int32_t i = 0; i < 6; ++i)
      for (int32_t j = 0; j < 24; ++j) many[static_cast<size_t>(i)].push_back((i * 37 + j * 11) % 300);
    for (const auto& prompts : {std::vector<std::vector<int32_t>>{kIdPrompts[0]}, many}) {
      const double r = relative_diff(batch_logits(*once, prompts), batch_logits(*jit, prompts));
      QVERIFY2(r <= 1e-5,
               qPrintable(QString("%1 prompts: JIT vs dequantize-once = %2").arg(prompts.size()).arg(r)));
    }
    // And it is the quantized model, not the fp32 one.
    Gpt2Model fp32(small_, test_weights(small_, 3, tied));
    QVERIFY(relative_diff(batch_logits(fp32, kIdPrompts), a) > 1e-5);
  }

  void fused_kernels_equal_dequant_once_data() {
    QTest::addColumn<QString>("mode");
    QTest::addColumn<qint64>("group");  // int4 only: the mode's, or 16 (not a multiple of 32)
    QTest::addColumn<int>("isa");       // each row under every ISA of ours
    for (const Isa isa : kIsas) {
      const std::string i = std::string("/") + isa_name(isa);
      const int n = static_cast<int>(isa);
      for (const auto& m : kModes)
        QTest::newRow((m + i).c_str()) << QString::fromStdString(m) << qint64{0} << n;
      QTest::newRow(("int4-g16" + i).c_str()) << QString("int4-g32") << qint64{16} << n;
      // GGUF's Q8_0 as stored (no CLI mode of its own): int8 groups of 32, and of 16 (refused by the
      // GEMV).
      QTest::newRow(("int8-g32" + i).c_str()) << QString("int8-g") << qint64{32} << n;
      QTest::newRow(("int8-g16" + i).c_str()) << QString("int8-g") << qint64{16} << n;
    }
  }
  // The data rows' matrix: a CLI mode, or int4 / int8 groups of the given size.
  static QuantizedTensor quantize_row(const QString& mode, qint64 group, const at::Tensor& m) {
    if (mode == "int8-g") return quantize_int8_group(m, group);
    if (group) return quantize_int4_group(m, group);
    return quantize_tensor(m, parse_quant_mode(mode.toStdString()), false);
  }
  void fused_kernels_equal_dequant_once() {
    // The JIT path's CPU kernels on their own, at the edges of their tiling: 37 output channels
    // (4 tiles of 8 and a partial one), rows of x from 1 to 130 (AVX-512's passes of 32 and of 16,
    // AVX2's of 24, 16 and 8, partial ones), rows of 100 columns (the conversions' scalar tails;
    // int4 takes 128). Row dequantization is bitwise under every ISA (a multiply, then an add, no
    // contraction); the products within 1e-6 of at::mm (the order of the sums differs).
    QFETCH(QString, mode);
    QFETCH(qint64, group);
    FORCE_DATA_ISA();
    const QuantSpec spec =
        mode == "int8-g" ? QuantSpec{QuantScheme::Int8Group} : parse_quant_mode(mode.toStdString());
    const bool grouped = spec.scheme == QuantScheme::Int4Group || group;
    const int64_t out = 37, cols = grouped ? 128 : 100;
    c10::InferenceMode guard;
    const at::Tensor m = pattern(out * cols, 0.3, 0.2).view({out, cols}) +
                         pattern(out * cols, 1.1, 0.05).view({cols, out}).t();
    QuantizedTensor w = quantize_row(mode, group, m);
    const at::Tensor dense = w.dequantize(at::kFloat);
    // Row blocks dequantize to the very values of dequantize-once (per-channel int8: to its
    // integers, the JIT path scales the product).
    if (fused_dequant_supported(w)) {
      at::Tensor block = at::empty({13, cols});
      dequantize_rows_cpu(w, 20, block);
      const bool integers = spec.scheme == QuantScheme::PerChannelInt8;
      QVERIFY(
          at::equal(block, integers ? w.values.narrow(0, 20, 13).to(at::kFloat) : dense.narrow(0, 20, 13)));
    } else
      QFAIL("every ISA dequantizes rows of every scheme");
    if (static_cast<Isa>(isa) == Isa::Generic) {
      // No fused product of ours: the JIT path dequantizes rows and ATen multiplies.
      QVERIFY(!fused_linear_supported(w));
      QVERIFY_THROWS_EXCEPTION(InputError, fused_linear_cpu(w, at::ones({9, cols})));
      return;
    }
    QVERIFY(fused_linear_supported(w));
    const at::Tensor x = pattern(130 * cols, 2.0, 1.0).view({130, cols});
    const at::Tensor all = fused_linear_cpu(w, x);
    for (int64_t rows : {1, 8, 9, 16, 17, 23, 24, 25, 33, 48, 49, 100, 128, 130}) {
      const at::Tensor xr = x.narrow(0, 0, rows);
      const at::Tensor y = fused_linear_cpu(w, xr), want = at::mm(xr, dense.t());
      QCOMPARE(y.sizes().vec(), want.sizes().vec());
      const double rel = relative_diff(want, y);
      QVERIFY2(rel <= 1e-6, qPrintable(QString("%1 rows: max |diff| / max |y| = %2").arg(rows).arg(rel)));
      // Each row's products run in the same order whatever the other rows: the same bits.
      QVERIFY(at::equal(y, all.narrow(0, 0, rows)));
    }
  }

  void fused_gemv_equals_dequant_once_data() { fused_kernels_equal_dequant_once_data(); }
  void fused_gemv_equals_dequant_once() {
    // The decode kernel (1 to 7 rows, weights dequantized in registers): 45 output channels split
    // over the threads unevenly, under each ISA, at widths of 256 (8 steps of 32, 2 to 8 int4
    // groups), 384 (3 groups of 128: an odd count) and, for groups of 32, 352 (11 groups: an odd
    // count, and 3 past the AVX2 kernels' vectors of 8 groups).
    QFETCH(QString, mode);
    QFETCH(qint64, group);
    FORCE_DATA_ISA();
    const int64_t out = 45;
    c10::InferenceMode guard;
    const QuantSpec spec =
        mode == "int8-g" ? QuantSpec{QuantScheme::Int8Group} : parse_quant_mode(mode.toStdString());
    const int64_t grouping = group ? group : spec.scheme == QuantScheme::Int4Group ? spec.group_size : 32;
    for (const int64_t cols : {int64_t{256}, int64_t{384}, int64_t{352}}) {
      const at::Tensor m = pattern(out * cols, 0.7, 0.1).view({out, cols}) -
                           pattern(out * cols, 0.4, 0.3).view({cols, out}).t();
      if (cols % grouping) continue;
      QuantizedTensor w = quantize_row(mode, group, m);
      if (group == 16 && mode != "int8-g") {
        // int4 groups of 16 split a step of 32: the kernel refuses them and JIT runs blocks instead
        // (int8 groups of 16, GGUF's Q6_K, take a scale per half-step).
        QVERIFY(!fused_gemv_supported(w));
        QVERIFY_THROWS_EXCEPTION(InputError, fused_gemv_cpu(w, at::ones({1, cols})));
        return;
      }
      if (static_cast<Isa>(isa) == Isa::Generic) {
        QVERIFY(!fused_gemv_supported(w));  // the JIT path dequantizes rows and ATen multiplies
        return;
      }
      QVERIFY(fused_gemv_supported(w));
      const at::Tensor dense = w.dequantize(at::kFloat);
      const at::Tensor x = pattern(kFusedGemvMaxRows * cols, 1.3, 0.5).view({kFusedGemvMaxRows, cols});
      for (int64_t rows = 1; rows <= kFusedGemvMaxRows; ++rows) {
        const at::Tensor xr = x.narrow(0, 0, rows);
        const at::Tensor y = fused_gemv_cpu(w, xr), want = at::mm(xr, dense.t());
        QCOMPARE(y.sizes().vec(), want.sizes().vec());
        const double rel = relative_diff(want, y);
        QVERIFY2(rel <= 1e-6,
                 qPrintable(
                     QString("%1 columns, %2 rows: max |diff| / max |y| = %3").arg(cols).arg(rows).arg(rel)));
      }
      // Eight rows, a wrong width, a non-float input: refused with a clear error, nothing computed.
      QVERIFY_THROWS_EXCEPTION(InputError, fused_gemv_cpu(w, at::ones({kFusedGemvMaxRows + 1, cols})));
      QVERIFY_THROWS_EXCEPTION(InputError, fused_gemv_cpu(w, at::ones({1, cols - 32})));
      QVERIFY_THROWS_EXCEPTION(InputError, fused_gemv_cpu(w, at::ones({1, cols}, at::kDouble)));
    }
  }

  void int8_activation_rows_data() {
    QTest::addColumn<int>("isa");
    for (const Isa isa : kIsas) QTest::newRow(isa_name(isa)) << static_cast<int>(isa);
  }
  void int8_activation_rows() {
    // Activations to int8 per 32 columns (--quant-exec jit-int8) against the definition: d = max |x| /
    // 127, q = round-to-nearest-even(x * (127 / max |x|)); a block of zeros gives 0s; and the
    // same bits under every ISA (AVX2 vectors or portable C++).
    FORCE_DATA_ISA();
    const int64_t rows = 5, cols = 96;
    c10::InferenceMode guard;
    at::Tensor x = pattern(rows * cols, 1.7, 0.9).view({rows, cols}).contiguous();
    x[2].narrow(0, 32, 32).zero_();
    x[3][70] = 40.0f;  // one large value: the rest of its block rounds to small integers
    const float* xp = x.data_ptr<float>();
    const Int8Rows r = quantize_rows_int8(xp, rows, cols);
    QCOMPARE(r.blocks, int64_t{3});
    for (int64_t m = 0; m < rows; ++m)
      for (int64_t b = 0; b < 3; ++b) {
        float amax = 0;
        for (int64_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xp[m * cols + b * 32 + j]));
        QCOMPARE(r.d[static_cast<size_t>(m * 3 + b)], amax / 127.0f);
        const float inv = amax > 0 ? 127.0f / amax : 0.0f;
        for (int64_t j = 0; j < 32; ++j) {
          const int64_t at = m * cols + b * 32 + j;
          QCOMPARE(static_cast<int>(r.q[static_cast<size_t>(at)]),
                   static_cast<int>(std::nearbyint(xp[at] * inv)));
        }
      }
    QCOMPARE(r.d[2 * 3 + 1], 0.0f);
    Int8Rows generic;
    {
      IsaScope portable(Isa::Generic);
      generic = quantize_rows_int8(xp, rows, cols);
    }
    QVERIFY(generic.q == r.q && generic.d == r.d);
    QVERIFY_THROWS_EXCEPTION(InputError, quantize_rows_int8(xp, 1, 100));
  }

  void int8_activation_products_data() {
    QTest::addColumn<bool>("int4");
    QTest::addColumn<int>("isa");
    for (const Isa isa : kIsas) {
      QTest::newRow((std::string("int4-g32/") + isa_name(isa)).c_str()) << true << static_cast<int>(isa);
      QTest::newRow((std::string("int8-g32/") + isa_name(isa)).c_str()) << false << static_cast<int>(isa);
    }
  }
  void int8_activation_products() {
    // The integer-activation products (int4 groups as GGUF's Q4_0/Q4_1, int8 groups as Q8_0) against
    // the same arithmetic in doubles: the dequantized matrix times x's int8 quantization
    // dequantized (int4's minimums times x's own block sums). 1 to 18 groups per row (every tail of AVX-512's
    // steps of 4 and 2 groups and AVX2's of 4 (int4) and 1), 1 to 130 rows (the decode kernels, then blocks
    // of 4 rows). Each row's result is the same bits whatever the other rows (batch invariance: a request's
    // tokens do not depend on its batch).
    QFETCH(bool, int4);
    FORCE_DATA_ISA();
    c10::InferenceMode guard;
    for (const int64_t cols : {32, 96, 160, 576, 1536}) {
      const int64_t out = 37;
      const at::Tensor m = pattern(out * cols, 0.3, 0.2).view({out, cols}) +
                           pattern(out * cols, 1.1, 0.05).view({cols, out}).t();
      const QuantizedTensor w = int4 ? quantize_int4_group(m, 32) : quantize_int8_group(m, 32);
      const at::Tensor x = (pattern(130 * cols, 2.0, 1.0) + pattern(130 * cols, 0.4, 0.3).pow(3))
                               .view({130, cols})
                               .contiguous();
      if (static_cast<Isa>(isa) == Isa::Generic) {
        QVERIFY(!int8_activation_supported(w));
        QVERIFY_THROWS_EXCEPTION(InputError, int8_activation_linear_cpu(w, x));
        continue;
      }
      QVERIFY(int8_activation_supported(w));
      const Int8Rows r = quantize_rows_int8(x.data_ptr<float>(), 130, cols);
      const at::Tensor q =
          at::from_blob(const_cast<int8_t*>(r.q.data()), {130, cols}, at::kChar).to(at::kDouble);
      const at::Tensor d = at::from_blob(const_cast<float*>(r.d.data()), {130, cols / 32}, at::kFloat)
                               .to(at::kDouble)
                               .repeat_interleave(32, 1);
      const at::Tensor xq = q * d, dense = w.dequantize(at::kDouble);
      at::Tensor want = at::mm(xq, dense.t()), bound = at::mm(xq.abs(), dense.abs().t());
      if (int4) {
        // int4's minimums meet the sums of x itself, not of its rounding (one fp32 sum per block).
        const at::Tensor rest = x.to(at::kDouble) - xq,
                         mn = w.offset.to(at::kDouble).repeat_interleave(32, 1);
        want = want + at::mm(rest, mn.t());
        bound = bound + at::mm(rest.abs(), mn.abs().t());
      }
      const at::Tensor all = int8_activation_linear_cpu(w, x);
      QCOMPARE(all.sizes().vec(), (std::vector<int64_t>{130, out}));
      const double err = ((all.to(at::kDouble) - want).abs() / bound).max().item<double>();
      QVERIFY2(err <= 1e-5,
               qPrintable(QString("%1 columns: max |diff| / sum |terms| = %2").arg(cols).arg(err)));
      // Not the fp32 activations' product: x's rounding shows, within what 8 bits allow.
      const double moved = relative_diff(at::mm(x, w.dequantize(at::kFloat).t()), all);
      QVERIFY2(moved > 1e-6 && moved < 3e-2, qPrintable(QString("against fp32 x: %1").arg(moved)));
      for (int64_t rows : {1, 2, 3, 5, 7, 8, 9, 33, 129}) {
        const at::Tensor y = int8_activation_linear_cpu(w, x.narrow(0, 0, rows));
        QVERIFY2(at::equal(y, all.narrow(0, 0, rows)), qPrintable(QString("%1 rows").arg(rows)));
      }
    }
    // Groups other than 32 and other schemes are not these kernels' (the JIT path keeps its own).
    const at::Tensor m = pattern(8 * 128, 0.5, 0.5).view({8, 128});
    QVERIFY(!int8_activation_supported(quantize_int4_group(m, 64)));
    QVERIFY(!int8_activation_supported(quantize_int8_group(m, 16)));
    QVERIFY(!int8_activation_supported(quantize_per_channel_int8(m)));
    QVERIFY_THROWS_EXCEPTION(InputError,
                             int8_activation_linear_cpu(quantize_int4_group(m, 32), at::ones({2, 96})));
  }

  void fp32_kernels_equal_mm_data() {
    QTest::addColumn<int>("isa");
    for (const Isa isa : kIsas) QTest::newRow(isa_name(isa)) << static_cast<int>(isa);
  }
  void fp32_kernels_equal_mm() {
    // The same kernels over a plain fp32 matrix (bench/cpp/linear_kernels.cpp times them against
    // oneDNN): the GEMV up to 7 rows, the 8-channel tiles beyond, 45 channels of 256 columns.
    FORCE_DATA_ISA();
    c10::InferenceMode guard;
    const int64_t out = 45, cols = 256;
    const at::Tensor w = pattern(out * cols, 0.9, 0.2).view({out, cols});
    if (static_cast<Isa>(isa) == Isa::Generic) {
      QVERIFY(!fp32_gemv_supported(w));  // ATen's linear runs these matrices
      return;
    }
    QVERIFY(fp32_gemv_supported(w));
    const at::Tensor x = pattern(130 * cols, 0.2, 1.5).view({130, cols});
    for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 17, 23, 24, 25, 33, 130}) {
      const at::Tensor xr = x.narrow(0, 0, rows);
      const double rel = relative_diff(at::mm(xr, w.t()), fp32_linear_cpu(w, xr));
      QVERIFY2(rel <= 1e-6, qPrintable(QString("%1 rows: max |diff| / max |y| = %2").arg(rows).arg(rel)));
    }
    QVERIFY(!fp32_gemv_supported(w.narrow(1, 0, 100).contiguous()));  // not a multiple of 32
    QVERIFY(!fp32_gemv_supported(w.t()));                             // not contiguous
    QVERIFY_THROWS_EXCEPTION(InputError, fp32_linear_cpu(w, at::ones({3, cols - 32})));
    QVERIFY_THROWS_EXCEPTION(InputError, fp32_linear_cpu(w.to(at::kDouble), at::ones({9, cols})));
  }

  void blocked_linear_equals_addmm_data() {
    QTest::addColumn<qint64>("out");
    QTest::addColumn<qint64>("in");
    QTest::addColumn<int>("isa");
    // Outputs that fill their last block of 16 and ones that do not (50, GPT-2's 50257 scaled down
    // to 503, 2304 = c_attn; 8 and 7 fill or not AVX2's half block), odd inner widths (GEMV and
    // GEMM both run a tail of single steps), under every ISA.
    for (const Isa isa : kIsas) {
      const std::string i = std::string("/") + isa_name(isa);
      const int n = static_cast<int>(isa);
      QTest::newRow(("50x37" + i).c_str()) << qint64{50} << qint64{37} << n;
      QTest::newRow(("503x129" + i).c_str()) << qint64{503} << qint64{129} << n;
      QTest::newRow(("2304x96" + i).c_str()) << qint64{2304} << qint64{96} << n;
      QTest::newRow(("16x1" + i).c_str()) << qint64{16} << qint64{1} << n;
      QTest::newRow(("7x768" + i).c_str()) << qint64{7} << qint64{768} << n;
      QTest::newRow(("8x33" + i).c_str()) << qint64{8} << qint64{33} << n;
      QTest::newRow(("40x5" + i).c_str()) << qint64{40} << qint64{5} << n;
    }
  }
  void blocked_linear_equals_addmm() {
    // x W^T + b through the 16-channel blocked layout equals addmm within fp32 rounding for every
    // row count the GEMV (1..7) and the GEMM tiles (8 per tile, and every remainder) see.
    QFETCH(qint64, out);
    QFETCH(qint64, in);
    FORCE_DATA_ISA();
    c10::InferenceMode guard;
    const at::Tensor w =
        pattern(out * in, 0.9, 0.2).view({out, in}) - pattern(out * in, 0.3, 0.1).view({in, out}).t();
    const at::Tensor bias = pattern(out, 2.1, 0.5);
    // Packing is a copy: both source layouts give the same blocks, and unpacking gives back the bits.
    const BlockedMatrix b = BlockedMatrix::from_out_in(w);
    QCOMPARE(b.packed().sizes().vec(), (std::vector<int64_t>{(out + 15) / 16, in, 16}));
    QCOMPARE(b.out_features(), out);
    QCOMPARE(b.in_features(), in);
    QCOMPARE(b.bytes(), (out + 15) / 16 * 16 * in * 4);
    QVERIFY(at::equal(b.to_out_in(), w));
    QVERIFY(at::equal(BlockedMatrix::from_in_out(w.t().contiguous()).packed(), b.packed()));
    if (out % 16) {  // the padding of the last block is zeros
      const at::Tensor pad = b.packed().select(0, b.packed().size(0) - 1).narrow(1, out % 16, 16 - out % 16);
      QVERIFY(at::equal(pad, at::zeros_like(pad)));
    }
    std::string why;
    if (!blocked_linear_available(at::kCPU, at::kFloat, &why)) QSKIP(why.c_str());
    const at::Tensor x = pattern(130 * in, 0.2, 1.5).view({130, in});
    for (int64_t rows : {1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17, 31, 33, 64, 127, 128, 129, 130}) {
      const at::Tensor xr = x.narrow(0, 0, rows);
      const at::Tensor want = at::addmm(bias, xr, w.t());
      const at::Tensor y = blocked_linear(xr, b, bias);
      QCOMPARE(y.sizes().vec(), want.sizes().vec());
      const double rel = relative_diff(want, y);
      QVERIFY2(rel <= 1e-5, qPrintable(QString("%1 rows: max |diff| / max |y| = %2").arg(rows).arg(rel)));
      // Without bias, and from a non-contiguous x (a column slice of a wider matrix).
      const at::Tensor wide = at::cat({xr, xr.narrow(1, 0, 1)}, 1).narrow(1, 0, in);
      QVERIFY(relative_diff(at::mm(xr, w.t()), blocked_linear(wide, b)) <= 1e-5);
    }
    QCOMPARE(blocked_linear(x.narrow(0, 0, 0), b, bias).sizes().vec(), (std::vector<int64_t>{0, out}));
  }

  void blocked_linear_rejects_bad_input() {
    c10::InferenceMode guard;
    const at::Tensor w = pattern(50 * 37, 0.9, 0.2).view({50, 37});
    const BlockedMatrix b = BlockedMatrix::from_out_in(w);
    auto input_error = [&](const at::Tensor& x, const at::Tensor& bias = {}) {
      return error_of(ErrorKind::Input, [&] { blocked_linear(x, b, bias); });
    };
    std::string e = input_error(at::ones({3, 37}, at::kDouble));
    QVERIFY2(contains(e, "fp32") && contains(e, "Double"), e.c_str());
    e = input_error(at::ones({3, 36}));
    QVERIFY2(contains(e, "36 columns") && contains(e, "37 inputs"), e.c_str());
    e = input_error(at::empty({3, 37}, at::TensorOptions().device(at::kMeta)));
    QVERIFY2(contains(e, "CPU") && contains(e, "meta"), e.c_str());
    e = input_error(at::ones({37}));
    QVERIFY2(contains(e, "2 dimensions"), e.c_str());
    e = input_error(at::ones({3, 37}), at::ones({49}));
    QVERIFY2(contains(e, "bias") && contains(e, "49"), e.c_str());
    e = error_of(ErrorKind::Input, [] { BlockedMatrix::from_out_in(at::ones({4, 4}, at::kHalf)); });
    QVERIFY2(contains(e, "fp32") && contains(e, "Half"), e.c_str());
    e = error_of(ErrorKind::Input, [&] { blocked_linear(at::ones({1, 37}), BlockedMatrix()); });
    QVERIFY2(contains(e, "empty"), e.c_str());
  }

  void llama_quantizes_every_mode_data() {
    QTest::addColumn<QString>("mode");
    QTest::addColumn<bool>("tied");
    QTest::addColumn<double>("native_tolerance");  // as native_close_to_dequant_once's, per scheme
    for (const auto& m : kModes) {
      const double tol = m == "int8-channel" ? 5e-2 : m == "fp16" ? 1e-2 : m == "bf16" ? 5e-2 : 1e-4;
      QTest::newRow((m + "/tied").c_str()) << QString::fromStdString(m) << true << tol;
      QTest::newRow((m + "/untied").c_str()) << QString::fromStdString(m) << false << tol;
    }
  }
  void llama_quantizes_every_mode() {
    // A small random Llama (GQA 4 over 2, q/k/v biases as qwen2 has them) through quantize_llama:
    // every projection, the embedding and the head quantized; JIT equals dequantize-once up to
    // summation order, native is within its arithmetic's error, and it is not the fp32 model.
    QFETCH(QString, mode);
    QFETCH(bool, tied);
    QFETCH(double, native_tolerance);
    c10::InferenceMode guard;
    LlamaConfig c;
    c.vocab_size = 300;
    c.hidden_size = 128;
    c.intermediate_size = 256;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_kv_head = 2;
    c.head_dim = 32;
    c.context = 64;
    c.tie_word_embeddings = tied;
    c.attention_bias = true;
    c.eos_token_ids = {299};
    uint64_t seed = 11;
    const LlamaWeights w =
        assemble_llama_weights(c, [&](const std::string& name, const std::vector<int64_t>& shape, bool) {
          at::Tensor t = pattern(std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>()),
                                 0.37 + static_cast<double>(seed++ % 17) * 0.11, 0.05)
                             .view(shape);
          return name.find("norm") != std::string::npos ? t.abs() + 0.5 : t;
        });
    const QuantSpec spec = parse_quant_mode(mode.toStdString());
    const QuantizedMatrices q = quantize_llama(c, w, spec);
    QCOMPARE(q.layers.size(), size_t{2});
    QCOMPARE(q.layers[0][static_cast<size_t>(LinearSlot::Gate)].scheme,
             spec.scheme == QuantScheme::ZeroPointUint8 ? QuantScheme::ZeroPointUint8 : spec.scheme);
    QCOMPARE(q.head_tied, tied);
    auto once = build_quantized_llama(c, w, q, at::kFloat, QuantExec::DequantOnce);
    auto jit = build_quantized_llama(c, w, q, at::kFloat, QuantExec::Jit);
    QVERIFY(once->kernels() == nullptr && jit->kernels() != nullptr);
    QVERIFY(!jit->weights().embed.defined() && !jit->weights().layers[0].w[0].defined());
    QVERIFY(jit->weights().layers[0].b[0].defined());  // biases stay with the model
    std::vector<std::vector<int32_t>> many(3);
    for (int32_t i = 0; i < 3; ++i)
      for (int32_t j = 0; j < 5 + 4 * i; ++j) many[static_cast<size_t>(i)].push_back((i * 37 + j * 11) % 299);
    const at::Tensor a = batch_logits(*once, many);
    const double rel = relative_diff(a, batch_logits(*jit, many));
    QVERIFY2(rel <= 1e-5, qPrintable(QString("JIT vs dequantize-once: %1").arg(rel)));
    const double one = relative_diff(batch_logits(*once, {many[0]}), batch_logits(*jit, {many[0]}));
    QVERIFY2(one <= 1e-5, qPrintable(QString("one prompt (the decode kernels): %1").arg(one)));
    LlamaModel fp32(c, w);
    QVERIFY(relative_diff(batch_logits(fp32, many), a) > 1e-6);
    // jit-int8: int8 activations where the scheme is int4 in groups of 32 (the others run as jit).
    auto int8 = build_quantized_llama(c, w, q, at::kFloat, QuantExec::JitInt8);
    const double r8 = relative_diff(a, batch_logits(*int8, many));
    if (spec.scheme == QuantScheme::Int4Group && spec.group_size == 32 && active_isa() != Isa::Generic) {
      QVERIFY2(r8 > 1e-6 && r8 <= 3e-2, qPrintable(QString("jit-int8 vs dequantize-once: %1").arg(r8)));
      QVERIFY(int8->kernels()->description().find("int8 activations") != std::string::npos);
    } else {
      QVERIFY2(r8 <= 1e-5, qPrintable(QString("jit-int8 without int8 kernels is jit: %1").arg(r8)));
    }
    std::string why;
    if (native_quant_available(spec, at::Device(at::kCPU), &why)) {
      auto native = build_quantized_llama(c, w, q, at::kFloat, QuantExec::Native);
      const double r = relative_diff(a, batch_logits(*native, many));
      QVERIFY2(r <= native_tolerance, qPrintable(QString("native vs dequantize-once: %1").arg(r)));
    } else {
      QVERIFY_THROWS_EXCEPTION(InputError, build_quantized_llama(c, w, q, at::kFloat, QuantExec::Native));
    }
  }

  void native_close_to_dequant_once_data() {
    QTest::addColumn<QString>("mode");
    QTest::addColumn<double>("tolerance");
    // max |diff| / max |logit| against dequantize-once, from the arithmetic of each kernel (the
    // weights are the same values; only what the kernel does to the activations differs):
    // - int8-channel, libtorch's weight-only int8 GEMM, whose CPU path takes bf16 activations:
    //   8 mantissa bits per activation before each product (3.9e-3 relative per cast), as bf16
    //   below: 5e-2.
    // - int4: torch's CPU kernel dequantizes (q - 8) * scale + (min + 8 scale) in fp32 and
    //   accumulates in fp32: only rounding differs, 1e-4.
    // - fp16 / bf16: activations are cast to 11 / 8 mantissa bits before each product and the
    //   product back (2^-11 = 4.9e-4, 2^-8 = 3.9e-3 relative per cast, a few casts per layer):
    //   1e-2 and 5e-2.
    QTest::newRow("int8-channel") << "int8-channel" << 5e-2;
    for (const char* m : {"int4-g32", "int4-g64", "int4-g128"}) QTest::newRow(m) << m << 1e-4;
    QTest::newRow("fp16") << "fp16" << 1e-2;
    QTest::newRow("bf16") << "bf16" << 5e-2;
  }
  void native_close_to_dequant_once() {
    QFETCH(QString, mode);
    QFETCH(double, tolerance);
    const QuantSpec spec = parse_quant_mode(mode.toStdString());
    std::string why;
    if (!native_quant_available(spec, at::Device(at::kCPU), &why))
      QSKIP(qPrintable("no native kernel here: " + QString::fromStdString(why)));
    // auto picks it, except per-channel int8, whose JIT kernel is faster on the CPU
    QCOMPARE(resolve_quant_exec(spec, at::Device(at::kCPU)),
             spec.scheme == QuantScheme::PerChannelInt8 ? QuantExec::Jit : QuantExec::Native);
    const QuantizedGpt2 q = quantize_small(mode.toStdString());
    c10::InferenceMode guard;
    auto once = build_quantized_model(q, at::kFloat, QuantExec::DequantOnce);
    auto native = build_quantized_model(q, at::kFloat, QuantExec::Native);
    QVERIFY(native->kernels() != nullptr);
    const at::Tensor a = batch_logits(*once, kIdPrompts), b = batch_logits(*native, kIdPrompts);
    QVERIFY(at::isfinite(b).all().item<bool>());
    const double rel = relative_diff(a, b);
    qInfo("%s native (%s): max |diff| / max |logit| = %.3g", qPrintable(mode),
          native->kernels()->description().c_str(), rel);
    QVERIFY2(rel <= tolerance,
             qPrintable(QString("native vs dequantize-once: %1 > %2").arg(rel).arg(tolerance)));
    // The prediction is the same almost everywhere.
    const double agree = a.argmax(-1).eq(b.argmax(-1)).to(at::kDouble).mean().item<double>();
    QVERIFY2(agree >= 0.9, qPrintable(QString("top-1 agreement %1").arg(agree)));
    // A prompt's logits alone against its rows in the batch: the kernels only round differently.
    double batch_vs_solo = 0;
    int64_t row = 0;
    for (const auto& prompt : kIdPrompts) {
      const at::Tensor alone = batch_logits(*native, {prompt});
      const int64_t len = static_cast<int64_t>(prompt.size());
      batch_vs_solo = std::max(batch_vs_solo, relative_diff(alone, b.narrow(0, row, len)));
      row += len;
    }
    qInfo("%s native: a prompt alone vs in the batch: max |diff| / max |logit| = %.3g", qPrintable(mode),
          batch_vs_solo);
    QVERIFY2(batch_vs_solo <= 1e-2 * tolerance + 1e-5,
             qPrintable(QString("batch vs solo: %1").arg(batch_vs_solo)));
  }

  void int4_native_with_gpt2_vocabulary() {
    // GPT-2's vocabulary has 50257 entries, so its LM head (wte) has 50257 rows; torch's int4 CPU
    // packing (_convert_weight_to_int4pack_for_cpu) needs a multiple of 16 rows. The native path
    // pads the rows and drops their outputs: auto (native) must equal dequantize-once, through the
    // model, the engine and the experiment.
    const QuantSpec spec = parse_quant_mode("int4-g64");
    std::string why;
    if (!native_quant_available(spec, at::Device(at::kCPU), &why))
      QSKIP(qPrintable("no native int4 kernel here: " + QString::fromStdString(why)));
    auto attempt = [](const std::function<void()>& fn) -> std::string {
      try {
        fn();
      } catch (const c10::Error& e) {
        const std::string w = e.what_without_backtrace();
        return "libtorch error: " + w.substr(0, w.find('\n'));
      } catch (const std::exception& e) {
        return e.what();
      }
      return "";
    };
    Gpt2Config c = small_;
    c.vocab_size = 310;  // like 50257, not a multiple of 16 (and above the eos id 303 used as padding)
    const std::string direct = attempt([&] {
      c10::InferenceMode guard;
      const QuantizedGpt2 q = quantize_gpt2(c, test_weights(c, 3, true), spec);
      auto m = build_quantized_model(q, at::kFloat, QuantExec::Auto);
      auto once = build_quantized_model(q, at::kFloat, QuantExec::DequantOnce);
      const double rel = relative_diff(batch_logits(*once, kIdPrompts), batch_logits(*m, kIdPrompts));
      if (rel > 1e-4)
        throw std::runtime_error("auto int4 differs from dequantize-once by " + std::to_string(rel));
    });
    QVERIFY2(direct.empty(), direct.c_str());
    require_vocab_folder();
    EngineOptions o;
    o.quant = "int4-g64";  // --quant int4-g64, exec auto
    const std::string engine = attempt([&] { Engine::load_folder(vocab_dir_, o); });
    QVERIFY2(engine.empty(), engine.c_str());
    // The experiment with its default modes and execution (what the GUI runs on a real checkpoint).
    QuantizationParams p;
    p.measure_speed = false;
    p.new_tokens = 1;
    const std::string experiment = attempt([&] {
      auto e = Engine::load_folder(vocab_dir_, EngineOptions{});
      run_quantization(*e, p);
    });
    QVERIFY2(experiment.empty(), experiment.c_str());
  }

  // ---- 5. Quantized models generate -----------------------------------------------------------

  void quantized_models_generate_data() {
    QTest::addColumn<QString>("mode");
    QTest::addColumn<QString>("exec");
    for (const auto& m : kModes)
      for (const char* e : {"dequant-once", "jit", "native"}) {
        if (m == "zp-uint8" && std::string(e) == "native") continue;  // an error, tested below
        QTest::newRow((m + "/" + e).c_str()) << QString::fromStdString(m) << e;
      }
  }
  void quantized_models_generate() {
    // Single, batched (left-padded, rows equal their solo runs) and continuous batching (each
    // request equals its solo greedy run on the same quantized model), with and without the cache.
    QFETCH(QString, mode);
    QFETCH(QString, exec);
    const QuantSpec spec = parse_quant_mode(mode.toStdString());
    const QuantExec ex = parse_quant_exec(exec.toStdString());
    std::string why;
    if (ex == QuantExec::Native && !native_quant_available(spec, at::Device(at::kCPU), &why))
      QSKIP(qPrintable("no native kernel here: " + QString::fromStdString(why)));
    const QuantizedGpt2 q = quantize_small(mode.toStdString());
    std::unique_ptr<Gpt2Model> m;
    {
      c10::InferenceMode guard;
      m = build_quantized_model(q, at::kFloat, ex, 24576);
    }
    const int64_t n = 6;
    std::vector<std::vector<int32_t>> solos;
    for (const auto& p : kIdPrompts) {
      solos.push_back(solo(*m, id_tok_, p, n));
      QCOMPARE(solos.back().size(), size_t(n));
      GenerateOptions nc = greedy(n);
      nc.use_kv_cache = false;
      QCOMPARE(generate(*m, id_tok_, {p}, nc).sequences[0].generated_ids, solos.back());
    }
    const GenerateResult batch = generate(*m, id_tok_, kIdPrompts, greedy(n));
    for (size_t i = 0; i < kIdPrompts.size(); ++i) QCOMPARE(batch.sequences[i].generated_ids, solos[i]);

    std::vector<BatchRequest> rs;
    const std::vector<int64_t> budgets = {6, 2, 4, 3, 5};
    for (size_t i = 0; i < budgets.size(); ++i) {
      BatchRequest r;
      r.prompt_ids = kIdPrompts[i % kIdPrompts.size()];
      if (i == 4) std::reverse(r.prompt_ids.begin(), r.prompt_ids.end());
      r.max_new_tokens = budgets[i];
      r.stop_at_eos = false;
      rs.push_back(r);
    }
    BatchOptions bo;
    bo.max_batch = 2;
    const BatchRunResult run = run_continuous_batching(*m, id_tok_, rs, bo);
    QCOMPARE(run.requests.size(), rs.size());
    QVERIFY(run.max_batch == 2);
    for (size_t i = 0; i < rs.size(); ++i)
      QCOMPARE(run.requests[i].generated_ids, solo(*m, id_tok_, rs[i].prompt_ids, rs[i].max_new_tokens));
  }

  void engine_quantizes_through_options() {
    require_vocab_folder();
    EngineOptions o;
    o.quant = "int8-channel";
    o.quant_exec = "jit";
    auto e = Engine::load_folder(vocab_dir_, o);
    QCOMPARE(e->quantization().scheme, QuantScheme::PerChannelInt8);
    QCOMPARE(e->quantization().exec, QuantExec::Jit);
    QVERIFY(e->model().kernels() != nullptr);
    QVERIFY(!e->model_as<Gpt2Model>().weights().wte.defined());
    const json info = e->info();
    QCOMPARE(info["quantization"]["mode"].get<std::string>(), std::string("int8-channel"));
    QCOMPARE(info["quantization"]["exec"].get<std::string>(), std::string("jit"));
    QVERIFY(contains(info["quantization"]["kernel"].get<std::string>(), "JIT"));
    QCOMPARE(info["parameters"].get<int64_t>(), vocab_config().num_parameters());
    const QuantizedBytes want =
        expected_bytes(layout_of(vocab_config(), true), parse_quant_mode("int8-channel"));
    QCOMPARE(info["weight_bytes"].get<int64_t>(), want.total());

    // The same model as quantizing the fp32 engine's weights by hand: identical logits and tokens.
    auto fp32 = Engine::load_folder(vocab_dir_, EngineOptions{});
    QVERIFY(!fp32->info().contains("quantization"));
    QVERIFY(!fp32->quantization().is_quantized());
    std::vector<std::vector<int32_t>> prompts;
    for (const auto& s : kCoursePrompts) prompts.push_back(e->tokenizer().encode(s));
    {
      c10::InferenceMode guard;
      QuantSpec s = parse_quant_mode("int8-channel");
      auto by_hand = build_quantized_model(
          quantize_gpt2(fp32->model_as<Gpt2Model>().config(), fp32->model_as<Gpt2Model>().dense_weights(), s),
          at::kFloat, QuantExec::Jit);
      QVERIFY(at::equal(batch_logits(e->model(), prompts), batch_logits(*by_hand, prompts)));
      const GenerateResult a = generate(e->model(), e->tokenizer(), prompts, greedy(4));
      const GenerateResult b = generate(*by_hand, e->tokenizer(), prompts, greedy(4));
      for (size_t i = 0; i < prompts.size(); ++i) {
        QCOMPARE(a.sequences[i].generated_ids, b.sequences[i].generated_ids);
        QCOMPARE(a.sequences[i].generated_ids.size(), size_t{4});
      }
    }

    // Once only.
    const std::string twice = error_of(ErrorKind::Input, [&] { e->quantize(parse_quant_mode("int4-g64")); });
    QVERIFY2(contains(twice, "already quantized (int8-channel)"), twice.c_str());
    QCOMPARE(e->quantization().scheme, QuantScheme::PerChannelInt8);  // unchanged
    // Engine::quantize on a loaded fp32 engine; auto resolves to native where a kernel exists.
    QuantSpec half = parse_quant_mode("fp16");
    half.exec = QuantExec::Auto;
    fp32->quantize(half);
    QCOMPARE(fp32->quantization().exec, resolve_quant_exec(half, at::Device(at::kCPU)));
    QCOMPARE(fp32->info()["quantization"]["exec"].get<std::string>(),
             std::string(quant_exec_name(fp32->quantization().exec)));
    QCOMPARE(
        generate(fp32->model(), fp32->tokenizer(), {prompts[0]}, greedy(3)).sequences[0].generated_ids.size(),
        size_t{3});
    // "none" keeps the weights as loaded.
    EngineOptions none;
    none.quant = "none";
    QVERIFY(!Engine::load_folder(vocab_dir_, none)->quantization().is_quantized());
  }

  // ---- 6. Errors --------------------------------------------------------------------------------

  void bad_names_list_the_accepted_ones() {
    for (const char* bad : {"int5", "int4-g16", "INT8", ""}) {
      const std::string e = error_of(ErrorKind::Input, [&] { parse_quant_mode(bad); });
      QVERIFY2(contains(e, "unknown quantization mode '" + std::string(bad) + "'"), e.c_str());
      for (const auto& name : quant_mode_names()) QVERIFY2(contains(e, name), (e + " lacks " + name).c_str());
    }
    const std::string e = error_of(ErrorKind::Input, [] { parse_quant_exec("fast"); });
    QVERIFY2(contains(e, "unknown quantized execution 'fast'"), e.c_str());
    for (const auto& name : quant_exec_names()) QVERIFY2(contains(e, name), (e + " lacks " + name).c_str());
    // Every listed name parses, and back to itself.
    for (const auto& name : quant_mode_names()) QCOMPARE(parse_quant_mode(name).mode_name(), name);
    for (const auto& name : quant_exec_names())
      QCOMPARE(std::string(quant_exec_name(parse_quant_exec(name))), name);
  }

  void native_zero_point_is_refused() {
    // The course's zero point is a float minimum: no integer kernel takes it.
    std::string why;
    QVERIFY(!native_quant_available(parse_quant_mode("zp-uint8"), at::Device(at::kCPU), &why));
    QVERIFY2(contains(why, "zero point") && contains(why, "jit or dequant-once"), why.c_str());
    const QuantizedGpt2 q = quantize_small("zp-uint8");
    const std::string e = error_of(ErrorKind::Input, [&] {
      c10::InferenceMode guard;
      build_quantized_model(q, at::kFloat, QuantExec::Native);
    });
    QVERIFY2(contains(e, "native zp-uint8") && contains(e, "jit or dequant-once"), e.c_str());
    QCOMPARE(resolve_quant_exec(parse_quant_mode("zp-uint8"), at::Device(at::kCPU)), QuantExec::Jit);
    require_vocab_folder();
    EngineOptions o;
    o.quant = "zp-uint8";
    o.quant_exec = "native";
    const std::string eng = error_of(ErrorKind::Input, [&] { Engine::load_folder(vocab_dir_, o); });
    QVERIFY2(contains(eng, "native zp-uint8"), eng.c_str());
    o.quant = "bogus";
    o.quant_exec = "auto";
    QVERIFY(contains(error_of(ErrorKind::Input, [&] { Engine::load_folder(vocab_dir_, o); }),
                     "unknown quantization mode 'bogus'"));
    o.quant = "fp16";
    o.quant_exec = "warp";
    QVERIFY(contains(error_of(ErrorKind::Input, [&] { Engine::load_folder(vocab_dir_, o); }),
                     "unknown quantized execution 'warp'"));
  }

  void run_quantization_refuses_bad_input() {
    require_vocab_folder();
    auto fp32 = Engine::load_folder(vocab_dir_, EngineOptions{});
    QuantizationParams p;
    p.measure_speed = false;
    p.new_tokens = 1;
    p.modes = {"zp-uint8", "int8-channel"};
    p.exec = "native";
    const std::string native = error_of(ErrorKind::Input, [&] { run_quantization(*fp32, p); });
    QVERIFY2(contains(native, "native zp-uint8") && contains(native, "zero point"), native.c_str());
    p.exec = "sideways";
    QVERIFY(contains(error_of(ErrorKind::Input, [&] { run_quantization(*fp32, p); }),
                     "unknown quantized execution"));
    p.exec = "auto";
    p.modes = {"int8-channel", "int3"};
    QVERIFY(contains(error_of(ErrorKind::Input, [&] { run_quantization(*fp32, p); }),
                     "unknown quantization mode 'int3'"));
    p.modes = {};
    QVERIFY(contains(error_of(ErrorKind::Input, [&] { run_quantization(*fp32, p); }), "at least one mode"));
    // An engine that is already quantized has no fp32 weights to measure against.
    EngineOptions o;
    o.quant = "int8-channel";
    auto quantized = Engine::load_folder(vocab_dir_, o);
    p.modes = {"fp16"};
    const std::string already = error_of(ErrorKind::Input, [&] { run_quantization(*quantized, p); });
    QVERIFY2(contains(already, "already quantized (int8-channel)") && contains(already, "without --quant"),
             already.c_str());
  }

  void cli_errors_are_one_line_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("expected");
    QTest::newRow("quantize --mode bogus")
        << QStringList{"quantize", "--mode", "bogus"}
        << "unknown quantization mode 'bogus' (choose one of none, zp-uint8";
    QTest::newRow("quantize --exec bogus")
        << QStringList{"quantize", "--exec", "bogus"}
        << "unknown quantized execution 'bogus' (choose one of dequant-once";
    QTest::newRow("generate --quant bogus") << QStringList{"generate", "--quant", "bogus", "--prompt", "x"}
                                            << "unknown quantization mode 'bogus'";
    QTest::newRow("generate --quant-exec bogus")
        << QStringList{"generate", "--quant", "fp16", "--quant-exec", "bogus", "--prompt", "x"}
        << "unknown quantized execution 'bogus'";
    QTest::newRow("native zp-uint8") << QStringList{"generate", "--quant",  "zp-uint8", "--quant-exec",
                                                    "native",   "--prompt", "x"}
                                     << "native zp-uint8: the course's zero point is a float";
  }
  void cli_errors_are_one_line() {
    QFETCH(QStringList, args);
    QFETCH(QString, expected);
    // On the small folder where a model is loaded (fast); the names fail before loading anyway.
    if (args.first() == "generate") {
      require_vocab_folder();
      args << "--model" << QString::fromStdString(vocab_dir_);
    }
    Run r = cli(args);
    QCOMPARE(r.code, 1);
    const QString err = r.err.trimmed();
    QVERIFY2(err.startsWith("servelab-cli: "), qPrintable(err));
    QVERIFY2(err.contains(expected), qPrintable(err));
    QVERIFY2(!err.contains('\n'), qPrintable("more than one line: " + err));
    QVERIFY(r.out.isEmpty());
  }

  void cli_quantize_json() {
    require_vocab_folder();
    Run r = cli({"quantize", "--model", QString::fromStdString(vocab_dir_), "--mode", "zp-uint8,int8-channel",
                 "--no-speed", "--json", "--new-tokens", "3"});
    QVERIFY2(r.code == 0, qPrintable(r.err));
    const json j = json::parse(r.out.toStdString());
    QCOMPARE(j["experiment"].get<std::string>(), std::string("quantization"));
    QVERIFY(j.contains("engine") && j["engine"].contains("model"));
    const json& modes = j["modes"];
    QCOMPARE(modes.size(), size_t{3});
    const Layout l = layout_of(vocab_config(), true);
    const std::vector<std::string> names = {"none", "zp-uint8", "int8-channel"};
    for (size_t i = 0; i < names.size(); ++i) {
      const json& m = modes[i];
      const QuantSpec spec = parse_quant_mode(names[i]);
      QCOMPARE(m["mode"].get<std::string>(), names[i]);
      QVERIFY2(!m.contains("speed"), "--no-speed must leave the timings out");
      // memory: the fields the GUI reads, to the byte.
      const json& mem = m["memory"];
      for (const char* k : {"parameters", "quantized_bytes", "state_bytes", "other_bytes", "total_bytes",
                            "fp32_bytes", "fraction_of_fp32", "course_footprint_bytes",
                            "course_fp32_footprint_bytes", "resident_bytes", "resident_fraction_of_fp32"})
        QVERIFY2(mem.contains(k), k);
      const QuantizedBytes want = expected_bytes(l, spec);
      QCOMPARE(mem["quantized_bytes"].get<int64_t>(), want.quantized);
      QCOMPARE(mem["state_bytes"].get<int64_t>(), want.states);
      QCOMPARE(mem["other_bytes"].get<int64_t>(), want.other);
      QCOMPARE(mem["total_bytes"].get<int64_t>(), want.total());
      QCOMPARE(mem["fp32_bytes"].get<int64_t>(), 4 * want.parameters);
      const double fraction = mem["fraction_of_fp32"].get<double>();
      QVERIFY(std::abs(fraction -
                       static_cast<double>(want.total()) / static_cast<double>(4 * want.parameters)) < 1e-12);
      if (names[i] == "int8-channel")  // one byte per weight plus a scale per row of 128: just over a quarter
        QVERIFY2(fraction >= 0.25 && fraction <= 0.27, qPrintable(QString::number(fraction)));
      // histogram: every quantized element in one bin.
      const json& h = m["histogram"];
      QCOMPARE(h["counts"].size(), size_t{41});
      int64_t counted = 0;
      for (const auto& c : h["counts"]) counted += c.get<int64_t>();
      QCOMPARE(counted, quantized_elements(l, spec));
      QVERIFY(h["lo"].get<double>() <= 0 && h["hi"].get<double>() >= 0);
      // blocks, logits, greedy
      std::vector<std::string> blocks;
      for (const auto& b : m["blocks"]) blocks.push_back(b["block"].get<std::string>());
      if (spec.is_quantized())
        QCOMPARE(blocks, spec.scheme == QuantScheme::ZeroPointUint8
                             ? (std::vector<std::string>{"wte", "wpe", "h.0", "h.1", "ln_f"})
                             : (std::vector<std::string>{"wte", "wpe", "h.0", "h.1"}));
      const json& lg = m["logits"];
      const double top1 = lg["top1_agreement"].get<double>();
      QVERIFY(top1 >= 0 && top1 <= 1);
      QVERIFY(lg["kl_mean"].get<double>() >= 0 && lg["kl_max"].get<double>() >= lg["kl_mean"].get<double>());
      QCOMPARE(lg["positions"].get<int64_t>(), int64_t{7 + 5 + 4});
      QCOMPARE(m["greedy"].size(), size_t{3});
      for (const auto& g : m["greedy"]) {
        QCOMPARE(g["tokens"].size(), size_t{3});
        QCOMPARE(g["fp32_tokens"].size(), size_t{3});
        QVERIFY(g.contains("text") && g.contains("fp32_text") && g.contains("first_difference"));
      }
      if (!spec.is_quantized()) {
        QCOMPARE(top1, 1.0);
        QCOMPARE(h["counts"].size(), size_t{41});
        QCOMPARE(counted, int64_t{0});
      }
    }
    const json& zp = modes[1]["memory"];
    QCOMPARE(zp["course_footprint_bytes"].get<int64_t>(),
             zp["quantized_bytes"].get<int64_t>() + hf_gpt2_buffer_bytes(vocab_config()));

    // --quant on the other commands: info says what runs, generate generates.
    Run info = cli({"info", "--model", QString::fromStdString(vocab_dir_), "--quant", "int4-g64",
                    "--quant-exec", "jit"});
    QVERIFY2(info.code == 0, qPrintable(info.err));
    const json ij = json::parse(info.out.toStdString());
    QCOMPARE(ij["quantization"]["mode"].get<std::string>(), std::string("int4-g64"));
    QCOMPARE(ij["quantization"]["exec"].get<std::string>(), std::string("jit"));
    QCOMPARE(ij["weight_bytes"].get<int64_t>(), expected_bytes(l, parse_quant_mode("int4-g64")).total());
    Run gen = cli({"generate", "--model", QString::fromStdString(vocab_dir_), "--quant", "int8-channel",
                   "--json", "--max-new-tokens", "3", "--prompt", kCoursePrompts[1].c_str()});
    QVERIFY2(gen.code == 0, qPrintable(gen.err));
    QCOMPARE(json::parse(gen.out.toStdString())["generated_ids"].size(), size_t{3});
  }

  // ---- 7. The experiment -------------------------------------------------------------------------

  void run_quantization_on_a_small_model() {
    require_vocab_folder();
    auto engine = Engine::load_folder(vocab_dir_, EngineOptions{});
    QuantizationParams p;  // the default modes
    p.measure_speed = false;
    p.new_tokens = 3;
    // jit: every scheme runs it (auto, native int4 on GPT-2's vocabulary included, is checked in
    // int4_native_with_gpt2_vocabulary).
    p.exec = "jit";
    ModeRecorder rec;
    ExperimentControl control;
    control.quant = &rec;
    const QuantizationResult r = run_quantization(*engine, p, control);
    const Gpt2Config c = vocab_config();
    const Layout l = layout_of(c, true);
    std::vector<std::string> names = {"none"};
    names.insert(names.end(), p.modes.begin(), p.modes.end());
    QCOMPARE(r.modes.size(), names.size());
    QCOMPARE(rec.modes, names);
    QVERIFY(r.perplexity_note.empty() && r.fp32_perplexity.has_value());  // a folder, not the demo

    const QuantModeResult& none = r.modes[0];
    QCOMPARE(none.mode, std::string("none"));
    QCOMPARE(none.exec, std::string("fp32"));
    QCOMPARE(none.max_abs_error, 0.0);
    QCOMPARE(none.kl_mean, 0.0);
    QCOMPARE(none.kl_max, 0.0);
    QCOMPARE(none.top1_agreement, 1.0);
    QVERIFY(none.tensors.empty() && none.blocks.empty());
    QCOMPARE(std::accumulate(none.histogram.counts.begin(), none.histogram.counts.end(), int64_t{0}),
             int64_t{0});
    for (const auto& g : none.greedy) {
      QCOMPARE(g.first_difference, int64_t{-1});
      QCOMPARE(g.tokens, g.reference_tokens);
    }

    // The largest error each scheme allows, from the weights themselves.
    const auto named = engine->model_as<Gpt2Model>().dense_weights().named_tensors();
    double zp_bound = 0, int8_bound = 0;
    for (const auto& [name, t] : named) {
      zp_bound = std::max(zp_bound, (t.max() - t.min()).item<double>() / 255);
      if (t.dim() == 2) int8_bound = std::max(int8_bound, t.abs().max().item<double>() / 127 / 2);
    }
    int64_t positions = 0;
    for (const auto& s : p.prompts) positions += static_cast<int64_t>(engine->tokenizer().encode(s).size());

    for (size_t i = 1; i < r.modes.size(); ++i) {
      const QuantModeResult& m = r.modes[i];
      const QuantSpec spec = parse_quant_mode(m.mode);
      QCOMPARE(m.mode, names[i]);
      QCOMPARE(m.exec, std::string("jit"));
      QVERIFY(contains(m.kernel, "JIT"));
      QVERIFY(!m.speed.has_value());
      const QuantizedBytes want = expected_bytes(l, spec);
      QCOMPARE(m.memory.parameters, want.parameters);
      QCOMPARE(m.memory.quantized_bytes, want.quantized);
      QCOMPARE(m.memory.state_bytes, want.states);
      QCOMPARE(m.memory.other_bytes, want.other);
      QCOMPARE(m.memory.total_bytes, want.total());
      QCOMPARE(m.memory.fp32_bytes, 4 * want.parameters);
      QCOMPARE(m.memory.fraction_of_fp32,
               static_cast<double>(want.total()) / static_cast<double>(4 * want.parameters));
      QCOMPARE(m.memory.course_footprint_bytes,
               want.quantized + want.other + c.n_layer * (c.n_positions * c.n_positions + 4));
      // The histogram holds every quantized element, the tensors list every quantized parameter.
      const int64_t elements = quantized_elements(l, spec);
      QCOMPARE(std::accumulate(m.histogram.counts.begin(), m.histogram.counts.end(), int64_t{0}), elements);
      QCOMPARE(m.histogram.counts.size(), size_t(p.histogram_bins));
      QCOMPARE(m.histogram.hi, m.max_abs_error);
      QCOMPARE(m.histogram.lo, -m.max_abs_error);
      int64_t listed = 0;
      for (const auto& t : m.tensors) listed += t.numel;
      QCOMPARE(listed, elements);
      QVERIFY(m.max_abs_error > 0 && m.mean_abs_error > 0 && m.mean_abs_error <= m.max_abs_error);
      if (spec.scheme == QuantScheme::ZeroPointUint8)
        QVERIFY2(m.max_abs_error <= zp_bound * (1 + 1e-5),
                 qPrintable(QString("%1 > %2").arg(m.max_abs_error).arg(zp_bound)));
      if (spec.scheme == QuantScheme::PerChannelInt8)
        QVERIFY2(m.max_abs_error <= int8_bound * (1 + 1e-4),
                 qPrintable(QString("%1 > %2").arg(m.max_abs_error).arg(int8_bound)));
      // Blocks in model order; ln_f only where 1-D parameters are quantized (the course's mode).
      std::vector<std::string> blocks;
      for (const auto& b : m.blocks) blocks.push_back(b.block);
      QCOMPARE(blocks, spec.scheme == QuantScheme::ZeroPointUint8
                           ? (std::vector<std::string>{"wte", "wpe", "h.0", "h.1", "ln_f"})
                           : (std::vector<std::string>{"wte", "wpe", "h.0", "h.1"}));
      for (const auto& b : m.blocks) QVERIFY(b.rel_rms > 0 && b.max_abs <= m.max_abs_error);
      // Logit drift.
      QCOMPARE(m.positions, positions);
      QVERIFY2(
          m.kl_mean >= 0 && m.kl_max >= m.kl_mean,
          qPrintable(QString("%1: KL mean %2, max %3").arg(m.mode.c_str()).arg(m.kl_mean).arg(m.kl_max)));
      QVERIFY(m.top1_agreement >= 0 && m.top1_agreement <= 1);
      QCOMPARE(m.greedy.size(), p.prompts.size());
      for (size_t k = 0; k < m.greedy.size(); ++k) {
        const GreedyComparison& g = m.greedy[k];
        QCOMPARE(g.reference_tokens, none.greedy[k].tokens);
        QCOMPARE(g.tokens.size(), size_t{3});
        QCOMPARE(g.pieces.size(), size_t{3});
        const auto first = std::mismatch(g.tokens.begin(), g.tokens.end(), g.reference_tokens.begin());
        QCOMPARE(g.first_difference,
                 first.first == g.tokens.end() ? int64_t{-1} : first.first - g.tokens.begin());
      }
      QVERIFY(m.perplexity.has_value() && std::isfinite(*m.perplexity));
    }
    // fp16 is the mildest: far less drift than 4-bit.
    auto find = [&](const std::string& mode) {
      return *std::find_if(r.modes.begin(), r.modes.end(), [&](const auto& m) { return m.mode == mode; });
    };
    QVERIFY(find("fp16").kl_mean < find("int4-g64").kl_mean);
    QVERIFY(find("fp16").max_abs_error < find("int8-channel").max_abs_error);
  }

  void run_quantization_cancels() {
    require_vocab_folder();
    auto engine = Engine::load_folder(vocab_dir_, EngineOptions{});
    QuantizationParams p;
    p.measure_speed = false;
    p.new_tokens = 1;
    p.modes = {"int8-channel", "fp16"};
    std::atomic<bool> cancel{true};
    ExperimentControl control;
    control.cancel = &cancel;
    QVERIFY(!error_of(ErrorKind::Cancelled, [&] { run_quantization(*engine, p, control); }).empty());
    QVERIFY(error_of(ErrorKind::Cancelled, [&] { run_quantization(*engine, p, control); })[0] != '<');
    // Stopped between modes: the modes already reported stay reported, no later one is measured.
    cancel = false;
    ModeRecorder rec;
    rec.cancel_after_first = &cancel;
    control.quant = &rec;
    const std::string e = error_of(ErrorKind::Cancelled, [&] { run_quantization(*engine, p, control); });
    QVERIFY2(e[0] != '<', e.c_str());
    QCOMPARE(rec.modes, (std::vector<std::string>{"none", "int8-channel"}));
  }
};

QTEST_GUILESS_MAIN(TestQuant)
#include "test_quant.moc"

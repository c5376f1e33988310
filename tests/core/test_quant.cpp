// The quantizers and their bookkeeping: the course's zero-point formula and the other quantizers on
// tensors whose answers are worked out by hand; the course's uint8 values and Hugging Face's memory
// footprint against a Python oracle (tests/oracle/make_quant_fixtures.py, run first as a CTest
// fixture); memory to the byte for every scheme; every bad input; the CLI's quantize command; and the
// experiment run_quantization. The compute (JIT, native and fused kernels, quantized models
// generating) is test_quant_kernels'.
#include <c10/core/InferenceMode.h>

#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>
#include <atomic>
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
#include "model/engine.h"
#include "quant/quantized_model.h"
#include "quant/quantizer.h"
#include "quant_fixture.h"
#include "test_support.h"

using namespace servelab;
using namespace servelab::quant_test;
using nlohmann::json;
using servelab::test::error_of;
namespace fs = std::filesystem;

namespace {

std::vector<int> ints(const at::Tensor& t) {
  at::Tensor c = t.to(at::kInt).contiguous().view({-1});
  return std::vector<int>(c.data_ptr<int>(), c.data_ptr<int>() + c.numel());
}

std::vector<float> floats(const at::Tensor& t) {
  at::Tensor c = t.to(at::kFloat).contiguous().view({-1});
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

struct ModeRecorder : QuantizationSink {
  std::vector<std::string> modes;
  std::atomic<bool>* cancel_after_first = nullptr;
  void on_mode(const QuantModeResult& m) override {
    modes.push_back(m.mode);
    if (cancel_after_first && modes.size() == 2) *cancel_after_first = true;  // after "none" and one mode
  }
};

}  // namespace

class TestQuant : public QObject, private QuantFixture {
  Q_OBJECT

  using Run = test::CliRun;
  Run cli(const QStringList& args) { return test::run_cli(SERVELAB_CLI, args); }

 private Q_SLOTS:
  void initTestCase() { initQuant(); }

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

  // ---- 4. Errors --------------------------------------------------------------------------------

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

  // ---- 5. The experiment -------------------------------------------------------------------------

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

// The GGUF reader and ggml's block dequantization (servelab_base, no libtorch).
// Corrupt files are crafted byte by byte here, so that each check of the reader is reached on
// purpose, and every message is checked for the file and the culprit (key, tensor or field). Files
// written by the PyPI `gguf` package (tests/oracle/make_gguf_fixtures.py, a CTest fixture) check
// every metadata type and every supported tensor type against gguf-py's own reader and numpy
// dequantization, bit for bit; the shipped SmolLM2 file, when present, against docs/models.md's facts.
#include <QTemporaryDir>
#include <QtTest>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gguf_crafted.h"
#include "model/ggml_quants.h"
#include "model/gguf_file.h"
#include "model/safetensors_file.h"
#include "tokenizer/gguf_tokenizer.h"
#include "util/errors.h"
#include "verify_contains.h"

using namespace servelab;
using namespace servelab::test;
using nlohmann::json;

static_assert(std::endian::native == std::endian::little, "the crafted files are written in host order");

namespace {

const double kQ4_1Values[8] = {-0.096313, 0.157349,  -0.096313, -0.730469,
                               1.171997,  -0.096313, 0.030518,  0.664673};

template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const ModelFormatError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<wrong exception type: ") + e.what() + ">";
  }
  return "<no exception>";
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Bitwise equality of two float arrays, or a description of the first difference.
std::string first_difference(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::bit_cast<uint32_t>(a[i]) != std::bit_cast<uint32_t>(b[i]))
      return "value " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
  return {};
}

std::string oracle_dir() {
  const char* d = std::getenv("SERVELAB_GGUF_ORACLE_DIR");
  return d ? std::string(d) : std::string();
}

const std::string kSmolLM2 =
    std::string(SERVELAB_SOURCE_DIR) + "/.venv/share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf";

}  // namespace

class GgufTest : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string file(const char* name) const { return dir_.filePath(QString::fromUtf8(name)).toStdString(); }
  std::string write(const char* name, const std::string& bytes) {
    const std::string path = file(name);
    write_bytes(path, bytes);
    return path;
  }
  std::string oracle(const char* name) const { return oracle_dir() + "/" + name; }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  // ---- ggml types and block dequantization ----

  void type_table() {
    const struct {
      uint32_t id;
      const char* name;
      int64_t values, bytes;
    } rows[] = {{0, "F32", 1, 4},       {1, "F16", 1, 2},       {30, "BF16", 1, 2},    {2, "Q4_0", 32, 18},
                {3, "Q4_1", 32, 20},    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},   {8, "Q8_0", 32, 34},
                {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176}, {14, "Q6_K", 256, 210}};
    for (const auto& r : rows) {
      QVERIFY2(ggml_type_supported(r.id), r.name);
      const auto t = static_cast<GgmlType>(r.id);
      QCOMPARE(std::string(ggml_type_name(t)), std::string(r.name));
      QCOMPARE(ggml_type_name_of_id(r.id), std::string(r.name));
      QCOMPARE(ggml_block_values(t), r.values);
      QCOMPARE(ggml_block_bytes(t), r.bytes);
    }
    for (uint32_t id : {4u, 5u, 9u, 10u, 11u, 15u, 16u, 20u, 24u, 28u, 31u, 99u, 0xFFFFFFFFu})
      QVERIFY2(!ggml_type_supported(id), qPrintable(QString::number(id)));
    QCOMPARE(ggml_type_name_of_id(6), std::string("Q5_0"));
    QCOMPARE(ggml_type_name_of_id(16), std::string("IQ2_XXS"));
    QCOMPARE(ggml_type_name_of_id(39), std::string("MXFP4"));
    QCOMPARE(ggml_type_name_of_id(4), std::string("type 4"));  // Q4_2, removed from ggml
    QCOMPARE(ggml_type_name_of_id(99), std::string("type 99"));
  }

  void fp16_every_value() {
    // All 65536 halves against the definition: subnormals m * 2^-24, normals (1024 + m) * 2^(e - 25).
    for (uint32_t h = 0; h < 65536; ++h) {
      const uint32_t e = (h >> 10) & 31, m = h & 1023;
      const double sign = (h & 0x8000) ? -1.0 : 1.0;
      const float got = fp16_to_fp32(static_cast<uint16_t>(h));
      if (e == 31) {
        QVERIFY2(m == 0 ? std::isinf(got) : std::isnan(got), qPrintable(QString::number(h, 16)));
        QCOMPARE(std::signbit(got), sign < 0);
        continue;
      }
      const double want =
          sign * (e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, static_cast<int>(e) - 25));
      QVERIFY2(static_cast<double>(got) == want && std::signbit(got) == (sign < 0),
               qPrintable(QStringLiteral("half 0x%1: %2 vs %3").arg(h, 0, 16).arg(got).arg(want)));
    }
    QCOMPARE(std::bit_cast<uint32_t>(fp16_to_fp32(0x7E01)), 0x7FC02000u);  // NaN payload kept
  }

  void dequantize_q4_1_test_vector() {
    const std::string block = block_q4_1();
    float y[32];
    ggml_dequantize(GgmlType::Q4_1, reinterpret_cast<const std::byte*>(block.data()), y, 32);
    const float d = fp16_to_fp32(0x300F), m = fp16_to_fp32(0xB9D8);
    QCOMPARE(d, 1039.f / 8192.f);
    QCOMPARE(m, -0.73046875f);
    for (int j = 0; j < 8; ++j)
      QVERIFY2(std::abs(y[j] - kQ4_1Values[j]) < 1e-5, qPrintable(QString::number(j)));
    // Low nibbles are values 0-15, high nibbles 16-31 (not interleaved).
    const auto* qs = reinterpret_cast<const uint8_t*>(block.data()) + 4;
    for (int j = 0; j < 16; ++j) {
      QCOMPARE(y[j], static_cast<float>(qs[j] & 15) * d + m);
      QCOMPARE(y[j + 16], static_cast<float>(qs[j] >> 4) * d + m);
    }
  }

  void dequantize_simple_blocks() {
    // Q4_0: d = 0.5, nibbles 0x10 + j: low 0 (-8), high 1 (-7).
    Bytes q40;
    q40.put<uint16_t>(0x3800);
    for (int j = 0; j < 16; ++j) q40.put<uint8_t>(static_cast<uint8_t>(0x10 | (j & 15)));
    float y[32];
    ggml_dequantize(GgmlType::Q4_0, reinterpret_cast<const std::byte*>(q40.b.data()), y, 32);
    for (int j = 0; j < 16; ++j) {
      QCOMPARE(y[j], 0.5f * static_cast<float>(j - 8));
      QCOMPARE(y[j + 16], 0.5f * -7.f);
    }
    // Q8_0: d = -2, q = -128..
    Bytes q80;
    q80.put<uint16_t>(0xC000);
    for (int j = 0; j < 32; ++j) q80.put<int8_t>(static_cast<int8_t>(j * 8 - 128));
    ggml_dequantize(GgmlType::Q8_0, reinterpret_cast<const std::byte*>(q80.b.data()), y, 32);
    for (int j = 0; j < 32; ++j) QCOMPARE(y[j], -2.f * static_cast<float>(j * 8 - 128));
    // BF16 and F16 widen exactly; an odd source address is fine.
    const std::string bf = std::string("x") + Bytes().put<uint16_t>(0x3F80).put<uint16_t>(0xC0A0).b;
    ggml_dequantize(GgmlType::BF16, reinterpret_cast<const std::byte*>(bf.data() + 1), y, 2);
    QCOMPARE(y[0], 1.f);
    QCOMPARE(y[1], -5.f);
    const std::string f16 = std::string("x") + Bytes().put<uint16_t>(0x3C00).put<uint16_t>(0x0001).b;
    ggml_dequantize(GgmlType::F16, reinterpret_cast<const std::byte*>(f16.data() + 1), y, 2);
    QCOMPARE(y[0], 1.f);
    QCOMPARE(y[1], std::ldexp(1.f, -24));
    ggml_dequantize(GgmlType::Q4_K, nullptr, y, 0);  // nothing to do
  }

  void dequantize_rejects_partial_blocks() {
    float y[64];
    const std::byte src[64] = {};
    std::string msg;
    try {
      ggml_dequantize(GgmlType::Q4_1, src, y, 31);
    } catch (const InputError& e) {
      msg = e.what();
    }
    VERIFY_CONTAINS(msg, "31 values of Q4_1");
    VERIFY_CONTAINS(msg, "block");
    QVERIFY_THROWS_EXCEPTION(InputError, ggml_dequantize(GgmlType::Q6_K, src, y, -256));
    QVERIFY_THROWS_EXCEPTION(InputError, ggml_dequantize(static_cast<GgmlType>(20), src, y, 32));
  }

  // ---- crafted files that open ----

  void crafted_file_opens() {
    const std::string path = write("ok.gguf", Crafted().bytes());
    const GgufFile f = GgufFile::open(path);
    QCOMPARE(f.path(), path);
    QCOMPARE(f.file_size(), std::filesystem::file_size(path));
    QCOMPARE(f.version(), 3u);
    QCOMPARE(f.alignment(), uint64_t{32});
    QCOMPARE(f.get_string("general.architecture"), std::string("llama"));
    QCOMPARE(f.metadata().size(), size_t{1});
    QCOMPARE(f.tensors().size(), size_t{2});

    const GgufTensor& a = f.tensors()[0];
    QCOMPARE(a.name, std::string("a.f32"));
    QCOMPARE(a.type, GgmlType::F32);
    QCOMPARE(a.ne, (std::vector<int64_t>{8}));
    QCOMPARE(a.offset, uint64_t{0});
    QCOMPARE(a.nbytes, size_t{32});
    QCOMPARE(reinterpret_cast<uintptr_t>(a.data) % 32, uintptr_t{0});  // mapping + aligned offset
    QCOMPARE(gguf_dequantize(a), (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));

    const GgufTensor& b = f.at("b.q4_1");
    QCOMPARE(&b, &f.tensors()[1]);
    QCOMPARE(b.type, GgmlType::Q4_1);
    QCOMPARE(b.ne, (std::vector<int64_t>{32, 2}));
    QCOMPARE(b.shape(), (std::vector<int64_t>{2, 32}));
    QCOMPARE(b.numel(), int64_t{64});
    QCOMPARE(b.offset, uint64_t{32});
    QCOMPARE(b.nbytes, size_t{40});
    QCOMPARE(b.data, a.data + 32);
    const std::vector<float> v = gguf_dequantize(b);
    QCOMPARE(v.size(), size_t{64});
    for (int j = 0; j < 8; ++j) {
      QVERIFY(std::abs(v[j] - kQ4_1Values[j]) < 1e-5);
      QCOMPARE(v[32 + j], v[j]);  // the second row is the same block
    }
    QVERIFY(f.find("c") == nullptr);
    const std::string msg = error_of([&] { (void)f.at("output.weight"); });
    VERIFY_CONTAINS(msg, path);
    VERIFY_CONTAINS(msg, "tensor \"output.weight\"");
  }

  void crafted_variants_open() {
    Crafted v2;
    v2.version = 2;  // v2 and v3 differ only in v3 allowing big-endian files
    QCOMPARE(GgufFile::open(write("v2.gguf", v2.bytes())).version(), 2u);

    Crafted aligned;
    aligned.alignment = 64;
    aligned.kvs.push_back(kv_u32("general.alignment", 64));
    aligned.tensors[1].offset = 64;
    aligned.data = aligned.data.substr(0, 32) + std::string(32, '\0') + aligned.data.substr(32);
    const GgufFile a = GgufFile::open(write("a64.gguf", aligned.bytes()));
    QCOMPARE(a.alignment(), uint64_t{64});
    QCOMPARE(a.at("b.q4_1").data, a.at("a.f32").data + 64);
    QCOMPARE(gguf_dequantize(a.at("b.q4_1"))[0],
             gguf_dequantize(GgufFile::open(file("v2.gguf")).at("b.q4_1"))[0]);

    // Any integer type for general.alignment (the spec says UINT32; the value is what matters).
    Crafted aligned16;
    aligned16.kvs.push_back(kv("general.alignment", GgufValueType::INT16, Bytes().put<int16_t>(32)));
    QCOMPARE(GgufFile::open(write("a16.gguf", aligned16.bytes())).alignment(), uint64_t{32});

    // Header only: no keys, no tensors, no data section.
    Crafted empty;
    empty.kvs.clear();
    empty.tensors.clear();
    empty.data.clear();
    empty.pad = false;
    const GgufFile e = GgufFile::open(write("empty.gguf", empty.bytes()));
    QCOMPARE(e.file_size(), size_t{24});
    QVERIFY(e.tensors().empty());
    QVERIFY(e.metadata().empty());

    // Tensors out of offset order and gaps between them are fine: offsets are what count.
    Crafted reordered;
    reordered.tensors = {{"b.q4_1", {32, 2}, 3, 64}, {"a.f32", {8}, 0, 0}};
    reordered.data = reordered.data.substr(0, 32) + std::string(32, '\x7f') + reordered.data.substr(32);
    const GgufFile r = GgufFile::open(write("reordered.gguf", reordered.bytes()));
    QCOMPARE(r.tensors()[0].name, std::string("b.q4_1"));  // file order kept
    QCOMPARE(r.at("b.q4_1").data, r.at("a.f32").data + 64);
  }

  void moves_keep_tensors_valid() {
    const std::string path = write("move.gguf", Crafted().bytes());
    GgufFile a = GgufFile::open(path);
    const std::byte* data = a.at("a.f32").data;
    GgufFile b(std::move(a));
    QCOMPARE(b.at("a.f32").data, data);
    GgufFile c = GgufFile::open(path);
    c = std::move(b);  // unmaps c's own mapping, takes b's
    QCOMPARE(c.at("a.f32").data, data);
    QCOMPARE(c.find("a.f32"), &c.tensors()[0]);
    QCOMPARE(gguf_dequantize(c.at("a.f32"))[7], 7.f);
    QCOMPARE(c.get_string("general.architecture"), std::string("llama"));
  }

  // ---- typed metadata getters ----

  void typed_getters() {
    Crafted c;
    c.kvs = {
        kv_u32("u32", 4000000000u),
        kv("u64", GgufValueType::UINT64, Bytes().u64(~uint64_t{0})),
        kv("i8", GgufValueType::INT8, Bytes().put<int8_t>(-5)),
        kv("f32", GgufValueType::FLOAT32, Bytes().put(0.1f)),
        kv("f64", GgufValueType::FLOAT64, Bytes().put(0.1)),
        kv("yes", GgufValueType::BOOL, Bytes().put<uint8_t>(1)),
        kv_str("s", "text"),
        kv("ints", GgufValueType::ARRAY,
           Bytes().u32(vt(GgufValueType::INT16)).u64(3).put<int16_t>(-1).put<int16_t>(0).put<int16_t>(7)),
        kv("big", GgufValueType::ARRAY,
           Bytes().u32(vt(GgufValueType::UINT64)).u64(2).u64(1).u64(~uint64_t{0})),
        kv("none", GgufValueType::ARRAY, Bytes().u32(vt(GgufValueType::UINT8)).u64(0)),
        kv("floats", GgufValueType::ARRAY,
           Bytes().u32(vt(GgufValueType::FLOAT32)).u64(2).put(1.5f).put(-0.f)),
        kv("strs", GgufValueType::ARRAY, Bytes().u32(vt(GgufValueType::STRING)).u64(2).str("a").str("")),
        kv("flags", GgufValueType::ARRAY,
           Bytes().u32(vt(GgufValueType::BOOL)).u64(2).put<uint8_t>(0).put<uint8_t>(1))};
    const std::string path = write("typed.gguf", c.bytes());
    const GgufFile f = GgufFile::open(path);

    QCOMPARE(f.get_int("u32"), int64_t{4000000000});
    QCOMPARE(f.get_int("i8"), int64_t{-5});
    QCOMPARE(f.get_float("f32"), static_cast<double>(0.1f));
    QCOMPARE(f.get_float("f64"), 0.1);
    QCOMPARE(f.get_bool("yes"), true);
    QCOMPARE(f.get_string("s"), std::string("text"));
    QCOMPARE(f.get_int_array("ints"), (std::vector<int64_t>{-1, 0, 7}));
    QCOMPARE(f.get_int_array("none"), std::vector<int64_t>{});
    QCOMPARE(f.get_float_array("floats"), (std::vector<double>{1.5, -0.0}));
    QCOMPARE(f.get_string_array("strs"), (std::vector<std::string>{"a", ""}));
    QCOMPARE(f.metadata().at("flags"), json::parse("[false, true]"));
    QCOMPARE(f.metadata().at("u64").get<uint64_t>(), ~uint64_t{0});
    QCOMPARE(f.metadata_type("u32"), GgufValueType::UINT32);
    QCOMPARE(f.metadata_type("strs"), GgufValueType::ARRAY);
    QCOMPARE(f.metadata_array_type("strs"), GgufValueType::STRING);
    QCOMPARE(f.metadata_array_type("none"), GgufValueType::UINT8);
    QVERIFY(f.has("s") && !f.has("t"));
    QCOMPARE(f.find_int("u32"), std::optional<int64_t>(4000000000));
    QCOMPARE(f.find_int("absent"), std::optional<int64_t>());
    QCOMPARE(f.find_float("f64"), std::optional<double>(0.1));
    QCOMPARE(f.find_float("absent"), std::optional<double>());
    QCOMPARE(f.find_string("s"), std::optional<std::string>("text"));
    QCOMPARE(f.find_string("absent"), std::optional<std::string>());

    // Each refusal names the file, the key and what it is.
    const struct {
      std::function<void()> call;
      const char* key;
      const char* needle;
    } refusals[] = {
        {[&] { (void)f.get_string("u32"); }, "u32", "is UINT32, expected a STRING"},
        {[&] { (void)f.get_int("s"); }, "s", "is STRING, expected an integer"},
        {[&] { (void)f.get_int("f32"); }, "f32", "is FLOAT32, expected an integer"},
        {[&] { (void)f.get_int("u64"); }, "u64", "18446744073709551615 does not fit in int64"},
        {[&] { (void)f.get_float("u32"); }, "u32", "expected FLOAT32 or FLOAT64"},
        {[&] { (void)f.get_bool("i8"); }, "i8", "is INT8, expected a BOOL"},
        {[&] { (void)f.get_string_array("ints"); }, "ints", "is ARRAY of INT16, expected an ARRAY of STRING"},
        {[&] { (void)f.get_int_array("strs"); }, "strs", "is ARRAY of STRING"},
        {[&] { (void)f.get_int_array("big"); }, "big", "element 1 = 18446744073709551615 does not fit"},
        {[&] { (void)f.get_int_array("u32"); }, "u32", "is UINT32, expected an ARRAY"},
        {[&] { (void)f.get_float_array("ints"); }, "ints", "expected an ARRAY of FLOAT32 or FLOAT64"},
        {[&] { (void)f.metadata_array_type("s"); }, "s", "is STRING, expected an ARRAY"},
        {[&] { (void)f.find_int("s"); }, "s", "expected an integer"},
        {[&] { (void)f.find_float("s"); }, "s", "expected FLOAT32"},
        {[&] { (void)f.find_string("u32"); }, "u32", "expected a STRING"},
        {[&] { (void)f.get_int("llama.block_count"); }, "llama.block_count", "no metadata"},
        {[&] { (void)f.metadata_type("absent"); }, "absent", "no metadata"},
    };
    for (const auto& r : refusals) {
      const std::string msg = error_of(r.call);
      VERIFY_CONTAINS(msg, path);
      VERIFY_CONTAINS(msg, std::string("key \"") + r.key + "\"");
      VERIFY_CONTAINS(msg, r.needle);
    }
  }

  // ---- corrupt files ----

  void corrupt_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("needles");  // '|'-separated, all must be in the message
    const auto row = [](const char* tag, const std::string& bytes, const char* needles) {
      QTest::newRow(tag) << QByteArray(bytes.data(), static_cast<qsizetype>(bytes.size()))
                         << QString::fromUtf8(needles);
    };
    const auto with = [](auto edit) {
      Crafted c;
      edit(c);
      return c.bytes();
    };
    const std::string ok = Crafted().bytes();
    using T = GgufValueType;

    // Header.
    row("empty file", "", "file is empty|0 bytes");
    row("three bytes", "GGU", "not a GGUF file|\"GGU\"");
    row("bad magic", with([](Crafted& c) { c.magic = "GGML"; }), "not a GGUF file|\"GGML\"|magic \"GGUF\"");
    row("binary magic",
        "\x7f"
        "ELF\x02\x01",
        "not a GGUF file|\"\\x7fELF\"");
    row("safetensors", std::string("\x10\0\0\0\0\0\0\0{\"a\":1}", 15),
        "not a GGUF file|\"\\x10\\x00\\x00\\x00\"");
    row("version 1", with([](Crafted& c) { c.version = 1; }),
        "header|GGUF version 1 is not supported|2 and 3");
    row("version 0", with([](Crafted& c) { c.version = 0; }), "unknown GGUF version 0");
    row("version 4", with([](Crafted& c) { c.version = 4; }), "unknown GGUF version 4|supported: 2 and 3");
    row("big-endian", with([](Crafted& c) { c.version = 0x03000000; }), "big-endian GGUF is not supported");
    row("big-endian v2", with([](Crafted& c) { c.version = 0x02000000; }),
        "big-endian GGUF is not supported");
    row("cut in the version", ok.substr(0, 6),
        "header|version (4 bytes at byte 4)|runs past the end|6 bytes");
    row("cut in the counts", ok.substr(0, 20),
        "header|key count (8 bytes at byte 16)|runs past the end|20 bytes");
    row("key count huge", with([](Crafted& c) { c.kv_count = uint64_t{1} << 60; }),
        "header|key count 1152921504606846976 cannot fit");
    row("key count one too many", header(0, 2) + kv_str("general.architecture", "llama"),
        "key 1 of 2|key name (8 bytes at byte 69)|runs past the end|truncated");
    row("tensor count huge", with([](Crafted& c) { c.tensor_count = ~uint64_t{0}; }),
        "header|tensor count 18446744073709551615 cannot fit");

    // Metadata.
    row("key name past the end", with([](Crafted& c) { c.kvs = {Bytes().u64(1000).raw("gen").b}; }),
        "key 0 of 1|key name (1000 bytes at byte 32)|runs past the end");
    row("string value past the end", with([](Crafted& c) {
          c.kvs.push_back(kv("general.name", T::STRING, Bytes().u64(uint64_t{1} << 40)));
        }),
        "key \"general.name\"|string value (1099511627776 bytes|runs past the end");
    row("value cut short", header(0, 1) + kv("llama.block_count", T::UINT32, Bytes().put<uint16_t>(30)),
        "key \"llama.block_count\"|UINT32 value (4 bytes|runs past the end");
    row("unknown value type",
        with([](Crafted& c) { c.kvs.push_back(kv("x.y", static_cast<T>(13), Bytes().u32(0))); }),
        "key \"x.y\"|unknown value type 13");
    row("unknown element type",
        with([](Crafted& c) { c.kvs.push_back(kv("x.y", T::ARRAY, Bytes().u32(99).u64(0))); }),
        "key \"x.y\"|unknown value type 99");
    row("nested array", with([](Crafted& c) {
          c.kvs.push_back(
              kv("x.nested", T::ARRAY, Bytes().u32(vt(T::ARRAY)).u64(1).u32(vt(T::UINT8)).u64(0)));
        }),
        "key \"x.nested\"|nested arrays");
    row("array count huge", with([](Crafted& c) {
          c.kvs.push_back(
              kv("tokenizer.ggml.tokens", T::ARRAY, Bytes().u32(vt(T::STRING)).u64(uint64_t{1} << 60)));
        }),
        "key \"tokenizer.ggml.tokens\"|array of 1152921504606846976 STRING|needs at least "
        "9223372036854775808 bytes");
    row("array count overflowing bytes", with([](Crafted& c) {
          c.kvs.push_back(kv("x.big", T::ARRAY, Bytes().u32(vt(T::UINT64)).u64(uint64_t{1} << 62)));
        }),
        "key \"x.big\"|array of 4611686018427387904 UINT64|needs at least 2^64 bytes");
    row("array count one past the end",
        header(0, 1) + kv("x.ints", T::ARRAY, Bytes().u32(vt(T::UINT32)).u64(3).u32(1).u32(2)),
        "key \"x.ints\"|array of 3 UINT32|needs at least 12 bytes|only 8 remain");
    row("duplicate key", with([](Crafted& c) { c.kvs.push_back(kv_str("general.architecture", "gpt2")); }),
        "key \"general.architecture\"|duplicate key");
    row("bool not 0 or 1",
        with([](Crafted& c) { c.kvs.push_back(kv("x.flag", T::BOOL, Bytes().put<uint8_t>(2))); }),
        "key \"x.flag\"|BOOL value 2 is neither 0 nor 1");
    row("key with control bytes",
        with([](Crafted& c) { c.kvs.push_back(kv("a\nb\"", static_cast<T>(77), Bytes())); }),
        "key \"a\\x0ab\\\"\"|unknown value type 77");
    row("alignment 0", with([](Crafted& c) { c.kvs.push_back(kv_u32("general.alignment", 0)); }),
        "key \"general.alignment\"|alignment 0 is not a power of two");
    row("alignment 48", with([](Crafted& c) { c.kvs.push_back(kv_u32("general.alignment", 48)); }),
        "key \"general.alignment\"|alignment 48 is not a power of two");
    row("alignment negative", with([](Crafted& c) {
          c.kvs.push_back(kv("general.alignment", T::INT32, Bytes().put<int32_t>(-32)));
        }),
        "key \"general.alignment\"|alignment -32 is not a power of two");
    row("alignment a string", with([](Crafted& c) { c.kvs.push_back(kv_str("general.alignment", "32")); }),
        "key \"general.alignment\"|must be an unsigned integer, got STRING");

    // Tensor infos.
    row("tensor name past the end", with([](Crafted& c) {
          c.tensors.clear();
          c.tensor_count = 1;
          c.data = Bytes().u64(500).raw("blk.").b;
          c.pad = false;
        }),
        "tensor info 0 of 1|name (500 bytes|runs past the end");
    row("tensor info cut short", (Crafted().head() + Crafted().metadata() + Crafted().infos()).substr(0, 130),
        "tensor \"b.q4_1\"|dimension (8 bytes at byte 124)|runs past the end");
    row("zero dimensions", with([](Crafted& c) { c.tensors[0].ne.clear(); }),
        "tensor \"a.f32\"|0 dimensions|1 to 4");
    row("five dimensions", with([](Crafted& c) {
          c.tensors[0].ne = {8, 1, 1, 1, 1};
        }),
        "tensor \"a.f32\"|5 dimensions|1 to 4");
    row("dimension 0", with([](Crafted& c) {
          c.tensors[1].ne = {32, 0};
        }),
        "tensor \"b.q4_1\"|ne[1] = 0 is not positive");
    row("dimension negative", with([](Crafted& c) { c.tensors[0].ne = {uint64_t{1} << 63}; }),
        "tensor \"a.f32\"|ne[0] = -9223372036854775808 is not positive");
    row("element count overflow", with([](Crafted& c) {
          c.tensors[0].ne = {uint64_t{1} << 32, uint64_t{1} << 32};
        }),
        "tensor \"a.f32\"|overflows int64");
    row("byte count overflow", with([](Crafted& c) {
          c.tensors[0].ne = {uint64_t{1} << 61, 2};
        }),
        "tensor \"a.f32\"|of F32 overflows (too many bytes)");
    row("type IQ4_NL", with([](Crafted& c) { c.tensors[1].type = 20; }),
        "tensor \"b.q4_1\"|unsupported tensor type IQ4_NL (20)|supported: F32");
    row("type IQ2_XXS", with([](Crafted& c) { c.tensors[1].type = 16; }),
        "tensor \"b.q4_1\"|unsupported tensor type IQ2_XXS (16)");
    row("type 99", with([](Crafted& c) { c.tensors[1].type = 99; }),
        "tensor \"b.q4_1\"|unsupported tensor type 99 (unknown to ggml)");
    row("row not whole blocks", with([](Crafted& c) {
          c.tensors[1].ne = {48, 1};
        }),
        "tensor \"b.q4_1\"|ne[0] = 48 is not a multiple of Q4_1's block of 32");
    row("K-quant row not whole blocks", with([](Crafted& c) {
          c.tensors[1].ne = {512 + 32};
          c.tensors[1].type = 14;
        }),
        "tensor \"b.q4_1\"|ne[0] = 544 is not a multiple of Q6_K's block of 256");
    row("duplicate tensor name", with([](Crafted& c) { c.tensors[1].name = "a.f32"; }),
        "tensor \"a.f32\"|duplicate tensor name");

    // Data section.
    row("offset not aligned", with([](Crafted& c) { c.tensors[1].offset = 36; }),
        "tensor \"b.q4_1\"|data offset 36 is not a multiple of the alignment 32");
    row("offset past the end", with([](Crafted& c) { c.tensors[1].offset = 64; }),
        "tensor \"b.q4_1\"|data [64, +40 bytes)|runs past the end of the file");
    row("offset huge", with([](Crafted& c) { c.tensors[1].offset = ~uint64_t{31}; }),
        "tensor \"b.q4_1\"|data [18446744073709551584, +40 bytes)|runs past the end");
    row("data cut short", ok.substr(0, ok.size() - 1), "tensor \"b.q4_1\"|runs past the end of the file");
    row("no data section", with([](Crafted& c) {
          c.data.clear();
          c.pad = false;
        }),
        "file is truncated: the data section would start at byte 160");
    row("overlapping tensors", with([](Crafted& c) { c.tensors[1].offset = 0; }),
        "tensor \"b.q4_1\" [0, 40) overlaps tensor \"a.f32\" [0, 32)");
  }
  void corrupt() {
    QFETCH(QByteArray, bytes);
    QFETCH(QString, needles);
    const std::string path = write("corrupt.gguf", bytes.toStdString());
    const std::string msg = error_of([&] { GgufFile::open(path); });
    VERIFY_CONTAINS(msg, path + ": ");
    for (const QString& n : needles.split(QLatin1Char('|'))) VERIFY_CONTAINS(msg, n.toStdString());
  }

  void not_a_file() {
    std::string msg = error_of([&] { GgufFile::open(file("nowhere.gguf")); });
    VERIFY_CONTAINS(msg, file("nowhere.gguf"));
    VERIFY_CONTAINS(msg, "not found");
    msg = error_of([&] { GgufFile::open(dir_.path().toStdString()); });
    VERIFY_CONTAINS(msg, dir_.path().toStdString());
    VERIFY_CONTAINS(msg, "is a directory");
  }

  void every_truncation_fails_cleanly() {
    // Every proper prefix of a valid file misses some bytes a tensor needs: each must be refused
    // with a ModelFormatError naming the file, whatever field the cut lands in.
    const std::string full = Crafted().bytes();
    for (size_t n = 0; n < full.size(); ++n) {
      const std::string path = write("prefix.gguf", full.substr(0, n));
      const std::string msg = error_of([&] { GgufFile::open(path); });
      QVERIFY2(msg.starts_with(path + ": "),
               qPrintable(QString::number(n) + ": " + QString::fromStdString(msg)));
    }
  }

  void every_byte_flip_is_safe() {
    // Any single corrupted byte either still opens or is refused with a ModelFormatError.
    const std::string full = Crafted().bytes();
    int refused = 0;
    for (size_t i = 0; i < full.size(); ++i)
      for (char flip : {'\xff', '\x00', '\x80'}) {
        std::string bytes = full;
        if (bytes[i] == flip) continue;
        bytes[i] = flip;
        const std::string path = write("flip.gguf", bytes);
        const std::string msg = error_of([&] {
          const GgufFile f = GgufFile::open(path);
          for (const GgufTensor& t : f.tensors()) (void)gguf_dequantize(t);
        });
        if (msg == "<no exception>") continue;
        ++refused;
        QVERIFY2(msg.starts_with(path + ": "),
                 qPrintable(QString::number(i) + ": " + QString::fromStdString(msg)));
      }
    QVERIFY(refused > 100);
  }

  // ---- files written by the gguf package (tests/oracle/make_gguf_fixtures.py) ----

  void oracle_values() {
    if (oracle_dir().empty())
      QSKIP(
          "SERVELAB_GGUF_ORACLE_DIR is not set (no .venv Python at configure time): gguf-py fixtures "
          "skipped");
    const json expected = json::parse(read_bytes(oracle("expected.json")));
    const GgufFile f = GgufFile::open(oracle("values.gguf"));
    QCOMPARE(f.version(), 3u);
    QCOMPARE(f.alignment(), uint64_t{32});

    QCOMPARE(f.metadata().size(), expected["keys"].size());
    for (const auto& [key, e] : expected["keys"].items()) {
      QVERIFY2(f.has(key), key.c_str());
      QCOMPARE(std::string(gguf_value_type_name(f.metadata_type(key))), e["type"].get<std::string>());
      const json& want = e["value"];
      QVERIFY2(f.metadata().at(key) == want,
               qPrintable(
                   QString::fromStdString(key + ": " + f.metadata().at(key).dump() + " vs " + want.dump())));
      const GgufValueType type = f.metadata_type(key);
      if (type == GgufValueType::ARRAY) {
        const std::string elem = e["array_type"].get<std::string>();
        QCOMPARE(std::string(gguf_value_type_name(f.metadata_array_type(key))), elem);
        if (elem == "STRING")
          QCOMPARE(f.get_string_array(key), want.get<std::vector<std::string>>());
        else if (elem == "FLOAT32" || elem == "FLOAT64")
          QCOMPARE(f.get_float_array(key), want.get<std::vector<double>>());
        else if (elem != "BOOL")
          QCOMPARE(f.get_int_array(key), want.get<std::vector<int64_t>>());
      } else if (type == GgufValueType::STRING) {
        QCOMPARE(f.get_string(key), want.get<std::string>());
      } else if (type == GgufValueType::BOOL) {
        QCOMPARE(f.get_bool(key), want.get<bool>());
      } else if (type == GgufValueType::FLOAT32 || type == GgufValueType::FLOAT64) {
        QCOMPARE(f.get_float(key), want.get<double>());
      } else if (key == "test.uint64_huge") {
        VERIFY_CONTAINS(error_of([&] { (void)f.get_int(key); }), "does not fit in int64");
      } else {
        QCOMPARE(f.get_int(key), want.get<int64_t>());
      }
    }
    QCOMPARE(f.get_float("test.float32"), 9.999999747378752e-06);
    QCOMPARE(f.get_string("test.string"),
             std::string("h\xc3\xa9llo \"w\xc3\xb6rld\" \xe2\x98\x83 \xf0\x9f\x98\x80"));

    // Tensors: names, types, ne and offsets as gguf's GGUFReader reads them, and every value
    // equal to gguf.quants.dequantize's, bit for bit (NaNs and signed zeros included).
    const SafetensorsFile ref = SafetensorsFile::open(oracle("reference.safetensors"));
    const json& tensors = expected["tensors"];
    QCOMPARE(f.tensors().size(), tensors.size());
    std::set<std::string> types_seen;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const GgufTensor& t = f.tensors()[i];
      const std::string& name = tensors[i]["name"].get_ref<const std::string&>();
      QCOMPARE(t.name, name);
      QCOMPARE(std::string(ggml_type_name(t.type)), tensors[i]["type"].get<std::string>());
      QCOMPARE(t.ne, tensors[i]["ne"].get<std::vector<int64_t>>());
      QCOMPARE(t.offset, tensors[i]["offset"].get<uint64_t>());
      QCOMPARE(t.data, f.tensors()[0].data + t.offset);
      QCOMPARE(static_cast<int64_t>(t.nbytes),
               t.numel() / ggml_block_values(t.type) * ggml_block_bytes(t.type));
      const StTensor& r = ref.at(name);
      QCOMPARE(r.shape, t.shape());
      const std::vector<float> got = gguf_dequantize(t);
      std::vector<float> want(static_cast<size_t>(r.numel()));
      std::memcpy(want.data(), r.data, r.nbytes);
      const std::string diff = first_difference(got.data(), want.data(), want.size());
      QVERIFY2(diff.empty(), qPrintable(QString::fromStdString(name + ": " + diff)));
      types_seen.insert(ggml_type_name(t.type));
    }
    QCOMPARE(types_seen.size(), size_t{11});  // every supported type was checked
  }

  void oracle_alignment_64() {
    if (oracle_dir().empty()) QSKIP("SERVELAB_GGUF_ORACLE_DIR is not set: gguf-py fixtures skipped");
    const GgufFile f = GgufFile::open(oracle("aligned64.gguf"));
    const GgufFile base = GgufFile::open(oracle("values.gguf"));
    QCOMPARE(f.alignment(), uint64_t{64});
    QCOMPARE(f.get_int("general.alignment"), int64_t{64});
    QCOMPARE(f.tensors().size(), base.tensors().size());
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const GgufTensor& t = f.tensors()[i];
      QCOMPARE(t.offset % 64, uint64_t{0});
      QCOMPARE(t.ne, base.tensors()[i].ne);
      QVERIFY(std::memcmp(t.data, base.tensors()[i].data, t.nbytes) == 0);
    }
  }

  void oracle_refusals() {
    if (oracle_dir().empty()) QSKIP("SERVELAB_GGUF_ORACLE_DIR is not set: gguf-py fixtures skipped");
    std::string msg = error_of([&] { GgufFile::open(oracle("big_endian.gguf")); });
    VERIFY_CONTAINS(msg, oracle("big_endian.gguf"));
    VERIFY_CONTAINS(msg, "big-endian GGUF is not supported");
    msg = error_of([&] { GgufFile::open(oracle("iq4_nl.gguf")); });
    VERIFY_CONTAINS(msg, oracle("iq4_nl.gguf"));
    VERIFY_CONTAINS(msg, "tensor \"w.iq4_nl\"");
    VERIFY_CONTAINS(msg, "unsupported tensor type IQ4_NL (20)");
  }

  // ---- the shipped model (docs/models.md) ----

  void smollm2_file() {
    if (!std::filesystem::exists(kSmolLM2))
      QSKIP(qPrintable(QString::fromStdString(
          "the built-in model is absent (scripts/bootstrap installs it): " + kSmolLM2)));
    const GgufFile f = GgufFile::open(kSmolLM2);
    QCOMPARE(f.file_size(), size_t{98362432});
    QCOMPARE(f.version(), 3u);
    QCOMPARE(f.alignment(), uint64_t{32});
    QVERIFY(!f.has("general.alignment"));
    QCOMPARE(f.metadata().size(), size_t{33});
    QCOMPARE(f.tensors().size(), size_t{272});
    QCOMPARE(f.get_string("general.architecture"), std::string("llama"));
    QCOMPARE(f.get_int("llama.block_count"), int64_t{30});
    QCOMPARE(f.get_int("llama.embedding_length"), int64_t{576});
    QCOMPARE(f.get_int("llama.attention.head_count"), int64_t{9});
    QCOMPARE(f.get_int("llama.attention.head_count_kv"), int64_t{3});
    QCOMPARE(f.get_int("llama.feed_forward_length"), int64_t{1536});
    QCOMPARE(f.get_int("llama.context_length"), int64_t{8192});
    QCOMPARE(f.get_float("llama.rope.freq_base"), 100000.0);
    QCOMPARE(f.get_float("llama.attention.layer_norm_rms_epsilon"), static_cast<double>(9.9999997e-06f));
    QCOMPARE(f.get_string("tokenizer.ggml.model"), std::string("gpt2"));
    QCOMPARE(f.get_string("tokenizer.ggml.pre"), std::string("smollm"));
    QCOMPARE(f.get_bool("tokenizer.ggml.add_bos_token"), false);
    QCOMPARE(f.get_int("tokenizer.ggml.bos_token_id"), int64_t{1});
    QCOMPARE(f.get_int("tokenizer.ggml.eos_token_id"), int64_t{2});
    const std::vector<std::string> tokens = f.get_string_array("tokenizer.ggml.tokens");
    QCOMPARE(tokens.size(), size_t{49152});
    QCOMPARE(tokens[0], std::string("<|endoftext|>"));
    QCOMPARE(tokens[1], std::string("<|im_start|>"));
    QCOMPARE(f.get_string_array("tokenizer.ggml.merges").size(), size_t{48900});
    QCOMPARE(f.metadata_array_type("tokenizer.ggml.token_type"), GgufValueType::INT32);
    QCOMPARE(f.get_int_array("tokenizer.ggml.token_type").size(), size_t{49152});

    int q8 = 0, q41 = 0, f32 = 0;
    for (const GgufTensor& t : f.tensors()) {
      QCOMPARE(t.offset % 32, uint64_t{0});
      if (t.type == GgmlType::Q8_0) ++q8;
      if (t.type == GgmlType::Q4_1) ++q41;
      if (t.type == GgmlType::F32) {
        ++f32;
        QCOMPARE(t.ne.size(), size_t{1});  // the norms
      }
    }
    QCOMPARE(q8, 1);
    QCOMPARE(q41, 210);
    QCOMPARE(f32, 61);
    QVERIFY(f.find("output.weight") == nullptr);  // the LM head is tied to token_embd
    const GgufTensor& embd = f.at("token_embd.weight");
    QCOMPARE(embd.type, GgmlType::Q8_0);
    QCOMPARE(embd.shape(), (std::vector<int64_t>{49152, 576}));
    QCOMPARE(f.at("blk.0.ffn_down.weight").ne, (std::vector<int64_t>{1536, 576}));
    QCOMPARE(f.at("blk.0.ffn_down.weight").shape(), (std::vector<int64_t>{576, 1536}));

    const GgufTensor& q = f.at("blk.0.attn_q.weight");
    QCOMPARE(q.type, GgmlType::Q4_1);
    QCOMPARE(q.shape(), (std::vector<int64_t>{576, 576}));
    QVERIFY(std::memcmp(q.data, kQ4_1Block, 20) == 0);
    float y[32];
    ggml_dequantize(q.type, q.data, y, 32);
    for (int j = 0; j < 8; ++j)
      QVERIFY2(std::abs(y[j] - kQ4_1Values[j]) < 1e-5,
               qPrintable(QStringLiteral("value %1: %2 vs %3").arg(j).arg(y[j]).arg(kQ4_1Values[j])));
    const std::vector<float> all = gguf_dequantize(q);
    QCOMPARE(all.size(), size_t{576 * 576});
    QCOMPARE(all[0], y[0]);
    const std::vector<float> norm = gguf_dequantize(f.at("blk.0.attn_norm.weight"));
    QCOMPARE(norm.size(), size_t{576});
    for (float v : norm) QVERIFY(std::isfinite(v));
  }
};

QTEST_GUILESS_MAIN(GgufTest)
#include "test_gguf.moc"

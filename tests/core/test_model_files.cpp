// Model-file readers of core/: the safetensors reader/writer and the GPT-2 config.json parser.
// Corrupt inputs are crafted byte by byte here, so each check of the reader is reached on purpose,
// and every error message is checked for the file and the culprit a user would need to fix it.
#include <QTemporaryDir>
#include <QtTest>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model/gpt2_config.h"
#include "model/safetensors_file.h"
#include "util/errors.h"
#include "verify_contains.h"

using namespace servelab;
using nlohmann::json;

namespace {

// The message of the ModelFormatError that fn throws; a marker (which no check matches) otherwise.
template <typename F>
std::string format_error(F&& fn) {
  try {
    fn();
  } catch (const ModelFormatError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<wrong exception type: ") + e.what() + ">";
  }
  return "<no exception>";
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// A safetensors file as the bytes say, with the header length field forced when asked.
void write_raw(const std::string& path, const std::string& header, const std::string& data,
               std::optional<uint64_t> header_len = std::nullopt) {
  uint64_t len = header_len.value_or(header.size());
  std::string bytes(8, '\0');
  for (char& b : bytes) {
    b = static_cast<char>(len & 0xff);
    len >>= 8;
  }
  write_bytes(path, bytes + header + data);
}

uint64_t read_header_len(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char b[8] = {};
  in.read(reinterpret_cast<char*>(b), 8);
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | b[i];
  return len;
}

template <typename T>
StWriteTensor write_tensor(const std::string& name, StDType dtype, std::vector<int64_t> shape,
                           const std::vector<T>& values) {
  return {name, dtype, std::move(shape), values.data(), values.size() * sizeof(T)};
}

}  // namespace

class ModelFilesTest : public QObject {
  Q_OBJECT

 private:
  QTemporaryDir dir_;
  std::string file(const char* name) const { return dir_.filePath(QString::fromUtf8(name)).toStdString(); }

  // Writes a copy of GPT-2 small's config.json, changed by `edit`, and returns its path.
  template <typename Edit>
  std::string config_file(Edit&& edit, const char* name = "config.json") {
    json j = Gpt2Config::gpt2_small().to_json();
    edit(j);
    const std::string path = file(name);
    write_bytes(path, j.dump(2));
    return path;
  }

 private Q_SLOTS:
  void initTestCase() { QVERIFY(dir_.isValid()); }

  // ---- safetensors: dtypes and the round trip ----

  void dtype_table() {
    QCOMPARE(dtype_size(StDType::F64), size_t{8});
    QCOMPARE(dtype_size(StDType::F32), size_t{4});
    QCOMPARE(dtype_size(StDType::BF16), size_t{2});
    QCOMPARE(dtype_size(StDType::F16), size_t{2});
    QCOMPARE(dtype_size(StDType::I64), size_t{8});
    QCOMPARE(dtype_size(StDType::BOOL), size_t{1});
    QCOMPARE(std::string(dtype_name(StDType::BF16)), std::string("BF16"));
    QCOMPARE(std::string(dtype_name(StDType::BOOL)), std::string("BOOL"));
  }

  void round_trip() {
    const std::vector<uint8_t> u8 = {1, 2, 3, 250, 255};  // odd size: tempts a writer into misaligning
    const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x7bff, 0x0001};
    const std::vector<float> f32 = {0.f, 1.5f, -2.25f, 3e-8f, 1e30f, -0.f};
    const std::vector<int64_t> i64 = {0, -1, INT64_MAX, INT64_MIN};
    const std::vector<uint16_t> bf16 = {0x3f80, 0xbf80, 0x7f80};
    const std::vector<float> none, scalar = {7.f};
    const std::vector<StWriteTensor> in = {write_tensor("h.0.u8", StDType::U8, {5}, u8),
                                           write_tensor("h.0.f16", StDType::F16, {2, 2}, f16),
                                           write_tensor("h.0.f32", StDType::F32, {2, 3}, f32),
                                           write_tensor("h.0.empty", StDType::F32, {0, 3}, none),
                                           write_tensor("h.0.i64", StDType::I64, {4}, i64),
                                           write_tensor("h.0.bf16", StDType::BF16, {3, 1}, bf16),
                                           write_tensor("scalar", StDType::F32, {}, scalar)};
    const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "h\xc3\xa9llo, \"quoted\""}};
    const std::string path = file("round.safetensors");
    write_safetensors(path, in, meta);

    QVERIFY(!std::filesystem::exists(path + ".tmp"));
    const uint64_t header_len = read_header_len(path);
    QCOMPARE(header_len % 8, uint64_t{0});
    size_t data_bytes = 0;
    for (const auto& t : in) data_bytes += t.nbytes;
    QCOMPARE(std::filesystem::file_size(path), 8 + header_len + data_bytes);

    const SafetensorsFile st = SafetensorsFile::open(path);
    QCOMPARE(st.path(), path);
    QCOMPARE(st.file_size(), size_t{8 + header_len + data_bytes});
    QCOMPARE(st.metadata(), meta);
    QCOMPARE(st.tensors().size(), in.size());
    for (const StWriteTensor& w : in) {
      const StTensor* t = st.find(w.name);
      QVERIFY2(t, w.name.c_str());
      QCOMPARE(t->name, w.name);
      QCOMPARE(t->dtype, w.dtype);
      QCOMPARE(t->shape, w.shape);
      QCOMPARE(t->nbytes, w.nbytes);
      QCOMPARE(static_cast<size_t>(t->numel()) * dtype_size(t->dtype), w.nbytes);
      QVERIFY2(w.nbytes == 0 || std::memcmp(t->data, w.data, w.nbytes) == 0, w.name.c_str());
      // Aligned to the element size, so a consumer may view it in place.
      QVERIFY2(reinterpret_cast<uintptr_t>(t->data) % dtype_size(t->dtype) == 0, w.name.c_str());
    }
    QCOMPARE(st.at("h.0.empty").numel(), int64_t{0});
    QCOMPARE(st.at("scalar").numel(), int64_t{1});
    for (size_t i = 1; i < st.tensors().size(); ++i)  // file order of data offsets
      QVERIFY(st.tensors()[i - 1].data <= st.tensors()[i].data);
    QVERIFY(st.find("nope") == nullptr);

    const std::string msg = format_error([&] { (void)st.at("lm_head.weight"); });
    VERIFY_CONTAINS(msg, path);
    VERIFY_CONTAINS(msg, "\"lm_head.weight\"");
  }

  void moves_keep_tensors_valid() {
    const std::vector<float> v = {1.f, 2.f, 3.f};
    const std::string path = file("move.safetensors");
    write_safetensors(path, {write_tensor("w", StDType::F32, {3}, v)});
    SafetensorsFile a = SafetensorsFile::open(path);
    const std::byte* data = a.at("w").data;
    SafetensorsFile b(std::move(a));
    QCOMPARE(b.at("w").data, data);
    SafetensorsFile c = SafetensorsFile::open(path);
    c = std::move(b);  // unmaps c's own mapping, takes b's
    QCOMPARE(c.at("w").data, data);
    QVERIFY(std::memcmp(c.at("w").data, v.data(), 12) == 0);
    QVERIFY(c.metadata().empty());
  }

  void write_overwrites_and_empty_file_is_valid() {
    const std::string path = file("over.safetensors");
    write_bytes(path, "old junk that is not safetensors");
    write_safetensors(path, {});
    const SafetensorsFile st = SafetensorsFile::open(path);
    QVERIFY(st.tensors().empty());
    QVERIFY(st.metadata().empty());
  }

  void write_rejects_bad_tensors() {
    const std::vector<float> v = {1.f, 2.f};
    const std::string path = file("rejected.safetensors");
    std::string msg =
        format_error([&] { write_safetensors(path, {write_tensor("w", StDType::F32, {3}, v)}); });
    VERIFY_CONTAINS(msg, path);
    VERIFY_CONTAINS(msg, "\"w\"");
    VERIFY_CONTAINS(msg, "does not match");
    msg = format_error([&] {
      write_safetensors(path,
                        {write_tensor("w", StDType::F32, {2}, v), write_tensor("w", StDType::F32, {2}, v)});
    });
    VERIFY_CONTAINS(msg, "duplicate");
    msg =
        format_error([&] { write_safetensors(path, {write_tensor("__metadata__", StDType::F32, {2}, v)}); });
    VERIFY_CONTAINS(msg, "reserved");
    QVERIFY(!std::filesystem::exists(path));
    QVERIFY(!std::filesystem::exists(path + ".tmp"));
  }

  void zero_size_tensors_anywhere() {
    // Zero-size tensors take no bytes: at the end of the data, or sharing an offset, is fine.
    const std::string path = file("zeros.safetensors");
    write_raw(path,
              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("z0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
              R"("z1":{"dtype":"I64","shape":[3,0],"data_offsets":[8,8]}})",
              std::string(8, '\0'));
    const SafetensorsFile st = SafetensorsFile::open(path);
    QCOMPARE(st.tensors().size(), size_t{3});
    QCOMPARE(st.at("z1").nbytes, size_t{0});
    QCOMPARE(st.at("z1").shape, (std::vector<int64_t>{3, 0}));
  }

  // ---- safetensors: corrupt files ----

  void corrupt_header_data() {
    QTest::addColumn<QByteArray>("header");
    QTest::addColumn<int>("data_size");
    QTest::addColumn<QString>("needles");  // '|'-separated, all must be in the message

    const auto row = [](const char* tag, const char* header, int data_size, const char* needles) {
      QTest::newRow(tag) << QByteArray(header) << data_size << QString::fromUtf8(needles);
    };
    row("not json", "{\"w\": {\"dtype\": ", 0, "header is not valid JSON|parse error");
    row("not an object", "[1, 2]", 0, "header must be a JSON object|[1,2]");
    row("entry not an object", R"({"w": 5})", 0, "tensor \"w\"|must be a JSON object");
    row("missing dtype", R"({"w":{"shape":[2],"data_offsets":[0,8]}})", 8, "tensor \"w\"|missing \"dtype\"");
    row("missing shape", R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8,
        "tensor \"w\"|missing \"shape\"");
    row("missing data_offsets", R"({"w":{"dtype":"F32","shape":[2]}})", 8,
        "tensor \"w\"|missing \"data_offsets\"");
    row("dtype not a string", R"({"w":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", 8,
        "tensor \"w\"|\"dtype\" must be a string");
    row("unknown dtype", R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2,
        "tensor \"w\"|unknown dtype \"F8_E4M3\"|BF16");
    row("shape not an array", R"({"w":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", 8,
        "tensor \"w\"|\"shape\" must be an array");
    row("shape of floats", R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8,
        "tensor \"w\"|must hold integers|2.5");
    row("negative dim", R"({"w":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,8]}})", 8,
        "tensor \"w\"|negative dimension -1");
    row("shape overflow", R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8,
        "tensor \"w\"|overflows");
    row("offsets one number", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8,
        "tensor \"w\"|data_offsets|[begin, end]|[0]");
    row("offsets negative", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8,
        "tensor \"w\"|data_offsets|[-8,0]");
    row("offsets not an array", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":"0-8"}})", 8,
        "tensor \"w\"|data_offsets");
    row("offsets begin > end", R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8,
        "tensor \"w\"|[8, 0]|begin > end");
    row("shape does not match bytes", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8,
        "tensor \"w\"|shape [3]|needs 12 bytes|does not match|8 bytes");
    row("offsets overrun",
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[64,72]}})",
        16, "tensor \"b\"|overruns|72|16 bytes of data");
    row("single tensor overruns", R"({"w":{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}})", 8,
        "tensor \"w\"|overruns|1000|8 bytes of data");
    row("overlap",
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
        12, "tensor \"a\"|tensor \"b\"|overlaps|[4, 12]|[0, 8]");
    row("metadata not an object", R"({"__metadata__": 5})", 0, "\"__metadata__\"|JSON object");
    row("metadata value not a string", R"({"__metadata__": {"step": 1}})", 0, "\"step\"|must be a string");
  }
  void corrupt_header() {
    QFETCH(QByteArray, header);
    QFETCH(int, data_size);
    QFETCH(QString, needles);
    const std::string path = file("corrupt.safetensors");
    write_raw(path, header.toStdString(), std::string(static_cast<size_t>(data_size), '\0'));
    const std::string msg = format_error([&] { SafetensorsFile::open(path); });
    VERIFY_CONTAINS(msg, path);
    for (const QString& n : needles.split(QLatin1Char('|'))) VERIFY_CONTAINS(msg, n.toStdString());
  }

  void corrupt_length_data() {
    QTest::addColumn<QByteArray>("bytes");
    QTest::addColumn<QString>("needles");
    const auto len_field = [](uint64_t len) {
      QByteArray b(8, '\0');
      for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((len >> (8 * i)) & 0xff);
      return b;
    };
    QTest::newRow("empty file") << QByteArray() << QStringLiteral("file is empty|0 bytes");
    QTest::newRow("shorter than 8 bytes")
        << QByteArray("\x02\0\0\0\0", 5) << QStringLiteral("5 bytes|shorter than the 8-byte header length");
    QTest::newRow("header longer than file")
        << len_field(1000) + QByteArray("{}              ")
        << QStringLiteral("header length 1000|larger than the file|24 bytes");
    QTest::newRow("absurd header length")
        << len_field(200'000'000) + QByteArray("{}") << QStringLiteral("header length 200000000|absurd");
    QTest::newRow("length with top bit set") << len_field(uint64_t{1} << 63) + QByteArray("{}")
                                             << QStringLiteral("header length 9223372036854775808|absurd");
  }
  void corrupt_length() {
    QFETCH(QByteArray, bytes);
    QFETCH(QString, needles);
    const std::string path = file("short.safetensors");
    write_bytes(path, bytes.toStdString());
    const std::string msg = format_error([&] { SafetensorsFile::open(path); });
    VERIFY_CONTAINS(msg, path);
    for (const QString& n : needles.split(QLatin1Char('|'))) VERIFY_CONTAINS(msg, n.toStdString());
  }

  void truncated_file_data() {
    QTest::addColumn<int>("cut");
    QTest::newRow("last byte") << 1;
    QTest::newRow("most of the last tensor") << 15;
    QTest::newRow("into the previous tensor") << 20;
  }
  void truncated_file() {
    QFETCH(int, cut);
    const std::vector<float> a(8, 1.f), b(4, 2.f);  // 32 + 16 bytes, b last in the file
    const std::string path = file("truncated.safetensors");
    write_safetensors(path,
                      {write_tensor("a", StDType::F32, {8}, a), write_tensor("b", StDType::F32, {4}, b)});
    const auto full = std::filesystem::file_size(path);
    std::filesystem::resize_file(path, full - static_cast<uintmax_t>(cut));
    const std::string msg = format_error([&] { SafetensorsFile::open(path); });
    VERIFY_CONTAINS(msg, path);
    VERIFY_CONTAINS(msg, "file is truncated");
    VERIFY_CONTAINS(msg, "expected " + std::to_string(full) + " bytes");
    VERIFY_CONTAINS(msg, "actual " + std::to_string(full - static_cast<uintmax_t>(cut)) + " bytes");
    VERIFY_CONTAINS(msg, cut > 16 ? "tensor \"a\"" : "tensor \"b\"");
  }

  void missing_file_and_directory() {
    const std::string missing = file("no-such.safetensors");
    std::string msg = format_error([&] { SafetensorsFile::open(missing); });
    VERIFY_CONTAINS(msg, missing);
    VERIFY_CONTAINS(msg, "not found");

    const std::string folder = file("a-folder");
    std::filesystem::create_directory(folder);
    msg = format_error([&] { SafetensorsFile::open(folder); });
    VERIFY_CONTAINS(msg, folder);
    VERIFY_CONTAINS(msg, "is a directory");
  }

  // ---- GPT-2 config ----

  void gpt2_small_figures() {
    const Gpt2Config c = Gpt2Config::gpt2_small();
    QCOMPARE(c.vocab_size, int64_t{50257});
    QCOMPARE(c.n_positions, int64_t{1024});
    QCOMPARE(c.n_embd, int64_t{768});
    QCOMPARE(c.n_layer, int64_t{12});
    QCOMPARE(c.n_head, int64_t{12});
    QCOMPARE(c.head_dim(), int64_t{64});
    QCOMPARE(c.inner_dim(), int64_t{3072});
    QCOMPARE(c.num_parameters(), int64_t{124439808});  // HF GPT2LMHeadModel("gpt2").num_parameters()
    Gpt2Config medium = c;
    medium.n_embd = 1024;
    medium.n_layer = 24;
    medium.n_head = 16;
    QCOMPARE(medium.num_parameters(), int64_t{354823168});  // HF "gpt2-medium"
  }

  void real_gpt2_config() {
    const QByteArray shared = qgetenv("SERVELAB_SHARED");
    if (shared.isEmpty()) QSKIP("SERVELAB_SHARED is not set: skipping the real GPT-2 config.json");
    const std::string path = shared.toStdString() + "/data/gpt2/config.json";
    if (!std::filesystem::exists(path)) QSKIP(qPrintable(QStringLiteral("%1 is absent").arg(path.c_str())));
    const Gpt2Config c = parse_gpt2_config(path);
    QVERIFY(c == Gpt2Config::gpt2_small());
    QCOMPARE(c.num_parameters(), int64_t{124439808});
    QCOMPARE(c.activation_function, std::string("gelu_new"));
    QCOMPARE(c.layer_norm_epsilon, 1e-5);
  }

  void config_round_trip_and_folder() {
    Gpt2Config c;
    c.n_embd = 64;
    c.n_head = 4;
    c.n_layer = 2;
    c.n_inner = 100;
    c.vocab_size = 1000;
    c.n_positions = 128;
    c.layer_norm_epsilon = 1e-6;
    c.activation_function = "gelu_pytorch_tanh";
    c.bos_token_id = -1;
    c.eos_token_id = 3;
    c.scale_attn_weights = false;
    c.scale_attn_by_inverse_layer_idx = true;
    c.reorder_and_upcast_attn = true;
    QVERIFY(gpt2_config_from_json(c.to_json(), "memory") == c);
    QCOMPARE(c.inner_dim(), int64_t{100});

    const QString folder = dir_.filePath(QStringLiteral("model-folder"));
    QVERIFY(QDir().mkpath(folder));
    write_bytes((folder + QStringLiteral("/config.json")).toStdString(), c.to_json().dump());
    QVERIFY(parse_gpt2_config(folder.toStdString()) == c);  // a folder stands for its config.json
  }

  void config_aliases() {
    const std::string path = config_file([](json& j) {
      for (const char* k : {"n_embd", "n_layer", "n_head", "n_positions"}) j.erase(k);
      j["hidden_size"] = 256;
      j["num_hidden_layers"] = 3;
      j["num_attention_heads"] = 8;
      j["n_ctx"] = 512;
    });
    const Gpt2Config c = parse_gpt2_config(path);
    QCOMPARE(c.n_embd, int64_t{256});
    QCOMPARE(c.n_layer, int64_t{3});
    QCOMPARE(c.n_head, int64_t{8});
    QCOMPARE(c.n_positions, int64_t{512});
    // An alias never overrides its primary key.
    const Gpt2Config d = parse_gpt2_config(config_file([](json& j) {
      j["n_ctx"] = 512;
      j["hidden_size"] = 32;
    }));
    QCOMPARE(d.n_positions, int64_t{1024});
    QCOMPARE(d.n_embd, int64_t{768});
  }

  void config_optional_keys() {
    const Gpt2Config c = parse_gpt2_config(config_file([](json& j) {
      for (const char* k : {"n_inner", "layer_norm_epsilon", "activation_function", "bos_token_id",
                            "eos_token_id", "scale_attn_weights", "model_type", "architectures"})
        j.erase(k);
      j["reorder_and_upcast_attn"] = true;
      j["scale_attn_by_inverse_layer_idx"] = true;
      j["n_ctx"] = 1024;  // extra keys HF writes are ignored
      j["attn_pdrop"] = 0.1;
    }));
    QCOMPARE(c.n_inner, int64_t{0});
    QCOMPARE(c.inner_dim(), int64_t{3072});
    QCOMPARE(c.activation_function, std::string("gelu_new"));
    QCOMPARE(c.eos_token_id, int64_t{50256});
    QVERIFY(c.reorder_and_upcast_attn);
    QVERIFY(c.scale_attn_by_inverse_layer_idx);
    QVERIFY(c.scale_attn_weights);
  }

  void config_missing_key_data() {
    QTest::addColumn<QString>("key");
    for (const char* k : {"n_embd", "n_layer", "n_head", "vocab_size", "n_positions"})
      QTest::newRow(k) << QString::fromUtf8(k);
  }
  void config_missing_key() {
    QFETCH(QString, key);
    const std::string path = config_file([&](json& j) { j.erase(key.toStdString()); });
    const std::string msg = format_error([&] { parse_gpt2_config(path); });
    VERIFY_CONTAINS(msg, "config.json at " + path + ": missing key \"" + key.toStdString() + "\"");
  }

  void config_bad_value_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("value");  // JSON text
    QTest::addColumn<QString>("needles");
    const auto row = [](const char* tag, const char* key, const char* value, const char* needles) {
      QTest::newRow(tag) << QString::fromUtf8(key) << QString::fromUtf8(value) << QString::fromUtf8(needles);
    };
    row("n_embd zero", "n_embd", "0", "\"n_embd\"|positive integer|0");
    row("n_head negative", "n_head", "-12", "\"n_head\"|positive integer|-12");
    row("n_layer string", "n_layer", "\"12\"", "\"n_layer\"|\"12\"");
    row("vocab_size float", "vocab_size", "50257.5", "\"vocab_size\"|50257.5");
    row("n_positions null", "n_positions", "null", "\"n_positions\"|null");
    row("n_embd not divisible", "n_embd", "770", "n_embd 770|not divisible|n_head 12");
    row("activation unknown", "activation_function", "\"swish\"",
        "\"swish\"|not supported|gelu_new|gelu_pytorch_tanh|gelu|relu");
    row("activation not a string", "activation_function", "3", "activation_function 3|not supported");
    row("model_type llama", "model_type", "\"llama\"", "\"llama\"|not supported|gpt2");
    row("layer_norm_epsilon zero", "layer_norm_epsilon", "0", "\"layer_norm_epsilon\"|positive number");
    row("layer_norm_epsilon string", "layer_norm_epsilon", "\"1e-5\"", "\"layer_norm_epsilon\"|\"1e-5\"");
    row("n_inner negative", "n_inner", "-1", "\"n_inner\"|-1");
    row("flag not a bool", "reorder_and_upcast_attn", "\"yes\"", "\"reorder_and_upcast_attn\"|true or false");
    row("eos outside vocab", "eos_token_id", "50257", "\"eos_token_id\"|[0, 50257)|50257");
    row("bos negative", "bos_token_id", "-3", "\"bos_token_id\"|-3");
  }
  void config_bad_value() {
    QFETCH(QString, key);
    QFETCH(QString, value);
    QFETCH(QString, needles);
    const std::string path =
        config_file([&](json& j) { j[key.toStdString()] = json::parse(value.toStdString()); });
    const std::string msg = format_error([&] { parse_gpt2_config(path); });
    VERIFY_CONTAINS(msg, "config.json at " + path + ": ");
    for (const QString& n : needles.split(QLatin1Char('|'))) VERIFY_CONTAINS(msg, n.toStdString());
  }

  void config_bad_alias_value_is_named() {
    const std::string path = config_file([](json& j) {
      j.erase("n_head");
      j["num_attention_heads"] = 0;
    });
    VERIFY_CONTAINS(format_error([&] { parse_gpt2_config(path); }), "\"num_attention_heads\"");
  }

  void config_unreadable() {
    const std::string broken = file("broken.json");
    write_bytes(broken, "{\"n_embd\": 768,");
    std::string msg = format_error([&] { parse_gpt2_config(broken); });
    VERIFY_CONTAINS(msg, broken);
    VERIFY_CONTAINS(msg, "not valid JSON");
    VERIFY_CONTAINS(msg, "parse error");

    const std::string array = file("array.json");
    write_bytes(array, "[768, 12]");
    msg = format_error([&] { parse_gpt2_config(array); });
    VERIFY_CONTAINS(msg, array);
    VERIFY_CONTAINS(msg, "expected a JSON object");

    const std::string missing = file("nowhere/config.json");
    msg = format_error([&] { parse_gpt2_config(missing); });
    VERIFY_CONTAINS(msg, missing);
    VERIFY_CONTAINS(msg, "not found");

    msg = format_error([&] { gpt2_config_from_json(json::object(), "inline config"); });
    VERIFY_CONTAINS(msg, "config.json at inline config: missing key \"n_embd\"");
  }
};

QTEST_GUILESS_MAIN(ModelFilesTest)
#include "test_model_files.moc"

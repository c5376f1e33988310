// libFuzzer target for GgufFile (scripts/fuzz gguf). Any input must either open or be refused with
// a servelab::Error; an accepted file must keep the reader's promises: every metadata key readable
// through its typed getter, every tensor's bytes inside the file and dequantizable. Anything else
// (another exception, a sanitizer report, a crash, a failed FUZZ_CHECK) is a finding.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "fuzz_input_file.h"
#include "model/ggml_quants.h"
#include "model/gguf_file.h"
#include "util/errors.h"

using namespace servelab;

namespace {

// Dequantizing costs about a nanosecond a value: small tensors only, so each input stays fast.
constexpr int64_t kMaxDequantizedValues = 1 << 16;

void read_metadata(const GgufFile& f) {
  for (const auto& [key, value] : f.metadata().items()) {
    FUZZ_CHECK(f.has(key));
    (void)value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    const GgufValueType type = f.metadata_type(key);
    try {
      switch (type) {
        case GgufValueType::STRING:
          FUZZ_CHECK(f.get_string(key) == value.get<std::string>());
          break;
        case GgufValueType::BOOL:
          (void)f.get_bool(key);
          break;
        case GgufValueType::FLOAT32:
        case GgufValueType::FLOAT64:
          (void)f.get_float(key);
          break;
        case GgufValueType::ARRAY:
          switch (f.metadata_array_type(key)) {
            case GgufValueType::STRING:
              FUZZ_CHECK(f.get_string_array(key).size() == value.size());
              break;
            case GgufValueType::FLOAT32:
            case GgufValueType::FLOAT64:
              FUZZ_CHECK(f.get_float_array(key).size() == value.size());
              break;
            case GgufValueType::BOOL:
            case GgufValueType::ARRAY:
              break;
            default:
              FUZZ_CHECK(f.get_int_array(key).size() == value.size());  // may refuse a UINT64 above INT64_MAX
          }
          break;
        default:
          (void)f.get_int(key);  // may refuse a UINT64 above INT64_MAX
      }
    } catch (const ModelFormatError&) {
      FUZZ_CHECK(type == GgufValueType::UINT64 ||
                 (type == GgufValueType::ARRAY && f.metadata_array_type(key) == GgufValueType::UINT64));
    }
    // A getter of the wrong type refuses with a ModelFormatError, never anything else.
    try {
      (void)(type == GgufValueType::STRING ? f.get_int(key) : static_cast<int64_t>(f.get_string(key).size()));
      FUZZ_CHECK(false);
    } catch (const ModelFormatError&) {
    }
  }
}

void read_tensors(const GgufFile& f) {
  const std::byte* data_section = f.tensors().empty() ? nullptr : f.tensors()[0].data - f.tensors()[0].offset;
  for (const GgufTensor& t : f.tensors()) {
    FUZZ_CHECK(f.find(t.name) == &t);
    FUZZ_CHECK(ggml_type_supported(static_cast<uint32_t>(t.type)));
    FUZZ_CHECK(!t.ne.empty() && t.ne.size() <= 4);
    FUZZ_CHECK(t.offset % f.alignment() == 0);
    FUZZ_CHECK(t.data == data_section + t.offset);
    FUZZ_CHECK(t.numel() > 0 && t.numel() % ggml_block_values(t.type) == 0);
    FUZZ_CHECK(static_cast<int64_t>(t.nbytes) ==
               t.numel() / ggml_block_values(t.type) * ggml_block_bytes(t.type));
    // The data section starts after the 24-byte header at least.
    FUZZ_CHECK(t.nbytes <= f.file_size() - 24 && t.offset <= f.file_size() - 24 - t.nbytes);
    (void)fuzz::touch(t.data, t.nbytes);
    if (t.numel() <= kMaxDequantizedValues)
      FUZZ_CHECK(gguf_dequantize(t).size() == static_cast<size_t>(t.numel()));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::FuzzInputFile input("fuzz.gguf");
  const std::string& path = input.write(data, size);
  try {
    const GgufFile f = GgufFile::open(path);
    FUZZ_CHECK(f.file_size() == size);
    FUZZ_CHECK(f.version() == 2 || f.version() == 3);
    FUZZ_CHECK(f.alignment() > 0 && (f.alignment() & (f.alignment() - 1)) == 0);
    read_metadata(f);
    read_tensors(f);
  } catch (const Error&) {
    // A refusal is the expected outcome for most inputs.
  }
  return 0;
}

#pragma once
// Reader of GGUF files (llama.cpp's model format, https://github.com/ggml-org/ggml/blob/master/docs/gguf.md),
// versions 2 and 3, little-endian:
//   "GGUF", u32 version, u64 tensor_count, u64 kv_count
//   kv_count times:     string key, u32 value type, value
//   tensor_count times: string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset
//   padding to general.alignment (default 32), then the data section; tensor offsets are relative
//   to it and multiples of the alignment
// where a string is a u64 byte length and the bytes (no terminator), and an ARRAY value is a u32
// element type, a u64 count and the elements (arrays of arrays are refused: no model uses them).
// Like SafetensorsFile, the reader maps the file and checks every size and offset in open(), so a
// GgufTensor handed out always lies inside the file and a hostile file fails with a
// ModelFormatError, never a crash or a huge allocation.
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/ggml_quants.h"

namespace servelab {

enum class GgufValueType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12
};

// "UINT32", "STRING", ...
const char* gguf_value_type_name(GgufValueType type);

struct GgufTensor {
  std::string name;
  GgmlType type;
  std::vector<int64_t> ne;  // GGUF order: ne[0] is the contiguous (input) dimension
  uint64_t offset;          // relative to the data section
  // Points into the mapping; valid while the GgufFile lives (moves keep it valid). Aligned to the
  // file's alignment within the file, but read it through memcpy or ggml_dequantize, not a cast.
  const std::byte* data;
  size_t nbytes;

  int64_t numel() const;
  std::vector<int64_t> shape() const;  // row-major, ne reversed: a matrix is [out, in]
};

class GgufFile {
 public:
  // Maps and validates the file; throws ModelFormatError naming the path and the culprit.
  static GgufFile open(const std::string& path);

  GgufFile(GgufFile&& other) noexcept;
  GgufFile& operator=(GgufFile&& other) noexcept;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  uint32_t version() const { return version_; }      // 2 or 3
  uint64_t alignment() const { return alignment_; }  // general.alignment, or 32 without it

  // Every key to its value: integers as JSON integers, floats as doubles (FLOAT32 widened exactly),
  // booleans, strings as their bytes (not checked to be UTF-8: dump with error_handler_t::replace),
  // arrays as JSON arrays.
  const nlohmann::json& metadata() const { return metadata_; }
  GgufValueType metadata_type(const std::string& key) const;        // ModelFormatError if absent
  GgufValueType metadata_array_type(const std::string& key) const;  // element type; error unless ARRAY
  bool has(const std::string& key) const;

  // Typed getters: ModelFormatError naming the path and key when absent or of another type.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;   // any integer type; UINT64 above INT64_MAX refused
  double get_float(const std::string& key) const;  // FLOAT32 or FLOAT64
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  // nullopt when absent; ModelFormatError when present with another type.
  std::optional<int64_t> find_int(const std::string& key) const;
  std::optional<double> find_float(const std::string& key) const;
  std::optional<std::string> find_string(const std::string& key) const;

  const GgufTensor* find(std::string_view name) const;  // nullptr if absent
  const GgufTensor& at(std::string_view name) const;    // ModelFormatError naming file and tensor if absent
  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order
  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }

 private:
  struct KeyType {
    GgufValueType type;
    GgufValueType array_type;  // meaningful for ARRAY only
  };

  GgufFile() = default;
  void unmap() noexcept;
  const KeyType& key_type(const std::string& key) const;
  [[noreturn]] void wrong_type(const std::string& key, const char* expected) const;

  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;  // GGUF's default, without general.alignment
  nlohmann::json metadata_ = nlohmann::json::object();
  std::map<std::string, KeyType, std::less<>> key_types_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// The whole tensor as fp32, in its row-major order.
std::vector<float> gguf_dequantize(const GgufTensor& tensor);

// How many tensors of each ggml type the file holds ("Q4_1" -> 210).
std::map<std::string, int64_t> gguf_tensor_type_counts(const GgufFile& file);

}  // namespace servelab

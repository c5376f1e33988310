#pragma once
// Reader and writer of the safetensors format (https://github.com/huggingface/safetensors):
//   8 bytes   little-endian u64 N, the length of the JSON header
//   N bytes   JSON object: {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {"key": "value", ...}}  (offsets are relative to the data section)
//   rest      the data section
// The reader maps the file instead of reading it: a GPT-2 checkpoint is hundreds of MB and the
// engine copies each tensor once, onto its device, so a read into a buffer would be a wasted copy.
// Every check of the header happens in open(), so a StTensor handed out is always inside the file.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

enum class StDType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

// Bytes per element.
size_t dtype_size(StDType dtype);
// The name the format uses in its header ("F32", "BF16", ...).
const char* dtype_name(StDType dtype);

struct StTensor {
  std::string name;
  StDType dtype;
  std::vector<int64_t> shape;
  // Points into the mapping; valid while the SafetensorsFile lives (moves keep it valid). Aligned
  // to the dtype only if the file's writer aligned it (ours and Hugging Face's do): copy, don't cast.
  const std::byte* data;
  size_t nbytes;

  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Maps and validates the file; throws ModelFormatError naming the path and the culprit.
  static SafetensorsFile open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const StTensor* find(std::string_view name) const;  // nullptr if absent
  const StTensor& at(std::string_view name) const;    // ModelFormatError naming file and tensor if absent
  const std::vector<StTensor>& tensors() const { return tensors_; }  // in file order of data offsets
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // "__metadata__"
  const std::string& path() const { return path_; }
  size_t file_size() const { return size_; }

 private:
  SafetensorsFile() = default;
  void unmap() noexcept;

  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::vector<StTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

struct StWriteTensor {
  std::string name;
  StDType dtype;
  std::vector<int64_t> shape;
  const void* data;
  size_t nbytes;
};

// Writes the standard layout: 8-byte LE header length, JSON header padded with spaces to a multiple
// of 8, then the tensors back to back, widest dtype first (stable otherwise) so that each one is
// aligned to its element size without gaps, as Hugging Face's writer does (its reader rejects
// gaps). Writes PATH.tmp and renames it over PATH, so a reader never sees a half-written file.
// Throws ModelFormatError for an invalid tensor (bytes not matching the shape, duplicate or reserved
// name) or an I/O failure, naming the path.
void write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace servelab

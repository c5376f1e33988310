#include "model/safetensors_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "util/errors.h"

namespace servelab {
namespace {

using nlohmann::json;

// A real header is a few hundred bytes per tensor; a length above this means the file is not
// safetensors at all (or is corrupt), and we should not try to allocate or parse that much.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

constexpr StDType kAllDTypes[] = {StDType::F64, StDType::F32, StDType::F16, StDType::BF16, StDType::I64,
                                  StDType::I32, StDType::I16, StDType::I8,  StDType::U8,   StDType::BOOL};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw ModelFormatError(path + ": " + what);
}

std::string in_quotes(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string tensor_ref(const std::string& name) { return "tensor " + in_quotes(name); }

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string supported_dtypes() {
  std::string s;
  for (StDType d : kAllDTypes) s += (s.empty() ? "" : ", ") + std::string(dtype_name(d));
  return s;
}

std::optional<StDType> dtype_from_name(std::string_view name) {
  for (StDType d : kAllDTypes)
    if (name == dtype_name(d)) return d;
  return std::nullopt;
}

// JSON text of a value for an error message, shortened so that a huge bogus value stays readable.
std::string json_excerpt(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Element count of a shape, with the overflow check that a hostile header makes necessary.
std::optional<uint64_t> checked_numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return std::nullopt;
  return n;
}

// Non-negative JSON integer; nullopt for anything else (negative, float, string, ...).
// (JSON parsed from text holds non-negative integers as unsigned, JSON built in code as signed.)
std::optional<uint64_t> as_unsigned(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

struct RawEntry {
  StTensor tensor;
  uint64_t begin;
  uint64_t end;
};

RawEntry parse_entry(const std::string& path, const std::string& name, const json& entry) {
  const std::string who = tensor_ref(name);
  if (!entry.is_object()) fail(path, who + ": entry must be a JSON object, got " + json_excerpt(entry));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) fail(path, who + ": missing " + in_quotes(key));

  RawEntry out{};
  out.tensor.name = name;

  const json& dt = entry["dtype"];
  if (!dt.is_string()) fail(path, who + ": \"dtype\" must be a string, got " + json_excerpt(dt));
  const auto dtype = dtype_from_name(dt.get_ref<const std::string&>());
  if (!dtype)
    fail(path, who + ": unknown dtype " + json_excerpt(dt) + " (supported: " + supported_dtypes() + ")");
  out.tensor.dtype = *dtype;

  const json& shape = entry["shape"];
  if (!shape.is_array()) fail(path, who + ": \"shape\" must be an array, got " + json_excerpt(shape));
  for (const json& d : shape) {
    if (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0)
      fail(path, who + ": negative dimension " + std::to_string(d.get<int64_t>()) + " in shape " +
                     json_excerpt(shape));
    const auto dim = as_unsigned(d);
    if (!dim)
      fail(path, who + ": shape " + json_excerpt(shape) + " must hold integers, got " + json_excerpt(d));
    if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(path, who + ": dimension " + std::to_string(*dim) + " overflows int64");
    out.tensor.shape.push_back(static_cast<int64_t>(*dim));
  }
  const auto numel = checked_numel(out.tensor.shape);
  uint64_t expected_bytes = 0;
  if (!numel || __builtin_mul_overflow(*numel, dtype_size(out.tensor.dtype), &expected_bytes) ||
      expected_bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(path, who + ": shape " + json_excerpt(shape) + " overflows (element count too large)");

  const json& offs = entry["data_offsets"];
  if (!offs.is_array() || offs.size() != 2 || !as_unsigned(offs[0]) || !as_unsigned(offs[1]))
    fail(path, who + ": \"data_offsets\" must be [begin, end] with non-negative integers, got " +
                   json_excerpt(offs));
  out.begin = *as_unsigned(offs[0]);
  out.end = *as_unsigned(offs[1]);
  if (out.begin > out.end)
    fail(path, who + ": data_offsets [" + std::to_string(out.begin) + ", " + std::to_string(out.end) +
                   "] has begin > end");
  const uint64_t nbytes = out.end - out.begin;
  if (nbytes != expected_bytes)
    fail(path, who + ": shape " + shape_string(out.tensor.shape) + " of " + dtype_name(out.tensor.dtype) +
                   " needs " + std::to_string(expected_bytes) + " bytes, which does not match the " +
                   std::to_string(nbytes) + " bytes of its data_offsets [" + std::to_string(out.begin) +
                   ", " + std::to_string(out.end) + "]");
  out.tensor.nbytes = static_cast<size_t>(nbytes);
  return out;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& meta) {
  // The format defines __metadata__ as a string-to-string map; anything else is a corrupt header.
  if (!meta.is_object()) fail(path, "\"__metadata__\" must be a JSON object, got " + json_excerpt(meta));
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string())
      fail(path,
           "\"__metadata__\" value of " + in_quotes(key) + " must be a string, got " + json_excerpt(value));
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// Checks that the data section holds every tensor and that no two share bytes. `entries` is
// sorted by offsets. Truncation and a bogus offset look alike (an end past the data); we call it
// truncation when the header is self-consistent (tensors back to back from 0, allowing alignment
// padding), which is what a cut-off download or copy looks like.
void check_layout(const std::string& path, const std::vector<RawEntry>& entries, uint64_t data_start,
                  uint64_t data_size) {
  const RawEntry* prev = nullptr;  // last tensor with bytes; zero-size tensors occupy nothing
  bool back_to_back = true;
  uint64_t max_end = 0;
  for (const RawEntry& e : entries) {
    if (e.begin == e.end) continue;
    if (prev && e.begin < prev->end)
      fail(path, tensor_ref(e.tensor.name) + " [" + std::to_string(e.begin) + ", " + std::to_string(e.end) +
                     "] overlaps " + tensor_ref(prev->tensor.name) + " [" + std::to_string(prev->begin) +
                     ", " + std::to_string(prev->end) + "]");
    const uint64_t prev_end = prev ? prev->end : 0;
    if (e.begin - prev_end >= 8) back_to_back = false;
    max_end = std::max(max_end, e.end);
    prev = &e;
  }
  for (const RawEntry& e : entries) {
    if (e.end <= data_size) continue;
    const std::string overrun = tensor_ref(e.tensor.name) + " data_offsets [" + std::to_string(e.begin) +
                                ", " + std::to_string(e.end) + "] overruns the data section (end " +
                                std::to_string(e.end) + " > " + std::to_string(data_size) + " bytes of data)";
    if (back_to_back)
      fail(path, "file is truncated: expected " + std::to_string(data_start + max_end) + " bytes, actual " +
                     std::to_string(data_start + data_size) + " bytes; " + overrun);
    fail(path, overrun);
  }
}

}  // namespace

size_t dtype_size(StDType dtype) {
  switch (dtype) {
    case StDType::F64:
      return 8;
    case StDType::F32:
      return 4;
    case StDType::F16:
      return 2;
    case StDType::BF16:
      return 2;
    case StDType::I64:
      return 8;
    case StDType::I32:
      return 4;
    case StDType::I16:
      return 2;
    case StDType::I8:
      return 1;
    case StDType::U8:
      return 1;
    case StDType::BOOL:
      return 1;
  }
  return 0;
}

const char* dtype_name(StDType dtype) {
  switch (dtype) {
    case StDType::F64:
      return "F64";
    case StDType::F32:
      return "F32";
    case StDType::F16:
      return "F16";
    case StDType::BF16:
      return "BF16";
    case StDType::I64:
      return "I64";
    case StDType::I32:
      return "I32";
    case StDType::I16:
      return "I16";
    case StDType::I8:
      return "I8";
    case StDType::U8:
      return "U8";
    case StDType::BOOL:
      return "BOOL";
  }
  return "?";
}

int64_t StTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // cannot overflow: open() checked the product
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    fail(path, err == ENOENT ? std::string("not found") : std::string("cannot open: ") + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail(path, "is a directory, expected a .safetensors file");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, "is not a regular file");
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    fail(path, "file is empty (0 bytes), expected a safetensors file");
  }
  if (size < 8) {
    ::close(fd);
    fail(path, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
  }
  // MAP_PRIVATE + PROT_READ: we never write, and a private mapping keeps another process's
  // in-place rewrite of the file from changing tensors under us (page by page, until touched).
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (map == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(map_errno));
  file.map_ = map;
  file.size_ = static_cast<size_t>(size);  // from here on the destructor unmaps, also on throw

  const auto* bytes = static_cast<const unsigned char*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];  // little-endian on any host
  if (header_len > kMaxHeaderBytes)
    fail(path, "header length " + std::to_string(header_len) + " is absurd (limit " +
                   std::to_string(kMaxHeaderBytes) + " bytes); not a safetensors file?");
  if (header_len > size - 8)
    fail(path, "header length " + std::to_string(header_len) + " is larger than the file (" +
                   std::to_string(size) + " bytes, " + std::to_string(size - 8) + " after the length)");

  const char* header_begin = reinterpret_cast<const char*>(bytes + 8);
  json header;
  // nlohmann keeps the last of two equal keys: a tensor named twice would silently load its last
  // copy. The parser's callback sees every key of the top-level object as it comes.
  std::set<std::string> names;
  std::string twice;
  const json::parser_callback_t note_keys = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && twice.empty() &&
        !names.insert(parsed.get<std::string>()).second)
      twice = parsed.get<std::string>();
    return true;
  };
  try {
    header = json::parse(header_begin, header_begin + header_len, note_keys);
  } catch (const json::exception& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!twice.empty()) fail(path, "the header names tensor " + in_quotes(twice) + " twice");
  if (!header.is_object()) fail(path, "header must be a JSON object, got " + json_excerpt(header));

  std::vector<RawEntry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      file.metadata_ = parse_metadata(path, value);
      continue;
    }
    entries.push_back(parse_entry(path, name, value));
  }
  std::stable_sort(entries.begin(), entries.end(), [](const RawEntry& a, const RawEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t data_start = 8 + header_len;
  check_layout(path, entries, data_start, size - data_start);

  const auto* data = reinterpret_cast<const std::byte*>(bytes + data_start);
  file.tensors_.reserve(entries.size());
  for (RawEntry& e : entries) {
    e.tensor.data = data + e.begin;
    file.tensors_.push_back(std::move(e.tensor));
  }
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      tensors_(std::move(other.tensors_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    size_ = std::exchange(other.size_, 0);
    tensors_ = std::move(other.tensors_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { unmap(); }

void SafetensorsFile::unmap() noexcept {
  if (map_) ::munmap(map_, size_);
  map_ = nullptr;
  size_ = 0;
  tensors_.clear();  // their data pointers died with the mapping
}

const StTensor* SafetensorsFile::find(std::string_view name) const {
  // Linear: GPT-2 has ~150 tensors and lookups happen once, at load.
  for (const StTensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const StTensor& SafetensorsFile::at(std::string_view name) const {
  if (const StTensor* t = find(name)) return *t;
  fail(path_,
       "no tensor " + in_quotes(name) + " in this file (" + std::to_string(tensors_.size()) + " tensors)");
}

void write_safetensors(const std::string& path, const std::vector<StWriteTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Validate first, so that a bad tensor leaves no file behind.
  std::set<std::string_view> names;
  for (const StWriteTensor& t : tensors) {
    const std::string who = tensor_ref(t.name);
    if (t.name == "__metadata__") fail(path, who + ": the name is reserved for metadata");
    if (!names.insert(t.name).second) fail(path, who + ": duplicate tensor name");
    for (int64_t d : t.shape)
      if (d < 0) fail(path, who + ": negative dimension in shape " + shape_string(t.shape));
    const auto numel = checked_numel(t.shape);
    uint64_t expected = 0;
    if (!numel || __builtin_mul_overflow(*numel, dtype_size(t.dtype), &expected))
      fail(path, who + ": shape " + shape_string(t.shape) + " overflows");
    if (expected != t.nbytes)
      fail(path, who + ": shape " + shape_string(t.shape) + " of " + dtype_name(t.dtype) + " needs " +
                     std::to_string(expected) + " bytes, which does not match the " +
                     std::to_string(t.nbytes) + " bytes given");
    if (t.nbytes > 0 && t.data == nullptr) fail(path, who + ": data is null");
  }

  std::vector<const StWriteTensor*> order;
  for (const StWriteTensor& t : tensors) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const StWriteTensor* a, const StWriteTensor* b) {
    return dtype_size(a->dtype) > dtype_size(b->dtype);
  });

  json header = json::object();
  uint64_t offset = 0;
  for (const StWriteTensor* t : order) {
    header[t->name] = {
        {"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {offset, offset + t->nbytes}}};
    offset += t->nbytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string header_text;
  try {
    header_text = header.dump();
  } catch (const json::exception& e) {  // e.g. a name that is not valid UTF-8
    fail(path, std::string("cannot encode the header: ") + e.what());
  }
  // Padding with spaces keeps the data section 8-byte aligned in the file (and in a mapping).
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  unsigned char len_bytes[8];
  uint64_t len = header_text.size();
  for (unsigned char& b : len_bytes) {
    b = static_cast<unsigned char>(len & 0xff);
    len >>= 8;
  }

  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(tmp, std::string("cannot create: ") + std::strerror(errno));
    out.write(reinterpret_cast<const char*>(len_bytes), sizeof len_bytes);
    out.write(header_text.data(), static_cast<std::streamsize>(header_text.size()));
    for (const StWriteTensor* t : order)
      if (t->nbytes > 0)
        out.write(static_cast<const char*>(t->data), static_cast<std::streamsize>(t->nbytes));
    out.close();
    if (!out) {
      const int err = errno;
      std::remove(tmp.c_str());
      fail(tmp, std::string("write failed: ") + std::strerror(err));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp.c_str());
    fail(path, std::string("cannot rename ") + tmp + " over it: " + std::strerror(err));
  }
}

}  // namespace servelab

#include "model/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>

#include "util/errors.h"

namespace servelab {
namespace {

using nlohmann::json;

constexpr uint32_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS
constexpr const char* kAlignmentKey = "general.alignment";
// The fewest bytes a key-value pair can take (key length, value type, a 1-byte value) and a
// tensor info (name length, n_dims, one dimension, type, offset): a count beyond what the rest of
// the file could hold at these sizes is corrupt, and is refused before anything is allocated for it.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;
constexpr uint64_t kMaxQuotedBytes = 80;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw ModelFormatError(path + ": " + what);
}

// A name from the file for a message: quoted, control bytes escaped and cut short, so that a
// hostile name cannot forge lines or flood the message.
std::string quote_name(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < kMaxQuotedBytes; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (s.size() > kMaxQuotedBytes) out += "...";
  return out + "\"";
}

std::string key_ref(std::string_view key) { return "key " + quote_name(key); }
std::string tensor_ref(std::string_view name) { return "tensor " + quote_name(name); }

std::string ne_string(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

bool is_integer_type(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
      return true;
    default:
      return false;
  }
}

bool is_float_type(GgufValueType t) { return t == GgufValueType::FLOAT32 || t == GgufValueType::FLOAT64; }

// Bytes a value of this type takes in the file; for a string, the least it can take (its length).
uint64_t min_value_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::UINT8:
    case GgufValueType::INT8:
    case GgufValueType::BOOL:
      return 1;
    case GgufValueType::UINT16:
    case GgufValueType::INT16:
      return 2;
    case GgufValueType::UINT32:
    case GgufValueType::INT32:
    case GgufValueType::FLOAT32:
      return 4;
    case GgufValueType::UINT64:
    case GgufValueType::INT64:
    case GgufValueType::FLOAT64:
    case GgufValueType::STRING:
      return 8;
    case GgufValueType::ARRAY:
      return 4 + 8;
  }
  return 1;
}

// Bounds-checked little-endian reads over the mapped file. Every failure names the file, what is
// being read (`context`: the key or tensor, set by the caller as soon as it is known), the field
// and where, so a truncated or corrupt file says which entry broke.
class ByteCursor {
 public:
  ByteCursor(const std::string& path, const unsigned char* data, uint64_t size)
      : path_(path), data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  void set_context(std::string context) { context_ = std::move(context); }

  [[noreturn]] void fail(const std::string& what) const {
    servelab::fail(path_, context_.empty() ? what : context_ + ": " + what);
  }

  template <typename T>
  T read(const char* field) {
    static_assert(std::is_arithmetic_v<T>);
    using Bits = std::conditional_t<
        sizeof(T) == 1, uint8_t,
        std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
    need(sizeof(T), field);
    Bits bits = 0;
    for (size_t i = sizeof(T); i-- > 0;) bits = static_cast<Bits>((uint64_t{bits} << 8) | data_[pos_ + i]);
    pos_ += sizeof(T);
    return std::bit_cast<T>(bits);
  }

  std::string read_string(const char* field) {
    const auto len = read<uint64_t>(field);
    need(len, field);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  void need(uint64_t n, const char* field) const {
    if (n > remaining())
      fail(std::string(field) + " (" + std::to_string(n) + " bytes at byte " + std::to_string(pos_) +
           ") runs past the end of the file (" + std::to_string(size_) + " bytes): truncated or corrupt");
  }

  const std::string& path_;
  const unsigned char* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string context_;
};

GgufValueType read_value_type(ByteCursor& cur, const char* field) {
  const auto id = cur.read<uint32_t>(field);
  if (id > static_cast<uint32_t>(GgufValueType::FLOAT64))
    cur.fail("unknown value type " + std::to_string(id) + " (GGUF defines 0-12)");
  return static_cast<GgufValueType>(id);
}

json read_scalar(ByteCursor& cur, GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8:
      return cur.read<uint8_t>("UINT8 value");
    case GgufValueType::INT8:
      return cur.read<int8_t>("INT8 value");
    case GgufValueType::UINT16:
      return cur.read<uint16_t>("UINT16 value");
    case GgufValueType::INT16:
      return cur.read<int16_t>("INT16 value");
    case GgufValueType::UINT32:
      return cur.read<uint32_t>("UINT32 value");
    case GgufValueType::INT32:
      return cur.read<int32_t>("INT32 value");
    case GgufValueType::UINT64:
      return cur.read<uint64_t>("UINT64 value");
    case GgufValueType::INT64:
      return cur.read<int64_t>("INT64 value");
    case GgufValueType::FLOAT32:
      return static_cast<double>(cur.read<float>("FLOAT32 value"));
    case GgufValueType::FLOAT64:
      return cur.read<double>("FLOAT64 value");
    case GgufValueType::BOOL: {
      const auto b = cur.read<uint8_t>("BOOL value");
      if (b > 1) cur.fail("BOOL value " + std::to_string(b) + " is neither 0 nor 1");
      return b == 1;
    }
    case GgufValueType::STRING:
      return cur.read_string("string value");
    case GgufValueType::ARRAY:
      break;
  }
  cur.fail("nested arrays are not supported");  // the caller reads arrays; only their elements come here
}

struct KeyValue {
  json value;
  GgufValueType type;
  GgufValueType array_type = GgufValueType::UINT8;
};

KeyValue read_value(ByteCursor& cur) {
  KeyValue kv{json(), read_value_type(cur, "value type")};
  if (kv.type != GgufValueType::ARRAY) {
    kv.value = read_scalar(cur, kv.type);
    return kv;
  }
  kv.array_type = read_value_type(cur, "array element type");
  if (kv.array_type == GgufValueType::ARRAY) cur.fail("nested arrays (an ARRAY of ARRAY) are not supported");
  const auto count = cur.read<uint64_t>("array count");
  const uint64_t per_element = min_value_bytes(kv.array_type);
  if (count > cur.remaining() / per_element)
    cur.fail(
        "array of " + std::to_string(count) + " " + gguf_value_type_name(kv.array_type) + " needs at least " +
        (count > std::numeric_limits<uint64_t>::max() / per_element ? std::string("2^64")
                                                                    : std::to_string(count * per_element)) +
        " bytes, but only " + std::to_string(cur.remaining()) + " remain in the file: truncated or corrupt");
  kv.value = json::array();
  auto& elements = kv.value.get_ref<json::array_t&>();
  elements.reserve(static_cast<size_t>(count));
  for (uint64_t i = 0; i < count; ++i) elements.push_back(read_scalar(cur, kv.array_type));
  return kv;
}

// A tensor info as read, before the data section's position is known.
struct TensorInfo {
  std::string name;
  uint32_t type_id;
  std::vector<int64_t> ne;
  uint64_t offset;
  uint64_t nbytes;
};

TensorInfo read_tensor_info(ByteCursor& cur, uint64_t index, uint64_t count) {
  cur.set_context("tensor info " + std::to_string(index) + " of " + std::to_string(count));
  TensorInfo t{};
  t.name = cur.read_string("name");
  cur.set_context(tensor_ref(t.name));
  const auto n_dims = cur.read<uint32_t>("dimension count");
  if (n_dims == 0 || n_dims > kMaxDims)
    cur.fail(std::to_string(n_dims) + " dimensions (GGUF tensors have 1 to " + std::to_string(kMaxDims) +
             ")");
  uint64_t numel = 1;
  for (uint32_t i = 0; i < n_dims; ++i) {
    const auto d = cur.read<uint64_t>("dimension");
    if (d == 0 || d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      cur.fail("dimension ne[" + std::to_string(i) + "] = " + std::to_string(static_cast<int64_t>(d)) +
               " is not positive");
    t.ne.push_back(static_cast<int64_t>(d));
    if (__builtin_mul_overflow(numel, d, &numel) ||
        numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      cur.fail("shape ne = " + ne_string(t.ne) + "... overflows int64 (element count too large)");
  }
  t.type_id = cur.read<uint32_t>("ggml type");
  if (!ggml_type_supported(t.type_id)) {
    const std::string name = ggml_type_name_of_id(t.type_id);
    cur.fail("unsupported tensor type " +
             (name.starts_with("type ") ? std::to_string(t.type_id) + " (unknown to ggml)"
                                        : name + " (" + std::to_string(t.type_id) + ")") +
             "; supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K");
  }
  const auto type = static_cast<GgmlType>(t.type_id);
  const auto block_values = static_cast<uint64_t>(ggml_block_values(type));
  if (t.ne[0] % static_cast<int64_t>(block_values) != 0)
    cur.fail("row length ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of " +
             ggml_type_name(type) + "'s block of " + std::to_string(block_values) + " values");
  if (__builtin_mul_overflow(numel / block_values, static_cast<uint64_t>(ggml_block_bytes(type)),
                             &t.nbytes) ||
      t.nbytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    cur.fail("shape ne = " + ne_string(t.ne) + " of " + ggml_type_name(type) + " overflows (too many bytes)");
  t.offset = cur.read<uint64_t>("data offset");
  return t;
}

// The file mapped read-only; fails naming the path for anything that is not a readable, non-empty
// regular file.
std::pair<void*, size_t> map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    fail(path, err == ENOENT ? std::string("not found") : std::string("cannot open: ") + std::strerror(err));
  }
  struct stat st {};
  std::string problem;
  if (::fstat(fd, &st) != 0)
    problem = std::string("cannot stat: ") + std::strerror(errno);
  else if (S_ISDIR(st.st_mode))
    problem = "is a directory, expected a .gguf file";
  else if (!S_ISREG(st.st_mode))
    problem = "is not a regular file";
  else if (st.st_size == 0)
    problem = "file is empty (0 bytes), expected a GGUF file";
  if (!problem.empty()) {
    ::close(fd);
    fail(path, problem);
  }
  const auto size = static_cast<size_t>(st.st_size);
  // MAP_PRIVATE + PROT_READ, as SafetensorsFile: we never write, and another process rewriting
  // the file in place does not change the tensors under us.
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (map == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(map_errno));
  return {map, size};
}

void check_header(const std::string& path, const unsigned char* bytes, size_t size) {
  if (size < 4 || std::memcmp(bytes, "GGUF", 4) != 0) {
    std::string got;
    for (size_t i = 0; i < std::min<size_t>(size, 4); ++i) got += static_cast<char>(bytes[i]);
    fail(path, "not a GGUF file: it starts with " + quote_name(got) + ", not the magic \"GGUF\"");
  }
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::UINT8:
      return "UINT8";
    case GgufValueType::INT8:
      return "INT8";
    case GgufValueType::UINT16:
      return "UINT16";
    case GgufValueType::INT16:
      return "INT16";
    case GgufValueType::UINT32:
      return "UINT32";
    case GgufValueType::INT32:
      return "INT32";
    case GgufValueType::FLOAT32:
      return "FLOAT32";
    case GgufValueType::BOOL:
      return "BOOL";
    case GgufValueType::STRING:
      return "STRING";
    case GgufValueType::ARRAY:
      return "ARRAY";
    case GgufValueType::UINT64:
      return "UINT64";
    case GgufValueType::INT64:
      return "INT64";
    case GgufValueType::FLOAT64:
      return "FLOAT64";
  }
  return "?";
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // cannot overflow: open() checked the product
  return n;
}

std::vector<int64_t> GgufTensor::shape() const { return {ne.rbegin(), ne.rend()}; }

GgufFile GgufFile::open(const std::string& path) {
  GgufFile file;
  file.path_ = path;
  const auto [map, size] = map_file(path);
  file.map_ = map;
  file.size_ = size;  // from here on the destructor unmaps, also on throw
  const auto* bytes = static_cast<const unsigned char*>(map);
  check_header(path, bytes, size);

  ByteCursor cur(path, bytes, size);
  cur.read<uint32_t>("magic");
  cur.set_context("header");
  file.version_ = cur.read<uint32_t>("version");
  if (file.version_ != 2 && file.version_ != 3) {
    const uint32_t swapped = __builtin_bswap32(file.version_);
    if (file.version_ > 0xFFFF && swapped >= 1 && swapped <= 3)
      cur.fail("big-endian GGUF is not supported (version field reads " + std::to_string(swapped) +
               " byte-swapped)");
    if (file.version_ == 1)
      cur.fail("GGUF version 1 is not supported (32-bit counts and lengths; only versions 2 and 3 are)");
    cur.fail("unknown GGUF version " + std::to_string(file.version_) + " (supported: 2 and 3)");
  }
  const auto tensor_count = cur.read<uint64_t>("tensor count");
  const auto kv_count = cur.read<uint64_t>("key count");
  if (kv_count > cur.remaining() / kMinKeyValueBytes)
    cur.fail("key count " + std::to_string(kv_count) + " cannot fit in the " +
             std::to_string(cur.remaining()) + " bytes after the header (a key takes at least " +
             std::to_string(kMinKeyValueBytes) + ")");
  if (tensor_count > cur.remaining() / kMinTensorInfoBytes)
    cur.fail("tensor count " + std::to_string(tensor_count) + " cannot fit in the " +
             std::to_string(cur.remaining()) + " bytes after the header (a tensor info takes at least " +
             std::to_string(kMinTensorInfoBytes) + ")");

  for (uint64_t i = 0; i < kv_count; ++i) {
    cur.set_context("key " + std::to_string(i) + " of " + std::to_string(kv_count));
    std::string key = cur.read_string("key name");
    cur.set_context(key_ref(key));
    if (file.key_types_.contains(key)) cur.fail("duplicate key");
    KeyValue kv = read_value(cur);
    file.key_types_.emplace(key, KeyType{kv.type, kv.array_type});
    file.metadata_[std::move(key)] = std::move(kv.value);
  }

  if (file.has(kAlignmentKey)) {
    cur.set_context(key_ref(kAlignmentKey));
    const GgufValueType type = file.metadata_type(kAlignmentKey);
    if (!is_integer_type(type))
      cur.fail(std::string("must be an unsigned integer, got ") + gguf_value_type_name(type));
    const json& v = file.metadata_.at(kAlignmentKey);
    const uint64_t a = v.is_number_unsigned() ? v.get<uint64_t>()
                       : v.get<int64_t>() > 0 ? static_cast<uint64_t>(v.get<int64_t>())
                                              : 0;
    if (a == 0 || !std::has_single_bit(a))
      cur.fail("alignment " + v.dump() + " is not a power of two (and positive)");
    file.alignment_ = a;
  }

  std::vector<TensorInfo> infos;
  infos.reserve(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    infos.push_back(read_tensor_info(cur, i, tensor_count));
    if (!file.tensor_index_.emplace(infos.back().name, i).second) cur.fail("duplicate tensor name");
  }

  // The data section starts at the next multiple of the alignment (no overflow: pos < 2^63 and
  // the alignment a power of two in a uint64).
  const uint64_t data_start = (cur.pos() + file.alignment_ - 1) / file.alignment_ * file.alignment_;
  if (!infos.empty() && data_start > size)
    servelab::fail(path, "file is truncated: the data section would start at byte " +
                             std::to_string(data_start) + ", past the end of the file (" +
                             std::to_string(size) + " bytes)");
  const uint64_t data_size = infos.empty() ? 0 : size - data_start;
  for (const TensorInfo& t : infos) {
    cur.set_context(tensor_ref(t.name));
    if (t.offset % file.alignment_ != 0)
      cur.fail("data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
               std::to_string(file.alignment_));
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      cur.fail("data [" + std::to_string(t.offset) + ", +" + std::to_string(t.nbytes) +
               " bytes) of the data section at byte " + std::to_string(data_start) +
               " runs past the end of the file (" + std::to_string(size) + " bytes): truncated or corrupt");
  }

  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& t : infos) by_offset.push_back(&t);
  std::stable_sort(by_offset.begin(), by_offset.end(),
                   [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    const TensorInfo& t = *by_offset[i];
    if (t.offset < prev.offset + prev.nbytes)  // no overflow: both ends are inside the file
      servelab::fail(path, tensor_ref(t.name) + " [" + std::to_string(t.offset) + ", " +
                               std::to_string(t.offset + t.nbytes) + ") overlaps " + tensor_ref(prev.name) +
                               " [" + std::to_string(prev.offset) + ", " +
                               std::to_string(prev.offset + prev.nbytes) + ") in the data section");
  }

  const auto* data = reinterpret_cast<const std::byte*>(bytes) + data_start;
  file.tensors_.reserve(infos.size());
  for (TensorInfo& t : infos)
    file.tensors_.push_back(GgufTensor{std::move(t.name), static_cast<GgmlType>(t.type_id), std::move(t.ne),
                                       t.offset, data + t.offset, static_cast<size_t>(t.nbytes)});
  return file;
}

GgufFile::GgufFile(GgufFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      version_(other.version_),
      alignment_(other.alignment_),
      metadata_(std::move(other.metadata_)),
      key_types_(std::move(other.key_types_)),
      tensors_(std::move(other.tensors_)),
      tensor_index_(std::move(other.tensor_index_)) {}

GgufFile& GgufFile::operator=(GgufFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    size_ = std::exchange(other.size_, 0);
    version_ = other.version_;
    alignment_ = other.alignment_;
    metadata_ = std::move(other.metadata_);
    key_types_ = std::move(other.key_types_);
    tensors_ = std::move(other.tensors_);
    tensor_index_ = std::move(other.tensor_index_);
  }
  return *this;
}

GgufFile::~GgufFile() { unmap(); }

void GgufFile::unmap() noexcept {
  if (map_) ::munmap(map_, size_);
  map_ = nullptr;
  size_ = 0;
  tensors_.clear();  // their data pointers died with the mapping
  tensor_index_.clear();
}

const GgufFile::KeyType& GgufFile::key_type(const std::string& key) const {
  const auto it = key_types_.find(key);
  if (it == key_types_.end())
    fail(path_,
         "no metadata " + key_ref(key) + " in this file (" + std::to_string(key_types_.size()) + " keys)");
  return it->second;
}

void GgufFile::wrong_type(const std::string& key, const char* expected) const {
  const KeyType& t = key_type(key);
  std::string got = gguf_value_type_name(t.type);
  if (t.type == GgufValueType::ARRAY) got += std::string(" of ") + gguf_value_type_name(t.array_type);
  fail(path_, key_ref(key) + " is " + got + ", expected " + expected);
}

GgufValueType GgufFile::metadata_type(const std::string& key) const { return key_type(key).type; }

GgufValueType GgufFile::metadata_array_type(const std::string& key) const {
  const KeyType& t = key_type(key);
  if (t.type != GgufValueType::ARRAY) wrong_type(key, "an ARRAY");
  return t.array_type;
}

bool GgufFile::has(const std::string& key) const { return key_types_.contains(key); }

std::string GgufFile::get_string(const std::string& key) const {
  if (key_type(key).type != GgufValueType::STRING) wrong_type(key, "a STRING");
  return metadata_.at(key).get<std::string>();
}

int64_t GgufFile::get_int(const std::string& key) const {
  if (!is_integer_type(key_type(key).type)) wrong_type(key, "an integer");
  const json& v = metadata_.at(key);
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    fail(path_, key_ref(key) + ": value " + v.dump() + " does not fit in int64");
  return v.get<int64_t>();
}

double GgufFile::get_float(const std::string& key) const {
  if (!is_float_type(key_type(key).type)) wrong_type(key, "FLOAT32 or FLOAT64");
  return metadata_.at(key).get<double>();
}

bool GgufFile::get_bool(const std::string& key) const {
  if (key_type(key).type != GgufValueType::BOOL) wrong_type(key, "a BOOL");
  return metadata_.at(key).get<bool>();
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const KeyType& t = key_type(key);
  if (t.type != GgufValueType::ARRAY || t.array_type != GgufValueType::STRING)
    wrong_type(key, "an ARRAY of STRING");
  return metadata_.at(key).get<std::vector<std::string>>();
}

std::vector<int64_t> GgufFile::get_int_array(const std::string& key) const {
  const KeyType& t = key_type(key);
  if (t.type != GgufValueType::ARRAY || !is_integer_type(t.array_type))
    wrong_type(key, "an ARRAY of an integer type");
  const json& a = metadata_.at(key);
  std::vector<int64_t> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const json& v = a[i];
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(path_,
           key_ref(key) + ": element " + std::to_string(i) + " = " + v.dump() + " does not fit in int64");
    out.push_back(v.get<int64_t>());
  }
  return out;
}

std::vector<double> GgufFile::get_float_array(const std::string& key) const {
  const KeyType& t = key_type(key);
  if (t.type != GgufValueType::ARRAY || !is_float_type(t.array_type))
    wrong_type(key, "an ARRAY of FLOAT32 or FLOAT64");
  return metadata_.at(key).get<std::vector<double>>();
}

std::optional<int64_t> GgufFile::find_int(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_int(key);
}

std::optional<double> GgufFile::find_float(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_float(key);
}

std::optional<std::string> GgufFile::find_string(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return get_string(key);
}

const GgufTensor* GgufFile::find(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::at(std::string_view name) const {
  if (const GgufTensor* t = find(name)) return *t;
  fail(path_, "no " + tensor_ref(name) + " in this file (" + std::to_string(tensors_.size()) + " tensors)");
}

std::vector<float> gguf_dequantize(const GgufTensor& tensor) {
  std::vector<float> out(static_cast<size_t>(tensor.numel()));
  ggml_dequantize(tensor.type, tensor.data, out.data(), tensor.numel());
  return out;
}

std::map<std::string, int64_t> gguf_tensor_type_counts(const GgufFile& f) {
  std::map<std::string, int64_t> counts;
  for (const GgufTensor& t : f.tensors()) ++counts[ggml_type_name(t.type)];
  return counts;
}

}  // namespace servelab

#pragma once
// GGUF files written byte by byte, for the reader's tests and the model catalog's: little-endian
// fields, key-value pairs of every type, and a small valid file (Crafted) that each test changes one
// thing of.
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "model/gguf_file.h"

namespace servelab::test {

// docs/models.md's test vector: the first Q4_1 block of SmolLM2's blk.0.attn_q.weight.
inline const char kQ4_1Block[] =
    "\x0f\x30\xd8\xb9\x45\x87\x65\x40\x6f\x65\x16\x4b\x67\x76\x64\x50\x22\x67\x65\x5a";
inline std::string block_q4_1() { return std::string(kQ4_1Block, 20); }

// Little-endian bytes, appended field by field.
struct Bytes {
  std::string b;
  template <typename T>
  Bytes& put(T v) {
    static_assert(std::is_arithmetic_v<T>);
    b.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b.append(s);
    return *this;
  }
  Bytes& raw(std::string_view s) {
    b.append(s);
    return *this;
  }
};

// A GGUF v3 header with the given counts.
inline std::string header(uint64_t tensor_count, uint64_t kv_count) {
  return Bytes().raw("GGUF").u32(3).u64(tensor_count).u64(kv_count).b;
}

inline uint32_t vt(GgufValueType t) { return static_cast<uint32_t>(t); }

// One key-value pair: key, value type, the value's bytes as given.
inline std::string kv(std::string_view key, GgufValueType type, const Bytes& value) {
  return Bytes().str(key).u32(vt(type)).raw(value.b).b;
}
inline std::string kv_str(std::string_view key, std::string_view s) {
  return kv(key, GgufValueType::STRING, Bytes().str(s));
}
inline std::string kv_u32(std::string_view key, uint32_t v) {
  return kv(key, GgufValueType::UINT32, Bytes().u32(v));
}

// Typed arrays of metadata.
inline std::string kv_strings(std::string_view key, const std::vector<std::string>& v) {
  Bytes b;
  b.u32(vt(GgufValueType::STRING)).u64(v.size());
  for (const std::string& x : v) b.str(x);
  return kv(key, GgufValueType::ARRAY, b);
}
inline std::string kv_floats(std::string_view key, const std::vector<float>& v) {
  Bytes b;
  b.u32(vt(GgufValueType::FLOAT32)).u64(v.size());
  for (float x : v) b.put(x);
  return kv(key, GgufValueType::ARRAY, b);
}
inline std::string kv_ints(std::string_view key, const std::vector<int32_t>& v) {
  Bytes b;
  b.u32(vt(GgufValueType::INT32)).u64(v.size());
  for (int32_t x : v) b.put(x);
  return kv(key, GgufValueType::ARRAY, b);
}
inline std::string kv_bool(std::string_view key, bool v) {
  return kv(key, GgufValueType::BOOL, Bytes().put(static_cast<uint8_t>(v)));
}

struct CraftedTensor {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type;
  uint64_t offset;
};

// A small valid GGUF file, field by field; each corruption test changes one thing. Its data:
// "a.f32" = 0, 1, ..., 7 and "b.q4_1" = docs/models.md's Q4_1 block twice (two rows of 32).
struct Crafted {
  std::string magic = "GGUF";
  uint32_t version = 3;
  std::optional<uint64_t> tensor_count, kv_count;  // override the counts of the lists below
  std::vector<std::string> kvs = {kv_str("general.architecture", "llama")};
  std::vector<CraftedTensor> tensors = {{"a.f32", {8}, 0, 0}, {"b.q4_1", {32, 2}, 3, 32}};
  uint64_t alignment = 32;
  bool pad = true;  // pad the tensor infos to the alignment
  std::string data = default_data();

  static std::string default_data() {
    Bytes d;
    for (int i = 0; i < 8; ++i) d.put(static_cast<float>(i));
    return d.b + block_q4_1() + block_q4_1();
  }
  std::string head() const {
    return Bytes()
        .raw(magic)
        .u32(version)
        .u64(tensor_count.value_or(tensors.size()))
        .u64(kv_count.value_or(kvs.size()))
        .b;
  }
  std::string metadata() const {
    std::string s;
    for (const std::string& k : kvs) s += k;
    return s;
  }
  static std::string info(const CraftedTensor& t) {
    Bytes b;
    b.str(t.name).u32(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) b.u64(d);
    return b.u32(t.type).u64(t.offset).b;
  }
  std::string infos() const {
    std::string s;
    for (const CraftedTensor& t : tensors) s += info(t);
    return s;
  }
  std::string bytes() const {
    std::string s = head() + metadata() + infos();
    if (pad) s.append((alignment - s.size() % alignment) % alignment, '\0');
    return s + data;
  }
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace servelab::test

#include "model/ggml_quants.h"

#include <array>
#include <bit>
#include <cstring>

#include "util/errors.h"

namespace servelab {
namespace {

constexpr int64_t kQK = 32;    // values per block of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0
constexpr int64_t kQKK = 256;  // values per super-block of the K-quants

// Every type ggml has named, by id (ggml.h; gguf-py's GGMLQuantizationType). Ids ggml removed
// (4, 5, 31-33, 36-38) have no entry, so a file using one reads as an unknown type.
struct KnownType {
  uint32_t id;
  const char* name;
};
constexpr KnownType kKnownTypes[] = {
    {0, "F32"},     {1, "F16"},    {2, "Q4_0"},     {3, "Q4_1"},    {6, "Q5_0"},     {7, "Q5_1"},
    {8, "Q8_0"},    {9, "Q8_1"},   {10, "Q2_K"},    {11, "Q3_K"},   {12, "Q4_K"},    {13, "Q5_K"},
    {14, "Q6_K"},   {15, "Q8_K"},  {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"},
    {20, "IQ4_NL"}, {21, "IQ3_S"}, {22, "IQ2_S"},   {23, "IQ4_XS"}, {24, "I8"},      {25, "I16"},
    {26, "I32"},    {27, "I64"},   {28, "F64"},     {29, "IQ1_M"},  {30, "BF16"},    {34, "TQ1_0"},
    {35, "TQ2_0"},  {39, "MXFP4"}, {40, "NVFP4"},   {41, "Q1_0"}};

struct TypeTraits {
  const char* name;
  int64_t block_values;
  int64_t block_bytes;
};

TypeTraits traits(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
      return {"F32", 1, 4};
    case GgmlType::F16:
      return {"F16", 1, 2};
    case GgmlType::BF16:
      return {"BF16", 1, 2};
    case GgmlType::Q4_0:
      return {"Q4_0", kQK, 2 + kQK / 2};
    case GgmlType::Q4_1:
      return {"Q4_1", kQK, 2 + 2 + kQK / 2};
    case GgmlType::Q5_0:
      return {"Q5_0", kQK, 2 + 4 + kQK / 2};
    case GgmlType::Q5_1:
      return {"Q5_1", kQK, 2 + 2 + 4 + kQK / 2};
    case GgmlType::Q8_0:
      return {"Q8_0", kQK, 2 + kQK};
    case GgmlType::Q4_K:
      return {"Q4_K", kQKK, 2 + 2 + 12 + kQKK / 2};
    case GgmlType::Q5_K:
      return {"Q5_K", kQKK, 2 + 2 + 12 + kQKK / 8 + kQKK / 2};
    case GgmlType::Q6_K:
      return {"Q6_K", kQKK, kQKK / 2 + kQKK / 4 + kQKK / 16 + 2};
  }
  return {"?", 1, 1};
}

// Little-endian loads byte by byte: callers may pass any address (reading a uint16_t through a cast
// pointer would be undefined behaviour at an odd one).
uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
float load_fp16(const uint8_t* p) { return fp16_to_fp32(load_u16(p)); }

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K super-block (llama.cpp's get_scale_min_k4):
// the first four pairs sit in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); the last four are
// a nibble of bytes 8-11 topped up with the 2 spare high bits of bytes 0-7.
void scale_min_k4(int j, const uint8_t* q, uint8_t& scale, uint8_t& min) {
  if (j < 4) {
    scale = q[j] & 63;
    min = q[j + 4] & 63;
  } else {
    scale = static_cast<uint8_t>((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    min = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void block_q4_0(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + kQK / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void block_q4_1(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  const float m = load_fp16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0F) * d + m;
    y[j + kQK / 2] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

// Q5_0/Q5_1: value j's code is its nibble (byte j's low one, or byte j - 16's high one) with bit j
// of the 32-bit word qh as its fifth bit.
uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
int q5_code(const uint8_t* qh, const uint8_t* qs, int j) {
  const uint32_t h = load_u32(qh);
  const int nibble = j < kQK / 2 ? qs[j] & 0x0F : qs[j - kQK / 2] >> 4;
  return nibble | static_cast<int>(((h >> j) & 1u) << 4);
}

void block_q5_0(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q5_code(b + 2, b + 6, j) - 16) * d;
}

void block_q5_1(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  const float m = load_fp16(b + 2);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(q5_code(b + 4, b + 8, j)) * d + m;
}

void block_q8_0(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

// Q4_K: fp16 d, fp16 dmin, 12 bytes of packed scales/mins, 128 bytes of nibbles. Each 32 bytes of
// nibbles hold two sub-blocks: the low nibbles the first 32 values, the high nibbles the next 32.
void block_q4_k(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  const float dmin = load_fp16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int is = 0; is < 8; is += 2, q += 32) {
    uint8_t sc = 0, m = 0;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K: as Q4_K, with a fifth bit per value in qh[32]: bit 2k of qh[l] tops up value l of the
// sub-block pair k's low nibbles, bit 2k+1 that of its high nibbles.
void block_q5_k(const uint8_t* b, float* y) {
  const float d = load_fp16(b);
  const float dmin = load_fp16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int is = 0; is < 8; is += 2, ql += 32) {
    uint8_t sc = 0, m = 0;
    scale_min_k4(is, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(is + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0x0F) + (qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    u1 = static_cast<uint8_t>(u1 << 2);
    u2 = static_cast<uint8_t>(u2 << 2);
  }
}

// Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], fp16 d; two halves of 128
// values, each from 64 bytes of ql and 32 of qh, in four runs of 32 values with a scale per 16.
void block_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_fp16(b + 208);
  for (int half = 0; half < 2; ++half, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      // (d * scale) * q, in that order, as llama.cpp's `d * sc[is] * q1` and numpy compute it.
      y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

template <typename BlockFn>
void for_each_block(const uint8_t* src, float* dst, int64_t blocks, int64_t block_bytes, int64_t block_values,
                    BlockFn fn) {
  for (int64_t i = 0; i < blocks; ++i) fn(src + i * block_bytes, dst + i * block_values);
}

}  // namespace

void ggml_q5_0_codes(const std::byte* block, int8_t* codes, float* scale) {
  const auto* b = reinterpret_cast<const uint8_t*>(block);
  *scale = load_fp16(b);
  for (int j = 0; j < kQK; ++j) codes[j] = static_cast<int8_t>(q5_code(b + 2, b + 6, j) - 16);
}

void ggml_q4_k_groups(const std::byte* block, uint8_t* codes, float* scale, float* minimum) {
  const auto* b = reinterpret_cast<const uint8_t*>(block);
  const float d = load_fp16(b);
  const float dmin = load_fp16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int is = 0; is < 8; is += 2, q += 32) {
    for (int half = 0; half < 2; ++half) {
      uint8_t sc = 0, m = 0;
      scale_min_k4(is + half, scales, sc, m);
      scale[is + half] = d * sc;
      minimum[is + half] = -(dmin * m);
      for (int l = 0; l < 32; ++l) *codes++ = static_cast<uint8_t>(half ? q[l] >> 4 : q[l] & 0x0F);
    }
  }
}

void ggml_q6_k_groups(const std::byte* block, int8_t* codes, float* scale) {
  const auto* b = reinterpret_cast<const uint8_t*>(block);
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_fp16(b + 208);
  for (int half = 0; half < 2; ++half, codes += 128, ql += 64, qh += 32, sc += 8, scale += 8) {
    for (int l = 0; l < 32; ++l) {
      codes[l + 0] = static_cast<int8_t>(((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32);
      codes[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32);
      codes[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      codes[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
    // Values 16 j .. 16 j + 15 of this half take sc[j]: block_q6_k's sc[is + 2 k] for value l + 32 k,
    // is = l / 16.
    for (int j = 0; j < 8; ++j) scale[j] = d * static_cast<float>(sc[j]);
  }
}

float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  uint32_t bits = 0;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13);  // infinity, or NaN with its payload
  } else if (exp != 0) {
    bits = sign | ((exp + (127 - 15)) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal half, a normal float: shift the mantissa up to its implicit bit.
    uint32_t e = 127 - 15 + 1;
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((man & 0x3FFu) << 13);
  }
  return std::bit_cast<float>(bits);
}

bool ggml_type_supported(uint32_t id) {
  switch (static_cast<GgmlType>(id)) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q8_0:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::BF16:
      return true;
  }
  return false;
}

const char* ggml_type_name(GgmlType type) { return traits(type).name; }

std::string ggml_type_name_of_id(uint32_t id) {
  for (const KnownType& t : kKnownTypes)
    if (t.id == id) return t.name;
  return "type " + std::to_string(id);
}

int64_t ggml_block_values(GgmlType type) { return traits(type).block_values; }

int64_t ggml_block_bytes(GgmlType type) { return traits(type).block_bytes; }

void ggml_dequantize(GgmlType type, const std::byte* src, float* dst, int64_t n) {
  const TypeTraits t = traits(type);
  if (!ggml_type_supported(static_cast<uint32_t>(type)))
    throw InputError("ggml_dequantize: unsupported type " +
                     ggml_type_name_of_id(static_cast<uint32_t>(type)));
  if (n < 0 || n % t.block_values != 0)
    throw InputError("ggml_dequantize: " + std::to_string(n) + " values of " + t.name +
                     " is not a whole number of blocks of " + std::to_string(t.block_values));
  const auto* s = reinterpret_cast<const uint8_t*>(src);
  const int64_t blocks = n / t.block_values;
  switch (type) {
    case GgmlType::F32:
      if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = load_fp16(s + 2 * i);
      return;
    case GgmlType::BF16:
      // bf16 is the top half of a float: widening is exact, NaNs included.
      for (int64_t i = 0; i < n; ++i)
        dst[i] = std::bit_cast<float>(static_cast<uint32_t>(load_u16(s + 2 * i)) << 16);
      return;
    case GgmlType::Q4_0:
      return for_each_block(s, dst, blocks, t.block_bytes, t.block_values, block_q4_0);
    case GgmlType::Q4_1:
      return for_each_block(s, dst, blocks, t.block_bytes, t.block_values, block_q4_1);
    case GgmlType::Q5_0:
      return for_each_block(s, dst, blocks, t.block_bytes, t.block_values, block_q5_0);
    case GgmlType::Q5_1:
      return for_each_block(s, dst, blocks, t.block_bytes, t.block_values, block_q5_1);
    case GgmlType::Q8_0:
      return for_each_block(s, dst, blocks, t.block_bytes, t.block_values, block_q8_0);
    case GgmlType::Q4_K:
      return for_each_block(s, dst, blocks, t.block_bytes, t.block_values, block_q4_k);
    case GgmlType::Q5_K:
      return for_each_block(s, dst, blocks, t.block_bytes, t.block_values, block_q5_k);
    case GgmlType::Q6_K:
      return for_each_block(s, dst, blocks, t.block_bytes, t.block_values, block_q6_k);
  }
}

}  // namespace servelab

#pragma once
// The ggml tensor types a GGUF file may hold, and their dequantization to fp32.
//
// A quantized row of n values is n / block_values consecutive blocks of block_bytes each (blocks
// never span rows); the layouts are those of llama.cpp's ggml-common.h, all little-endian:
//   Q4_0  18 bytes / 32 values:  fp16 d, 16 bytes of nibbles         v = (q - 8) * d
//   Q4_1  20 bytes / 32 values:  fp16 d, fp16 m, 16 bytes of nibbles v = q * d + m
//   Q5_0  22 bytes / 32 values:  fp16 d, 32 high bits, 16 bytes of nibbles   v = (q - 16) * d
//   Q5_1  24 bytes / 32 values:  fp16 d, fp16 m, 32 high bits, 16 bytes      v = q * d + m
//   Q8_0  34 bytes / 32 values:  fp16 d, int8 q[32]                  v = q * d
//         (nibbles: value j < 16 is byte j's low nibble, value j + 16 its high one; Q5's fifth
//         bit of value j is bit j of the little-endian 32-bit word before them)
//   Q4_K 144 bytes / 256 values, Q5_K 176, Q6_K 210: super-blocks of 8 (16 for Q6_K) sub-blocks, each
//         with its own 6-bit (8-bit for Q6_K) scale, under one or two fp16 super-scales.
// ggml_dequantize computes exactly what llama.cpp's dequantize_row_* and the gguf package's numpy
// port compute, bit for bit, whatever the order of operations or FMA contraction: a product of an
// fp16 scale (11 significant bits), a sub-block scale and a quant needs at most 23 of float's 24
// bits (Q6_K: 11 + 7 + 5), so every product is exact and a value is rounded at most once, by the
// final add of Q4_1's and the K-quants' offsets.
#include <cstddef>
#include <cstdint>
#include <string>

namespace servelab {

// The numeric ids are ggml's (ggml.h), as stored in a GGUF tensor info.
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  BF16 = 30
};

// Whether the numeric id is one of the types above (the reader refuses the others by name where
// ggml knows them, e.g. "Q5_0 (6)", else by number).
bool ggml_type_supported(uint32_t id);
// "Q4_1", "F32", ...
const char* ggml_type_name(GgmlType type);
// The name of any type ggml knows, supported here or not ("Q5_0", "IQ2_XXS", ...); "type 99" otherwise.
std::string ggml_type_name_of_id(uint32_t id);
// Values per block: 1 for F32/F16/BF16, 32 for Q4_0/Q4_1/Q5_0/Q5_1/Q8_0, 256 for the K-quants.
int64_t ggml_block_values(GgmlType type);
// Bytes per block: 4, 2, 2 (BF16), 18 (Q4_0), 20 (Q4_1), 22 (Q5_0), 24 (Q5_1), 34 (Q8_0), 144 (Q4_K),
// 176 (Q5_K), 210 (Q6_K).
int64_t ggml_block_bytes(GgmlType type);

// Dequantizes n values of `type` from src into dst (fp32). n must be a non-negative multiple of the
// block size (InputError otherwise); src holds n / block_values blocks and needs no alignment.
void ggml_dequantize(GgmlType type, const std::byte* src, float* dst, int64_t n);

// The K-quant blocks as groups of plain codes, for kernels that read int4 or int8 groups (quant/
// quantized_llama.h's ggml_as_stored), with every value q * scale + minimum (or q * scale) equal bit
// for bit to ggml_dequantize's:
// - Q4_K: 256 codes 0..15 in value order, and per sub-block of 32 its scale d * sc and its minimum
//   -(dmin * m) (ggml's d1 * q - m1 is d1 * q + (-m1) exactly);
// - Q6_K: 256 codes -32..31, and per sub-block of 16 its scale d * sc (ggml's d * sc * q multiplies
//   in that order: (d * sc) * q).
// - Q5_0: 32 codes -16..15, under the block's d.
// block: one block's bytes (ggml_block_bytes), no alignment needed.
void ggml_q5_0_codes(const std::byte* block, int8_t* codes, float* scale);
void ggml_q4_k_groups(const std::byte* block, uint8_t* codes, float* scale, float* minimum);
void ggml_q6_k_groups(const std::byte* block, int8_t* codes, float* scale);

// IEEE half to float, exactly (subnormals, infinities, NaN payloads kept).
float fp16_to_fp32(uint16_t h);

}  // namespace servelab

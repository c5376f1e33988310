#pragma once
// Decode attention on the CPU: one new query per row over that row's cached keys and values, read
// in place (no gathered copy of the context per step), for every KV memory: the dense cache and
// slot KV (a strided [rows, H_kv, S, D] view of the cache) and paged KV (blocks through a table).
// Grouped-query heads share their KV head's reads. At a batch's decode step this is the other big
// reader of memory beside the weights (32 rows of 190 positions read 280 MB of fp32 K/V per step
// of SmolLM2), which libtorch's SDPA read at about half the bandwidth.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace servelab {

// Whether dense_decode_attention_cpu takes these operands: CPU tensors, one query per row, whole
// KV head groups, unit stride along D, equal K and V strides, a bool mask or none.
bool dense_decode_attention_applies(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                                    const at::Tensor& mask);

// q [B, H, 1, D]; keys, values [R, H_kv, S, D] (a narrowed view of a cache is read in place);
// kv_rows: int64 [B], the K/V row each query row reads (undefined: row b reads row b); mask:
// undefined (every key visible) or bool [R or 1, 1, 1, S], true where a key is visible. Returns
// softmax(q k^T * scale) v as [B, H, 1, D] in q's dtype, scores and sums in fp32; a row that sees
// no key gets zeros.
at::Tensor dense_decode_attention_cpu(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                                      const at::Tensor& mask, const at::Tensor& kv_rows, double scale);

// One (query row, KV head) item of dense_decode_attention_cpu over fp32 keys and values, for a
// caller that runs its own threads (model/decode_program): position p of the item sits at
// base + p * position_stride in both buffers and is visible where mask is null or
// mask[p * mask_stride] is true; q_group [G, D] are the query heads that share this KV head, out
// [G, D] their results; scores: scratch of G * (L + 16) floats. The same loops, so the same bits.
void decode_attention_item_f32(const float* q_group, int64_t G, int64_t D, const float* keys,
                               const float* values, int64_t base, int64_t position_stride, const bool* mask,
                               int64_t mask_stride, int64_t L, float scale, float* scores, float* out);

// The same over positions anywhere: position p at offsets[p] + head_offset in both buffers, every
// one visible (a KvStore's places, model.h). The loops paged_decode_attention_cpu runs, so for the
// same addresses the same bits.
void decode_attention_item_f32_at(const float* q_group, int64_t G, int64_t D, const float* keys,
                                  const float* values, const int64_t* offsets, int64_t head_offset, int64_t L,
                                  float scale, float* scores, float* out);

// Every row's positions as pool slots, its block table walked once: row b's positions
// 0..length(b)-1 sit at slots[first[b] + p]. Built once per decode step and read by every layer
// (the in-place kernel, the gather baseline). Throws InputError when a table is shorter than its
// row's length.
struct PagedPositions {
  std::vector<int64_t> slots, first;  // first: B + 1 offsets into slots
  int64_t rows() const { return static_cast<int64_t>(first.size()) - 1; }
  int64_t length(int64_t b) const {
    return first[static_cast<size_t>(b) + 1] - first[static_cast<size_t>(b)];
  }
};
PagedPositions paged_positions(const std::vector<const std::vector<int64_t>*>& tables,
                               const std::vector<int64_t>& lengths, int64_t block_size);

// q [B, H, 1, D]; keys and values: one layer of the pool, [blocks * block_size, H_kv, D]
// contiguous; positions: the B rows' slots (the new position included). Returns [B, H, 1, D] as
// above.
at::Tensor paged_decode_attention_cpu(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                                      const PagedPositions& positions, double scale);

// The loops the active ISA runs for keys of this dtype and head size ("AVX-512 fp32", "portable
// loops (avx2 target)", ...), for `info` and the benchmarks.
std::string decode_attention_kernel(at::ScalarType keys, int64_t head_dim);

}  // namespace servelab

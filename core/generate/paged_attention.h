#pragma once
// Decode attention over paged KV on the CPU, reading each request's keys and values in place
// through its block table: no gathered copy of the context per step.
#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace servelab {

// q [B, H, 1, D]; keys and values: one layer of the pool, [blocks * block_size, H_kv, D]
// contiguous, on the CPU; tables[b]: row b's block ids, lengths[b]: its positions (the new one
// included). Returns softmax(q k^T * scale) v as [B, H, 1, D] in q's dtype, scores and sums in fp32
// (H a multiple of H_kv: grouped-query heads share their KV head's reads).
at::Tensor paged_decode_attention_cpu(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                                      const std::vector<const std::vector<int64_t>*>& tables,
                                      const std::vector<int64_t>& lengths, int64_t block_size, double scale);

}  // namespace servelab

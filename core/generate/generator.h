#pragma once
// Single and static-batch (left-padded) generation, with or without the KV cache.
#include <ATen/ATen.h>

#include <atomic>
#include <string>
#include <vector>

#include "generate/generation.h"
#include "generate/sampling.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace servelab {

// A batch laid out the way the course does it: pad = EOS on the left, attention_mask 1 for real
// tokens, position_ids = cumsum(mask) - 1 with padding positions set to 1.
struct PaddedBatch {
  at::Tensor input_ids;       // [batch, len] int64
  at::Tensor attention_mask;  // [batch, len] int64
  at::Tensor position_ids;    // [batch, len] int64
};
PaddedBatch left_padded_batch(const std::vector<std::vector<int32_t>>& prompts, int32_t pad_id);

}  // namespace servelab

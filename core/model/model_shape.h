#pragma once
// What every face and experiment needs to know of a model's shape, whatever its architecture.
// Torch-free: the GUI reads it through Engine.
#include <cstdint>
#include <string>
#include <vector>

namespace servelab {

struct ModelShape {
  std::string architecture;  // "gpt2" or "llama"
  int64_t n_layer = 0;
  int64_t n_embd = 0;     // width of the residual stream
  int64_t n_head = 0;     // query heads
  int64_t n_kv_head = 0;  // key/value heads (fewer than n_head with grouped-query attention)
  int64_t head_dim = 0;
  int64_t n_inner = 0;        // width of the MLP's hidden layer
  int64_t vocab_size = 0;     // rows of the embedding (may exceed the tokenizer's vocabulary)
  int64_t context = 0;        // positions the model can attend over
  int64_t bos_token_id = -1;  // -1: none
  int64_t eos_token_id = -1;  // -1: none
  // Every end-of-generation id config.json declares (its eos_token_id list; the first is
  // eos_token_id): generation stops on each.
  std::vector<int64_t> eos_token_ids;

  // Bytes of keys and values one token takes in the cache, over every layer.
  int64_t kv_bytes_per_token(int64_t dtype_bytes) const {
    return 2 * n_layer * n_kv_head * head_dim * dtype_bytes;
  }
};

}  // namespace servelab

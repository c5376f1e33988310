#pragma once
// Paged KV memory (vLLM's PagedAttention): one pool of blocks for every layer, keys and values at
// [layer][block * block_size + offset, kv_heads, head_dim], and a block table per request kept by
// the BlockManager. A prefill computes only the positions its prefix cache did not have (the
// cached blocks' keys and values are reused as they are, the new positions attend to them); a
// decode step writes one position per request into its current block and attends through the
// block table, on the CPU with a kernel that reads the blocks in place.
#include <map>
#include <utility>

#include "generate/block_manager.h"
#include "generate/kv_memory_manager.h"
#include "model/decode_attention.h"

namespace servelab {

class PagedKvMemory : public KvMemoryManager, private KvStore {
 public:
  PagedKvMemory(const Model& model, const PagedKvConfig& config, int32_t pad_id);

  at::Tensor extend(const std::vector<StepSegment>& segments) override;
  bool extends() const override { return true; }
  at::Tensor decode(const std::vector<int64_t>& ids, const std::vector<int32_t>& tokens) override;
  void retire(const std::vector<int64_t>& ids) override;
  int64_t slot_of(int64_t id) const override;
  int64_t bytes() const override { return pool_bytes_; }

  bool reserve(const PrefillRequest& r) override;
  std::string never_fits(const PrefillRequest& r) const override;
  int64_t cached_tokens(int64_t id) const override;
  int64_t computed(int64_t id) const override;
  void commit(int64_t id, int64_t positions) override;
  bool grow(int64_t id, int32_t token) override;
  bool grow_tokens(int64_t id, const std::vector<int32_t>& tokens) override;
  // Blocks past the positions go back to the pool; a block cut into leaves the prefix cache.
  void truncate(int64_t id, int64_t positions) override;
  Usage usage() const override;
  void snapshot_blocks(BatchStep& step) const override;

  const BlockManager& blocks() const { return blocks_; }
  // Bytes of one block: keys and values of block_size positions at every layer.
  int64_t block_bytes() const { return block_bytes_; }
  // The decode attention in use (Auto resolved).
  PagedAttentionKernel kernel() const { return kernel_; }
  // The last extend's forward input, [rows, width] positions (padding included): what its linear
  // layers computed over.
  std::pair<int64_t, int64_t> last_prefill_shape() const { return last_prefill_shape_; }

 private:
  struct Request {
    int64_t computed = 0;  // positions whose keys and values are written
    int64_t cached = 0;    // of the prompt, found in the prefix cache
    int64_t place = 0;     // batch place, for the Gantt chart
  };
  // KvStore: stores this forward's keys and values at the rows' slots, then attends.
  at::Tensor attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const AttentionParams& params) override;
  // The pool slots of positions [from, to) of a request, as an int64 tensor on the model's device.
  at::Tensor slots(int64_t id, int64_t from, int64_t to) const;

  const Model& model_;
  int32_t pad_;
  BlockManager blocks_;
  PagedAttentionKernel kernel_;
  int64_t block_bytes_ = 0, pool_bytes_ = 0;
  at::Tensor keys_, values_;  // [layers, blocks * block_size, kv_heads, head_dim]
  std::map<int64_t, Request> requests_;
  std::vector<bool> place_used_;

  // The forward in flight (set by extend/decode for attend()).
  struct Pass {
    bool decode = false;
    std::vector<int64_t> ids;
    std::vector<int64_t> start, count;  // per request: first position written, positions written
    at::Tensor write_rows;              // [positions written] rows of k.view(B * T, ...) to store;
                                        // undefined: every row, in order (a decode step)
    at::Tensor write_slots;             // [positions written] their pool slots
    // Extend: per request, its input row and the column its first new position sits at (requests
    // are packed end to end), and the slots of its positions [0, start + count).
    std::vector<int64_t> row, column;
    std::vector<at::Tensor> read_slots;
    // Decode: every row's positions as pool slots (once per step, for every layer), read in place;
    // for the gather baseline, the same slots padded to [B, width] and the key mask [B, 1, 1, width].
    PagedPositions positions;
    // Per attention window (0: none; Gemma's layers alternate), the positions each row attends
    // to, and the gathered slots [B * width] and key mask [B, 1, 1, width] of the gather path;
    // built by the first layer that asks.
    std::map<int64_t, PagedPositions> windowed;
    std::map<int64_t, std::pair<at::Tensor, at::Tensor>> gathered;
  };
  // KvStore: the pool's slots of each request's positions, where the in-place kernel would read
  // them (not under the gather baseline, which attend() must run to be measured).
  bool places(KvPlaces& out) const override;
  // The decode step's positions under a window (all of them for 0): each row's last `window`.
  const PagedPositions& decode_positions(int64_t window);
  // Them as the gather path's slots and mask.
  const std::pair<at::Tensor, at::Tensor>& decode_gather(int64_t window);
  Pass pass_;
  std::pair<int64_t, int64_t> last_prefill_shape_{0, 0};
};

}  // namespace servelab

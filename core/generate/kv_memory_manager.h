#pragma once
// The KV memory of continuous batching, and the model runs over it. The scheduler decides who
// runs; a KvMemoryManager owns the running requests' caches and executes a step's prefill and
// decode over them (vLLM's block manager and model runner, for one layout each).
#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "generate/continuous_batching.h"
#include "generate/kv_bookkeeping.h"
#include "lora/multi_lora.h"
#include "model/decode_graph_stats.h"
#include "model/model.h"

namespace servelab {

// One request's share of a forward pass over several tokens per row: `tokens` take the request's
// next positions [computed(id), computed(id) + tokens.size()) and attend causally to everything
// it holds before them. A whole uncached prompt, a prompt chunk (chunked prefill), or several
// tokens of a decoding request (speculative verification).
struct StepSegment {
  enum class Logits {
    None,  // a prompt chunk that ends before its prompt does: nothing to sample from
    Last,  // the next-token logits after the segment
    All,   // one row per new position (verification of proposed tokens)
  };
  int64_t id = 0;
  std::vector<int32_t> tokens;
  Logits logits = Logits::Last;
};

struct PagedKvConfig {
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  bool prefix_caching = true;
  PagedAttentionKernel kernel = PagedAttentionKernel::Auto;
};

class KvMemoryManager : public KvBookkeeping {
 public:
  // Gives each admitted request its KV memory (reserve()) and runs the positions its prefix cache
  // does not hold in one forward pass: next-token logits [admitted, vocab], rows in the order
  // given. The default commits every prompt whole, then extend()s their uncached suffixes.
  virtual at::Tensor prefill(const std::vector<PrefillRequest>& admitted);
  // One forward pass over several new tokens of several reserved requests (StepSegment): logits
  // of the positions each segment asks for, segments in order, [rows, vocab] (no rows: an
  // undefined tensor). InputError from a layout that cannot (the course's merge/filter).
  virtual at::Tensor extend(const std::vector<StepSegment>& segments);
  // Whether extend() runs (the course's merge/filter runs whole prompts only).
  virtual bool extends() const { return false; }
  // One forward pass that feeds every listed request its last token: logits [ids, vocab] in the
  // order of ids. Requests not listed (finished this step) may hold memory but take no token.
  virtual at::Tensor decode(const std::vector<int64_t>& ids, const std::vector<int32_t>& tokens) = 0;
  // The batch place a request runs in, for the Gantt chart.
  virtual int64_t slot_of(int64_t id) const = 0;
  // KV bytes held now.
  virtual int64_t bytes() const = 0;
  // Leading prompt positions a reserved request found in the prefix cache.
  virtual int64_t cached_tokens(int64_t /*id*/) const { return 0; }
  struct Usage {
    int64_t reserved_bytes = 0;  // held for requests now: their slots or blocks
    int64_t used_bytes = 0;      // holding cached positions (distinct positions: shared blocks once)
    int64_t total_bytes = 0;     // the whole cache or pool
    int64_t blocks_used = 0, blocks_cached = 0, blocks_total = 0;  // paged only
  };
  virtual Usage usage() const = 0;
  // What this memory's decode CUDA graphs did, when it has any (slot KV on a GPU).
  virtual const DecodeGraphStats* graph_stats() const { return nullptr; }
  // Paged: copies the block tables and cached blocks into step (BatchStep::kv_block_tables); the
  // other layouts have no blocks.
  virtual void snapshot_blocks(BatchStep& /*step*/) const {}

  // KV memory copied from one place to another since the last call: bytes, and the
  // device-synchronised milliseconds the copies took. Writing a new token's key and value is not
  // a copy; moving cached positions between caches is.
  struct CopyStats {
    int64_t bytes = 0;
    double ms = 0;
  };
  CopyStats take_copy_stats() { return std::exchange(copied_, CopyStats{}); }

  // Adapters per request (continuous batching with LoRA): every forward pass gives each of its
  // rows its request's adapter (null: the base model). For the gathered strategy, stack() holds
  // every adapter a request may have.
  struct LoraRouting {
    std::function<const LoraAdapter*(int64_t id)> adapter_of;
    MultiLoraStrategy strategy = MultiLoraStrategy::Segmented;
    std::function<std::shared_ptr<const LoraStack>()> stack;
  };
  void set_lora(LoraRouting routing) { lora_ = std::move(routing); }

 protected:
  // The segments of an extend() packed end to end into as few input rows as possible (one per
  // adapter, each at most `width_limit` long), as vLLM flattens a step's tokens: padding one row
  // per request to the longest would run the linear layers over every row's padding.
  struct Packed {
    at::Tensor input_ids, position_ids;  // [rows, width] on the CPU (padding: pad id, position 0)
    at::Tensor logit_positions;          // into the flattened [rows * width] positions
    std::vector<int64_t> row, column;    // per segment: its input row and first column
    std::vector<int64_t> start;          // per segment: its first position (computed() before)
    std::vector<int64_t> row_request;    // per input row: a request of its adapter (LoRA routing)
  };
  Packed pack(const std::vector<StepSegment>& segments, int32_t pad, int64_t width_limit) const;
  // The model's forward over a packed step, attending through `store`: the logits the segments ask
  // for, or an undefined tensor when none asks (prompt chunks that all end mid-prompt still project
  // one position, dropped).
  at::Tensor forward_packed(const Model& model, const Packed& packed, KvStore* store) const;
  // dst.copy_(src), counted.
  void copy_kv(const at::Tensor& dst, const at::Tensor& src);
  // The LoRA rows of a forward pass whose input rows belong to these requests (-1: a padding
  // row); empty when no row has an adapter.
  std::optional<LoraBatch> lora_rows(const std::vector<int64_t>& ids) const;
  // The adapter a request runs with (null: the base model, or no adapters in this run).
  const LoraAdapter* adapter_of(int64_t id) const {
    return lora_.adapter_of ? lora_.adapter_of(id) : nullptr;
  }

 private:
  CopyStats copied_;
  LoraRouting lora_;
};

// slots: the most requests at once; capacity: positions the longest request needs; paged: the
// pool (num_blocks 0: slots x capacity positions' worth).
std::unique_ptr<KvMemoryManager> make_kv_memory_manager(KvStrategy strategy, const Model& model,
                                                        int64_t slots, int64_t capacity, int32_t pad_id,
                                                        const PagedKvConfig& paged = {});

}  // namespace servelab

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
#include "lora/multi_lora.h"
#include "model/model.h"

namespace servelab {

struct PrefillRequest {
  int64_t id;                              // the scheduler's request id
  const std::vector<int32_t>* prompt_ids;  // outlives the call
  int64_t max_new_tokens;
  // Which weights computed its keys and values (0: the base model, else an adapter): prefix caching
  // shares blocks only between requests with the same key.
  int64_t adapter_key = 0;
};

struct PagedKvConfig {
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  bool prefix_caching = true;
  PagedAttentionKernel kernel = PagedAttentionKernel::Auto;
};

class KvMemoryManager {
 public:
  virtual ~KvMemoryManager() = default;
  // Gives each admitted request its KV memory and runs their prompts in one forward pass:
  // next-token logits [admitted, vocab], rows in the order given.
  virtual at::Tensor prefill(const std::vector<PrefillRequest>& admitted) = 0;
  // One forward pass that feeds every listed request its last token: logits [ids, vocab] in the
  // order of ids. Requests not listed (finished this step) may hold memory but take no token.
  virtual at::Tensor decode(const std::vector<int64_t>& ids, const std::vector<int32_t>& tokens) = 0;
  // Frees the memory of finished requests.
  virtual void retire(const std::vector<int64_t>& ids) = 0;
  // The batch place a request runs in, for the Gantt chart.
  virtual int64_t slot_of(int64_t id) const = 0;
  // KV bytes held now.
  virtual int64_t bytes() const = 0;

  // Memory that can run out (paged KV). The defaults suit the layouts sized for max batch up front.
  // Takes KV memory for a request about to be admitted (its prompt's positions); false, changing
  // nothing, when it does not fit now. prefill() of a request not reserved reserves it first.
  virtual bool reserve(const PrefillRequest& /*r*/) { return true; }
  // Why the request can never run in this memory (its prompt and new tokens need more than all
  // of it), or empty.
  virtual std::string never_fits(const PrefillRequest& /*r*/) const { return {}; }
  // Leading prompt positions a reserved request found in the prefix cache.
  virtual int64_t cached_tokens(int64_t /*id*/) const { return 0; }
  // Room for the position the request's `token` takes at its next decode; false when memory is
  // out (the scheduler then preempts).
  virtual bool grow(int64_t /*id*/, int32_t /*token*/) { return true; }
  struct Usage {
    int64_t reserved_bytes = 0;  // held for requests now: their slots or blocks
    int64_t used_bytes = 0;      // holding cached positions (distinct positions: shared blocks once)
    int64_t total_bytes = 0;     // the whole cache or pool
    int64_t blocks_used = 0, blocks_cached = 0, blocks_total = 0;  // paged only
  };
  virtual Usage usage() const = 0;
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

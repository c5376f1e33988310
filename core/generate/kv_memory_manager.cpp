#include "generate/kv_memory_manager.h"

#include "generate/merge_filter_kv_memory.h"
#include "generate/slot_kv_memory.h"

namespace servelab {

std::unique_ptr<KvMemoryManager> make_kv_memory_manager(KvStrategy strategy, const Gpt2Model& model,
                                                        int64_t slots, int64_t capacity, int32_t pad_id) {
  if (strategy == KvStrategy::SlotKv) return std::make_unique<SlotKvMemory>(model, slots, capacity, pad_id);
  return std::make_unique<MergeFilterKvMemory>(model, pad_id);
}

}  // namespace servelab

#include "generate/kv_memory_manager.h"

#include "generate/merge_filter_kv_memory.h"
#include "generate/paged_kv_memory.h"
#include "generate/slot_kv_memory.h"
#include "util/device.h"
#include "util/errors.h"

namespace servelab {

void KvMemoryManager::copy_kv(const at::Tensor& dst, const at::Tensor& src) {
  const DeviceTimer timer(dst.device());
  dst.copy_(src);
  copied_.bytes += dst.numel() * static_cast<int64_t>(dst.element_size());
  copied_.ms += timer.elapsed_ms();
}

std::optional<LoraBatch> KvMemoryManager::lora_rows(const std::vector<int64_t>& ids) const {
  if (!lora_.adapter_of) return std::nullopt;
  std::vector<const LoraAdapter*> rows;
  bool any = false;
  for (int64_t id : ids) {
    rows.push_back(id < 0 ? nullptr : lora_.adapter_of(id));
    any = any || rows.back();
  }
  if (!any) return std::nullopt;
  return LoraBatch(std::move(rows), lora_.strategy,
                   lora_.strategy == MultiLoraStrategy::Gathered && lora_.stack ? lora_.stack() : nullptr);
}

std::unique_ptr<KvMemoryManager> make_kv_memory_manager(KvStrategy strategy, const Model& model,
                                                        int64_t slots, int64_t capacity, int32_t pad_id,
                                                        const PagedKvConfig& paged) {
  if (strategy == KvStrategy::SlotKv) return std::make_unique<SlotKvMemory>(model, slots, capacity, pad_id);
  if (strategy == KvStrategy::Paged) {
    PagedKvConfig c = paged;
    if (c.block_size < 1)
      throw InputError("KV block size must be at least 1, got " + std::to_string(c.block_size));
    if (c.num_blocks == 0) c.num_blocks = slots * ((capacity + c.block_size - 1) / c.block_size);
    return std::make_unique<PagedKvMemory>(model, c, pad_id);
  }
  return std::make_unique<MergeFilterKvMemory>(model, pad_id);
}

}  // namespace servelab

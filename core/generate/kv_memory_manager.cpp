#include "generate/kv_memory_manager.h"

#include "generate/merge_filter_kv_memory.h"
#include "generate/slot_kv_memory.h"
#include "util/device.h"

namespace servelab {

void KvMemoryManager::copy_kv(const at::Tensor& dst, const at::Tensor& src) {
  const DeviceTimer timer(dst.device());
  dst.copy_(src);
  copied_.bytes += dst.numel() * static_cast<int64_t>(dst.element_size());
  copied_.ms += timer.elapsed_ms();
}

std::unique_ptr<KvMemoryManager> make_kv_memory_manager(KvStrategy strategy, const Gpt2Model& model,
                                                        int64_t slots, int64_t capacity, int32_t pad_id) {
  if (strategy == KvStrategy::SlotKv) return std::make_unique<SlotKvMemory>(model, slots, capacity, pad_id);
  return std::make_unique<MergeFilterKvMemory>(model, pad_id);
}

}  // namespace servelab

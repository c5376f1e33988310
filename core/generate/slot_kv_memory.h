#pragma once
// KV memory preallocated per batch place: [layers][slots, heads, capacity, head_dim], each slot
// holding one request at its own length. Admission writes only the new request's slot, retirement
// only marks it free, and a decode step writes one position per row in place: nobody's cache is
// ever copied for somebody else's sake.
#include <map>

#include "generate/kv_memory_manager.h"

namespace servelab {

class SlotKvMemory : public KvMemoryManager {
 public:
  SlotKvMemory(const Model& model, int64_t slots, int64_t capacity, int32_t pad_id);

  at::Tensor prefill(const std::vector<PrefillRequest>& admitted) override;
  at::Tensor decode(const std::vector<int64_t>& ids, const std::vector<int32_t>& tokens) override;
  void retire(const std::vector<int64_t>& ids) override;
  int64_t slot_of(int64_t id) const override { return slot_.at(id); }
  int64_t bytes() const override { return cache_.bytes(); }
  Usage usage() const override;

 private:
  const Model& model_;
  KvCache cache_;
  int32_t pad_;
  std::vector<bool> used_;           // per slot
  std::vector<int64_t> length_;      // positions cached per slot
  std::map<int64_t, int64_t> slot_;  // request id -> slot
};

}  // namespace servelab

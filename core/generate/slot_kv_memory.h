#pragma once
// KV memory preallocated per batch place: [layers][slots, heads, capacity, head_dim], each slot
// holding one request at its own length. Admission writes only the new request's slot, retirement
// only marks it free, and a decode step writes one position per row in place: nobody's cache is
// ever copied for somebody else's sake.
#include <map>
#include <memory>

#include "generate/kv_memory_manager.h"
#include "model/decode_graphs.h"

namespace servelab {

class SlotKvMemory : public KvMemoryManager, private KvStore {
 public:
  SlotKvMemory(const Model& model, int64_t slots, int64_t capacity, int32_t pad_id);

  // Takes the lowest free slot (false when every slot is taken).
  bool reserve(const PrefillRequest& r) override;
  int64_t computed(int64_t id) const override;
  // Whole prompts from position 0: written straight into the slot (one request) or through one
  // left-padded forward and a copy into each slot (several), as the course's lesson measures.
  at::Tensor prefill(const std::vector<PrefillRequest>& admitted) override;
  // Packed segments attending through this memory's KvStore (chunks, multi-token steps).
  at::Tensor extend(const std::vector<StepSegment>& segments) override;
  bool extends() const override { return true; }
  at::Tensor decode(const std::vector<int64_t>& ids, const std::vector<int32_t>& tokens) override;
  // The slot's length goes back; the positions after it are overwritten by the next writes.
  void truncate(int64_t id, int64_t positions) override;
  void retire(const std::vector<int64_t>& ids) override;
  int64_t slot_of(int64_t id) const override { return slot_.at(id); }
  int64_t bytes() const override { return cache_.bytes(); }
  Usage usage() const override;
  const DecodeGraphStats* graph_stats() const override { return graphs_ ? &graphs_->stats() : nullptr; }

 private:
  // KvStore, for extend(): stores each segment's keys and values in its slot, then attends.
  at::Tensor attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                    const AttentionParams& params) override;
  // Each segment's slot row of the cache, position by position (an fp32 cache on the CPU).
  bool places(KvPlaces& out) const override;
  struct Segment {
    int64_t slot, start, count, row, column;
  };

  const Model& model_;
  KvCache cache_;
  int32_t pad_;
  std::vector<bool> used_;           // per slot
  std::vector<int64_t> length_;      // positions cached per slot
  std::map<int64_t, int64_t> slot_;  // request id -> slot
  std::vector<Segment> pass_;        // the extend() in flight
  // Decode steps as CUDA graphs over cache_ (on a GPU, unless switched off); made at the first.
  std::unique_ptr<DecodeGraphs> graphs_;
};

}  // namespace servelab

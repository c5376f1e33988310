#pragma once
// The course's continuous batching memory (lesson 3's merge_batches / filter_batch): the running
// batch is one left-padded cache. Admitting prefills the new requests as their own padded batch,
// then re-pads both caches to a common length and concatenates them; retiring gathers the rows
// that stay and trims the padding no row needs any more. Every admission and retirement copies
// every running request's whole cache: the teaching contrast to SlotKvMemory.
#include <map>
#include <optional>

#include "generate/kv_memory_manager.h"

namespace servelab {

class MergeFilterKvMemory : public KvMemoryManager {
 public:
  MergeFilterKvMemory(const Model& model, int32_t pad_id) : model_(model), pad_(pad_id) {}

  // Memory is made at prefill, for the requests admitted then: nothing to reserve before.
  bool reserve(const PrefillRequest& /*r*/) override { return true; }
  int64_t computed(int64_t id) const override;
  at::Tensor prefill(const std::vector<PrefillRequest>& admitted) override;
  at::Tensor decode(const std::vector<int64_t>& ids, const std::vector<int32_t>& tokens) override;
  void retire(const std::vector<int64_t>& ids) override;
  // A stable batch place (the lowest free one at admission), as SlotKvMemory's slots are; the
  // request's physical row in the merged cache moves whenever rows before it retire.
  int64_t slot_of(int64_t id) const override;
  int64_t bytes() const override { return cache_ ? cache_->bytes() : 0; }
  Usage usage() const override;

 private:
  struct Row {
    int64_t id;
    int64_t length;  // real (unpadded) positions cached
    int64_t limit;   // prompt + max new tokens: the most it will ever need
  };
  // A fresh cache for rows_, with room until the longest remaining request is done.
  KvCache allocate(int64_t length) const;
  // Gathers rows keep (indices into rows_) into a fresh cache, trimming shared padding.
  void repack(const std::vector<int64_t>& keep);
  // The request's row in cache_ now.
  int64_t row_of(int64_t id) const;

  const Model& model_;
  int32_t pad_;
  std::optional<KvCache> cache_;  // [rows, ...] left-padded to cache_->length()
  at::Tensor mask_;               // [rows, cache length] int64: 1 where a position is real
  std::vector<Row> rows_;
  std::map<int64_t, int64_t> places_;  // request id -> batch place
  std::vector<bool> place_used_;
};

}  // namespace servelab

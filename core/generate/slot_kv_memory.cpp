#include "generate/slot_kv_memory.h"

#include <algorithm>

#include "generate/generator.h"
#include "util/errors.h"

namespace servelab {

SlotKvMemory::SlotKvMemory(const Model& model, int64_t slots, int64_t capacity, int32_t pad_id)
    : model_(model),
      cache_(model.make_cache(slots, capacity)),
      pad_(pad_id),
      used_(static_cast<size_t>(slots), false),
      length_(static_cast<size_t>(slots), 0) {}

at::Tensor SlotKvMemory::prefill(const std::vector<PrefillRequest>& admitted) {
  const at::Device dev = model_.device();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> slots;
  for (const PrefillRequest& r : admitted) {
    // The lowest free slot keeps the running rows packed at the front, so decode can run over a
    // short prefix of the slots.
    const auto free = std::find(used_.begin(), used_.end(), false);
    if (free == used_.end()) throw InputError("no free KV slot for request " + std::to_string(r.id));
    const int64_t s = free - used_.begin();
    used_[static_cast<size_t>(s)] = true;
    length_[static_cast<size_t>(s)] = static_cast<int64_t>(r.prompt_ids->size());
    slot_[r.id] = s;
    slots.push_back(s);
    prompts.push_back(*r.prompt_ids);
  }
  if (admitted.size() == 1) {
    // One request: its forward writes straight into its slot.
    KvCache slot = cache_.rows(slots[0], 1);
    const int64_t n = static_cast<int64_t>(prompts[0].size());
    at::Tensor ids = at::tensor(std::vector<int64_t>(prompts[0].begin(), prompts[0].end()), at::kLong);
    ForwardInput in;
    in.input_ids = ids.view({1, n}).to(dev);
    in.position_ids = at::arange(n, at::kLong).view({1, n}).to(dev);
    const std::optional<LoraBatch> lora = lora_rows({admitted[0].id});
    in.lora = lora ? &*lora : nullptr;
    return model_.forward(in, &slot);
  }
  // Several: one left-padded forward into a scratch cache, then each request's real positions
  // move to the front of its own slot (positions ids are real, so the keys equal a solo prefill).
  PaddedBatch pb = left_padded_batch(prompts, pad_);
  const int64_t width = pb.input_ids.size(1);
  KvCache scratch = model_.make_cache(static_cast<int64_t>(admitted.size()), width);
  const bool padded = !pb.attention_mask.all().item<bool>();
  std::vector<int64_t> admitted_ids;
  for (const PrefillRequest& r : admitted) admitted_ids.push_back(r.id);
  const std::optional<LoraBatch> lora = lora_rows(admitted_ids);
  ForwardInput batch_in{pb.input_ids.to(dev), pb.position_ids.to(dev),
                        padded ? pb.attention_mask.to(dev) : at::Tensor()};
  batch_in.lora = lora ? &*lora : nullptr;
  at::Tensor logits = model_.forward(batch_in, &scratch);
  for (size_t i = 0; i < admitted.size(); ++i) {
    const int64_t n = static_cast<int64_t>(prompts[i].size()), row = static_cast<int64_t>(i);
    copy_kv(cache_.keys().select(1, slots[i]).narrow(2, 0, n),
            scratch.keys().select(1, row).narrow(2, width - n, n));
    copy_kv(cache_.values().select(1, slots[i]).narrow(2, 0, n),
            scratch.values().select(1, row).narrow(2, width - n, n));
  }
  return logits;
}

at::Tensor SlotKvMemory::decode(const std::vector<int64_t>& ids, const std::vector<int32_t>& tokens) {
  const at::Device dev = model_.device();
  // Only the listed requests run through the linear layers; attention runs over slots
  // [0, rows), the lowest free slot being reused first keeps that prefix short. A slot not listed
  // (free, or its request sitting this step out) sees only its first key; its output is dropped.
  const int64_t n = static_cast<int64_t>(ids.size());
  int64_t rows = 0;
  std::vector<int64_t> slots, positions;
  for (int64_t id : ids) {
    slots.push_back(slot_.at(id));
    positions.push_back(length_[static_cast<size_t>(slots.back())]);
    rows = std::max(rows, slots.back() + 1);
  }
  int64_t width = 1;
  for (int64_t p : positions) width = std::max(width, p + 1);
  // Keys a slot's query sees: [0, position] for a listed slot, [0, 1) for the others.
  std::vector<int64_t> last(static_cast<size_t>(rows), 0);
  for (int64_t i = 0; i < n; ++i)
    last[static_cast<size_t>(slots[static_cast<size_t>(i)])] = positions[static_cast<size_t>(i)];
  const at::Tensor last_key = at::tensor(last, at::kLong).to(dev).view({rows, 1});
  ForwardInput in;
  in.input_ids =
      at::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), at::kLong).view({n, 1}).to(dev);
  const at::Tensor pos = at::tensor(positions, at::kLong).to(dev);
  in.position_ids = pos.view({n, 1});
  in.cache_positions = pos;
  in.cache_rows = at::tensor(slots, at::kLong).to(dev);
  in.key_mask = at::arange(width, pos.options()).view({1, width}) <= last_key;
  const std::optional<LoraBatch> lora = lora_rows(ids);
  in.lora = lora ? &*lora : nullptr;
  KvCache view = cache_.rows(0, rows);
  at::Tensor logits = model_.forward(in, &view);
  for (int64_t s : slots) ++length_[static_cast<size_t>(s)];
  return logits;
}

KvMemoryManager::Usage SlotKvMemory::usage() const {
  // A slot is reserved whole for its request from admission on: capacity positions, of which only
  // its length hold anything.
  Usage u;
  const int64_t slots = static_cast<int64_t>(used_.size());
  const int64_t per_position = slots > 0 ? cache_.bytes() / (slots * cache_.capacity()) : 0;
  u.total_bytes = cache_.bytes();
  for (size_t s = 0; s < used_.size(); ++s) {
    if (!used_[s]) continue;
    u.reserved_bytes += cache_.capacity() * per_position;
    u.used_bytes += length_[s] * per_position;
  }
  return u;
}

void SlotKvMemory::retire(const std::vector<int64_t>& ids) {
  for (int64_t id : ids) {
    const int64_t s = slot_.at(id);
    used_[static_cast<size_t>(s)] = false;
    length_[static_cast<size_t>(s)] = 0;
    slot_.erase(id);
  }
}

}  // namespace servelab

#include "generate/slot_kv_memory.h"

#include <algorithm>

#include "generate/generator.h"
#include "util/errors.h"

namespace servelab {

SlotKvMemory::SlotKvMemory(const Gpt2Model& model, int64_t slots, int64_t capacity, int32_t pad_id)
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
    return model_.forward(in, &slot);
  }
  // Several: one left-padded forward into a scratch cache, then each request's real positions
  // move to the front of its own slot (positions ids are real, so the keys equal a solo prefill).
  PaddedBatch pb = left_pad(prompts, pad_);
  const int64_t width = pb.input_ids.size(1);
  KvCache scratch = model_.make_cache(static_cast<int64_t>(admitted.size()), width);
  const bool padded = !pb.attention_mask.all().item<bool>();
  at::Tensor logits = model_.forward(
      {pb.input_ids.to(dev), pb.position_ids.to(dev), padded ? pb.attention_mask.to(dev) : at::Tensor()},
      &scratch);
  for (size_t i = 0; i < admitted.size(); ++i) {
    const int64_t n = static_cast<int64_t>(prompts[i].size()), row = static_cast<int64_t>(i);
    cache_.keys()
        .select(1, slots[i])
        .narrow(2, 0, n)
        .copy_(scratch.keys().select(1, row).narrow(2, width - n, n));
    cache_.values()
        .select(1, slots[i])
        .narrow(2, 0, n)
        .copy_(scratch.values().select(1, row).narrow(2, width - n, n));
  }
  return logits;
}

at::Tensor SlotKvMemory::decode(const std::vector<int64_t>& ids, const std::vector<int32_t>& tokens) {
  const at::Device dev = model_.device();
  // Rows [0, rows) of the slots run. A row not listed (a free slot, or a request sitting this
  // step out) writes a padding token at its next free position, which it cannot see and which
  // its next real token overwrites; its length stays.
  int64_t rows = 0;
  std::vector<int64_t> slots;
  for (int64_t id : ids) {
    slots.push_back(slot_.at(id));
    rows = std::max(rows, slots.back() + 1);
  }
  int64_t width = 1;
  for (int64_t s = 0; s < rows; ++s) width = std::max(width, length_[static_cast<size_t>(s)] + 1);
  at::Tensor input = at::full({rows, 1}, pad_, at::kLong);
  at::Tensor positions = at::tensor(std::vector<int64_t>(length_.begin(), length_.begin() + rows), at::kLong);
  at::Tensor listed = at::zeros({rows, 1}, at::kBool);
  auto in_a = input.accessor<int64_t, 2>();
  auto listed_a = listed.accessor<bool, 2>();
  for (size_t i = 0; i < ids.size(); ++i) {
    in_a[slots[i]][0] = tokens[i];
    listed_a[slots[i]][0] = true;
  }
  positions = positions.to(dev);
  ForwardInput in;
  in.input_ids = input.to(dev);
  in.position_ids = positions.view({rows, 1});
  in.cache_positions = positions;
  // A listed row sees its cached prefix and the key it writes now; an unlisted row sees only the
  // padding key it writes, which keeps its softmax finite.
  const at::Tensor keys = at::arange(width, positions.options()).view({1, width});
  const at::Tensor at_new = keys == positions.view({rows, 1});
  in.key_mask = ((keys < positions.view({rows, 1})) & listed.to(dev)) | at_new;
  KvCache view = cache_.rows(0, rows);
  at::Tensor logits = model_.forward(in, &view);
  for (int64_t s : slots) ++length_[static_cast<size_t>(s)];
  return logits.index_select(0, at::tensor(slots, at::kLong).to(dev));
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

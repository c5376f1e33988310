#include "generate/merge_filter_kv_memory.h"

#include <algorithm>

#include "generate/generator.h"
#include "util/errors.h"

namespace servelab {

KvCache MergeFilterKvMemory::allocate(int64_t length) const {
  int64_t headroom = 1;
  for (const Row& r : rows_) headroom = std::max(headroom, r.limit - r.length);
  KvCache cache = model_.make_cache(static_cast<int64_t>(rows_.size()), length + headroom);
  cache.set_length(length);
  return cache;
}

int64_t MergeFilterKvMemory::slot_of(int64_t id) const {
  const auto it = places_.find(id);
  if (it == places_.end()) throw InputError("request " + std::to_string(id) + " holds no KV memory");
  return it->second;
}

int64_t MergeFilterKvMemory::row_of(int64_t id) const {
  for (size_t i = 0; i < rows_.size(); ++i)
    if (rows_[i].id == id) return static_cast<int64_t>(i);
  throw InputError("request " + std::to_string(id) + " holds no KV memory");
}

int64_t MergeFilterKvMemory::computed(int64_t id) const {
  for (const Row& r : rows_)
    if (r.id == id) return r.length;
  return 0;
}

at::Tensor MergeFilterKvMemory::prefill(const std::vector<PrefillRequest>& admitted) {
  const at::Device dev = model_.device();
  // init_batch + the prefill forward: the new requests as a left-padded batch of their own.
  std::vector<std::vector<int32_t>> prompts;
  for (const PrefillRequest& r : admitted) prompts.push_back(*r.prompt_ids);
  PaddedBatch pb = left_padded_batch(prompts, pad_);
  const int64_t width = pb.input_ids.size(1), n = static_cast<int64_t>(admitted.size());
  KvCache fresh = model_.make_cache(n, width);
  at::Tensor fresh_mask = pb.attention_mask.to(dev);
  const bool padded = !pb.attention_mask.all().item<bool>();
  std::vector<int64_t> admitted_ids;
  for (const PrefillRequest& r : admitted) admitted_ids.push_back(r.id);
  const std::optional<LoraBatch> lora = lora_rows(admitted_ids);
  ForwardInput fresh_in{pb.input_ids.to(dev), pb.position_ids.to(dev), padded ? fresh_mask : at::Tensor()};
  fresh_in.lora = lora ? &*lora : nullptr;
  at::Tensor logits = model_.forward(fresh_in, &fresh);

  // merge_batches: left-pad both caches (and masks) to the longer one and concatenate them.
  const int64_t old_rows = static_cast<int64_t>(rows_.size());
  const int64_t old_len = cache_ ? cache_->length() : 0, len = std::max(old_len, width);
  for (const PrefillRequest& r : admitted) {
    rows_.push_back({r.id, static_cast<int64_t>(r.prompt_ids->size()),
                     static_cast<int64_t>(r.prompt_ids->size()) + r.max_new_tokens});
    const auto free = std::find(place_used_.begin(), place_used_.end(), false);
    const auto place = static_cast<int64_t>(free - place_used_.begin());
    if (free == place_used_.end()) {
      place_used_.push_back(true);
    } else {
      *free = true;
    }
    places_[r.id] = place;
  }
  KvCache merged = allocate(len);
  auto place = [&](const at::Tensor& dst, const at::Tensor& src, int64_t first, int64_t count,
                   int64_t src_len) {
    copy_kv(dst.narrow(1, first, count).narrow(3, len - src_len, src_len), src.narrow(3, 0, src_len));
  };
  at::Tensor mask = at::zeros({old_rows + n, len}, fresh_mask.options());
  if (old_rows > 0) {
    place(merged.keys(), cache_->keys(), 0, old_rows, old_len);
    place(merged.values(), cache_->values(), 0, old_rows, old_len);
    mask.narrow(0, 0, old_rows).narrow(1, len - old_len, old_len).copy_(mask_);
  }
  place(merged.keys(), fresh.keys(), old_rows, n, width);
  place(merged.values(), fresh.values(), old_rows, n, width);
  mask.narrow(0, old_rows, n).narrow(1, len - width, width).copy_(fresh_mask);
  cache_.emplace(std::move(merged));
  mask_ = mask;
  return logits;
}

at::Tensor MergeFilterKvMemory::decode(const std::vector<int64_t>& ids, const std::vector<int32_t>& tokens) {
  const at::Device dev = model_.device();
  const int64_t n = static_cast<int64_t>(rows_.size());
  // Every row of the padded batch steps; a row not listed gets a padding token it cannot see.
  at::Tensor input = at::full({n, 1}, pad_, at::kLong);
  at::Tensor positions = at::ones({n, 1}, at::kLong);
  at::Tensor real = at::zeros({n, 1}, at::kLong);
  auto in_a = input.accessor<int64_t, 2>();
  auto pos_a = positions.accessor<int64_t, 2>();
  auto real_a = real.accessor<int64_t, 2>();
  std::vector<int64_t> order;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t r = row_of(ids[i]);
    order.push_back(r);
    in_a[r][0] = tokens[i];
    pos_a[r][0] = rows_[static_cast<size_t>(r)].length;
    real_a[r][0] = 1;
  }
  if (cache_->length() == cache_->capacity()) {
    // Rows that sat steps out used up the headroom: re-pad everything into a larger cache.
    std::vector<int64_t> all(rows_.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    repack(all);
  }
  mask_ = at::cat({mask_, real.to(dev)}, 1);
  std::vector<int64_t> row_ids;
  for (const Row& row : rows_) row_ids.push_back(row.id);
  const std::optional<LoraBatch> lora = lora_rows(row_ids);
  ForwardInput step_in{input.to(dev), positions.to(dev), mask_};
  step_in.lora = lora ? &*lora : nullptr;
  at::Tensor logits = model_.forward(step_in, &*cache_);
  for (int64_t r : order) ++rows_[static_cast<size_t>(r)].length;
  return logits.index_select(0, at::tensor(order, at::kLong).to(dev));
}

KvMemoryManager::Usage MergeFilterKvMemory::usage() const {
  Usage u;
  if (!cache_ || rows_.empty()) return u;
  const int64_t per_position = cache_->bytes() / (cache_->batch() * cache_->capacity());
  u.total_bytes = u.reserved_bytes = cache_->bytes();
  for (const Row& r : rows_) u.used_bytes += r.length * per_position;
  return u;
}

void MergeFilterKvMemory::retire(const std::vector<int64_t>& ids) {
  if (ids.empty()) return;
  for (int64_t id : ids) {
    const auto it = places_.find(id);
    if (it == places_.end()) continue;
    place_used_[static_cast<size_t>(it->second)] = false;
    places_.erase(it);
  }
  std::vector<int64_t> keep;
  for (size_t i = 0; i < rows_.size(); ++i)
    if (std::find(ids.begin(), ids.end(), rows_[i].id) == ids.end()) keep.push_back(static_cast<int64_t>(i));
  repack(keep);
}

void MergeFilterKvMemory::repack(const std::vector<int64_t>& keep) {
  // filter_batch: gather the rows that stay into a new cache and trim the padding they share.
  std::vector<Row> kept;
  for (int64_t i : keep) kept.push_back(rows_[static_cast<size_t>(i)]);
  rows_ = std::move(kept);
  if (rows_.empty()) {
    cache_.reset();
    mask_ = at::Tensor();
    return;
  }
  const int64_t old_len = cache_->length();
  const at::Tensor index = at::tensor(keep, at::kLong).to(model_.device());
  const at::Tensor mask = mask_.index_select(0, index);
  const int64_t lead = (mask.cumsum(1) == 0).sum(1).min().item<int64_t>();  // padding every row has
  const int64_t len = old_len - lead;
  KvCache packed = allocate(len);
  copy_kv(packed.keys().narrow(3, 0, len), cache_->keys().index_select(1, index).narrow(3, lead, len));
  copy_kv(packed.values().narrow(3, 0, len), cache_->values().index_select(1, index).narrow(3, lead, len));
  mask_ = mask.narrow(1, lead, len);
  cache_.emplace(std::move(packed));
}

}  // namespace servelab

#include "generate/kv_memory_manager.h"

#include <algorithm>

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

at::Tensor KvMemoryManager::prefill(const std::vector<PrefillRequest>& admitted) {
  // One at a time, so that a request's prompt blocks are offered to the prefix cache before the
  // next one looks (both are written in this one forward, before anyone attends).
  for (const PrefillRequest& r : admitted) {
    if (!reserve(r)) throw InputError("no room in the KV memory for request " + std::to_string(r.id + 1));
    commit(r.id, static_cast<int64_t>(r.prompt_ids->size()));
  }
  std::vector<StepSegment> segments;
  for (const PrefillRequest& r : admitted) {
    const int64_t from = computed(r.id), n = static_cast<int64_t>(r.prompt_ids->size());
    if (from >= n)
      throw InputError("request " + std::to_string(r.id + 1) + " has no prompt position to compute");
    segments.push_back({r.id, std::vector<int32_t>(r.prompt_ids->begin() + from, r.prompt_ids->end()),
                        StepSegment::Logits::Last});
  }
  return extend(segments);
}

at::Tensor KvMemoryManager::extend(const std::vector<StepSegment>& /*segments*/) {
  throw InputError(
      "this KV memory runs whole prompts only; chunked prefill and multi-token steps need slot "
      "or paged KV");
}

KvMemoryManager::Packed KvMemoryManager::pack(const std::vector<StepSegment>& segments, int32_t pad,
                                              int64_t width_limit) const {
  Packed p;
  std::vector<int64_t> row_used;
  std::vector<const LoraAdapter*> row_adapter;
  for (const StepSegment& s : segments) {
    const int64_t count = static_cast<int64_t>(s.tokens.size());
    if (count < 1) throw InputError("request " + std::to_string(s.id + 1) + " has no token to compute");
    if (count > width_limit)
      throw InputError("request " + std::to_string(s.id + 1) + " has " + std::to_string(count) +
                       " tokens in one step; the model's context is " + std::to_string(width_limit));
    const LoraAdapter* adapter = adapter_of(s.id);
    size_t row = 0;
    while (row < row_used.size() && (row_adapter[row] != adapter || row_used[row] + count > width_limit))
      ++row;
    if (row == row_used.size()) {
      row_used.push_back(0);
      p.row_request.push_back(s.id);
      row_adapter.push_back(adapter);
    }
    p.start.push_back(computed(s.id));
    p.row.push_back(static_cast<int64_t>(row));
    p.column.push_back(row_used[row]);
    row_used[row] += count;
  }
  const int64_t B = static_cast<int64_t>(row_used.size());
  const int64_t T = B ? *std::max_element(row_used.begin(), row_used.end()) : 0;
  p.input_ids = at::full({B, T}, pad, at::kLong);
  p.position_ids = at::zeros({B, T}, at::kLong);
  auto in_a = p.input_ids.accessor<int64_t, 2>();
  auto pos_a = p.position_ids.accessor<int64_t, 2>();
  std::vector<int64_t> logits;
  for (size_t i = 0; i < segments.size(); ++i) {
    const StepSegment& s = segments[i];
    const int64_t count = static_cast<int64_t>(s.tokens.size());
    const int64_t row = p.row[i], column = p.column[i], start = p.start[i];
    for (int64_t j = 0; j < count; ++j) {
      in_a[row][column + j] = s.tokens[static_cast<size_t>(j)];
      pos_a[row][column + j] = start + j;
      if (s.logits == StepSegment::Logits::All) logits.push_back(row * T + column + j);
    }
    if (s.logits == StepSegment::Logits::Last) logits.push_back(row * T + column + count - 1);
  }
  p.logit_positions = at::tensor(logits, at::kLong);
  return p;
}

at::Tensor KvMemoryManager::forward_packed(const Model& model, const Packed& packed, KvStore* store) const {
  const at::Device dev = model.device();
  const bool any_logits = packed.logit_positions.numel() > 0;
  ForwardInput in;
  in.input_ids = packed.input_ids.to(dev);
  in.position_ids = packed.position_ids.to(dev);
  in.logit_positions = (any_logits ? packed.logit_positions : at::zeros({1}, at::kLong)).to(dev);
  const std::optional<LoraBatch> lora = lora_rows(packed.row_request);
  in.lora = lora ? &*lora : nullptr;
  in.kv_store = store;
  at::Tensor logits = model.forward(in);
  return any_logits ? logits : at::Tensor();
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

#include "generate/slot_kv_memory.h"

#include <algorithm>

#include "generate/generator.h"
#include "model/layers.h"
#include "util/errors.h"

namespace servelab {

SlotKvMemory::SlotKvMemory(const Model& model, int64_t slots, int64_t capacity, int32_t pad_id)
    : model_(model),
      cache_(model.make_cache(slots, capacity)),
      pad_(pad_id),
      used_(static_cast<size_t>(slots), false),
      length_(static_cast<size_t>(slots), 0) {}

bool SlotKvMemory::reserve(const PrefillRequest& r) {
  if (slot_.count(r.id)) return true;
  // The lowest free slot keeps the running rows packed at the front, so decode can run over a
  // short prefix of the slots.
  const auto free = std::find(used_.begin(), used_.end(), false);
  if (free == used_.end()) return false;
  const int64_t s = free - used_.begin();
  used_[static_cast<size_t>(s)] = true;
  length_[static_cast<size_t>(s)] = 0;
  slot_[r.id] = s;
  return true;
}

int64_t SlotKvMemory::computed(int64_t id) const {
  const auto it = slot_.find(id);
  return it == slot_.end() ? 0 : length_[static_cast<size_t>(it->second)];
}

void SlotKvMemory::truncate(int64_t id, int64_t positions) {
  int64_t& length = length_[static_cast<size_t>(slot_.at(id))];
  if (positions < 1 || positions > length)
    throw InputError("cannot take request " + std::to_string(id + 1) + " back from " +
                     std::to_string(length) + " to " + std::to_string(positions) + " positions");
  length = positions;
}

at::Tensor SlotKvMemory::prefill(const std::vector<PrefillRequest>& admitted) {
  const at::Device dev = model_.device();
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int64_t> slots;
  for (const PrefillRequest& r : admitted) {
    if (!reserve(r)) throw InputError("no free KV slot for request " + std::to_string(r.id + 1));
    const int64_t s = slot_.at(r.id);
    if (length_[static_cast<size_t>(s)] != 0)
      throw InputError("request " + std::to_string(r.id + 1) + " has positions cached already; extend() it");
    length_[static_cast<size_t>(s)] = static_cast<int64_t>(r.prompt_ids->size());
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

at::Tensor SlotKvMemory::extend(const std::vector<StepSegment>& segments) {
  for (const StepSegment& sg : segments) {
    const auto it = slot_.find(sg.id);
    if (it == slot_.end()) throw InputError("request " + std::to_string(sg.id + 1) + " holds no KV slot");
    const int64_t end = length_[static_cast<size_t>(it->second)] + static_cast<int64_t>(sg.tokens.size());
    if (end > cache_.capacity())
      throw InputError("request " + std::to_string(sg.id + 1) + " would reach position " +
                       std::to_string(end) + "; its KV slot holds " + std::to_string(cache_.capacity()));
  }
  const Packed packed = pack(segments, pad_, model_.shape().context);
  pass_.clear();
  for (size_t i = 0; i < segments.size(); ++i)
    pass_.push_back({slot_.at(segments[i].id), packed.start[i],
                     static_cast<int64_t>(segments[i].tokens.size()), packed.row[i], packed.column[i]});
  const at::Tensor logits = forward_packed(model_, packed, this);
  for (const Segment& sg : pass_) length_[static_cast<size_t>(sg.slot)] = sg.start + sg.count;
  pass_.clear();
  return logits;
}

at::Tensor SlotKvMemory::attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const AttentionParams& params) {
  const at::Tensor keys = cache_.keys().select(0, layer), values = cache_.values().select(0, layer);
  // Every segment's new positions are stored before any attends (one slot per request, so no
  // segment reads another's; the order only matters for a layout that shares).
  for (const Segment& sg : pass_) {
    keys.select(0, sg.slot)
        .narrow(1, sg.start, sg.count)
        .copy_(k.select(0, sg.row).narrow(1, sg.column, sg.count));
    values.select(0, sg.slot)
        .narrow(1, sg.start, sg.count)
        .copy_(v.select(0, sg.row).narrow(1, sg.column, sg.count));
  }
  // Each segment's queries over its slot's positions [0, start + count), causally; the padding at
  // the end of a packed row attends to nothing and stays zero.
  at::Tensor out = at::zeros(q.sizes(), q.options());
  for (const Segment& sg : pass_) {
    const int64_t n = sg.start + sg.count;
    AttentionMask m;
    m.keys = n;
    if (sg.start == 0) {
      m.causal = sg.count > 1;
    } else if (sg.count > 1) {
      m.mask = at::ones({sg.count, n}, at::TensorOptions().dtype(at::kBool).device(q.device()))
                   .tril(sg.start)
                   .view({1, 1, sg.count, n});
    }
    out.narrow(0, sg.row, 1)
        .narrow(2, sg.column, sg.count)
        .copy_(servelab::attend(q.narrow(0, sg.row, 1).narrow(2, sg.column, sg.count),
                                keys.narrow(0, sg.slot, 1).narrow(2, 0, n),
                                values.narrow(0, sg.slot, 1).narrow(2, 0, n), m, params));
  }
  return out;
}

bool SlotKvMemory::places(KvPlaces& out) const {
  const at::Tensor& k = cache_.keys();
  const at::Tensor& v = cache_.values();
  if (!k.device().is_cpu() || k.scalar_type() != at::kFloat || v.scalar_type() != at::kFloat ||
      k.strides() != v.strides() || k.stride(4) != 1)
    return false;
  out.clear();
  out.keys = k.mutable_data_ptr<float>();
  out.values = v.mutable_data_ptr<float>();
  out.layer_stride = k.stride(0);
  out.head_stride = k.stride(2);
  out.first.push_back(0);
  for (const Segment& sg : pass_) {
    out.segments.push_back({sg.row, sg.column, sg.start, sg.count});
    for (int64_t p = 0; p < sg.start + sg.count; ++p)
      out.offsets.push_back(sg.slot * k.stride(1) + p * k.stride(3));
    out.first.push_back(static_cast<int64_t>(out.offsets.size()));
  }
  return true;
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
  const std::optional<LoraBatch> lora = lora_rows(ids);
  if (!lora && cuda_graphs_usable(model_)) {
    if (!graphs_) graphs_ = std::make_unique<DecodeGraphs>(model_, cache_);
    std::vector<DecodeRow> step;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = positions[static_cast<size_t>(i)];
      step.push_back({tokens[static_cast<size_t>(i)], slots[static_cast<size_t>(i)], p, p, 0});
    }
    at::Tensor logits = graphs_->step(step);
    for (int64_t s : slots) ++length_[static_cast<size_t>(s)];
    return logits;
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

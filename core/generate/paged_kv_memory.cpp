#include "generate/paged_kv_memory.h"

#include <algorithm>

#include "model/decode_attention.h"
#include "model/layers.h"
#include "util/device.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

PagedKvMemory::PagedKvMemory(const Model& model, const PagedKvConfig& config, int32_t pad_id)
    : model_(model),
      pad_(pad_id),
      blocks_(config.num_blocks, config.block_size, config.prefix_caching),
      kernel_(config.kernel) {
  const at::Device dev = model.device();
  if (kernel_ == PagedAttentionKernel::Auto)
    kernel_ = dev.is_cpu() ? PagedAttentionKernel::InPlace : PagedAttentionKernel::Gather;
  if (kernel_ == PagedAttentionKernel::InPlace && !dev.is_cpu())
    throw InputError("the in-place paged attention kernel runs on the CPU only; use the gather kernel on " +
                     dev.str());
  const ModelShape& s = model.shape();
  block_bytes_ = model.kv_cache_bytes(1, config.block_size);
  pool_bytes_ = block_bytes_ * config.num_blocks;
  const std::string what = "a paged KV pool of " + std::to_string(config.num_blocks) + " blocks of " +
                           std::to_string(config.block_size) + " positions";
  if (dev.is_cpu()) limits::check_fits_in_memory(what, pool_bytes_);
  try {
    const auto opts = at::TensorOptions().dtype(model.dtype()).device(dev);
    keys_ = at::zeros({s.n_layer, config.num_blocks * config.block_size, s.n_kv_head, s.head_dim}, opts);
    values_ = at::zeros_like(keys_);
  } catch (const c10::Error& e) {
    if (!is_out_of_memory(e)) throw;
    throw OutOfMemoryError("out of memory allocating " + what + " on " + dev.str());
  }
}

int64_t PagedKvMemory::slot_of(int64_t id) const {
  const auto it = requests_.find(id);
  if (it == requests_.end()) throw InputError("request " + std::to_string(id) + " holds no KV memory");
  return it->second.place;
}

int64_t PagedKvMemory::cached_tokens(int64_t id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? 0 : it->second.cached;
}

std::string PagedKvMemory::never_fits(const PrefillRequest& r) const {
  // The last generated token is never fed back, so it needs no position.
  const int64_t prompt = static_cast<int64_t>(r.prompt_ids->size());
  const int64_t positions = std::max<int64_t>(prompt, prompt + r.max_new_tokens - 1);
  const int64_t need = blocks_.blocks_for(positions);
  if (need <= blocks_.num_blocks()) return {};
  return "request " + std::to_string(r.id + 1) + " needs " + std::to_string(need) + " KV blocks of " +
         std::to_string(blocks_.block_size()) + " positions (" + std::to_string(prompt) + " prompt + " +
         std::to_string(r.max_new_tokens) + " new tokens); the KV budget holds " +
         std::to_string(blocks_.num_blocks());
}

bool PagedKvMemory::reserve(const PrefillRequest& r) {
  if (requests_.count(r.id)) return true;
  // Prompt blocks join the prefix cache only once commit() says they will be written this step.
  const std::optional<int64_t> cached = blocks_.allocate(r.id, *r.prompt_ids, r.adapter_key, /*seal=*/false);
  if (!cached) return false;
  Request q;
  q.cached = q.computed = *cached;
  const auto free = std::find(place_used_.begin(), place_used_.end(), false);
  q.place = static_cast<int64_t>(free - place_used_.begin());
  if (free == place_used_.end()) {
    place_used_.push_back(true);
  } else {
    *free = true;
  }
  requests_[r.id] = q;
  return true;
}

int64_t PagedKvMemory::computed(int64_t id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? 0 : it->second.computed;
}

void PagedKvMemory::commit(int64_t id, int64_t positions) { blocks_.seal_upto(id, positions); }

bool PagedKvMemory::grow(int64_t id, int32_t token) {
  const Request& q = requests_.at(id);
  if (blocks_.length(id) > q.computed) return true;  // grown already
  return blocks_.append(id, token);
}

bool PagedKvMemory::grow_tokens(int64_t id, const std::vector<int32_t>& tokens) {
  const Request& q = requests_.at(id);
  const int64_t held = blocks_.length(id), want = q.computed + static_cast<int64_t>(tokens.size());
  if (held >= want) return true;
  const int64_t blocks_now = static_cast<int64_t>(blocks_.block_table(id).size());
  if (blocks_.blocks_for(want) - blocks_now > blocks_.available_blocks()) return false;
  for (int64_t p = held; p < want; ++p) blocks_.append(id, tokens[static_cast<size_t>(p - q.computed)]);
  return true;
}

void PagedKvMemory::truncate(int64_t id, int64_t positions) {
  Request& q = requests_.at(id);
  if (positions < 1 || positions > q.computed)
    throw InputError("cannot take request " + std::to_string(id + 1) + " back from " +
                     std::to_string(q.computed) + " to " + std::to_string(positions) + " positions");
  q.computed = positions;
  blocks_.truncate(id, positions);
}

at::Tensor PagedKvMemory::slots(int64_t id, int64_t from, int64_t to) const {
  const std::vector<int64_t>& table = blocks_.block_table(id);
  const int64_t bs = blocks_.block_size();
  std::vector<int64_t> s;
  s.reserve(static_cast<size_t>(to - from));
  for (int64_t p = from; p < to; ++p) s.push_back(table[static_cast<size_t>(p / bs)] * bs + p % bs);
  return at::tensor(s, at::kLong).to(model_.device());
}

at::Tensor PagedKvMemory::extend(const std::vector<StepSegment>& segments) {
  const at::Device dev = model_.device();
  for (const StepSegment& sg : segments) {
    const auto it = requests_.find(sg.id);
    if (it == requests_.end())
      throw InputError("request " + std::to_string(sg.id + 1) + " holds no KV memory");
    // Positions past the blocks the request holds (a decoding request's extra tokens) need room.
    const int64_t end = it->second.computed + static_cast<int64_t>(sg.tokens.size());
    if (blocks_.length(sg.id) < end)
      throw InputError("request " + std::to_string(sg.id + 1) + " holds KV blocks for " +
                       std::to_string(blocks_.length(sg.id)) + " positions, not the " + std::to_string(end) +
                       " this step writes");
  }
  // Packed end to end, as vLLM flattens a step's tokens: a 268-token prompt admitted with fifteen
  // 12-token suffixes over a cached system prompt costs 450 positions, not 16 x 268.
  const Packed packed = pack(segments, pad_, model_.shape().context);
  Pass pass;
  const int64_t T = packed.input_ids.size(1);
  std::vector<int64_t> write_rows;
  std::vector<at::Tensor> write_slots;
  for (size_t i = 0; i < segments.size(); ++i) {
    const int64_t count = static_cast<int64_t>(segments[i].tokens.size());
    const int64_t start = packed.start[i], row = packed.row[i], column = packed.column[i];
    pass.ids.push_back(segments[i].id);
    pass.start.push_back(start);
    pass.count.push_back(count);
    pass.row.push_back(row);
    pass.column.push_back(column);
    for (int64_t j = 0; j < count; ++j) write_rows.push_back(row * T + column + j);
    write_slots.push_back(slots(segments[i].id, start, start + count));
    pass.read_slots.push_back(slots(segments[i].id, 0, start + count));
  }
  pass.write_rows = at::tensor(write_rows, at::kLong).to(dev);
  pass.write_slots = at::cat(write_slots);
  pass_ = std::move(pass);
  last_prefill_shape_ = {packed.input_ids.size(0), T};
  const at::Tensor logits = forward_packed(model_, packed, this);
  for (const StepSegment& sg : segments) {
    Request& q = requests_.at(sg.id);
    q.computed += static_cast<int64_t>(sg.tokens.size());
    blocks_.seal_upto(sg.id, q.computed);
  }
  return logits;
}

at::Tensor PagedKvMemory::decode(const std::vector<int64_t>& ids, const std::vector<int32_t>& tokens) {
  const at::Device dev = model_.device();
  const int64_t B = static_cast<int64_t>(ids.size());
  Pass pass;
  pass.decode = true;
  std::vector<int64_t> positions, write_slots, lengths;
  std::vector<const std::vector<int64_t>*> tables;
  for (int64_t i = 0; i < B; ++i) {
    const int64_t id = ids[static_cast<size_t>(i)];
    const Request& q = requests_.at(id);
    if (!grow(id, tokens[static_cast<size_t>(i)]))
      throw InputError("the paged KV pool has no free block for request " + std::to_string(id + 1) +
                       "'s next position");
    pass.ids.push_back(id);
    pass.start.push_back(q.computed);
    pass.count.push_back(1);
    positions.push_back(q.computed);
    tables.push_back(&blocks_.block_table(id));
    lengths.push_back(q.computed + 1);
  }
  pass.positions = paged_positions(tables, lengths, blocks_.block_size());
  // The new position is each row's last.
  for (int64_t i = 0; i < B; ++i)
    write_slots.push_back(
        pass.positions.slots[static_cast<size_t>(pass.positions.first[static_cast<size_t>(i) + 1] - 1)]);
  pass.write_slots = at::tensor(write_slots, at::kLong).to(dev);
  pass_ = std::move(pass);
  const at::Tensor pos = at::tensor(positions, at::kLong);
  ForwardInput in;
  in.input_ids =
      at::tensor(std::vector<int64_t>(tokens.begin(), tokens.end()), at::kLong).view({B, 1}).to(dev);
  in.position_ids = pos.view({B, 1}).to(dev);
  const std::optional<LoraBatch> lora = lora_rows(ids);
  in.lora = lora ? &*lora : nullptr;
  in.kv_store = this;
  at::Tensor logits = model_.forward(in);
  for (int64_t id : ids) ++requests_.at(id).computed;
  return logits;
}

at::Tensor PagedKvMemory::attend(int64_t layer, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const AttentionParams& params) {
  const int64_t B = q.size(0), T = q.size(2), H_kv = k.size(1), D = k.size(3);
  const at::Tensor kl = keys_.select(0, layer), vl = values_.select(0, layer);
  // Every row's new positions are stored before any row attends: a request that found another's
  // prompt blocks in the prefix cache in this same prefill reads them once written.
  auto store = [&](const at::Tensor& pool, const at::Tensor& x) {
    const at::Tensor rows = x.permute({0, 2, 1, 3}).reshape({B * T, H_kv, D});
    pool.index_copy_(0, pass_.write_slots,
                     pass_.write_rows.defined() ? rows.index_select(0, pass_.write_rows) : rows);
  };
  store(kl, k);
  store(vl, v);
  if (pass_.decode) {
    // A window is applied by attending over each row's last `window` positions only; the kernel
    // has no soft-capping, so a soft-capped model takes the gather path.
    if (kernel_ == PagedAttentionKernel::InPlace && params.softcap <= 0)
      return paged_decode_attention_cpu(q, kl, vl, decode_positions(params.window), params.scale);
    const auto& [slots, mask] = decode_gather(params.window);
    const int64_t width = mask.size(3);
    auto gather = [&](const at::Tensor& pool) {
      return pool.index_select(0, slots).view({B, width, H_kv, D}).transpose(1, 2);
    };
    AttentionMask m;
    m.mask = mask;
    m.keys = width;
    AttentionParams sdpa = params;  // the baseline: libtorch's SDPA over the gathered copy
    sdpa.decode_kernel = false;
    sdpa.window = 0;
    return servelab::attend(q, gather(kl), gather(vl), m, sdpa);
  }
  // Prefill: each request's queries over its whole context, cached prefix included, gathered
  // once. The padding at the end of a packed row attends to nothing; its output stays zero.
  at::Tensor out = at::zeros(q.sizes(), q.options());
  for (size_t i = 0; i < pass_.ids.size(); ++i) {
    const int64_t start = pass_.start[i], count = pass_.count[i], row = pass_.row[i],
                  column = pass_.column[i];
    const int64_t n = start + count;
    const at::Tensor& read = pass_.read_slots[i];
    const at::Tensor ki = kl.index_select(0, read).permute({1, 0, 2}).unsqueeze(0);
    const at::Tensor vi = vl.index_select(0, read).permute({1, 0, 2}).unsqueeze(0);
    AttentionMask m;
    m.keys = n;
    if (start == 0) {
      m.causal = count > 1;
    } else {
      m.mask = at::ones({count, n}, at::TensorOptions().dtype(at::kBool).device(q.device()))
                   .tril(start)
                   .view({1, 1, count, n});
    }
    out.narrow(0, row, 1)
        .narrow(2, column, count)
        .copy_(servelab::attend(q.narrow(0, row, 1).narrow(2, column, count), ki, vi, m, params));
  }
  return out;
}

bool PagedKvMemory::places(KvPlaces& out) const {
  if (kernel_ != PagedAttentionKernel::InPlace || !keys_.device().is_cpu() ||
      keys_.scalar_type() != at::kFloat || values_.scalar_type() != at::kFloat || !keys_.is_contiguous() ||
      !values_.is_contiguous())
    return false;
  out.clear();
  out.keys = keys_.mutable_data_ptr<float>();
  out.values = values_.mutable_data_ptr<float>();
  out.layer_stride = keys_.stride(0);
  out.head_stride = keys_.stride(2);
  const int64_t per_slot = keys_.stride(1);
  out.first.push_back(0);
  for (size_t i = 0; i < pass_.ids.size(); ++i) {
    const int64_t start = pass_.start[i], count = pass_.count[i];
    if (pass_.decode) {
      out.segments.push_back({static_cast<int64_t>(i), 0, start, count});
      const int64_t* slot = pass_.positions.slots.data() + pass_.positions.first[i];
      for (int64_t p = 0; p < start + count; ++p) out.offsets.push_back(slot[p] * per_slot);
    } else {
      out.segments.push_back({pass_.row[i], pass_.column[i], start, count});
      const at::Tensor read = pass_.read_slots[i].to(at::kLong).contiguous();
      const int64_t* slot = read.const_data_ptr<int64_t>();
      for (int64_t p = 0; p < start + count; ++p) out.offsets.push_back(slot[p] * per_slot);
    }
    out.first.push_back(static_cast<int64_t>(out.offsets.size()));
  }
  return true;
}

const PagedPositions& PagedKvMemory::decode_positions(int64_t window) {
  if (window <= 0) return pass_.positions;
  auto [it, added] = pass_.windowed.try_emplace(window);
  if (added) {
    const PagedPositions& all = pass_.positions;
    PagedPositions& w = it->second;
    w.first.push_back(0);
    for (int64_t b = 0; b < all.rows(); ++b) {
      const int64_t n = std::min(window, all.length(b));
      const auto end = all.slots.begin() + all.first[static_cast<size_t>(b) + 1];
      w.slots.insert(w.slots.end(), end - n, end);
      w.first.push_back(static_cast<int64_t>(w.slots.size()));
    }
  }
  return it->second;
}

const std::pair<at::Tensor, at::Tensor>& PagedKvMemory::decode_gather(int64_t window) {
  auto [it, added] = pass_.gathered.try_emplace(std::max<int64_t>(window, 0));
  if (added) {
    // Every row's context gathered into a [B, width] copy (padding reads slot 0, masked out) for
    // SDPA: the baseline kernel.
    const PagedPositions& pos = decode_positions(window);
    const int64_t B = pos.rows();
    int64_t width = 1;
    for (int64_t i = 0; i < B; ++i) width = std::max(width, pos.length(i));
    std::vector<int64_t> gather(static_cast<size_t>(B * width), 0);
    std::vector<uint8_t> mask(static_cast<size_t>(B * width), 0);
    for (int64_t i = 0; i < B; ++i) {
      const int64_t* slot = pos.slots.data() + pos.first[static_cast<size_t>(i)];
      std::copy(slot, slot + pos.length(i), gather.begin() + i * width);
      std::fill_n(mask.begin() + i * width, pos.length(i), uint8_t{1});
    }
    const at::Device dev = model_.device();
    it->second = {at::tensor(gather, at::kLong).to(dev),
                  at::tensor(mask, at::kByte).to(at::kBool).view({B, 1, 1, width}).to(dev)};
  }
  return it->second;
}

void PagedKvMemory::retire(const std::vector<int64_t>& ids) {
  for (int64_t id : ids) {
    const auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    blocks_.free(id, it->second.computed);
    place_used_[static_cast<size_t>(it->second.place)] = false;
    requests_.erase(it);
  }
}

void PagedKvMemory::snapshot_blocks(BatchStep& step) const {
  step.kv_blocks_total = blocks_.num_blocks();
  step.kv_block_tables.clear();
  for (const auto& entry : requests_)
    step.kv_block_tables.push_back({entry.first, blocks_.block_table(entry.first)});
  step.kv_cached_blocks = blocks_.eviction_order();
}

KvMemoryManager::Usage PagedKvMemory::usage() const {
  Usage u;
  const int64_t bs = blocks_.block_size(), per_position = block_bytes_ / bs;
  u.total_bytes = pool_bytes_;
  u.blocks_total = blocks_.num_blocks();
  u.blocks_used = blocks_.used_blocks();
  u.blocks_cached = blocks_.cached_unused_blocks();
  u.reserved_bytes = u.blocks_used * block_bytes_;
  // Distinct positions: a block shared by several requests counts once.
  std::map<int64_t, int64_t> fill;
  for (const auto& [id, q] : requests_) {
    const std::vector<int64_t>& table = blocks_.block_table(id);
    for (size_t i = 0; i < table.size(); ++i) {
      const int64_t f = std::min(bs, q.computed - static_cast<int64_t>(i) * bs);
      if (f > 0) fill[table[i]] = std::max(fill[table[i]], f);
    }
  }
  for (const auto& [b, f] : fill) u.used_bytes += f * per_position;
  return u;
}

}  // namespace servelab

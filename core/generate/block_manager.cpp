#include "generate/block_manager.h"

#include <algorithm>
#include <string>

#include "util/errors.h"

namespace servelab {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching)
    : num_blocks_(num_blocks), block_size_(block_size), prefix_caching_(prefix_caching) {
  if (num_blocks < 1)
    throw InputError("a paged KV pool needs at least 1 block, got " + std::to_string(num_blocks));
  if (block_size < 1) throw InputError("KV block size must be at least 1, got " + std::to_string(block_size));
  blocks_.resize(static_cast<size_t>(num_blocks));
  // Reversed so that block 0 is handed out first: a fresh pool fills from the front.
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

uint64_t BlockManager::chain_hash(uint64_t parent, int64_t adapter, const int32_t* tokens, int64_t n) {
  // splitmix64 steps over (parent, adapter, tokens): cheap, and any changed input changes the mix.
  auto mix = [](uint64_t h, uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
  };
  uint64_t h = mix(parent, static_cast<uint64_t>(adapter));
  for (int64_t i = 0; i < n; ++i) h = mix(h, static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])));
  return h;
}

int64_t BlockManager::lookup(uint64_t hash, uint64_t parent, int64_t adapter, const int32_t* tokens) const {
  const auto [first, last] = cached_.equal_range(hash);
  for (auto it = first; it != last; ++it) {
    const Block& b = blocks_[static_cast<size_t>(it->second)];
    if (b.parent_hash == parent && b.adapter == adapter &&
        std::equal(b.tokens.begin(), b.tokens.end(), tokens))
      return it->second;
  }
  return -1;
}

int64_t BlockManager::cached_prefix_blocks(const std::vector<int32_t>& tokens, int64_t adapter) const {
  if (!prefix_caching_) return 0;
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t most = (n - 1) / block_size_;  // the last token is always computed
  uint64_t parent = 0;
  for (int64_t i = 0; i < most; ++i) {
    const int32_t* t = tokens.data() + i * block_size_;
    const uint64_t h = chain_hash(parent, adapter, t, block_size_);
    if (lookup(h, parent, adapter, t) < 0) return i;
    parent = h;
  }
  return most;
}

int64_t BlockManager::take_block() {
  if (!free_.empty()) {
    const int64_t b = free_.back();
    free_.pop_back();
    return b;
  }
  if (lru_.empty())
    throw InputError("paged KV pool exhausted: all " + std::to_string(num_blocks_) + " blocks in use");
  const int64_t b = lru_.front();
  lru_.pop_front();
  uncache(b);
  ++evictions_;
  return b;
}

void BlockManager::uncache(int64_t block) {
  Block& b = blocks_[static_cast<size_t>(block)];
  if (!b.hashed) return;
  const auto [first, last] = cached_.equal_range(b.hash);
  for (auto it = first; it != last; ++it)
    if (it->second == block) {
      cached_.erase(it);
      break;
    }
  b.hashed = false;
  b.tokens.clear();
}

void BlockManager::reference(int64_t block) {
  Block& b = blocks_[static_cast<size_t>(block)];
  if (b.refs == 0 && b.hashed) lru_.erase(b.in_lru);
  ++b.refs;
}

void BlockManager::release(int64_t block) {
  Block& b = blocks_[static_cast<size_t>(block)];
  if (--b.refs > 0) return;
  if (b.hashed) {
    b.in_lru = lru_.insert(lru_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void BlockManager::seal(Sequence& s, int64_t index) {
  if (!prefix_caching_) return;
  const uint64_t parent = index == 0 ? 0 : s.hashes[static_cast<size_t>(index - 1)];
  const int32_t* t = s.tokens.data() + index * block_size_;
  const uint64_t h = chain_hash(parent, s.adapter, t, block_size_);
  s.hashes.push_back(h);
  const int64_t id = s.table[static_cast<size_t>(index)];
  Block& b = blocks_[static_cast<size_t>(id)];
  if (b.hashed || lookup(h, parent, s.adapter, t) >= 0) return;  // shared already, or a duplicate
  b.hashed = true;
  b.hash = h;
  b.parent_hash = parent;
  b.adapter = s.adapter;
  b.tokens.assign(t, t + block_size_);
  cached_.emplace(h, id);
}

std::optional<int64_t> BlockManager::allocate(int64_t seq, const std::vector<int32_t>& tokens,
                                              int64_t adapter, bool seal_now) {
  if (seqs_.count(seq)) throw InputError("sequence " + std::to_string(seq) + " already holds KV blocks");
  if (tokens.empty()) throw InputError("sequence " + std::to_string(seq) + " has no tokens to allocate for");
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t hits = cached_prefix_blocks(tokens, adapter);
  std::vector<int64_t> hit_blocks;
  uint64_t parent = 0;
  std::vector<uint64_t> hashes;
  int64_t hits_unused = 0;  // hit blocks sitting in the LRU list: referencing them takes them out
  for (int64_t i = 0; i < hits; ++i) {
    const int32_t* t = tokens.data() + i * block_size_;
    const uint64_t h = chain_hash(parent, adapter, t, block_size_);
    hit_blocks.push_back(lookup(h, parent, adapter, t));
    hashes.push_back(h);
    hits_unused += blocks_[static_cast<size_t>(hit_blocks.back())].refs == 0 ? 1 : 0;
    parent = h;
  }
  const int64_t fresh = blocks_for(n) - hits;
  if (fresh > available_blocks() - hits_unused) return std::nullopt;
  Sequence s;
  s.adapter = adapter;
  s.tokens = tokens;
  s.hashes = std::move(hashes);
  for (int64_t b : hit_blocks) {
    reference(b);
    s.table.push_back(b);
  }
  for (int64_t i = 0; i < fresh; ++i) {
    const int64_t b = take_block();
    reference(b);
    s.table.push_back(b);
  }
  if (seal_now)
    for (int64_t i = hits; i < n / block_size_; ++i) seal(s, i);
  seqs_.emplace(seq, std::move(s));
  lookup_tokens_ += n;
  hit_tokens_ += hits * block_size_;
  return hits * block_size_;
}

bool BlockManager::append(int64_t seq, int32_t token) {
  Sequence& s = seqs_.at(seq);
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  if (n % block_size_ == 0) {
    if (available_blocks() == 0) return false;
    const int64_t b = take_block();
    reference(b);
    s.table.push_back(b);
  }
  s.tokens.push_back(token);
  if ((n + 1) % block_size_ == 0) seal_upto(seq, n + 1);
  return true;
}

void BlockManager::seal_upto(int64_t seq, int64_t positions) {
  if (!prefix_caching_) return;
  Sequence& s = seqs_.at(seq);
  const int64_t full = std::min<int64_t>(positions, static_cast<int64_t>(s.tokens.size())) / block_size_;
  for (int64_t i = static_cast<int64_t>(s.hashes.size()); i < full; ++i) seal(s, i);
}

std::optional<std::pair<int64_t, int64_t>> BlockManager::fork(int64_t parent, int64_t child) {
  if (seqs_.count(child)) throw InputError("sequence " + std::to_string(child) + " already holds KV blocks");
  const Sequence& p = seqs_.at(parent);
  const int64_t n = static_cast<int64_t>(p.tokens.size());
  const bool partial = n % block_size_ != 0;
  if (partial && available_blocks() == 0)
    throw InputError("no free KV block to fork sequence " + std::to_string(parent) + " into " +
                     std::to_string(child));
  Sequence c = p;
  std::optional<std::pair<int64_t, int64_t>> copy;
  const int64_t full = n / block_size_;
  for (int64_t i = 0; i < full; ++i) reference(c.table[static_cast<size_t>(i)]);
  if (partial) {
    const int64_t b = take_block();
    reference(b);
    copy = std::make_pair(c.table.back(), b);
    c.table.back() = b;
  }
  seqs_.emplace(child, std::move(c));
  return copy;
}

void BlockManager::truncate(int64_t seq, int64_t length) {
  Sequence& s = seqs_.at(seq);
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  if (length < 1 || length > n)
    throw InputError("cannot truncate sequence " + std::to_string(seq) + " of " + std::to_string(n) +
                     " tokens to " + std::to_string(length));
  // A block sealed with tokens now dropped: out of the cache, unless another sequence shares it
  // (then its tokens are that sequence's too, and stay true).
  const int64_t full = length / block_size_;
  for (int64_t i = full; i < static_cast<int64_t>(s.hashes.size()); ++i) {
    const int64_t b = s.table[static_cast<size_t>(i)];
    if (blocks_[static_cast<size_t>(b)].refs == 1 && blocks_[static_cast<size_t>(b)].hashed &&
        blocks_[static_cast<size_t>(b)].hash == s.hashes[static_cast<size_t>(i)])
      uncache(b);
  }
  if (static_cast<int64_t>(s.hashes.size()) > full) s.hashes.resize(static_cast<size_t>(full));
  const int64_t keep = blocks_for(length);
  while (static_cast<int64_t>(s.table.size()) > keep) {
    release(s.table.back());
    s.table.pop_back();
  }
  s.tokens.resize(static_cast<size_t>(length));
}

void BlockManager::free(int64_t seq, int64_t computed) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  const std::vector<int64_t>& table = it->second.table;
  if (computed >= 0)
    for (size_t i = static_cast<size_t>(computed / block_size_); i < table.size(); ++i)
      if (blocks_[static_cast<size_t>(table[i])].refs == 1) uncache(table[i]);
  // Tail first, so that of one sequence's cached blocks the last ones are evicted first: a later
  // prompt more likely shares the beginning.
  for (auto b = table.rbegin(); b != table.rend(); ++b) release(*b);
  seqs_.erase(it);
}

const std::vector<int64_t>& BlockManager::block_table(int64_t seq) const {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw InputError("sequence " + std::to_string(seq) + " holds no KV blocks");
  return it->second.table;
}

int64_t BlockManager::length(int64_t seq) const {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw InputError("sequence " + std::to_string(seq) + " holds no KV blocks");
  return static_cast<int64_t>(it->second.tokens.size());
}

std::vector<int64_t> BlockManager::sequences() const {
  std::vector<int64_t> ids;
  for (const auto& [id, s] : seqs_) ids.push_back(id);
  return ids;
}

}  // namespace servelab

#pragma once
// The bookkeeping of paged KV memory (vLLM's block manager), with no model and no tensors in it:
// a pool of num_blocks blocks of block_size token positions, a free list, a block table per
// sequence, blocks handed out as a sequence grows and returned when it ends, reference counts for
// blocks several sequences share, and automatic prefix caching.
//
// Prefix caching: a block that is full is identified by a hash of its tokens chained with the
// hash of the block before it and the sequence's adapter, so equal hashes mean equal keys and
// values at every layer. A new sequence reuses the cached blocks of its longest cached prefix;
// blocks nobody references any more stay cached and are evicted least recently used only when a
// block is needed. Only full blocks are ever shared, and a full block is never written again, so
// no copy-on-write is needed: a sequence's partial last block is always its own (fork copies it).
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

namespace servelab {

class BlockManager {
 public:
  // prefix_caching off: blocks are never shared between sequences (fork aside) nor kept once free.
  BlockManager(int64_t num_blocks, int64_t block_size, bool prefix_caching);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }
  // Blocks that hold `positions` token positions.
  int64_t blocks_for(int64_t positions) const { return (positions + block_size_ - 1) / block_size_; }

  // Blocks a new sequence could take now: free ones plus cached ones nobody references.
  int64_t available_blocks() const { return static_cast<int64_t>(free_.size() + lru_.size()); }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t cached_unused_blocks() const { return static_cast<int64_t>(lru_.size()); }
  // Blocks referenced by at least one sequence.
  int64_t used_blocks() const { return num_blocks_ - available_blocks(); }

  // Blocks of `tokens` that are cached for `adapter` (0: the base model), from the start, leaving
  // at least the last token uncached (its logits must be computed). No side effects.
  int64_t cached_prefix_blocks(const std::vector<int32_t>& tokens, int64_t adapter) const;

  // Gives sequence `seq` (not yet known) blocks for `tokens`: its longest cached prefix shared,
  // the rest fresh. Returns the number of leading tokens whose keys and values are cached already,
  // or nullopt (and changes nothing) when the blocks do not fit. seal_now: its full blocks join
  // the prefix cache at once (their keys and values are written before anyone reads them); else
  // only as seal_upto() says they are (chunked prefill writes a prompt over several steps).
  std::optional<int64_t> allocate(int64_t seq, const std::vector<int32_t>& tokens, int64_t adapter,
                                  bool seal_now = true);
  // The sequence's full blocks within its first `positions` tokens join the prefix cache.
  void seal_upto(int64_t seq, int64_t positions);
  // Makes room for one more token at the end of `seq` and records it; false (and changes nothing)
  // when a new block is needed and none is available.
  bool append(int64_t seq, int32_t token);
  // Drops the sequence's tokens from `length` on (speculative tokens the verification rejected):
  // blocks past it go back to the pool, and a block it cuts into leaves the prefix cache (its
  // tokens are no longer what it holds). InputError when length is beyond the sequence or below 1.
  void truncate(int64_t seq, int64_t length);
  // A new sequence `child` with parent's tokens: full blocks shared, the partial last block (if
  // any) copied into a fresh one. Returns {source, destination} of that copy, or nullopt when the
  // parent ends on a block boundary. Throws InputError when no block is available for the copy.
  std::optional<std::pair<int64_t, int64_t>> fork(int64_t parent, int64_t child);
  // Drops the sequence's references: blocks no one else holds go back to the free list, or, when
  // full and hashed, to the cached-unused LRU list. computed: positions whose keys and values were
  // actually written (-1: all); a block it does not cover whole is never kept cached (a request
  // preempted after append() but before its decode ran).
  void free(int64_t seq, int64_t computed = -1);

  bool has(int64_t seq) const { return seqs_.count(seq) != 0; }
  const std::vector<int64_t>& block_table(int64_t seq) const;
  // Token positions the sequence holds.
  int64_t length(int64_t seq) const;
  int64_t ref_count(int64_t block) const { return blocks_[static_cast<size_t>(block)].refs; }
  // The block cached for a hash, if any (for tests and the KV view).
  bool is_cached(int64_t block) const { return blocks_[static_cast<size_t>(block)].hashed; }
  // Cached-unused blocks from least to most recently used (the eviction order).
  std::vector<int64_t> eviction_order() const { return {lru_.begin(), lru_.end()}; }
  std::vector<int64_t> sequences() const;

  // Positions of prompts looked up and found cached since construction (prefix-cache hit rate).
  int64_t lookup_tokens() const { return lookup_tokens_; }
  int64_t hit_tokens() const { return hit_tokens_; }
  int64_t evictions() const { return evictions_; }

 private:
  struct Block {
    int64_t refs = 0;
    bool hashed = false;
    uint64_t hash = 0;
    uint64_t parent_hash = 0;
    int64_t adapter = 0;
    std::vector<int32_t> tokens;          // the block's tokens, compared on a hash hit
    std::list<int64_t>::iterator in_lru;  // valid while refs == 0 and hashed
  };
  struct Sequence {
    std::vector<int64_t> table;
    std::vector<int32_t> tokens;
    std::vector<uint64_t> hashes;  // of its full blocks, in order (prefix caching only)
    int64_t adapter = 0;
  };
  static uint64_t chain_hash(uint64_t parent, int64_t adapter, const int32_t* tokens, int64_t n);
  // A cached block holding exactly these tokens after `parent` for `adapter`, or -1.
  int64_t lookup(uint64_t hash, uint64_t parent, int64_t adapter, const int32_t* tokens) const;
  // A block with no references: from the free list, else the least recently used cached one.
  int64_t take_block();
  void reference(int64_t block);
  void release(int64_t block);
  void uncache(int64_t block);
  // Hashes the sequence's block `index` (now full) and caches it unless an equal block is cached.
  void seal(Sequence& s, int64_t index);

  int64_t num_blocks_, block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<int64_t> free_;  // a stack: the most recently freed block is reused first
  std::list<int64_t> lru_;     // cached, unreferenced: front is the least recently used
  std::unordered_multimap<uint64_t, int64_t> cached_;
  std::map<int64_t, Sequence> seqs_;
  int64_t lookup_tokens_ = 0, hit_tokens_ = 0, evictions_ = 0;
};

}  // namespace servelab

#pragma once
// What the scheduler asks of a KV memory layout when it decides who runs: does a request fit at
// all, can it be admitted now, how much of its prompt is cached, is there room for its next
// positions, which positions will be written this step. Torch-free, so that the scheduler's
// decisions can be tested against a fake layout without a model (tests/core/test_scheduler_core).
// Every KV layout (slot, paged, the course's merge/filter) implements it through KvMemoryManager.
#include <cstdint>
#include <string>
#include <vector>

#include "util/errors.h"

namespace servelab {

struct PrefillRequest {
  int64_t id;                              // the scheduler's request id
  const std::vector<int32_t>* prompt_ids;  // outlives the call
  int64_t max_new_tokens;
  // Which weights computed its keys and values (0: the base model, else an adapter): prefix caching
  // shares blocks only between requests with the same key.
  int64_t adapter_key = 0;
};

class KvBookkeeping {
 public:
  virtual ~KvBookkeeping() = default;
  // Why the request can never run in this memory (its prompt and new tokens need more than all
  // of it), or empty.
  virtual std::string never_fits(const PrefillRequest& /*r*/) const { return {}; }
  // Takes KV memory for a request about to be admitted (its prompt's positions); false, changing
  // nothing, when it does not fit now.
  virtual bool reserve(const PrefillRequest& r) = 0;
  // Positions of a request whose keys and values are written (after reserve(): the prefix found
  // in the prefix cache).
  virtual int64_t computed(int64_t id) const = 0;
  // Positions [0, positions) of a reserved request will be written by the end of this step: a
  // layout that shares prompt blocks (paged KV's prefix cache) may offer them to requests admitted
  // after this call. Prompt positions not committed are never shared.
  virtual void commit(int64_t /*id*/, int64_t /*positions*/) {}
  // Room for the position the request's `token` takes at its next decode; false when memory is
  // out (the scheduler then preempts).
  virtual bool grow(int64_t /*id*/, int32_t /*token*/) { return true; }
  // Room for several tokens at the request's next positions (a decoding request verifying
  // proposed tokens): all of them or, returning false, none.
  virtual bool grow_tokens(int64_t /*id*/, const std::vector<int32_t>& /*tokens*/) { return true; }
  // Forgets a running request's positions from `positions` on (proposed tokens the verification
  // rejected): they are written again later, and a layout that shares blocks never offers them.
  // InputError from a layout that cannot (the course's merge/filter, which never verifies).
  virtual void truncate(int64_t id, int64_t positions) {
    throw InputError("this KV layout cannot take back positions (request " + std::to_string(id + 1) + " to " +
                     std::to_string(positions) + ")");
  }
  // Frees the memory of finished (or preempted) requests.
  virtual void retire(const std::vector<int64_t>& ids) = 0;
};

}  // namespace servelab

#pragma once
// CUDA graphs for decode steps. On a GPU a small model's decode step is host time: hundreds of
// kernel launches of a few microseconds of work each. A step captured once as a CUDA graph and
// replayed costs one launch, so the charts show the GPU's time rather than ours.
//
// A graph fixes every tensor's shape and address. The step is therefore the continuous-batching
// form of the forward (ForwardInput's cache_rows / cache_positions), over static device buffers
// that each step overwrites: the tokens, their positions, the cache row and index each writes, and
// the span of keys each cache row sees. Graphs are keyed by (rows, cache rows, key width), each
// rounded up to a bucket, and captured when first needed; rows beyond the step's repeat its first
// row (the same inputs write the same keys and values to the same place). Prefill, mixed steps,
// LoRA and KV stores (paged KV) stay eager.
#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/decode_graph_stats.h"
#include "model/kv_cache.h"

namespace servelab {

class Model;

// One row of a decode step.
struct DecodeRow {
  int64_t token = 0;
  int64_t cache_row = 0;  // the KvCache row it reads and writes
  int64_t position = 0;   // its position id (rotary or learned position embeddings)
  int64_t write_at = 0;   // the cache index its key and value go to
  int64_t first_key = 0;  // it sees cache indices [first_key, write_at] (left padding before)
};

// The batch sizes graphs are captured for: powers of two below max_batch, and max_batch.
std::vector<int64_t> graph_batch_buckets(int64_t max_batch);
// The smallest of graph_batch_buckets(max_batch) holding `rows`, or 0 when none does.
int64_t graph_batch_bucket(int64_t rows, int64_t max_batch);
// Key widths: the smallest power of two from 256 up holding `keys`, capped at the capacity.
int64_t graph_width_bucket(int64_t keys, int64_t capacity);

// Why this model's decode steps cannot run as CUDA graphs here ("" when they can): not on a GPU,
// switched off (Model::set_cuda_graphs), or a build without libtorch's CUDA classes.
std::string cuda_graphs_unavailable(const Model& model);
// The same test without the message, for the decode step (no string built per step).
bool cuda_graphs_usable(const Model& model);
// Whether this build can capture CUDA graphs at all.
bool cuda_graphs_built();

class DecodeGraphs {
 public:
  // cache: the KV memory the steps read and write; it must outlive this object and keep its
  // buffers (the graphs hold their addresses).
  DecodeGraphs(const Model& model, KvCache& cache);
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // Logits [rows, vocab] of one decode step over the cache (the cache's own length is neither
  // used nor advanced). Replays the bucket's graph, capturing it first when needed; runs eagerly
  // when the rows exceed the largest bucket or a capture failed (stats().fallback says why).
  at::Tensor step(const std::vector<DecodeRow>& rows);
  const DecodeGraphStats& stats() const { return stats_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  DecodeGraphStats stats_;
};

// A KV cache with the decode graphs captured over it: what generate() keeps between runs of the
// same batch and capacity on a GPU (Model::take_graphed_cache), so that only a model's first run
// of a shape pays for capture, as an engine that captures at startup.
struct GraphedKvCache {
  GraphedKvCache(const Model& model, int64_t batch, int64_t capacity);
  KvCache cache;
  DecodeGraphs graphs;
};

}  // namespace servelab

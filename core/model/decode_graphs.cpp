#include "model/decode_graphs.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <tuple>
#include <utility>

#include "model/model.h"
#include "util/device.h"
#include "util/errors.h"

#if SERVELAB_CUDA_GRAPHS
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace servelab {

std::vector<int64_t> graph_batch_buckets(int64_t max_batch) {
  std::vector<int64_t> buckets;
  for (int64_t n = 1; n < max_batch; n *= 2) buckets.push_back(n);
  if (max_batch > 0) buckets.push_back(max_batch);
  return buckets;
}

int64_t graph_batch_bucket(int64_t rows, int64_t max_batch) {
  for (int64_t b : graph_batch_buckets(max_batch))
    if (b >= rows) return b;
  return 0;
}

int64_t graph_width_bucket(int64_t keys, int64_t capacity) {
  int64_t w = 256;
  while (w < keys) w *= 2;
  return std::min(w, capacity);
}

bool cuda_graphs_built() {
#if SERVELAB_CUDA_GRAPHS
  return true;
#else
  return false;
#endif
}

bool cuda_graphs_usable(const Model& model) {
  return model.cuda_graphs() && model.device().is_cuda() && cuda_graphs_built();
}

std::string cuda_graphs_unavailable(const Model& model) {
  if (!model.cuda_graphs()) return "switched off (--cuda-graphs off)";
  if (!model.device().is_cuda()) return "CUDA graphs need a GPU; the model runs on " + model.device().str();
  if (!cuda_graphs_built())
    return "this build has no CUDA graph support (the CUDA runtime headers were not found when it was "
           "configured)";
  return "";
}

namespace {

// The smallest power of two holding n, capped at cap.
int64_t pow2_bucket(int64_t n, int64_t cap) {
  int64_t b = 1;
  while (b < n) b *= 2;
  return std::min(b, cap);
}

}  // namespace

struct DecodeGraphs::Impl {
  Impl(const Model& m, KvCache& c)
      : model(m),
        cache(c),
        max_batch(std::max<int64_t>(1, m.cuda_graph_max_batch())),
        cache_rows(c.batch()),
        capacity(c.capacity()) {
    const at::TensorOptions longs = at::TensorOptions().dtype(at::kLong);
    const int64_t n = 4 * max_batch + 2 * cache_rows;
    packed = at::zeros({n}, longs.device(m.device()));
    staging = at::zeros({n}, longs.pinned_memory(m.device().is_cuda()));
    ids = packed.narrow(0, 0, max_batch);
    pos = packed.narrow(0, max_batch, max_batch);
    rows = packed.narrow(0, 2 * max_batch, max_batch);
    write = packed.narrow(0, 3 * max_batch, max_batch);
    first = packed.narrow(0, 4 * max_batch, cache_rows).view({cache_rows, 1});
    last = packed.narrow(0, 4 * max_batch + cache_rows, cache_rows).view({cache_rows, 1});
    arange = at::arange(capacity, longs.device(m.device())).view({1, capacity});
  }

  // The step over the static buffers: `batch` input rows, the cache's first `rows_used` rows,
  // keys [0, width). What a graph captures, and what its warm-up runs.
  at::Tensor forward(int64_t batch, int64_t rows_used, int64_t width) {
    KvCache view = cache.rows(0, rows_used);
    ForwardInput in;
    in.input_ids = ids.narrow(0, 0, batch).view({batch, 1});
    in.position_ids = pos.narrow(0, 0, batch).view({batch, 1});
    in.cache_rows = rows.narrow(0, 0, batch);
    in.cache_positions = write.narrow(0, 0, batch);
    const at::Tensor j = arange.narrow(1, 0, width);
    in.key_mask = (j >= first.narrow(0, 0, rows_used)) & (j <= last.narrow(0, 0, rows_used));
    return model.forward(in, &view);
  }

  // Fills the static buffers for a step of `batch` rows (the step's, then copies of its first).
  void load(const std::vector<DecodeRow>& step, int64_t batch) {
#if SERVELAB_CUDA_GRAPHS
    if (loaded) copied.synchronize();  // the previous step's copy has left the pinned buffer
#endif
    int64_t* s = staging.data_ptr<int64_t>();
    std::fill(s, s + staging.numel(), 0);
    for (int64_t i = 0; i < batch; ++i) {
      const DecodeRow& r = step[static_cast<size_t>(i < static_cast<int64_t>(step.size()) ? i : 0)];
      s[i] = r.token;
      s[max_batch + i] = r.position;
      s[2 * max_batch + i] = r.cache_row;
      s[3 * max_batch + i] = r.write_at;
    }
    for (const DecodeRow& r : step) {
      s[4 * max_batch + r.cache_row] = r.first_key;
      s[4 * max_batch + cache_rows + r.cache_row] = r.write_at;
    }
    packed.copy_(staging, /*non_blocking=*/true);
#if SERVELAB_CUDA_GRAPHS
    copied.record();
    loaded = true;
#endif
  }

  const Model& model;
  KvCache& cache;
  const int64_t max_batch, cache_rows, capacity;
  // Device: tokens, positions, cache rows, write indices [max_batch each], then each cache row's
  // first and last visible key [cache_rows each]; one copy from the pinned staging buffer a step.
  at::Tensor packed, staging;
  at::Tensor ids, pos, rows, write, first, last, arange;

#if SERVELAB_CUDA_GRAPHS
  struct Graph {
    at::cuda::CUDAGraph graph;
    at::Tensor logits;  // in the graphs' memory pool, overwritten by every replay
  };
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::unique_ptr<Graph>> graphs;
  // One memory pool for all the graphs: they never run at once, so their activations can share it.
  // (the pool id's type moved between libtorch versions: taken from CUDAGraph::pool()).
  std::optional<decltype(std::declval<at::cuda::CUDAGraph&>().pool())> pool;
  at::cuda::CUDAEvent copied;
  bool loaded = false;
#endif
};

DecodeGraphs::DecodeGraphs(const Model& model, KvCache& cache)
    : impl_(std::make_unique<Impl>(model, cache)) {}

DecodeGraphs::~DecodeGraphs() = default;

GraphedKvCache::GraphedKvCache(const Model& model, int64_t batch, int64_t capacity)
    : cache(model.make_cache(batch, capacity)), graphs(model, cache) {}

at::Tensor DecodeGraphs::step(const std::vector<DecodeRow>& step_rows) {
  if (step_rows.empty()) throw InputError("a decode step needs at least one row");
  Impl& d = *impl_;
  int64_t rows_needed = 0, keys = 0;
  for (const DecodeRow& r : step_rows) {
    if (r.cache_row < 0 || r.cache_row >= d.cache_rows || r.write_at < 0 || r.write_at >= d.capacity ||
        r.first_key < 0 || r.first_key > r.write_at)
      throw InputError("decode row (cache row " + std::to_string(r.cache_row) + ", index " +
                       std::to_string(r.write_at) + ") outside the KV cache of " +
                       std::to_string(d.cache_rows) + " rows x " + std::to_string(d.capacity) + " positions");
    rows_needed = std::max(rows_needed, r.cache_row + 1);
    keys = std::max(keys, r.write_at + 1);
  }
  const int64_t n = static_cast<int64_t>(step_rows.size());
  const int64_t rows_used = pow2_bucket(rows_needed, d.cache_rows);
  const int64_t width = graph_width_bucket(keys, d.capacity);
  const int64_t batch = graph_batch_bucket(n, d.max_batch);
  c10::InferenceMode guard;
  const bool graphs = cuda_graphs_usable(d.model) && stats_.fallback.empty() && batch > 0;
  if (!graphs) {
    // Eager over fresh tensors: the same forward with the step's own sizes.
    ++stats_.eager_steps;
    const at::Device dev = d.model.device();
    std::vector<int64_t> ids, pos, rows, write, first(static_cast<size_t>(rows_needed), 0),
        last(static_cast<size_t>(rows_needed), 0);
    for (const DecodeRow& r : step_rows) {
      ids.push_back(r.token);
      pos.push_back(r.position);
      rows.push_back(r.cache_row);
      write.push_back(r.write_at);
      first[static_cast<size_t>(r.cache_row)] = r.first_key;
      last[static_cast<size_t>(r.cache_row)] = r.write_at;
    }
    const auto on = [&](const std::vector<int64_t>& v) { return at::tensor(v, at::kLong).to(dev); };
    ForwardInput in;
    in.input_ids = on(ids).view({n, 1});
    in.position_ids = on(pos).view({n, 1});
    in.cache_rows = on(rows);
    in.cache_positions = on(write);
    const at::Tensor j = at::arange(keys, at::TensorOptions().dtype(at::kLong).device(dev)).view({1, keys});
    in.key_mask = (j >= on(first).view({-1, 1})) & (j <= on(last).view({-1, 1}));
    KvCache view = d.cache.rows(0, rows_needed);
    return d.model.forward(in, &view);
  }
#if SERVELAB_CUDA_GRAPHS
  const at::Device dev = d.model.device();
  c10::cuda::CUDAGuard device_guard(dev.index() < 0 ? c10::DeviceIndex{0} : dev.index());
  d.load(step_rows, batch);
  const auto key = std::make_tuple(batch, rows_used, width);
  auto it = d.graphs.find(key);
  if (it == d.graphs.end()) {
    auto g = std::make_unique<Impl::Graph>();
    const auto t0 = std::chrono::steady_clock::now();
    synchronize(dev);
    const c10::DeviceIndex index = dev.index() < 0 ? 0 : dev.index();
    // Memory the caching allocator holds (the graphs' pool comes from it); [0]: all pools.
    const auto reserved = [index] {
      return c10::cuda::CUDACachingAllocator::getDeviceStats(index).reserved_bytes[0].current;
    };
    const int64_t reserved_before = reserved();
    try {
      // Captured on a side stream (capture cannot use the legacy default stream); the warm-up runs
      // the step for real first (cuBLAS handles and workspaces, lazily loaded kernels), and writes
      // the same keys and values the replay writes again.
      c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, index);
      {
        c10::cuda::CUDAStreamGuard stream_guard(side);
        d.forward(batch, rows_used, width);
        side.synchronize();
        if (d.pool) {
          g->graph.capture_begin(*d.pool);
        } else {
          g->graph.capture_begin();
        }
        try {
          g->logits = d.forward(batch, rows_used, width);
          g->graph.capture_end();
        } catch (...) {
          try {
            g->graph.capture_end();
          } catch (...) {
          }
          throw;
        }
        if (!d.pool) d.pool = g->graph.pool();
      }
      synchronize(dev);
    } catch (const c10::Error& e) {
      synchronize(dev);
      stats_.fallback =
          std::string("CUDA graph capture failed, decoding eagerly: ") + e.what_without_backtrace();
      return step(step_rows);
    }
    ++stats_.captured;
    stats_.capture_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    stats_.memory_bytes += std::max<int64_t>(0, reserved() - reserved_before);
    it = d.graphs.emplace(key, std::move(g)).first;
  }
  it->second->graph.replay();
  ++stats_.replays;
  // The graph's output is overwritten by the next replay: the caller gets its own copy.
  return it->second->logits.narrow(0, 0, n).clone();
#else
  (void)rows_used;
  (void)width;
  throw InputError("CUDA graphs are not built in");
#endif
}

}  // namespace servelab

#include "model/model.h"

#include <cmath>

#include "lora/multi_lora.h"
#include "model/decode_graphs.h"
#include "util/errors.h"

namespace servelab {

const Projection& Model::projection(LinearSlot slot) const {
  for (const Projection& p : projections_)
    if (p.slot == slot) return p;
  throw InputError("a " + shape_.architecture + " block has no projection number " +
                   std::to_string(static_cast<int>(slot)));
}

std::string Model::fused_decode_unavailable() const {
  return "the " + shape_.architecture +
         " architecture has no fused decode program (the Llama family has one)";
}

struct Model::GraphedKvCaches {
  std::mutex mutex;
  std::vector<std::unique_ptr<GraphedKvCache>> kept;  // most recent last
};

std::unique_ptr<GraphedKvCache> Model::take_graphed_cache(int64_t batch, int64_t capacity) const {
  if (!cuda_graphs_usable(*this)) return nullptr;
  std::call_once(graphed_once_, [this] { graphed_ = std::make_shared<GraphedKvCaches>(); });
  {
    std::lock_guard<std::mutex> lock(graphed_->mutex);
    auto& kept = graphed_->kept;
    for (auto it = kept.begin(); it != kept.end(); ++it) {
      if ((*it)->cache.batch() == batch && (*it)->cache.capacity() == capacity) {
        std::unique_ptr<GraphedKvCache> c = std::move(*it);
        kept.erase(it);
        c->cache.reset();
        return c;
      }
    }
  }
  return std::make_unique<GraphedKvCache>(*this, batch, capacity);
}

void Model::keep_graphed_cache(std::unique_ptr<GraphedKvCache> cache) const {
  if (!cache || !graphed_) return;
  std::lock_guard<std::mutex> lock(graphed_->mutex);
  auto& kept = graphed_->kept;
  kept.push_back(std::move(cache));
  if (kept.size() > 2) kept.erase(kept.begin());
}

KvCache Model::make_cache(int64_t batch, int64_t capacity) const {
  return KvCache(shape_.n_layer, batch, shape_.n_kv_head, capacity, shape_.head_dim,
                 at::TensorOptions().dtype(dtype()).device(device()));
}

int64_t Model::kv_cache_bytes(int64_t batch, int64_t capacity) const {
  return KvCache::bytes_needed(shape_.n_layer, batch, shape_.n_kv_head, capacity, shape_.head_dim, dtype());
}

StepCostModel Model::cost_model() const {
  std::vector<MatrixShape> matrices;
  for (const Projection& p : projections_) matrices.push_back({p.in, p.out});
  const auto bytes = static_cast<int64_t>(c10::elementSize(dtype()));
  StepCostModel cost(shape_, std::move(matrices), weight_quant_, bytes, bytes);
  // Kernels over a file's own quantized blocks (a GGUF run as stored): what they hold per parameter.
  if (!weight_quant_.is_quantized() && kernels_ && !kernels_->holds_dense_weights() && parameter_count() > 0)
    cost.set_stored_bytes_per_weight(static_cast<double>(resident_bytes()) /
                                     static_cast<double>(parameter_count()));
  return cost;
}

at::Tensor Model::add_lora(int64_t layer, LinearSlot slot, const at::Tensor& x, at::Tensor y,
                           const LoraBatch& lora) {
  return lora.apply(layer, slot, x, std::move(y));
}

void check_finite_tensors(const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                          const std::string& source) {
  for (const auto& [name, t] : tensors) {
    if (!t.defined() || !at::isFloatingType(t.scalar_type()) || t.numel() == 0) continue;
    // An fp32 sum first (one vectorised pass, far cheaper than isfinite().all(): docs/benchmarks.md,
    // "The cost of checking for NaN and infinity"); the mask only when the sum is not finite.
    if (std::isfinite(t.sum(at::kFloat).item<float>())) continue;
    if (at::isfinite(t).all().item<bool>()) continue;
    const at::Tensor flat = t.reshape({-1});
    const int64_t nan = at::isnan(flat).sum().item<int64_t>();
    const int64_t inf = at::isinf(flat).sum().item<int64_t>();
    const int64_t first = at::logical_not(at::isfinite(flat)).nonzero().select(1, 0)[0].item<int64_t>();
    throw ModelFormatError(source + ": tensor \"" + name + "\" holds " + std::to_string(nan) + " NaN and " +
                           std::to_string(inf) + " infinite values (the first at flat index " +
                           std::to_string(first) + ")");
  }
}

}  // namespace servelab

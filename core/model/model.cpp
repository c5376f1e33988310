#include "model/model.h"

#include "lora/multi_lora.h"
#include "util/errors.h"

namespace servelab {

const Projection& Model::projection(LinearSlot slot) const {
  for (const Projection& p : projections_)
    if (p.slot == slot) return p;
  throw InputError("a " + shape_.architecture + " block has no projection number " +
                   std::to_string(static_cast<int>(slot)));
}

KvCache Model::make_cache(int64_t batch, int64_t capacity) const {
  return KvCache(shape_.n_layer, batch, shape_.n_kv_head, capacity, shape_.head_dim,
                 at::TensorOptions().dtype(dtype()).device(device()));
}

int64_t Model::kv_cache_bytes(int64_t batch, int64_t capacity) const {
  return KvCache::bytes_needed(shape_.n_layer, batch, shape_.n_kv_head, capacity, shape_.head_dim, dtype());
}

at::Tensor Model::add_lora(int64_t layer, LinearSlot slot, const at::Tensor& x, at::Tensor y,
                           const LoraBatch& lora) {
  return lora.apply(layer, slot, x, std::move(y));
}

}  // namespace servelab

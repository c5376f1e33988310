#include "model/kv_cache.h"

#include "util/device.h"
#include "util/errors.h"

namespace servelab {

KvCache::KvCache(int64_t n_layer, int64_t batch, int64_t n_head, int64_t capacity, int64_t head_dim,
                 at::TensorOptions options)
    : batch_(batch), capacity_(capacity) {
  try {
    keys_ = at::zeros({n_layer, batch, n_head, capacity, head_dim}, options);
    values_ = at::zeros({n_layer, batch, n_head, capacity, head_dim}, options);
  } catch (const c10::Error& e) {
    if (!is_out_of_memory(e)) throw;
    const double gib = static_cast<double>(bytes_needed(n_layer, batch, n_head, capacity, head_dim,
                                                        c10::typeMetaToScalarType(options.dtype()))) /
                       (1 << 30);
    throw OutOfMemoryError("out of memory allocating a KV cache of " + std::to_string(gib) + " GiB (batch " +
                           std::to_string(batch) + ", " + std::to_string(capacity) + " positions) on " +
                           options.device().str());
  }
}

int64_t KvCache::bytes_needed(int64_t n_layer, int64_t batch, int64_t n_head, int64_t capacity,
                              int64_t head_dim, at::ScalarType dtype) {
  return 2 * n_layer * batch * n_head * capacity * head_dim * static_cast<int64_t>(c10::elementSize(dtype));
}

int64_t KvCache::bytes() const { return 2 * keys_.numel() * static_cast<int64_t>(keys_.element_size()); }

std::pair<at::Tensor, at::Tensor> KvCache::append(int64_t layer, const at::Tensor& k, const at::Tensor& v) {
  const int64_t t = k.size(2);
  if (length_ + t > capacity_)
    throw InputError("KV cache full: " + std::to_string(length_) + " + " + std::to_string(t) +
                     " positions exceed its capacity of " + std::to_string(capacity_));
  at::Tensor kl = keys_.select(0, layer);
  at::Tensor vl = values_.select(0, layer);
  kl.narrow(2, length_, t).copy_(k);
  vl.narrow(2, length_, t).copy_(v);
  return {kl.narrow(2, 0, length_ + t), vl.narrow(2, 0, length_ + t)};
}

void KvCache::advance(int64_t tokens) { length_ += tokens; }

}  // namespace servelab

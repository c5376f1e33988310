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

void KvCache::set_length(int64_t length) {
  if (length < 0 || length > capacity_)
    throw InputError("KV cache length " + std::to_string(length) + " outside its capacity of " +
                     std::to_string(capacity_));
  length_ = length;
}

KvCache::KvCache(at::Tensor keys, at::Tensor values)
    : keys_(std::move(keys)), values_(std::move(values)), batch_(keys_.size(1)), capacity_(keys_.size(3)) {}

KvCache KvCache::rows(int64_t first, int64_t count) const {
  return KvCache(keys_.narrow(1, first, count), values_.narrow(1, first, count));
}

std::pair<at::Tensor, at::Tensor> KvCache::write_at(int64_t layer, const at::Tensor& k, const at::Tensor& v,
                                                    const at::Tensor& rows, const at::Tensor& positions,
                                                    int64_t width) {
  if (width > capacity_)
    throw InputError("KV cache key width " + std::to_string(width) + " exceeds its capacity of " +
                     std::to_string(capacity_));
  using at::indexing::Slice;
  at::Tensor kl = keys_.select(0, layer);
  at::Tensor vl = values_.select(0, layer);
  // Row i's new key lands at [rows[i], :, positions[i], :]: one scattered write, no row is moved.
  kl.index_put_({rows, Slice(), positions}, k.select(2, 0));
  vl.index_put_({rows, Slice(), positions}, v.select(2, 0));
  return {kl.narrow(2, 0, width), vl.narrow(2, 0, width)};
}

}  // namespace servelab

#pragma once
// Preallocated key/value cache, written in place: a decode step copies one new position per
// layer into the buffer and never concatenates the whole cache (the cost the course's code pays).
#include <ATen/ATen.h>

namespace servelab {

class KvCache {
 public:
  // One [batch, heads, capacity, head_dim] key and value buffer per layer.
  KvCache(int64_t n_layer, int64_t batch, int64_t n_head, int64_t capacity, int64_t head_dim,
          at::TensorOptions options);

  // Bytes a cache of this shape takes, for the memory check done before allocating it.
  static int64_t bytes_needed(int64_t n_layer, int64_t batch, int64_t n_head, int64_t capacity,
                              int64_t head_dim, at::ScalarType dtype);

  int64_t capacity() const { return capacity_; }
  int64_t batch() const { return batch_; }
  // Number of positions already written (same for every row; padding is masked, not skipped).
  int64_t length() const { return length_; }
  int64_t bytes() const;

  // Writes k, v ([batch, heads, T, head_dim]) at positions [length, length + T) of a layer and
  // returns views over [0, length + T). advance(T) is called once per forward after all layers.
  std::pair<at::Tensor, at::Tensor> append(int64_t layer, const at::Tensor& k, const at::Tensor& v);
  void advance(int64_t tokens);
  void reset() { length_ = 0; }
  // For a cache whose rows were filled by copying into buffers() (merging batches).
  void set_length(int64_t length);

  // Continuous batching, where every row has its own length (kept by the caller, not here):
  // writes one new position for each of n rows, k and v [n, heads, 1, head_dim] at
  // [rows[i], :, positions[i]] (rows, positions: [n] int64), and returns views over [0, width) of
  // every cache row.
  std::pair<at::Tensor, at::Tensor> write_at(int64_t layer, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& rows, const at::Tensor& positions,
                                             int64_t width);
  // Rows [first, first + count) as a cache of their own that shares this one's memory (length 0):
  // a forward through it writes straight into those rows.
  KvCache rows(int64_t first, int64_t count) const;
  // The whole [layers, batch, heads, capacity, head_dim] buffers, for the memory managers of
  // continuous batching that move requests' positions between caches.
  const at::Tensor& keys() const { return keys_; }
  const at::Tensor& values() const { return values_; }

 private:
  KvCache(at::Tensor keys, at::Tensor values);

  at::Tensor keys_;    // [layers, batch, heads, capacity, head_dim]
  at::Tensor values_;  // same
  int64_t batch_;
  int64_t capacity_;
  int64_t length_ = 0;
};

}  // namespace servelab

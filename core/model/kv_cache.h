#pragma once
// Preallocated key/value cache, written in place: a decode step copies one new position per
// layer into the buffer and never concatenates the whole cache (the cost the seeds pay).
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

 private:
  at::Tensor keys_;    // [layers, batch, heads, capacity, head_dim]
  at::Tensor values_;  // same
  int64_t batch_;
  int64_t capacity_;
  int64_t length_ = 0;
};

}  // namespace servelab

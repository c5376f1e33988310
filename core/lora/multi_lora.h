#pragma once
// Many adapters in one batch (lesson 6 and beyond): every row of a forward pass may use its own
// adapter, or none. The three strategies compute the same deltas, y += scale * x A B per row:
//   loop       the course's: one row at a time, two small matmuls per row and matrix
//   gathered   the course's: the rows' A and B index_selected from one stack, one batched matmul pair
//   segmented  rows grouped by adapter, one product pair per segment (Punica / LoRAX's SGMV); on
//              the CPU in fp32 a fused kernel that reads each adapter's A and B once per segment
#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "lora/lora_adapter.h"
#include "lora/lora_spec.h"

namespace servelab {

// The course's loras_a / loras_b: every adapter of a run in one tensor per matrix, index 0 the "no
// adapter" zeros, ranks padded with zeros to the largest one (which changes no product), scale
// folded into B.
class LoraStack {
 public:
  explicit LoraStack(const std::vector<const LoraAdapter*>& adapters);
  // 1 + position in the list; 0 for nullptr. InputError for an adapter not in the stack.
  int64_t index_of(const LoraAdapter* adapter) const;
  // [n + 1, in, r_max] and [n + 1, r_max, out]; undefined when no adapter wraps the matrix.
  const at::Tensor& a(int64_t layer, LinearSlot slot) const { return a_[key(layer, slot)]; }
  const at::Tensor& b(int64_t layer, LinearSlot slot) const { return b_[key(layer, slot)]; }
  int64_t bytes() const;

 private:
  static size_t key(int64_t layer, LinearSlot slot) {
    return static_cast<size_t>(layer) * kLinearSlotCount + static_cast<size_t>(slot);
  }
  std::vector<const LoraAdapter*> adapters_;
  std::vector<at::Tensor> a_, b_;
};

class LoraBatch {
 public:
  // One entry per row of the forward pass's input (null: the base model). Gathered uses `stack`,
  // which must hold every adapter named; without one it stacks the rows' adapters itself.
  LoraBatch(std::vector<const LoraAdapter*> rows, MultiLoraStrategy strategy,
            std::shared_ptr<const LoraStack> stack = nullptr);

  // y [rows * T, out] (the base product) plus every row's delta for x [rows * T, in], rows of x
  // batch-major (row b owns positions b*T .. b*T + T - 1). Returns y, updated in place when it is
  // contiguous.
  at::Tensor apply(int64_t layer, LinearSlot slot, const at::Tensor& x, at::Tensor y) const;

  bool any() const { return !segments_.empty(); }
  int64_t rows() const { return static_cast<int64_t>(rows_.size()); }
  int64_t distinct_adapters() const { return static_cast<int64_t>(segments_.size()); }
  MultiLoraStrategy strategy() const { return strategy_; }

 private:
  struct Segment {
    const LoraAdapter* adapter;
    std::vector<int64_t> rows;  // batch rows, ascending
  };
  at::Tensor loop(int64_t layer, LinearSlot slot, const at::Tensor& x, at::Tensor y, int64_t T) const;
  at::Tensor gathered(int64_t layer, LinearSlot slot, const at::Tensor& x, at::Tensor y, int64_t T) const;
  at::Tensor segmented(int64_t layer, LinearSlot slot, const at::Tensor& x, at::Tensor y, int64_t T) const;

  std::vector<const LoraAdapter*> rows_;
  MultiLoraStrategy strategy_;
  std::vector<Segment> segments_;
  std::shared_ptr<const LoraStack> stack_;
  at::Tensor stack_index_;  // [rows] int64 on the device (gathered)
};

}  // namespace servelab

#pragma once
// fp32 projections in one weight layout of our own that both a decode GEMV and a register-blocked
// GEMM read at full speed: each matrix [out, in] stored as blocks of 16 output channels, the inner
// (input) dimension contiguous within a block, [ceil(out / 16), in, 16], the last block padded
// with zeros. One step over the inner dimension is one 64-byte line holding one input's weight
// for 16 outputs: a single AVX-512 vector, multiplied by a broadcast input and added into 16
// outputs at once, so that neither kernel ever sums across a vector.
// - 1 to kBlockedGemvMaxRows rows (decode): each thread streams its share of the blocks, a few
//   independent accumulators per row, every weight read once from memory;
// - more rows: a kMicroRows x (kMicroBlocks x 16) register tile, each weight vector used for
//   kMicroRows rows, a group of blocks kept in L2 while every row of x goes past it.
// The kernels follow active_isa() (util/cpu_features.h) at every call: AVX-512F; AVX2+FMA (a block
// is two ymm vectors, a tile of its own shape); or portable C++ loops over the same layout.
#include <ATen/ATen.h>

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "util/cpu_features.h"

namespace servelab {

constexpr int64_t kBlockedWidth = 16;       // output channels per block: one AVX-512 vector
constexpr int64_t kBlockedGemvMaxRows = 7;  // rows up to this run the GEMV, more the GEMM

// Whether the blocked kernels run here: the CPU and fp32 (every ISA has a path).
bool blocked_linear_available(at::Device device, at::ScalarType dtype, std::string* why_not = nullptr);
// What blocked_linear runs under `isa`, in words (engine info).
std::string blocked_linear_kernel(Isa isa);

// A fp32 weight matrix in the blocked layout. Packing and unpacking are copies: the values come
// back bit for bit.
class BlockedMatrix {
 public:
  BlockedMatrix() = default;
  // From [out, in] (nn.Linear, an embedding used as a head) or [in, out] (GPT-2's Conv1D).
  static BlockedMatrix from_out_in(const at::Tensor& w);
  static BlockedMatrix from_in_out(const at::Tensor& w);
  // The plain matrix again, [out, in].
  at::Tensor to_out_in() const;

  bool defined() const { return packed_.defined(); }
  int64_t out_features() const { return out_; }
  int64_t in_features() const { return packed_.defined() ? packed_.size(1) : 0; }
  const at::Tensor& packed() const { return packed_; }  // [blocks, in, 16]
  // Bytes held, the zero padding of the last block included.
  int64_t bytes() const { return packed_.defined() ? packed_.numel() * 4 : 0; }

 private:
  at::Tensor packed_;
  int64_t out_ = 0;
};

// x [rows, in] (fp32, CPU) times w transposed plus bias ([out], or undefined): [rows, out]. Throws
// InputError naming the problem for any other input, and where blocked_linear_available says no.
at::Tensor blocked_linear(const at::Tensor& x, const BlockedMatrix& w, const at::Tensor& bias = {});

// The four projections of every block in the blocked layout (the plain matrices are released),
// and the LM head. The head is tied to wte, which the embedding keeps as it is; the head runs a
// blocked copy (the same memory as oneDNN's second, prepacked copy) at every row count: at 1 to 7
// rows the blocked GEMV over it took 4.7-5.1 ms where fp32_gemv_cpu over wte's plain rows took
// 5.7-10.7 ms (bench_linear_kernels, GPT-2 small's head, 2 threads).
class BlockedLinearKernels final : public LinearKernels {
 public:
  // Takes the projections out of a model's matrices (Model::with_kernels), whatever their
  // architecture and layout, and an untied LM head, which is then only kept blocked.
  explicit BlockedLinearKernels(LinearMatrices& matrices);

  at::Tensor linear(int64_t layer, LinearSlot slot, const at::Tensor& x,
                    const at::Tensor& bias) const override;
  bool handles_embeddings() const override { return false; }
  at::Tensor embed(const at::Tensor& ids, const at::Tensor& positions) const override;
  at::Tensor lm_head(const at::Tensor& h) const override;
  int64_t resident_bytes() const override;
  std::string description() const override;
  bool holds_dense_weights() const override { return true; }
  at::Tensor dense_weight(int64_t layer, LinearSlot slot) const override;
  at::Tensor dense_lm_head() const override;

 private:
  std::vector<std::array<BlockedMatrix, kLinearSlotCount>> layers_;  // by LinearSlot
  BlockedMatrix head_;                                               // blocked copy of the LM head
  at::Tensor head_rows_;  // the tied wte [vocab, in], for the plain-row GEMV (shared, not a copy)
};

// The same model with its projections and LM head in the blocked layout (the embeddings stay, and
// dense_weights() rebuilds the rest), any architecture. Throws InputError when
// blocked_linear_available says no, or when other kernels already run its matrices.
std::unique_ptr<Model> pack_blocked_model(const Model& model);
// The same, typed as the model's own class (Gpt2Model, LlamaModel).
template <class M>
std::unique_ptr<M> pack_blocked_linears(const M& model) {
  return std::unique_ptr<M>(static_cast<M*>(pack_blocked_model(model).release()));
}

}  // namespace servelab

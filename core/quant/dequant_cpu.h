#pragma once
// Fused dequantization on the CPU, one pass from the quantized bytes to fp32, for the JIT path:
// - dequantize_rows_cpu: a block of rows before a GEMM (ATen would need five or six passes for
//   int4: mask, shift, interleave, convert, scale, shift; and two for the course's format);
// - fused_linear_cpu: the whole product for a batch of rows, each thread dequantizing a few output
//   channels at a time into a buffer that stays in L1 and multiplying them with a register-tiled
//   kernel right away, so that no fp32 block ever travels through the caches or memory.
// Every kernel follows active_isa() (util/cpu_features.h) when it is called: AVX-512F, AVX2 + FMA
// + F16C, or (Generic) portable C++ row dequantization, the fused products then unsupported.
// Both run over libtorch's intra-op threads, and both dequantize exactly as
// QuantizedTensor::dequantize does (a multiply, then an add: no fused multiply-add), so that the
// weights they multiply equal the dequantize-once ones bit for bit.
#include <ATen/ATen.h>

#include <memory>
#include <string>

#include "quant/quantizer.h"
#include "util/cpu_features.h"

namespace servelab {

// Whether dequantize_rows_cpu handles this tensor: a contiguous CPU matrix of any quantized scheme
// (every ISA, Generic included).
bool fused_dequant_supported(const QuantizedTensor& q);
// Rows [begin, begin + out.size(0)) of q into out (fp32, [rows, cols], contiguous). Per-channel
// int8 gives its integers (the caller scales the product).
void dequantize_rows_cpu(const QuantizedTensor& q, int64_t begin, at::Tensor& out);

// Whether fused_linear_cpu handles this matrix: active_isa() avx512 or avx2, and a contiguous CPU
// matrix of any quantized scheme (the course's uint8, per-channel int8, int4 groups, fp16, bf16).
bool fused_linear_supported(const QuantizedTensor& w);
// x [rows, cols] (fp32) times the dequantized w transposed: [rows, w.rows()], fp32, without bias.
// Per-channel int8 multiplies its integers and applies the scale to the output (one rounding, as
// y * scale after the product would). Meant for a few to a hundred rows: each thread walks its
// share of the output channels once, so the weights are read once per call whatever the rows.
at::Tensor fused_linear_cpu(const QuantizedTensor& w, const at::Tensor& x);

// The decode product, 1 to kFusedGemvMaxRows rows of x: each weight dequantized in registers and
// used at once, so only the quantized bytes travel. Needs avx512 or avx2 active, columns in multiples of 32
// and (int4) groups of a multiple of 32. Per-channel int8 scales the output, as fused_linear_cpu does.
constexpr int64_t kFusedGemvMaxRows = 7;
// What the fused kernels run under `isa`, in words (engine info).
std::string fused_kernels(Isa isa);
bool fused_gemv_supported(const QuantizedTensor& w);
at::Tensor fused_gemv_cpu(const QuantizedTensor& w, const at::Tensor& x);
// The same kernel over a plain fp32 matrix w [out, in] (contiguous, in a multiple of 32):
// x [1..kFusedGemvMaxRows, in] times w transposed.
bool fp32_gemv_supported(const at::Tensor& w);
at::Tensor fp32_gemv_cpu(const at::Tensor& w, const at::Tensor& x);
// The most rows a DecodeGemv takes: the JIT kernels' tiled products end there.
constexpr int64_t kDecodeGemvMaxRows = 128;
// The most rows for which the tiled products over fp32 activations (fused_linear_cpu from 8 rows,
// DecodeGemv's tiles) run under `isa` before the JIT kernels dequantize the matrix once and
// multiply through oneDNN; the decode program leaves steps past it to them. Measured on the
// built-in model's Q4_1 matrices, two threads (docs/benchmarks.md): AVX2's 4-channel tiles,
// FMA-bound on half the vector width, still win a 16-row decode step and lose from about 24 rows
// (a 32-row step took 1.35x dequantize-once's time, a 100-token prefill 2.9x); AVX-512's win up to
// about 64 rows, and from 72 to 128 dequantize-once runs either faster or slower than them from one
// process to the next (77 or 130 ms for a 100-token prefill against the tiles' 112), so they keep
// all 128. 0 where there are no tiles (the portable ISA).
int64_t tiled_max_rows(Isa isa);
// A decode product (1 to kDecodeGemvMaxRows rows) for a caller that runs its own threads: the decode
// program (model/decode_program.h) runs a whole layer inside one parallel region and splits each
// product by output channels itself, so it needs the kernel without fused_gemv_cpu's allocation,
// operand preparation and parallel region around it. The kernels are fused_gemv_cpu's and
// fp32_gemv_cpu's, so every channel's value is theirs bit for bit, and they follow active_isa() at
// each call as those do.
class DecodeGemv {
 public:
  virtual ~DecodeGemv() = default;
  // The fused GEMV over fp32 activations: null unless fused_gemv_supported(w), or w is a plain
  // fp32 matrix (QuantScheme::None) that fp32_gemv_supported takes. Keeps w's tensors alive.
  // (int8_activation_decode_gemv, quant/int8_activations.h, is the integer-activation one.)
  static std::shared_ptr<const DecodeGemv> of(const QuantizedTensor& w);
  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  // Floats of scratch that prepare() may fill for m rows.
  virtual int64_t operand_floats(int64_t m) const = 0;
  // The most rows it runs the way the op-by-op product would: the GEMV up to kFusedGemvMaxRows,
  // the tiles up to kDecodeGemvMaxRows where the JIT kernels tile the matrix (where
  // rows_follow_isa(), up to tiled_max_rows(active_isa()) as well: read it when the step runs).
  virtual int64_t max_rows() const = 0;
  // Whether max_rows() follows the active ISA (tiled_max_rows).
  virtual bool rows_follow_isa() const { return false; }
  // Whether run() reads a prepared operand for m rows (x reordered, transposed, quantized, or with
  // its groups' sums) rather than x itself.
  virtual bool prepares(int64_t m) const = 0;
  // Rows [row0, row1) and columns [col0, col1) of x ([m, in], contiguous) into scratch as run()
  // reads them, where prepares(m): col0 a multiple of operand_align(), col1 too or in(), so that
  // threads can each prepare a part. Returns what run() reads: scratch, or x itself.
  virtual const float* prepare(const float* x, int64_t m, float* scratch, int64_t row0, int64_t row1,
                               int64_t col0, int64_t col1) const = 0;
  const float* prepare(const float* x, int64_t m, float* scratch) const {
    return prepare(x, m, scratch, 0, m, 0, in_);
  }
  // The column step prepare() splits at.
  virtual int64_t operand_align() const = 0;
  // y[r * ldy + c] for rows r < m and output channels c in [c0, c1), from prepare()'s operand; past
  // kFusedGemvMaxRows rows c0 is a multiple of 8 and c1 too, or out().
  virtual void run(const float* operand, int64_t m, int64_t c0, int64_t c1, float* y, int64_t ldy) const = 0;

 protected:
  DecodeGemv(int64_t out, int64_t in) : out_(out), in_(in) {}

 private:
  int64_t out_ = 0, in_ = 0;
};

// Any number of rows: the GEMV up to kFusedGemvMaxRows, else fused_linear_cpu's tiles (the rows
// copied, not converted).
at::Tensor fp32_linear_cpu(const at::Tensor& w, const at::Tensor& x);

}  // namespace servelab

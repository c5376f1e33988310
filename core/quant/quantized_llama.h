#pragma once
// The Llama family on quantized weights, two ways in:
// - quantize_llama: the dense weights of a loaded model quantized in any of our schemes (the
//   Quantization tab's and `--quant`'s modes), as GPT-2 is in quantized_model.h;
// - ggml_as_stored / load_llama_gguf_as_stored: a GGUF file's own blocks kept as they are and run
//   by the same kernels. Q4_1 is a 4-bit code with a scale and a minimum per group of 32, which is
//   our int4-g32; Q4_0 is the same with the minimum -8 d; Q8_0 is an int8 group of 32 with a scale,
//   and so is Q5_0 (codes q - 16); Q4_K's sub-blocks are int4-g32 too (scale d * sc, minimum
//   -dmin * m) and Q6_K's int8 groups of 16 (scale d * sc). Q5_1's and Q5_K's 5-bit codes above a
//   minimum fit neither and are dequantized at load.
//   The conversions only repack (ggml puts value j and j + 16 in one byte, we put 2j and 2j + 1)
//   and widen the fp16 scales: the weights the kernels multiply equal the dequantized file's bit for
//   bit (ggml_quants.h says why each product is exact).
#include <ATen/ATen.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "model/gguf_file.h"
#include "model/llama_model.h"
#include "quant/quantized_model.h"

namespace servelab {

// The projections, the embedding and an untied head quantized by spec (norms and biases stay as
// they are). Throws InputError naming the tensor when a shape does not fit the scheme.
QuantizedMatrices quantize_llama(const LlamaConfig& config, const LlamaWeights& weights,
                                 const QuantSpec& spec);

// The model over quantized matrices: DequantOnce rebuilds dense weights in the activations' dtype;
// Jit and Native keep the matrices quantized inside the kernels. rest holds the norms and biases.
std::unique_ptr<LlamaModel> build_quantized_llama(const LlamaConfig& config, const LlamaWeights& rest,
                                                  const QuantizedMatrices& q, at::ScalarType activations,
                                                  QuantExec exec, int64_t jit_block_bytes = 1 << 21);

// A GGUF matrix's blocks in the form our kernels read (see above), on the CPU; nullopt for the block
// types none of them reads (Q5_1, Q5_K), which are dequantized at load instead.
std::optional<QuantizedTensor> ggml_as_stored(const GgufTensor& tensor);

// A GGUF Llama with every matrix the kernels read kept as stored (JIT kernels, fp32 activations on
// the CPU); the others and the norms dequantized. run_as gets one line for `info`, e.g.
// "Q4_1 as int4-g32, Q8_0 as int8-g32 (fused JIT kernels); F32 as fp32". int8_activations: the
// int4/int8 groups multiply int8-quantized activations (--quant-exec jit-int8, as llama.cpp does).
std::unique_ptr<LlamaModel> load_llama_gguf_as_stored(const GgufFile& file, const LlamaConfig& config,
                                                      std::string* run_as, bool int8_activations = false);

}  // namespace servelab

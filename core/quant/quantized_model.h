#pragma once
// A whole GPT-2 quantized, its memory accounting, and the three ways to run it; and what quantized
// kernels hold for any architecture (QuantizedMatrices).
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "model/gpt2_model.h"
#include "quant/quantizer.h"

namespace servelab {

struct QuantizedParameter {
  std::string name;  // HF name, e.g. "transformer.h.0.attn.c_attn.weight"
  QuantizedTensor tensor;
};

struct QuantizedGpt2 {
  QuantSpec spec;
  Gpt2Config config;
  bool lm_head_tied = true;
  // Every parameter in Gpt2Weights::named_tensors() order. Outside the course's mode only the
  // matrices are quantized; biases and LayerNorms stay as loaded (scheme None).
  std::vector<QuantizedParameter> parameters;

  const QuantizedTensor& at(const std::string& name) const;
};

// What kernels over quantized weights run, for any architecture: each block's projections by slot
// (those the architecture's projection table names; the others stay empty), the embeddings and the
// head. The schemes may differ between matrices (a GGUF file's Q4_1 projections and Q8_0 embedding);
// native kernels need one scheme throughout.
struct QuantizedMatrices {
  QuantSpec spec;
  std::vector<std::array<QuantizedTensor, kLinearSlotCount>> layers;
  QuantizedTensor token_embedding;     // [vocab, E]
  QuantizedTensor position_embedding;  // [context, E] for GPT-2; empty where positions are rotary
  QuantizedTensor head;                // [vocab, E]; unused when tied
  bool head_tied = true;
};

// The matrices of a quantized GPT-2 by slot (shared tensors, not copies).
QuantizedMatrices gpt2_matrices(const QuantizedGpt2& q);

// Memory of a quantized model, to the byte.
struct QuantizedBytes {
  int64_t parameters = 0;
  int64_t quantized = 0;  // values of quantized parameters
  int64_t states = 0;     // their scales / zero points / minimums
  int64_t other = 0;      // parameters left unquantized, at their own element size
  int64_t total() const { return quantized + states + other; }
};

// Quantizes every parameter the scheme covers. Throws InputError when a shape does not fit the
// scheme (an int4 group size that does not divide a row).
QuantizedGpt2 quantize_gpt2(const Gpt2Config& config, const Gpt2Weights& weights, const QuantSpec& spec);
QuantizedBytes quantized_bytes(const QuantizedGpt2& q);
QuantizedBytes quantized_bytes(const std::vector<QuantizedParameter>& parameters);
// HF's get_memory_footprint() extra for GPT-2: the attn.bias (bool [1, 1, P, P]) and
// attn.masked_bias (one fp32) buffers of every layer, which the course's figure includes.
int64_t hf_gpt2_buffer_bytes(const Gpt2Config& config);

// The execution Auto resolves to for this scheme on this device, and whether Native exists
// (why not, when it does not).
QuantExec resolve_quant_exec(const QuantSpec& spec, at::Device device);
bool native_quant_available(const QuantSpec& spec, at::Device device, std::string* why_not = nullptr);

// A runnable model: DequantOnce rebuilds fp32 (the activations' dtype) weights; Jit and Native
// keep the matrices quantized inside LinearKernels (no fp32 copy is kept). Throws InputError for
// Native where the scheme has no kernel on the device.
std::unique_ptr<Gpt2Model> build_quantized_model(const QuantizedGpt2& q, at::ScalarType activations,
                                                 QuantExec exec, int64_t jit_block_bytes = 1 << 21);

}  // namespace servelab

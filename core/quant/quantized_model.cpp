#include "quant/quantized_model.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include "quant/quant_kernels.h"
#include "util/errors.h"

namespace servelab {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Conv1D weights are [in, out]; stored transposed so that rows are output channels.
bool is_conv1d_weight(const std::string& name) {
  return ends_with(name, "attn.c_attn.weight") || ends_with(name, "attn.c_proj.weight") ||
         ends_with(name, "mlp.c_fc.weight") || ends_with(name, "mlp.c_proj.weight");
}

// Looked up by name: the GPU machine's libtorch may be older and lack some of these.
bool has_op(const char* name) { return c10::Dispatcher::singleton().findSchema({name, ""}).has_value(); }

}  // namespace

const QuantizedTensor& QuantizedGpt2::at(const std::string& name) const {
  for (const auto& p : parameters)
    if (p.name == name) return p.tensor;
  throw InputError("quantized model has no parameter " + name);
}

QuantizedGpt2 quantize_gpt2(const Gpt2Config& config, const Gpt2Weights& weights, const QuantSpec& spec) {
  QuantizedGpt2 q;
  q.spec = spec;
  q.config = config;
  q.lm_head_tied = weights.lm_head_tied;
  for (const auto& [name, t] : weights.named_tensors()) {
    if (!t.defined())
      throw InputError("cannot quantize " + name + ": the model holds no plain tensor for it");
    const bool matrix = t.dim() == 2;
    QuantSpec s = spec;
    if (!matrix && spec.scheme != QuantScheme::ZeroPointUint8) s.scheme = QuantScheme::None;
    try {
      q.parameters.push_back({name, quantize_tensor(t, s, is_conv1d_weight(name))});
    } catch (const InputError& e) {
      throw InputError(spec.mode_name() + ": " + name + ": " + e.what());
    }
  }
  return q;
}

QuantizedMatrices gpt2_matrices(const QuantizedGpt2& q) {
  QuantizedMatrices m;
  m.spec = q.spec;
  m.token_embedding = q.at("transformer.wte.weight");
  m.position_embedding = q.at("transformer.wpe.weight");
  m.head_tied = q.lm_head_tied;
  if (!q.lm_head_tied) m.head = q.at("lm_head.weight");
  for (int64_t l = 0; l < q.config.n_layer; ++l) {
    std::array<QuantizedTensor, kLinearSlotCount> w;
    for (LinearSlot s : {LinearSlot::Attn, LinearSlot::AttnProj, LinearSlot::Fc, LinearSlot::MlpProj})
      w[static_cast<size_t>(s)] =
          q.at("transformer.h." + std::to_string(l) + "." + gpt2_slot_name(s) + ".weight");
    m.layers.push_back(std::move(w));
  }
  return m;
}

QuantizedBytes quantized_bytes(const QuantizedGpt2& q) { return quantized_bytes(q.parameters); }

QuantizedBytes quantized_bytes(const std::vector<QuantizedParameter>& parameters) {
  QuantizedBytes b;
  for (const auto& p : parameters) {
    b.parameters += p.tensor.numel();
    if (p.tensor.scheme == QuantScheme::None) {
      b.other += p.tensor.value_bytes();
    } else {
      b.quantized += p.tensor.value_bytes();
      b.states += p.tensor.state_bytes();
    }
  }
  return b;
}

int64_t hf_gpt2_buffer_bytes(const Gpt2Config& c) {
  return c.n_layer * (c.n_positions * c.n_positions * 1 + 4);
}

bool native_quant_available(const QuantSpec& spec, at::Device device, std::string* why_not) {
  auto no = [&](const std::string& why) {
    if (why_not) *why_not = why;
    return false;
  };
  switch (spec.scheme) {
    case QuantScheme::None:
      return no("the fp32 model has nothing to run natively");
    case QuantScheme::ZeroPointUint8:
      return no(
          "the course's zero point is a float (the minimum), which no integer kernel takes; run it with "
          "jit or dequant-once");
    case QuantScheme::PerChannelInt8:
      if (!has_op("aten::_weight_int8pack_mm"))
        return no(
            "this libtorch has no weight-only int8 GEMM (_weight_int8pack_mm); run int8-channel with jit");
      return true;
    case QuantScheme::Int4Group:
      if (!device.is_cpu())
        return no(
            "native int4 is wired for the CPU kernel only (CUDA's tinygemm wants bf16 and its own tile "
            "layout); run int4 with jit on " +
            device.str());
      if (!has_op("aten::_weight_int4pack_mm_for_cpu"))
        return no("this libtorch has no _weight_int4pack_mm_for_cpu; run int4 with jit");
      return true;
    case QuantScheme::Int8Group:
      return no("int8 groups (GGUF's Q8_0) run with jit: no library kernel takes a scale per group");
    case QuantScheme::Fp16:
    case QuantScheme::Bf16:
      return true;
  }
  return no("unknown scheme");
}

QuantExec resolve_quant_exec(const QuantSpec& spec, at::Device device) {
  if (spec.exec != QuantExec::Auto) return spec.exec;
  if (spec.scheme == QuantScheme::None) return QuantExec::DequantOnce;
  // Per-channel int8 on the CPU: our JIT GEMV (fp32 activations, the fused decode program) beats
  // libtorch's weight-only int8 GEMM, which needs bf16 activations to be fast (2.8 against 6.0 ms a
  // SmolLM2 decode step on 2 threads).
  if (device.is_cpu() && spec.scheme == QuantScheme::PerChannelInt8) return QuantExec::Jit;
  return native_quant_available(spec, device) ? QuantExec::Native : QuantExec::Jit;
}

std::unique_ptr<Gpt2Model> build_quantized_model(const QuantizedGpt2& q, at::ScalarType act, QuantExec exec,
                                                 int64_t jit_block_bytes) {
  const Gpt2Config& c = q.config;
  const at::Device device = q.parameters.front().tensor.values.device();
  if (exec == QuantExec::Auto) {
    QuantSpec s = q.spec;
    s.exec = exec;
    exec = resolve_quant_exec(s, device);
  }
  // Plain tensors for what is not a matrix (all of it for dequantize-once); the matrices stay
  // undefined for the kernels.
  const bool all = exec == QuantExec::DequantOnce || q.spec.scheme == QuantScheme::None;
  auto get = [&](const std::string& name) -> at::Tensor {
    const QuantizedTensor& t = q.at(name);
    if (!all && t.shape.size() == 2) return {};
    return t.dequantize_parameter(act);
  };
  Gpt2Weights w;
  w.wte = get("transformer.wte.weight");
  w.wpe = get("transformer.wpe.weight");
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    Gpt2LayerWeights lw;
    lw.ln_1_weight = get(p + "ln_1.weight");
    lw.ln_1_bias = get(p + "ln_1.bias");
    lw.c_attn_weight = get(p + "attn.c_attn.weight");
    lw.c_attn_bias = get(p + "attn.c_attn.bias");
    lw.c_proj_weight = get(p + "attn.c_proj.weight");
    lw.c_proj_bias = get(p + "attn.c_proj.bias");
    lw.ln_2_weight = get(p + "ln_2.weight");
    lw.ln_2_bias = get(p + "ln_2.bias");
    lw.c_fc_weight = get(p + "mlp.c_fc.weight");
    lw.c_fc_bias = get(p + "mlp.c_fc.bias");
    lw.mlp_proj_weight = get(p + "mlp.c_proj.weight");
    lw.mlp_proj_bias = get(p + "mlp.c_proj.bias");
    w.layers.push_back(std::move(lw));
  }
  w.ln_f_weight = get("transformer.ln_f.weight");
  w.ln_f_bias = get("transformer.ln_f.bias");
  w.lm_head_tied = q.lm_head_tied;
  w.lm_head = q.lm_head_tied ? w.wte : get("lm_head.weight");
  if (all) return std::make_unique<Gpt2Model>(c, std::move(w));
  const QuantizedMatrices matrices = gpt2_matrices(q);
  std::shared_ptr<const LinearKernels> kernels =
      exec == QuantExec::Native
          ? make_native_kernels(matrices, act, device)
          : make_jit_kernels(matrices, act, jit_block_bytes, exec == QuantExec::JitInt8);
  return std::make_unique<Gpt2Model>(c, std::move(w), std::move(kernels));
}

}  // namespace servelab

// GPT-2's record in the architecture registry (architecture.h): its file names, how a folder or a
// GGUF becomes a Gpt2Model, its packed fp32 GEMMs (oneDNN and blocked) and its quantization.
#include <filesystem>

#include "model/architecture.h"
#include "model/gguf_file.h"
#include "model/gpt2_gguf.h"
#include "model/gpt2_model.h"
#include "model/gpt2_weights.h"
#include "model/packed_linear.h"
#include "quant/quantized_model.h"

namespace servelab {

namespace {

const Gpt2Model& as_gpt2(const Model& m) { return dynamic_cast<const Gpt2Model&>(m); }

QuantTarget gpt2_quant_target(const Model& model) {
  const Gpt2Model& ref = as_gpt2(model);
  QuantTarget t;
  // The reference's fp32 weights as plain tensors (rebuilt from oneDNN's or the blocked layout when packed).
  auto dense = std::make_shared<const Gpt2Weights>(ref.dense_weights());
  t.named = dense->named_tensors();
  t.hf_buffer_bytes = hf_gpt2_buffer_bytes(ref.config());
  // Dequantize-once models run the same GEMMs as the reference, so only the weights differ.
  const GemmBackend gemm = gemm_backend_of(ref);
  t.quantize = [&ref, dense, gemm](const QuantSpec& spec) {
    auto q = std::make_shared<QuantizedGpt2>(quantize_gpt2(ref.config(), *dense, spec));
    QuantizedSet set;
    set.parameters = q->parameters;
    set.build = [&ref, q, gemm](QuantExec used) -> std::unique_ptr<Model> {
      std::unique_ptr<Gpt2Model> m = build_quantized_model(*q, ref.dtype(), used);
      if (used == QuantExec::DequantOnce && gemm != GemmBackend::Aten) m = apply_gemm_backend(*m, gemm);
      return m;
    };
    return set;
  };
  return t;
}

}  // namespace

Architecture gpt2_architecture() {
  Architecture a;
  a.name = "gpt2";
  a.display = "GPT-2";
  a.model_types = {"gpt2"};
  a.gguf_architectures = {"gpt2"};
  a.hf_root = "transformer.";
  a.hf_blocks = "h.";
  a.projection_names = gpt2_projections(Gpt2Config::gpt2_small());
  for (Projection& p : a.projection_names) p.in = p.out = 0;
  a.sharded_folders = false;
  a.load_folder = [](const std::string& dir, at::Device device, at::ScalarType dtype) {
    const std::filesystem::path root(dir);
    const Gpt2Config config = parse_gpt2_config((root / "config.json").string());
    return std::make_unique<Gpt2Model>(
        config, load_gpt2_weights((root / "model.safetensors").string(), config, device, dtype));
  };
  a.load_gguf = [](const GgufFile& file, at::Device device, at::ScalarType dtype) {
    const Gpt2Config config = gpt2_config_from_gguf(file);
    return std::make_unique<Gpt2Model>(config, load_gpt2_gguf(file, config, device, dtype));
  };
  // Our as-stored kernels are wired for the Llama family's projections: GPT-2 files are dequantized.
  a.load_gguf_as_stored = nullptr;
  a.plain_gemm = "aten addmm";
  a.onednn_gemm = true;
  a.dequantized_keeps_gemm = true;
  a.quantize = [](const Model& m, const QuantSpec& spec, GemmBackend gemm) -> std::unique_ptr<Model> {
    const Gpt2Model& base = as_gpt2(m);
    std::unique_ptr<Gpt2Model> g;
    {
      QuantizedGpt2 q = quantize_gpt2(base.config(), base.dense_weights(), spec);
      g = build_quantized_model(q, m.dtype(), spec.exec);
    }
    if (spec.exec == QuantExec::DequantOnce && gemm != GemmBackend::Aten) g = apply_gemm_backend(*g, gemm);
    return g;
  };
  a.quant_target = gpt2_quant_target;
  // The course's model: GPT-2 small's shape and tensors, its text noise.
  a.make_demo = [](std::uint64_t seed, at::Device device, at::ScalarType dtype) {
    const Gpt2Config config = Gpt2Config::gpt2_small();
    return std::make_unique<Gpt2Model>(config, make_random_gpt2_weights(config, seed, device, dtype));
  };
  a.demo_name = "built-in demo (GPT-2 small shape, random weights)";
  return a;
}

}  // namespace servelab

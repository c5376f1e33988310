// The Llama family's records in the architecture registry (architecture.h): the hooks every
// LlamaModel architecture shares, and Llama's own record (model_type llama, mistral without a
// and qwen2, with their sliding windows; GGUF llama).
#include <filesystem>
#include <map>

#include "model/gguf_file.h"
#include "model/llama_family.h"
#include "model/llama_gguf.h"
#include "model/llama_model.h"
#include "quant/quantized_llama.h"

namespace servelab {

namespace {

const LlamaModel& as_llama(const Model& m) { return dynamic_cast<const LlamaModel&>(m); }

QuantTarget llama_quant_target(const Model& model) {
  const LlamaModel& ref = as_llama(model);
  QuantTarget t;
  // Plain tensors, also where the reference runs blocked fp32 kernels that hold its matrices.
  auto dense = std::make_shared<const LlamaWeights>(ref.dense_weights());
  t.named = dense->named_tensors();
  // transformers' LlamaRotaryEmbedding keeps inv_freq (head_dim / 2 fp32) as a buffer.
  t.hf_buffer_bytes = ref.config().head_dim / 2 * 4;
  t.quantize = [&ref, dense, named = t.named](const QuantSpec& spec) {
    auto q = std::make_shared<QuantizedMatrices>(quantize_llama(ref.config(), *dense, spec));
    std::map<std::string, QuantizedTensor> matrices{{"model.embed_tokens.weight", q->token_embedding}};
    if (!q->head_tied) matrices["lm_head.weight"] = q->head;
    for (const Projection& p : ref.projections())
      for (size_t l = 0; l < q->layers.size(); ++l)
        matrices["model.layers." + std::to_string(l) + "." + p.hf_name + ".weight"] =
            q->layers[l][static_cast<size_t>(p.slot)];
    QuantizedSet set;
    for (const auto& [name, w] : named) {
      auto it = matrices.find(name);
      QuantizedTensor kept;  // norms and biases stay as they are
      kept.shape = w.sizes().vec();
      kept.values = w;
      set.parameters.push_back({name, it != matrices.end() ? it->second : kept});
    }
    set.build = [&ref, dense, q](QuantExec used) -> std::unique_ptr<Model> {
      return build_quantized_llama(ref.config(), *dense, *q, ref.dtype(), used);
    };
    return set;
  };
  return t;
}

}  // namespace

Architecture llama_family_architecture(std::function<LlamaConfig(const std::string&)> read_config,
                                       std::function<LlamaConfig(const GgufFile&)> read_gguf_config,
                                       LlamaFetchHook hook) {
  Architecture a;
  a.hf_root = "model.";
  a.hf_blocks = "layers.";
  a.projection_names = llama_projections(LlamaConfig{});
  for (Projection& p : a.projection_names) p.in = p.out = 0;
  a.sharded_folders = true;
  a.load_folder = [read_config, hook](const std::string& dir, at::Device device, at::ScalarType dtype) {
    const LlamaConfig config = read_config((std::filesystem::path(dir) / "config.json").string());
    return std::make_unique<LlamaModel>(config, load_llama_safetensors(dir, config, device, dtype, hook));
  };
  if (read_gguf_config) {
    a.load_gguf = [read_gguf_config, hook](const GgufFile& file, at::Device device, at::ScalarType dtype) {
      const LlamaConfig config = read_gguf_config(file);
      return std::make_unique<LlamaModel>(config, load_llama_gguf(file, config, device, dtype, hook));
    };
    // The blocks run as stored where no hook reshapes the matrices (Phi-3's fused ones are split
    // from dequantized weights).
    if (!hook)
      a.load_gguf_as_stored = [read_gguf_config](const GgufFile& file, std::string* run_as, bool int8) {
        return load_llama_gguf_as_stored(file, read_gguf_config(file), run_as, int8);
      };
  }
  // --gemm onednn has not been measured on these models: aten and blocked are offered.
  a.onednn_gemm = false;
  a.dequantized_keeps_gemm = false;
  a.quantize = [](const Model& m, const QuantSpec& spec, GemmBackend) -> std::unique_ptr<Model> {
    const LlamaModel& llama = as_llama(m);
    const LlamaWeights dense = llama.dense_weights();
    const QuantizedMatrices q = quantize_llama(llama.config(), dense, spec);
    return build_quantized_llama(llama.config(), dense, q, m.dtype(), spec.exec);
  };
  a.quant_target = llama_quant_target;
  return a;
}

Architecture llama_architecture() {
  Architecture a = llama_family_architecture(parse_llama_config, llama_config_from_gguf);
  a.name = "llama";
  a.display = "Llama";
  a.model_types = {"llama", "mistral", "qwen2"};
  a.gguf_architectures = {"llama"};
  return a;
}

}  // namespace servelab

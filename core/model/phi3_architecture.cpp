// Phi-3 (transformers' Phi3ForCausalLM, llama.cpp's src/models/phi3.cpp): the Llama block with its
// q, k and v in one matrix (self_attn.qkv_proj, rows q then k then v) and gate and up in another
// (mlp.gate_up_proj, rows gate then up), a sliding window on every layer where the config sets one,
// and a partial rotary embedding where rope_parameters has a partial_rotary_factor (Phi-4-mini). It
// runs on LlamaModel: the fused matrices are split into the shared layout at load (the hook below),
// so LoRA, the quantizers and the GEMMs see Llama's seven projections (a PEFT adapter on the fused
// modules is split the same way: fused_modules). longrope (su) scaling is
// refused by name by the shared reader. A GGUF file (llama.cpp's phi3: attn_qkv and ffn_up fused the
// same way) goes through the same split.
#include <map>

#include "model/gguf_file.h"
#include "model/llama_family.h"
#include "model/llama_gguf.h"
#include "util/errors.h"

namespace servelab {

namespace {

LlamaConfig phi3_config(const std::string& path) { return llama_family_config_of_type(path, "phi3", "phi3"); }

// Asked for a block's q/k/v or gate/up matrix, reads the fused one (once per block) and hands back
// its rows.
LlamaTensorFetch split_fused(const LlamaConfig& c, const LlamaTensorFetch& file) {
  const int64_t E = c.hidden_size, F = c.intermediate_size, Q = c.n_head * c.head_dim,
                KV = c.n_kv_head * c.head_dim;
  auto cache = std::make_shared<std::map<std::string, at::Tensor>>();
  return [file, E, F, Q, KV, cache](const std::string& name, const std::vector<int64_t>& shape,
                                    bool optional) -> at::Tensor {
    static const std::map<std::string, std::pair<std::string, int>> kParts = {
        {"self_attn.q_proj.weight", {"self_attn.qkv_proj.weight", 0}},
        {"self_attn.k_proj.weight", {"self_attn.qkv_proj.weight", 1}},
        {"self_attn.v_proj.weight", {"self_attn.qkv_proj.weight", 2}},
        {"mlp.gate_proj.weight", {"mlp.gate_up_proj.weight", 0}},
        {"mlp.up_proj.weight", {"mlp.gate_up_proj.weight", 1}}};
    // "model.layers.N." and the name inside the block.
    const size_t layers = name.find("layers.");
    if (layers == std::string::npos) return file(name, shape, optional);
    const size_t block_end = name.find('.', layers + 7) + 1;
    const auto part = kParts.find(name.substr(block_end));
    if (part == kParts.end()) return file(name, shape, optional);
    const std::string fused = name.substr(0, block_end) + part->second.first;
    const bool attn = part->second.first.rfind("self_attn", 0) == 0;
    auto it = cache->find(fused);
    if (it == cache->end()) {
      const std::vector<int64_t> fused_shape = {attn ? Q + 2 * KV : 2 * F, E};
      it = cache->emplace(fused, file(fused, fused_shape, false)).first;
    }
    const int index = part->second.second;
    const int64_t offset = attn ? (index == 0 ? 0 : index == 1 ? Q : Q + KV) : index * F;
    at::Tensor out = it->second.narrow(0, offset, shape[0]).contiguous();
    // The last part read frees the fused matrix.
    if ((attn && index == 2) || (!attn && index == 1)) cache->erase(it);
    return out;
  };
}

// llama.cpp's phi3 metadata: partial rotary as rope.dimension_count, Q and K not permuted, the
// window (0: none) on every layer; its long-context rope factors are refused as longrope is.
LlamaConfig phi3_gguf_config(const GgufFile& f) {
  if (f.find("rope_factors_long.weight"))
    throw ModelFormatError(
        f.path() + ": rope_factors_long (Phi-3's longrope scaling for long contexts) is not supported");
  LlamaConfig c = llama_family_config_from_gguf(f, "phi3", /*partial_rotary=*/true);
  c.gguf_qk_permuted = false;
  const int64_t window = f.find_int("phi3.attention.sliding_window").value_or(0);
  if (window < 0) throw ModelFormatError(f.path() + ": phi3.attention.sliding_window is negative");
  c.sliding_window = window;
  return c;
}

}  // namespace

Architecture phi3_architecture() {
  Architecture a = llama_family_architecture(phi3_config, phi3_gguf_config, split_fused);
  a.name = "phi3";
  a.display = "Phi-3";
  a.model_types = {"phi3"};
  a.gguf_architectures = {"phi3"};
  a.fused_modules = {{"self_attn.qkv_proj", {LinearSlot::Q, LinearSlot::K, LinearSlot::V}},
                     {"mlp.gate_up_proj", {LinearSlot::Gate, LinearSlot::Up}}};
  return a;
}

}  // namespace servelab

#include "quant/quantized_llama.h"

#include <map>

#include "model/ggml_quants.h"
#include "model/llama_gguf.h"
#include "quant/quant_kernels.h"
#include "util/errors.h"

namespace servelab {

namespace {

const char* kEmbed = "model.embed_tokens.weight";
const char* kHead = "lm_head.weight";

// Where a Hugging Face matrix name sits among the kernels' matrices: (layer, slot), or layer -1 for
// the embedding and -2 for the head; layer -3 for anything else (norms, biases).
std::pair<int64_t, LinearSlot> matrix_of(const std::string& hf, const std::vector<Projection>& table) {
  if (hf == kEmbed) return {-1, LinearSlot::Q};
  if (hf == kHead) return {-2, LinearSlot::Q};
  const std::string layers = "model.layers.";
  if (hf.rfind(layers, 0) == 0) {
    const size_t dot = hf.find('.', layers.size());
    const int64_t layer = std::stoll(hf.substr(layers.size(), dot - layers.size()));
    const std::string rest = hf.substr(dot + 1);
    for (const Projection& p : table)
      if (rest == p.hf_name + ".weight") return {layer, p.slot};
  }
  return {-3, LinearSlot::Q};
}

QuantizedTensor dense_matrix(const at::Tensor& t) {
  QuantizedTensor q;
  q.shape = t.sizes().vec();
  q.values = t.contiguous();
  return q;
}

// Half-precision scales of every block of a GGUF matrix, at byte `at` of each block_bytes: [rows, blocks].
at::Tensor block_fp16(const at::Tensor& raw, int64_t at, int64_t rows) {
  return raw.narrow(1, at, 2).contiguous().view(at::kHalf).to(at::kFloat).reshape({rows, -1});
}

}  // namespace

QuantizedMatrices quantize_llama(const LlamaConfig& c, const LlamaWeights& w, const QuantSpec& spec) {
  const std::vector<Projection> table = llama_projections(c);
  QuantizedMatrices q;
  q.spec = spec;
  auto quantize = [&](const std::string& name, const at::Tensor& t) {
    if (!t.defined())
      throw InputError("cannot quantize " + name + ": the model holds no plain tensor for it");
    try {
      return quantize_tensor(t, spec, /*transpose=*/false);
    } catch (const InputError& e) {
      throw InputError(spec.mode_name() + ": " + name + ": " + e.what());
    }
  };
  q.token_embedding = quantize(kEmbed, w.embed);
  q.head_tied = w.lm_head_tied;
  if (!w.lm_head_tied) q.head = quantize(kHead, w.lm_head);
  for (size_t l = 0; l < w.layers.size(); ++l) {
    std::array<QuantizedTensor, kLinearSlotCount> m;
    for (size_t k = 0; k < table.size(); ++k)
      m[static_cast<size_t>(table[k].slot)] = quantize(
          "model.layers." + std::to_string(l) + "." + table[k].hf_name + ".weight", w.layers[l].w[k]);
    q.layers.push_back(std::move(m));
  }
  return q;
}

std::unique_ptr<LlamaModel> build_quantized_llama(const LlamaConfig& c, const LlamaWeights& rest,
                                                  const QuantizedMatrices& q, at::ScalarType act,
                                                  QuantExec exec, int64_t jit_block_bytes) {
  const std::vector<Projection> table = llama_projections(c);
  LlamaWeights w = rest;
  const at::Device device = q.token_embedding.values.device();
  if (exec == QuantExec::Auto) {
    QuantSpec s = q.spec;
    s.exec = exec;
    exec = resolve_quant_exec(s, device);
  }
  if (exec == QuantExec::DequantOnce) {
    w.embed = q.token_embedding.dequantize(act);
    w.lm_head = q.head_tied ? w.embed : q.head.dequantize(act);
    w.lm_head_tied = q.head_tied;
    for (size_t l = 0; l < w.layers.size(); ++l)
      for (size_t k = 0; k < table.size(); ++k)
        w.layers[l].w[k] = q.layers[l][static_cast<size_t>(table[k].slot)].dequantize(act);
    return std::make_unique<LlamaModel>(c, std::move(w));
  }
  // The kernels hold the matrices: the model keeps only its norms and biases.
  w.embed = w.lm_head = at::Tensor();
  w.lm_head_tied = q.head_tied;
  for (auto& layer : w.layers)
    for (auto& m : layer.w) m = at::Tensor();
  std::shared_ptr<const LinearKernels> kernels =
      exec == QuantExec::Native ? make_native_kernels(q, act, device)
                                : make_jit_kernels(q, act, jit_block_bytes, exec == QuantExec::JitInt8);
  return std::make_unique<LlamaModel>(c, std::move(w), std::move(kernels));
}

std::optional<QuantizedTensor> ggml_as_stored(const GgufTensor& t) {
  const std::vector<int64_t> shape = t.shape();
  if (shape.size() != 2) return std::nullopt;
  const int64_t rows = shape[0], cols = shape[1];
  // A copy out of the mapping: the file may be closed after loading.
  const int64_t block_bytes = ggml_block_bytes(t.type), block_values = ggml_block_values(t.type);
  const at::Tensor raw = at::from_blob(const_cast<std::byte*>(t.data),
                                       {static_cast<int64_t>(t.nbytes) / block_bytes, block_bytes}, at::kByte)
                             .clone();
  QuantizedTensor q;
  q.shape = shape;
  switch (t.type) {
    case GgmlType::F32:
      q.values = raw.view(at::kFloat).reshape({rows, cols});
      return q;
    case GgmlType::F16:
    case GgmlType::BF16:
      q.scheme = t.type == GgmlType::F16 ? QuantScheme::Fp16 : QuantScheme::Bf16;
      q.values = raw.view(t.type == GgmlType::F16 ? at::kHalf : at::kBFloat16).reshape({rows, cols});
      return q;
    case GgmlType::Q4_0:
    case GgmlType::Q4_1: {
      // ggml: value j < 16 of a block in byte j's low nibble, value j + 16 in its high one.
      const bool min = t.type == GgmlType::Q4_1;
      const at::Tensor nibbles = raw.narrow(1, min ? 4 : 2, block_values / 2);
      const at::Tensor codes = at::cat({nibbles.bitwise_and(15), nibbles.bitwise_right_shift(4)}, 1);
      q.scheme = QuantScheme::Int4Group;
      q.group_size = block_values;
      q.values = pack_int4(codes.reshape({rows, cols}));
      q.scale = block_fp16(raw, 0, rows);
      // Q4_0's (q - 8) d is q d + (-8 d) exactly: every term has at most 15 significant bits.
      q.offset = min ? block_fp16(raw, 2, rows) : q.scale * -8;
      return q;
    }
    case GgmlType::Q5_0: {
      // (q - 16) d: int8 codes in -16..15 under the block's scale, an int8 group of 32.
      const int64_t blocks = raw.size(0);
      at::Tensor codes = at::empty({blocks * 32}, at::kChar), scale = at::empty({blocks}, at::kFloat);
      for (int64_t i = 0; i < blocks; ++i)
        ggml_q5_0_codes(reinterpret_cast<const std::byte*>(raw[i].const_data_ptr<uint8_t>()),
                        codes.mutable_data_ptr<int8_t>() + i * 32, scale.mutable_data_ptr<float>() + i);
      q.scheme = QuantScheme::Int8Group;
      q.group_size = 32;
      q.values = codes.reshape({rows, cols});
      q.scale = scale.reshape({rows, -1});
      return q;
    }
    case GgmlType::Q5_1:
    case GgmlType::Q5_K:
      return std::nullopt;  // 5-bit codes above a minimum: no kernel of ours reads them
    case GgmlType::Q8_0:
      q.scheme = QuantScheme::Int8Group;
      q.group_size = block_values;
      q.values = raw.narrow(1, 2, block_values).contiguous().view(at::kChar).reshape({rows, cols});
      q.scale = block_fp16(raw, 0, rows);
      return q;
    case GgmlType::Q4_K: {
      // Eight sub-blocks of 32 per super-block, each a scale and a minimum: our int4-g32.
      const int64_t blocks = raw.size(0), groups = blocks * 8;
      at::Tensor codes = at::empty({blocks * 256}, at::kByte);
      at::Tensor scale = at::empty({groups}, at::kFloat), minimum = at::empty({groups}, at::kFloat);
      for (int64_t i = 0; i < blocks; ++i)
        ggml_q4_k_groups(reinterpret_cast<const std::byte*>(raw[i].const_data_ptr<uint8_t>()),
                         codes.mutable_data_ptr<uint8_t>() + i * 256, scale.mutable_data_ptr<float>() + i * 8,
                         minimum.mutable_data_ptr<float>() + i * 8);
      q.scheme = QuantScheme::Int4Group;
      q.group_size = 32;
      q.values = pack_int4(codes.reshape({rows, cols}));
      q.scale = scale.reshape({rows, -1});
      q.offset = minimum.reshape({rows, -1});
      return q;
    }
    case GgmlType::Q6_K: {
      // Sixteen sub-blocks of 16 per super-block, each with a scale: int8 groups of 16.
      const int64_t blocks = raw.size(0), groups = blocks * 16;
      at::Tensor codes = at::empty({blocks * 256}, at::kChar);
      at::Tensor scale = at::empty({groups}, at::kFloat);
      for (int64_t i = 0; i < blocks; ++i)
        ggml_q6_k_groups(reinterpret_cast<const std::byte*>(raw[i].const_data_ptr<uint8_t>()),
                         codes.mutable_data_ptr<int8_t>() + i * 256,
                         scale.mutable_data_ptr<float>() + i * 16);
      q.scheme = QuantScheme::Int8Group;
      q.group_size = 16;
      q.values = codes.reshape({rows, cols});
      q.scale = scale.reshape({rows, -1});
      return q;
    }
  }
  return std::nullopt;
}

std::unique_ptr<LlamaModel> load_llama_gguf_as_stored(const GgufFile& f, const LlamaConfig& c,
                                                      std::string* run_as, bool int8_activations) {
  const std::vector<Projection> table = llama_projections(c);
  QuantizedMatrices q;
  q.layers.resize(static_cast<size_t>(c.n_layer));
  std::map<std::string, std::string> kinds;  // ggml type -> what runs it
  LlamaWeights rest = assemble_llama_weights(
      c, [&](const std::string& hf, const std::vector<int64_t>& shape, bool optional) -> at::Tensor {
        const GgufTensor* t = find_llama_gguf_tensor(f, c, hf, shape, optional);
        if (!t) return {};
        const auto [layer, slot] = matrix_of(hf, table);
        std::optional<QuantizedTensor> stored = layer == -3 ? std::nullopt : ggml_as_stored(*t);
        const int64_t heads = llama_gguf_rope_heads(*t, c);
        if (!stored) {
          std::vector<float> values = gguf_dequantize(*t);
          at::Tensor w = at::from_blob(values.data(), shape, at::kFloat);
          if (heads) w = unpermute_rope_rows(w, heads);
          w = w.clone();
          if (layer == -3) return llama_gguf_plain_tensor(*t, c, w);
          stored = dense_matrix(w);
          kinds[ggml_type_name(t->type)] = "fp32 (dequantized at load)";
        } else {
          if (heads)
            stored = select_rows(*stored, unpermute_rope_rows(at::arange(shape[0], at::kLong), heads));
          kinds[ggml_type_name(t->type)] =
              stored->scheme == QuantScheme::None
                  ? "fp32"
                  : QuantSpec{stored->scheme, static_cast<int>(stored->group_size)}.mode_name();
        }
        // Non-finite values hide in the blocks' fp16 scales and minimums (or a half matrix): checked
        // here, as the dequantized weights are at load, naming the tensor.
        check_finite_tensors({{hf, stored->values},
                              {hf + " (block scales)", stored->scale},
                              {hf + " (block minimums)", stored->offset}},
                             f.path());
        if (layer == -1) {
          q.token_embedding = std::move(*stored);
        } else if (layer == -2) {
          q.head = std::move(*stored);
        } else {
          q.layers[static_cast<size_t>(layer)][static_cast<size_t>(slot)] = std::move(*stored);
        }
        return {};
      });
  // assemble_llama_weights took an undefined head for a missing one: whether the file has its own.
  q.head_tied = !q.head.defined();
  rest.lm_head_tied = q.head_tied;
  // The file's own schemes, whatever they are, run through the JIT kernels.
  q.spec.exec = int8_activations ? QuantExec::JitInt8 : QuantExec::Jit;
  auto model = build_quantized_llama(c, rest, q, at::kFloat, q.spec.exec);
  if (run_as) {
    std::string line;
    for (const auto& [type, kind] : kinds) line += (line.empty() ? "" : ", ") + type + " as " + kind;
    *run_as = line + "; " + model->kernels()->description();
  }
  return model;
}

}  // namespace servelab

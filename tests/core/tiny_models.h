#pragma once
// Tiny random models and prompts for the scheduler suites (paged KV, chunked prefill, speculative
// decoding): a GPT-2 and a Llama (grouped-query attention, 4 query heads over 2 KV heads) with a
// 300-token vocabulary (eos 299), seeded, so that every suite runs the engine end to end in
// milliseconds.
#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "generate/continuous_batching.h"
#include "generate/generator.h"
#include "model/gpt2_config.h"
#include "model/gpt2_model.h"
#include "model/gpt2_weights.h"
#include "model/llama_model.h"

namespace servelab::test {

inline Gpt2Config tiny_gpt2_shape(int64_t context = 96) {
  Gpt2Config c;
  c.vocab_size = 300;
  c.n_positions = context;
  c.n_embd = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.bos_token_id = c.eos_token_id = 299;
  return c;
}

inline std::unique_ptr<Gpt2Model> tiny_gpt2(uint64_t seed = 5) {
  const Gpt2Config c = tiny_gpt2_shape();
  return std::make_unique<Gpt2Model>(c, make_random_gpt2_weights(c, seed, at::kCPU, at::kFloat));
}

inline std::unique_ptr<LlamaModel> tiny_llama(uint64_t seed = 13, int64_t context = 96,
                                              at::ScalarType dtype = at::kFloat,
                                              at::Device device = at::kCPU) {
  LlamaConfig c;
  c.vocab_size = 300;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 8;
  c.context = context;
  c.eos_token_ids = {299};
  at::Generator gen = at::detail::createCPUGenerator(seed);
  LlamaTensorFetch fetch = [&](const std::string& name, const std::vector<int64_t>& shape, bool optional) {
    if (optional) return at::Tensor();
    at::Tensor t = at::randn(shape, gen) * 0.2;
    if (name.find("norm") != std::string::npos) t = 1.0 + t;
    return t.to(device, dtype);
  };
  return std::make_unique<LlamaModel>(c, assemble_llama_weights(c, fetch));
}

// `len` token ids below 290, different for each salt.
inline std::vector<int32_t> tiny_prompt(int64_t len, int32_t salt) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < len; ++i) p.push_back(static_cast<int32_t>((salt * 37 + i * 11) % 290));
  return p;
}

// The request's tokens decoded alone by generate(), the reference every scheduler path must equal.
inline std::vector<int32_t> solo_tokens(const Model& m, const Tokenizer& tok, const BatchRequest& r) {
  GenerateOptions o;
  o.max_new_tokens = r.max_new_tokens;
  o.stop_at_eos = r.stop_at_eos;
  o.report_top = 0;
  o.sampling = r.sampling;
  return generate(m, tok, {r.prompt_ids}, o).sequences[0].generated_ids;
}

}  // namespace servelab::test

#pragma once
// What the quantization suites share (test_quant, test_quant_kernels): the schemes' names, the
// prompts, small GPT-2 configurations with deterministic weights that give every parameter a real
// range, the parameters' layout and each scheme's bytes from it, logits of a padded batch, and a
// fixture with an HF folder of GPT-2's vocabulary (when its tokenizer is there) and a quantizer of
// the small model.
#include <c10/core/InferenceMode.h>

#include <QTemporaryDir>
#include <QtTest>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "generate/generator.h"
#include "model/engine.h"
#include "model/gpt2_model.h"
#include "model/gpt2_weights.h"
#include "model/model_export.h"
#include "model/safetensors_file.h"
#include "quant/quantized_model.h"
#include "quant/quantizer.h"
#include "test_support.h"

namespace servelab::quant_test {

inline const std::vector<std::string> kModes = {"zp-uint8",     "int4-g32", "int4-g64", "int4-g128",
                                                "int8-channel", "fp16",     "bf16"};
inline const std::vector<std::string> kCoursePrompts = {"The quick brown fox jumped over the",
                                                        "The rain in Spain falls", "What comes up must"};
// Prompts of the made-up vocabulary of small_config(), of different lengths.
inline const std::vector<std::vector<int32_t>> kIdPrompts = {
    {5, 17, 250, 3, 99, 42, 7}, {12, 280}, {64, 1, 77, 190}, {200, 201, 202, 11, 13}};

// Every scheme fits: rows of 128 (wte, wpe, c_attn, c_proj, c_fc stored [out, in]) and 512
// (mlp.c_proj) divide by 32, 64 and 128, and every matrix has a multiple of 16 rows (torch's int4
// CPU kernel needs that; see int4_native_with_gpt2_vocabulary for GPT-2's 50257).
inline Gpt2Config small_config() {
  Gpt2Config c;
  c.vocab_size = 304;
  c.n_positions = 32;
  c.n_embd = 128;
  c.n_layer = 2;
  c.n_head = 4;
  c.bos_token_id = c.eos_token_id = 303;
  return c;
}

// GPT-2's vocabulary (the engine, the experiment and the CLI encode text), 128 wide: the matrices
// dominate the parameters and every scheme fits.
inline Gpt2Config vocab_config() {
  Gpt2Config c = Gpt2Config::gpt2_small();
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 128;
  c.n_positions = 64;
  return c;
}

// A smooth deterministic pattern in [-amp, amp] (no global RNG).
inline at::Tensor pattern(int64_t n, double salt, double amp) {
  return at::sin(at::arange(n, at::kDouble) * 0.7311 + salt).to(at::kFloat) * amp;
}

// The demo's seeded weights with LayerNorms and biases moved off their constant init (1 and 0),
// so that every parameter has a real range to quantize; optionally an untied LM head.
inline Gpt2Weights test_weights(const Gpt2Config& c, uint64_t seed, bool tied) {
  c10::InferenceMode guard;
  Gpt2Weights w = make_random_gpt2_weights(c, seed, at::Device(at::kCPU), at::kFloat);
  double salt = static_cast<double>(seed);
  auto vec = [&](int64_t n, double base, double amp) {
    salt += 1.37;
    return pattern(n, salt, amp) + base;
  };
  const int64_t E = c.n_embd, I = c.inner_dim();
  for (auto& l : w.layers) {
    l.ln_1_weight = vec(E, 1.0, 0.1);
    l.ln_1_bias = vec(E, 0.0, 0.05);
    l.c_attn_bias = vec(3 * E, 0.0, 0.05);
    l.c_proj_bias = vec(E, 0.0, 0.05);
    l.ln_2_weight = vec(E, 1.0, 0.1);
    l.ln_2_bias = vec(E, 0.0, 0.05);
    l.c_fc_bias = vec(I, 0.0, 0.05);
    l.mlp_proj_bias = vec(E, 0.0, 0.05);
  }
  w.ln_f_weight = vec(E, 1.0, 0.1);
  w.ln_f_bias = vec(E, 0.0, 0.05);
  if (!tied) {
    w.lm_head = make_random_gpt2_weights(c, seed + 1000, at::Device(at::kCPU), at::kFloat).wte;
    w.lm_head_tied = false;
  }
  return w;
}

// The GPT-2 tokenizer: ../shared when CI gives it, else the one scripts/bootstrap installed ("" when
// neither is there).
inline std::string gpt2_tokenizer_dir() {
  const std::string shared = test::env_or_empty("SERVELAB_SHARED");
  if (!shared.empty() &&
      std::filesystem::exists(std::filesystem::path(shared) / "data" / "gpt2" / "vocab.json"))
    return (std::filesystem::path(shared) / "data" / "gpt2").string();
  try {
    return default_tokenizer_dir();
  } catch (const Error&) {
    return "";
  }
}

// An HF folder of test_weights(config) with GPT-2's tokenizer files.
inline void write_folder(const std::filesystem::path& dir, const Gpt2Config& c, uint64_t seed,
                         const std::string& tok) {
  std::filesystem::create_directories(dir);
  save_gpt2_weights(test_weights(c, seed, true), (dir / "model.safetensors").string());
  std::ofstream(dir / "config.json") << c.to_json().dump(2);
  for (const char* f : {"vocab.json", "merges.txt"})
    std::filesystem::copy_file(std::filesystem::path(tok) / f, dir / f,
                               std::filesystem::copy_options::overwrite_existing);
}

// The parameters' shapes as the quantizers see them: matrices as stored, [out, in] (Conv1D
// weights transposed), and the 1-D parameters.
struct Layout {
  std::vector<std::pair<int64_t, int64_t>> matrices;
  std::vector<int64_t> vectors;
  int64_t matrix_elements() const {
    int64_t n = 0;
    for (auto [r, c] : matrices) n += r * c;
    return n;
  }
  int64_t matrix_rows() const {
    int64_t n = 0;
    for (auto [r, c] : matrices) n += r;
    return n;
  }
  int64_t vector_elements() const { return std::accumulate(vectors.begin(), vectors.end(), int64_t{0}); }
  int64_t tensors() const { return static_cast<int64_t>(matrices.size() + vectors.size()); }
};

inline Layout layout_of(const Gpt2Config& c, bool tied) {
  const int64_t E = c.n_embd, I = c.inner_dim(), V = c.vocab_size, P = c.n_positions;
  Layout l;
  l.matrices = {{V, E}, {P, E}};
  for (int64_t i = 0; i < c.n_layer; ++i) {
    l.matrices.insert(l.matrices.end(), {{3 * E, E}, {E, E}, {I, E}, {E, I}});
    l.vectors.insert(l.vectors.end(), {E, E, 3 * E, E, E, E, I, E});  // ln_1, biases, ln_2
  }
  l.vectors.insert(l.vectors.end(), {E, E});  // ln_f
  if (!tied) l.matrices.push_back({V, E});
  return l;
}

// What each scheme must take, from the shapes alone.
inline QuantizedBytes expected_bytes(const Layout& l, const QuantSpec& s) {
  QuantizedBytes b;
  const int64_t m = l.matrix_elements(), v = l.vector_elements();
  b.parameters = m + v;
  switch (s.scheme) {
    case QuantScheme::None:
      b.other = 4 * (m + v);
      break;
    case QuantScheme::ZeroPointUint8:  // every parameter: 1 byte each, fp32 scale + zero point each
      b.quantized = m + v;
      b.states = 8 * l.tensors();
      break;
    case QuantScheme::PerChannelInt8:  // 1 byte each, one fp32 scale per row
      b.quantized = m;
      b.states = 4 * l.matrix_rows();
      b.other = 4 * v;
      break;
    case QuantScheme::Int4Group:  // half a byte each, fp32 scale + minimum per group
      b.quantized = m / 2;
      b.states = 8 * (m / s.group_size);
      b.other = 4 * v;
      break;
    case QuantScheme::Int8Group:  // 1 byte each, one fp32 scale per group
      b.quantized = m;
      b.states = 4 * (m / s.group_size);
      b.other = 4 * v;
      break;
    case QuantScheme::Fp16:
    case QuantScheme::Bf16:
      b.quantized = 2 * m;
      b.other = 4 * v;
      break;
  }
  return b;
}

inline int64_t quantized_elements(const Layout& l, const QuantSpec& s) {
  if (s.scheme == QuantScheme::None) return 0;
  return l.matrix_elements() + (s.scheme == QuantScheme::ZeroPointUint8 ? l.vector_elements() : 0);
}

inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Logits of every real (unpadded) position of the prompts run as one left-padded batch: [N, vocab].
inline at::Tensor batch_logits(const Model& m, const std::vector<std::vector<int32_t>>& prompts) {
  PaddedBatch b = left_padded_batch(prompts, static_cast<int32_t>(m.shape().eos_token_id));
  ForwardInput in;
  in.input_ids = b.input_ids;
  in.position_ids = b.position_ids;
  in.key_mask = b.attention_mask;
  in.all_logits = true;
  at::Tensor l = m.forward(in).to(at::kFloat);
  return l.masked_select(b.attention_mask.to(at::kBool).unsqueeze(-1)).view({-1, l.size(-1)});
}

// max |a - b| / max |a|.
inline double relative_diff(const at::Tensor& a, const at::Tensor& b) {
  return test::max_abs_diff(a, b) / a.abs().max().item<double>();
}

// The suites' test classes derive from it (after QObject) and call initQuant() in initTestCase.
class QuantFixture {
 protected:
  std::string tokenizer_dir_;
  std::string oracle_dir_;
  QTemporaryDir tmp_;
  std::string vocab_dir_;  // an HF folder of vocab_config() with GPT-2's tokenizer
  Gpt2Config small_ = small_config();
  test::IdTokenizer id_tok_{304, 303};

  void require_vocab_folder() {
    if (vocab_dir_.empty())
      QSKIP(
          "GPT-2 tokenizer files not found (SERVELAB_SHARED unset and scripts/bootstrap's copy missing): the "
          "engine, experiment and CLI checks encode text and are skipped");
  }

  QuantizedGpt2 quantize_small(const std::string& mode, bool tied = true, uint64_t seed = 3) {
    c10::InferenceMode guard;
    return quantize_gpt2(small_, test_weights(small_, seed, tied), parse_quant_mode(mode));
  }

  void initQuant() {
    QVERIFY(tmp_.isValid());
    oracle_dir_ = test::env_or_empty("SERVELAB_QUANT_ORACLE_DIR");
    tokenizer_dir_ = gpt2_tokenizer_dir();
    if (!tokenizer_dir_.empty()) {
      vocab_dir_ = tmp_.filePath("vocab128").toStdString();
      write_folder(vocab_dir_, vocab_config(), 21, tokenizer_dir_);
    }
  }
};

}  // namespace servelab::quant_test

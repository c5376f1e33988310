#pragma once
// Lesson 4 and beyond: every quantization mode measured against the fp32 model it came from, on
// one engine, side by side: memory, reconstruction error, logit drift, greedy text, speed and
// (for real checkpoints) perplexity. Torch-free header: the GUI includes it.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "experiments/experiment_sink.h"
#include "experiments/roofline_point.h"
#include "model/engine.h"

namespace servelab {

struct QuantizationParams {
  // Mode names (quant_spec.h); "none" is the fp32 reference and is always measured first.
  std::vector<std::string> modes = {"zp-uint8", "int8-channel", "int4-g64", "fp16", "bf16"};
  std::string exec = "auto";  // dequant-once, jit, native or auto (native where a kernel exists)
  // Greedy text side by side with fp32, and the prompts whose logits measure drift.
  std::vector<std::string> prompts = {"The quick brown fox jumped over the", "The rain in Spain falls",
                                      "What comes up must"};
  int64_t new_tokens = 20;
  bool measure_speed = true;
  int64_t decode_tokens = 32;  // batch-1 decode steps timed per repeat
  int64_t batch = 32;          // batched throughput: this many rows ...
  int64_t batch_tokens = 16;   // ... each generating this many tokens
  int64_t repeats = 3;         // fp32 and the mode alternate; medians
  int64_t histogram_bins = 41;
  bool warmup = true;
};

// Size of the weights in one mode. fp32_bytes is the loaded model's parameters at 4 bytes each.
struct QuantMemory {
  int64_t parameters = 0;       // every parameter once (tied lm_head counted once)
  int64_t quantized_bytes = 0;  // the quantized values (packed for int4)
  int64_t state_bytes = 0;      // scales, zero points, minimums
  int64_t other_bytes = 0;      // parameters kept in fp32 (biases and LayerNorms outside the course's mode)
  int64_t total_bytes = 0;      // quantized + state + other
  int64_t fp32_bytes = 0;
  double fraction_of_fp32 = 0;
  // The course measures HF's get_memory_footprint() of the model whose parameters were replaced by
  // their uint8 values: it counts GPT-2's causal-mask buffers (attn.bias: n_layer x n_positions^2
  // bools, attn.masked_bias: one float each) but not the states, which the course keeps in a dict.
  // quantized + other + those buffers: 137,022,768 bytes for GPT-2 small in the course's mode.
  int64_t course_footprint_bytes = 0;
  int64_t course_fp32_footprint_bytes = 0;
  // Bytes of weights held in memory while the model runs under the chosen execution
  // (dequantize-once holds fp32 again; native kernels hold their own packed copies).
  int64_t resident_bytes = 0;
};

struct TensorError {
  std::string name;  // HF parameter name, e.g. "transformer.h.0.attn.c_attn.weight"
  int64_t numel = 0;
  double max_abs = 0, mean_abs = 0;
  double rel_rms = 0;  // ||dequant - w|| / ||w||
};

// Reconstruction error aggregated per block: "wte", "wpe", "h.0" ... "h.11", "ln_f".
struct BlockError {
  std::string block;
  double rel_rms = 0;
  double max_abs = 0;
};

struct ErrorHistogram {
  double lo = 0, hi = 0;  // dequant - w over every quantized element, in [lo, hi]
  std::vector<int64_t> counts;
};

struct GreedyComparison {
  std::string prompt;
  std::vector<int32_t> reference_tokens, tokens;  // fp32, this mode
  std::vector<std::string> reference_pieces, pieces;
  std::string reference_text, text;
  int64_t first_difference = -1;  // index of the first differing token, -1 when identical
};

struct QuantSpeed {
  double decode_ms = 0, fp32_decode_ms = 0;  // median batch-1 decode step
  double decode_speedup = 0;                 // fp32_decode_ms / decode_ms
  double batch_tokens_per_s = 0, fp32_batch_tokens_per_s = 0;
  double batch_ratio = 0;  // batch_tokens_per_s / fp32_batch_tokens_per_s
  // The batch-1 floor: bytes of weights one decode step reads at the machine's measured copy
  // bandwidth (a timed large memcpy in the same run).
  double floor_ms = 0, fp32_floor_ms = 0;
  // The batch-1 decode steps of this mode and of fp32 on the roofline (every timed step's cost
  // from the model's shapes and its position, summed over their times).
  RooflinePoint decode, fp32_decode;
};

struct QuantModeResult {
  std::string mode;    // "int4-g64"
  std::string exec;    // the execution actually used ("native", "jit", "dequant-once")
  std::string kernel;  // what runs the linears, e.g. "fbgemm dynamic int8 (quantized::linear_dynamic)"
  QuantMemory memory;
  std::vector<TensorError> tensors;
  std::vector<BlockError> blocks;
  ErrorHistogram histogram;
  double max_abs_error = 0, mean_abs_error = 0;
  // Logit drift against fp32 over every position of every prompt.
  double kl_mean = 0, kl_max = 0;
  double top1_agreement = 0;  // fraction of positions whose argmax matches fp32
  int64_t positions = 0;
  std::vector<GreedyComparison> greedy;
  std::optional<QuantSpeed> speed;
  std::optional<double> perplexity;  // real checkpoints only (the built-in text)
};

struct QuantizationResult {
  std::string model;
  std::string caveat;  // the demo model's "text is noise" line
  int threads = 0;
  std::string device;
  double copy_bandwidth_gbs = 0;  // measured once per run, for the floors
  std::optional<double> fp32_perplexity;
  std::string perplexity_note;  // why there is none (built-in model has random weights)
  std::vector<QuantModeResult> modes;
  nlohmann::json to_json() const;
};

// Each mode's result as soon as it is measured (the GUI fills its tables live); passed as
// ExperimentControl::quant.
class QuantizationSink {
 public:
  virtual ~QuantizationSink() = default;
  virtual void on_mode(const QuantModeResult& mode) = 0;
};

// Reports on_progress per stage, on_point("decode ms", mode index, ms) and
// on_point("batch tokens/s", mode index, tokens/s) as speeds arrive. Throws InputError for bad
// mode or execution names and unsupported combinations, CancelledError when stopped.
QuantizationResult run_quantization(const Engine& engine, const QuantizationParams& params,
                                    const ExperimentControl& control = {});

}  // namespace servelab

#include "experiments/quantization.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <memory>

#include "experiments/batch_sweep.h"  // median
#include "generate/generation.h"
#include "model/architecture.h"
#include "model/packed_linear.h"
#include "quant/quantized_model.h"
#include "tokenizer/prompt.h"
#include "util/device.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

namespace {

// A short original text for perplexity on real checkpoints (random weights make it meaningless).
constexpr const char* kPerplexityText =
    "The library opened at nine, and by ten the reading room was already full. Students sat in rows "
    "with their notes spread across the long tables, while an old man by the window turned the pages "
    "of a newspaper very slowly, as if each story needed time to settle. Outside, the rain had stopped "
    "and the street was bright again. A delivery van stopped at the corner, and two workers carried "
    "boxes of new books up the stone steps. The librarian counted them, signed a form, and asked them "
    "to leave the boxes near the front desk. In the afternoon she would open each one, check the titles "
    "against the list, and decide where every book belonged. It was quiet work, but she liked it: every "
    "new book was a small promise that someone, someday, would come looking for exactly that story.";

void check_cancel(const ExperimentControl& c) {
  if (c.cancel && c.cancel->load()) throw CancelledError();
}

void progress(const ExperimentControl& c, double f, const std::string& stage) {
  if (c.sink) c.sink->on_progress(f, stage);
}

double synchronized_ms_since(std::chrono::steady_clock::time_point t0, at::Device d) {
  if (d.is_cuda()) synchronize(d);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Read + write bandwidth of a large copy on the device, GB/s, median of a few.
double copy_bandwidth_gbs(at::Device d) {
  const int64_t n = int64_t{64} << 20;  // 64 Mi floats: 256 MiB, far beyond any cache
  at::Tensor src = at::ones({n}, at::TensorOptions().device(d)), dst = at::empty_like(src);
  dst.copy_(src);
  std::vector<double> gbs;
  for (int i = 0; i < 5; ++i) {
    if (d.is_cuda()) synchronize(d);
    auto t0 = std::chrono::steady_clock::now();
    dst.copy_(src);
    const double ms = synchronized_ms_since(t0, d);
    gbs.push_back(2.0 * static_cast<double>(n) * 4.0 / (ms * 1e6));
  }
  return median(gbs);
}

std::string block_of(const std::string& name, const Architecture& arch) {
  // "transformer.h.3.attn.c_attn.weight" -> "h.3"; "transformer.wte.weight" -> "wte";
  // "model.layers.3.mlp.up_proj.weight" -> "layers.3"; "model.embed_tokens.weight" -> "embed_tokens"
  const std::string s = name.rfind(arch.hf_root, 0) == 0 ? name.substr(arch.hf_root.size()) : name;
  if (s.rfind(arch.hf_blocks, 0) == 0) return s.substr(0, s.find('.', arch.hf_blocks.size()));
  return s.substr(0, s.find('.'));
}

at::Tensor all_logits(const Model& m, const std::vector<int32_t>& ids) {
  ForwardInput in;
  const int64_t T = static_cast<int64_t>(ids.size());
  in.input_ids = at::tensor(std::vector<int64_t>(ids.begin(), ids.end()), at::kLong).view({1, T});
  in.position_ids = at::arange(T, at::kLong).view({1, T});
  in.all_logits = true;
  return m.forward(in).select(0, 0).to(at::kFloat);
}

double perplexity(const Model& m, const std::vector<int32_t>& ids) {
  at::Tensor logp = at::log_softmax(all_logits(m, ids), -1).to(at::kCPU);
  const int64_t T = static_cast<int64_t>(ids.size());
  at::Tensor next = at::tensor(std::vector<int64_t>(ids.begin() + 1, ids.end()), at::kLong).view({T - 1, 1});
  const double nll = -logp.narrow(0, 0, T - 1).gather(1, next).mean().item<double>();
  return std::exp(nll);
}

struct Timing {
  double decode_ms = 0;    // median batch-1 decode step
  double batch_tok_s = 0;  // rows x tokens / wall time of the batched generation
  // The batch-1 decode steps' costs (model/step_cost.h) and times, summed, for the roofline.
  StepCost decode_cost;
  double decode_ms_sum = 0;
  int64_t decode_steps = 0;
};

Timing time_model(const Model& m, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                  const std::vector<std::vector<int32_t>>& batch, const QuantizationParams& p,
                  const ExperimentControl& c) {
  GenerateOptions o;
  o.stop_at_eos = false;
  o.report_top = 0;
  o.cancel = c.cancel;
  o.max_new_tokens = p.decode_tokens;
  GenerateResult one = generate(m, tok, {prompt}, o);
  std::vector<double> steps(one.step_ms.begin() + 1, one.step_ms.end());
  Timing t;
  t.decode_ms = steps.empty() ? one.step_ms.front() : median(steps);
  const StepCostModel cost = m.cost_model();
  const auto prompt_length = static_cast<int64_t>(prompt.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    t.decode_cost += cost.forward({{prompt_length + static_cast<int64_t>(i), 1, 1}});
    t.decode_ms_sum += steps[i];
    ++t.decode_steps;
  }
  o.max_new_tokens = p.batch_tokens;
  GenerateResult many = generate(m, tok, batch, o);
  t.batch_tok_s =
      static_cast<double>(batch.size()) * static_cast<double>(p.batch_tokens) / many.total_ms * 1e3;
  return t;
}

}  // namespace

QuantizationResult run_quantization(const Engine& engine, const QuantizationParams& p,
                                    const ExperimentControl& control) {
  if (p.modes.empty()) throw InputError("quantization needs at least one mode");
  if (p.prompts.empty()) throw InputError("quantization needs at least one prompt");
  if (p.new_tokens < 1 || p.decode_tokens < 2 || p.batch < 1 || p.batch_tokens < 1 || p.repeats < 1 ||
      p.histogram_bins < 2)
    throw InputError(
        "quantization needs new tokens >= 1, decode tokens >= 2, batch >= 1, batch tokens >= 1, repeats >= 1 "
        "and at least 2 histogram bins");
  limits::check_range("batch", p.batch, 1, limits::kMaxBatch);
  limits::check_range("repeats", p.repeats, 1, limits::kMaxRepeats);
  limits::check_range("new tokens", p.new_tokens, 1, limits::kMaxTokens);
  limits::check_range("decode tokens", p.decode_tokens, 2, limits::kMaxTokens);
  limits::check_range("batch tokens", p.batch_tokens, 1, limits::kMaxTokens);
  limits::check_range("histogram bins", p.histogram_bins, 2, 100000);
  const QuantExec exec = parse_quant_exec(p.exec);
  std::vector<QuantSpec> specs{QuantSpec{}};  // fp32 first
  for (const auto& name : p.modes) {
    QuantSpec s = parse_quant_mode(name);
    s.exec = exec;
    if (s.is_quantized()) specs.push_back(s);
  }
  if (engine.quantization().is_quantized())
    throw InputError("the loaded model is already quantized (" + engine.quantization().mode_name() +
                     "); load it without --quant to measure quantization against its own weights");
  // The reference: the loaded weights, or for a GGUF run as stored the file's blocks dequantized
  // (the values the stored blocks stand for).
  const std::shared_ptr<const Model> reference = engine.dense_reference();
  if (!reference) throw InputError("the loaded model keeps no plain weights to quantize from");
  const Model& ref = *reference;
  const at::Device device = ref.device();
  for (const QuantSpec& s : specs) {
    std::string why;
    if (s.is_quantized() && exec == QuantExec::Native && !native_quant_available(s, device, &why))
      throw InputError("native " + s.mode_name() + ": " + why);
  }
  c10::InferenceMode guard;
  const Tokenizer& tok = engine.tokenizer();
  // The architecture's side of the experiment (its record in the registry).
  const Architecture& arch = architecture_of(ref);
  const QuantTarget target = arch.quant_target(ref);

  QuantizationResult result;
  result.model = engine.name();
  result.caveat = engine.text_caveat();
  result.threads = engine_threads();
  result.device = device_label(device);
  if (p.measure_speed) {
    progress(control, 0.0, "measuring copy bandwidth");
    result.copy_bandwidth_gbs = copy_bandwidth_gbs(device);
  }

  std::vector<std::vector<int32_t>> prompts;
  for (const auto& s : p.prompts) prompts.push_back(encode_prompt(tok, s));
  GenerateOptions greedy;
  greedy.max_new_tokens = p.new_tokens;
  greedy.stop_at_eos = false;
  greedy.report_top = 0;
  greedy.cancel = control.cancel;
  check_generation_fits(ref, prompts, greedy);
  std::vector<std::vector<int32_t>> batch;
  for (int64_t i = 0; i < p.batch; ++i) batch.push_back(prompts[static_cast<size_t>(i) % prompts.size()]);
  if (p.measure_speed) {
    GenerateOptions o = greedy;
    o.max_new_tokens = std::max(p.decode_tokens, p.batch_tokens);
    check_generation_fits(ref, batch, o);
  }

  // Log-probabilities in fp64 for the KL divergence: in fp32 each of the vocabulary's terms
  // p (log p - log q) carries a rounding error near 1e-7 p, so a drift as small as fp16's (KL around
  // 1e-7 on a small model) came out negative.
  std::vector<at::Tensor> ref_logp;
  for (const auto& ids : prompts)
    ref_logp.push_back(at::log_softmax(all_logits(ref, ids).to(at::kDouble), -1));
  std::vector<GeneratedSequence> ref_greedy;
  for (const auto& ids : prompts) ref_greedy.push_back(generate(ref, tok, {ids}, greedy).sequences.at(0));

  std::vector<int32_t> ppl_ids;
  if (engine.is_demo()) {
    result.perplexity_note = "perplexity needs a real checkpoint: the built-in model's weights are random";
  } else {
    ppl_ids = encode_prompt(tok, kPerplexityText);
    if (static_cast<int64_t>(ppl_ids.size()) > ref.shape().context)
      ppl_ids.resize(static_cast<size_t>(ref.shape().context));
    result.fp32_perplexity = perplexity(ref, ppl_ids);
  }

  const auto& named = target.named;
  int64_t fp32_bytes = 0;
  for (const auto& [name, t] : named) fp32_bytes += t.numel() * 4;
  const double stages = static_cast<double>(specs.size());
  for (size_t mi = 0; mi < specs.size(); ++mi) {
    check_cancel(control);
    const QuantSpec& spec = specs[mi];
    const std::string mode = spec.mode_name();
    const double base = static_cast<double>(mi) / stages;
    progress(control, base, mode + ": quantizing");
    QuantModeResult r;
    r.mode = mode;
    std::unique_ptr<Model> owned;
    const Model* model = &ref;
    {
      QuantizedSet q = target.quantize(spec);
      const QuantizedBytes b = quantized_bytes(q.parameters);
      r.memory.parameters = b.parameters;
      r.memory.quantized_bytes = b.quantized;
      r.memory.state_bytes = b.states;
      r.memory.other_bytes = b.other;
      r.memory.total_bytes = b.total();
      r.memory.fp32_bytes = fp32_bytes;
      r.memory.fraction_of_fp32 = static_cast<double>(b.total()) / static_cast<double>(fp32_bytes);
      r.memory.course_footprint_bytes = b.quantized + b.other + target.hf_buffer_bytes;
      r.memory.course_fp32_footprint_bytes = fp32_bytes + target.hf_buffer_bytes;

      // Reconstruction error over every quantized element: stats per tensor and per block, then
      // one histogram over a range symmetric around 0 that holds every error.
      std::map<std::string, std::pair<double, double>> block_sq;  // block -> (sum diff^2, sum w^2)
      std::map<std::string, double> block_max;
      std::vector<std::string> block_order;
      double sum_abs = 0, max_abs = 0;
      int64_t count = 0;
      auto diff_of = [&](size_t i) {
        const QuantizedTensor& t = q.parameters[i].tensor;
        at::Tensor w = named[i].second.to(at::kFloat);
        if (t.transposed) w = w.t();
        return std::make_pair(t.dequantize(at::kFloat) - w, w);
      };
      for (size_t i = 0; i < q.parameters.size(); ++i) {
        if (q.parameters[i].tensor.scheme == QuantScheme::None) continue;
        auto [d, w] = diff_of(i);
        TensorError e;
        e.name = q.parameters[i].name;
        e.numel = d.numel();
        at::Tensor a = d.abs();
        e.max_abs = a.max().item<double>();
        const double sa = a.sum().item<double>();
        e.mean_abs = sa / static_cast<double>(e.numel);
        const double dd = d.square().sum().item<double>(), ww = w.square().sum().item<double>();
        e.rel_rms = ww > 0 ? std::sqrt(dd / ww) : 0.0;
        const std::string blk = block_of(e.name, arch);
        if (!block_sq.count(blk)) block_order.push_back(blk);
        block_sq[blk].first += dd;
        block_sq[blk].second += ww;
        block_max[blk] = std::max(block_max[blk], e.max_abs);
        sum_abs += sa;
        max_abs = std::max(max_abs, e.max_abs);
        count += e.numel;
        r.tensors.push_back(e);
      }
      for (const auto& blk : block_order) {
        const auto [dd, ww] = block_sq[blk];
        r.blocks.push_back({blk, ww > 0 ? std::sqrt(dd / ww) : 0.0, block_max[blk]});
      }
      r.max_abs_error = max_abs;
      r.mean_abs_error = count ? sum_abs / static_cast<double>(count) : 0.0;
      const double edge = max_abs > 0 ? max_abs : 1e-12;
      r.histogram.lo = -edge;
      r.histogram.hi = edge;
      r.histogram.counts.assign(static_cast<size_t>(p.histogram_bins), 0);
      if (count > 0) {
        at::Tensor total = at::zeros({p.histogram_bins}, at::kDouble);
        for (size_t i = 0; i < q.parameters.size(); ++i) {
          if (q.parameters[i].tensor.scheme == QuantScheme::None) continue;
          total += at::histc(diff_of(i).first.to(at::kCPU), p.histogram_bins, -edge, edge).to(at::kDouble);
        }
        for (int64_t k = 0; k < p.histogram_bins; ++k)
          r.histogram.counts[static_cast<size_t>(k)] =
              static_cast<int64_t>(std::llround(total[k].item<double>()));
      }
      check_cancel(control);
      if (spec.is_quantized()) {
        QuantExec used = resolve_quant_exec(spec, device);
        owned = q.build(used);
        owned->inherit_run_settings(ref);
        // What its steps read, for the roofline: the quantized bytes, or dense ones when dequantized.
        QuantSpec as_run = spec;
        as_run.exec = used;
        owned->set_weight_quantization(as_run);
        model = owned.get();
        r.exec = quant_exec_name(used);
        r.kernel = owned->kernels() ? owned->kernels()->description()
                                    : "dequantized once to " + dtype_label(ref.dtype());
      } else {
        r.exec = "fp32";
        r.kernel = "the loaded weights (" + dtype_label(ref.dtype()) +
                   (ref.kernels() ? "): " + ref.kernels()->description() : ")");
      }
    }  // the quantized copy is released here: what remains is what the model holds
    r.memory.resident_bytes = model->resident_bytes();

    progress(control, base + 0.3 / stages, mode + ": logit drift and greedy text");
    double kl_sum = 0, kl_max = 0;
    int64_t agree = 0, positions = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      at::Tensor logq = at::log_softmax(all_logits(*model, prompts[i]).to(at::kDouble), -1);
      at::Tensor kl = (ref_logp[i].exp() * (ref_logp[i] - logq)).sum(-1).to(at::kCPU);
      kl_sum += kl.sum().item<double>();
      kl_max = std::max(kl_max, kl.max().item<double>());
      agree += ref_logp[i].argmax(-1).eq(logq.argmax(-1)).sum().item<int64_t>();
      positions += kl.numel();
    }
    r.kl_mean = kl_sum / static_cast<double>(positions);
    r.kl_max = kl_max;
    r.top1_agreement = static_cast<double>(agree) / static_cast<double>(positions);
    r.positions = positions;
    for (size_t i = 0; i < prompts.size(); ++i) {
      check_cancel(control);
      const GeneratedSequence s = generate(*model, tok, {prompts[i]}, greedy).sequences.at(0);
      GreedyComparison g;
      g.prompt = p.prompts[i];
      g.reference_tokens = ref_greedy[i].generated_ids;
      g.tokens = s.generated_ids;
      for (int32_t id : g.reference_tokens) g.reference_pieces.push_back(tok.token_display(id));
      for (int32_t id : g.tokens) g.pieces.push_back(tok.token_display(id));
      g.reference_text = ref_greedy[i].text;
      g.text = s.text;
      for (size_t k = 0; k < std::min(g.tokens.size(), g.reference_tokens.size()); ++k)
        if (g.tokens[k] != g.reference_tokens[k]) {
          g.first_difference = static_cast<int64_t>(k);
          break;
        }
      if (g.first_difference < 0 && g.tokens.size() != g.reference_tokens.size())
        g.first_difference = static_cast<int64_t>(std::min(g.tokens.size(), g.reference_tokens.size()));
      r.greedy.push_back(std::move(g));
    }
    if (!ppl_ids.empty()) r.perplexity = perplexity(*model, ppl_ids);

    if (p.measure_speed) {
      progress(control, base + 0.5 / stages, mode + ": timing against fp32");
      if (p.warmup) {
        QuantizationParams w = p;
        w.decode_tokens = 2;
        w.batch_tokens = 1;
        time_model(ref, tok, prompts[0], batch, w, control);
        time_model(*model, tok, prompts[0], batch, w, control);
      }
      std::vector<double> d32, dq, b32, bq;
      Timing sum32, sumq;
      for (int64_t k = 0; k < p.repeats; ++k) {  // alternate, so both see the same machine
        Timing a = time_model(ref, tok, prompts[0], batch, p, control);
        Timing b = time_model(*model, tok, prompts[0], batch, p, control);
        d32.push_back(a.decode_ms);
        b32.push_back(a.batch_tok_s);
        dq.push_back(b.decode_ms);
        bq.push_back(b.batch_tok_s);
        for (auto [from, to] : {std::pair{&a, &sum32}, std::pair{&b, &sumq}}) {
          to->decode_cost += from->decode_cost;
          to->decode_ms_sum += from->decode_ms_sum;
          to->decode_steps += from->decode_steps;
        }
      }
      QuantSpeed sp;
      sp.fp32_decode_ms = median(d32);
      sp.decode_ms = median(dq);
      sp.decode_speedup = sp.fp32_decode_ms / sp.decode_ms;
      sp.fp32_batch_tokens_per_s = median(b32);
      sp.batch_tokens_per_s = median(bq);
      sp.batch_ratio = sp.batch_tokens_per_s / sp.fp32_batch_tokens_per_s;
      const double gb_per_ms = result.copy_bandwidth_gbs * 1e6;
      sp.floor_ms = static_cast<double>(r.memory.resident_bytes) / gb_per_ms;
      sp.fp32_floor_ms = static_cast<double>(ref.resident_bytes()) / gb_per_ms;
      sp.fp32_decode = roofline_point("decode", "decode batch 1, fp32", "none", 1, 1, sum32.decode_cost,
                                      sum32.decode_ms_sum, sum32.decode_steps);
      sp.decode = roofline_point("decode", "decode batch 1, " + mode + " (" + r.exec + ")", mode, 1, 1,
                                 sumq.decode_cost, sumq.decode_ms_sum, sumq.decode_steps);
      r.speed = sp;
      if (control.sink) {
        control.sink->on_point("decode ms", static_cast<double>(mi), sp.decode_ms);
        control.sink->on_point("batch tokens/s", static_cast<double>(mi), sp.batch_tokens_per_s);
      }
    }
    if (control.quant) control.quant->on_mode(r);
    result.modes.push_back(std::move(r));
    progress(control, static_cast<double>(mi + 1) / stages, mode + ": done");
  }
  return result;
}

nlohmann::json QuantizationResult::to_json() const {
  nlohmann::json modes_j = nlohmann::json::array();
  for (const auto& m : modes) {
    nlohmann::json j;
    j["mode"] = m.mode;
    j["exec"] = m.exec;
    j["kernel"] = m.kernel;
    const QuantMemory& b = m.memory;
    j["memory"] = {{"parameters", b.parameters},
                   {"quantized_bytes", b.quantized_bytes},
                   {"state_bytes", b.state_bytes},
                   {"other_bytes", b.other_bytes},
                   {"total_bytes", b.total_bytes},
                   {"fp32_bytes", b.fp32_bytes},
                   {"fraction_of_fp32", b.fraction_of_fp32},
                   {"course_footprint_bytes", b.course_footprint_bytes},
                   {"course_fp32_footprint_bytes", b.course_fp32_footprint_bytes},
                   {"resident_bytes", b.resident_bytes},
                   {"resident_fraction_of_fp32",
                    static_cast<double>(b.resident_bytes) / static_cast<double>(b.fp32_bytes)}};
    j["error"] = {{"max_abs", m.max_abs_error}, {"mean_abs", m.mean_abs_error}};
    nlohmann::json blocks = nlohmann::json::array();
    for (const auto& e : m.blocks)
      blocks.push_back({{"block", e.block}, {"rel_rms", e.rel_rms}, {"max_abs", e.max_abs}});
    j["blocks"] = blocks;
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& e : m.tensors)
      tensors.push_back({{"name", e.name},
                         {"numel", e.numel},
                         {"max_abs", e.max_abs},
                         {"mean_abs", e.mean_abs},
                         {"rel_rms", e.rel_rms}});
    j["tensors"] = tensors;
    j["histogram"] = {{"lo", m.histogram.lo}, {"hi", m.histogram.hi}, {"counts", m.histogram.counts}};
    j["logits"] = {{"kl_mean", m.kl_mean},
                   {"kl_max", m.kl_max},
                   {"top1_agreement", m.top1_agreement},
                   {"positions", m.positions}};
    nlohmann::json greedy = nlohmann::json::array();
    for (const auto& g : m.greedy)
      greedy.push_back({{"prompt", g.prompt},
                        {"fp32_text", g.reference_text},
                        {"text", g.text},
                        {"fp32_tokens", g.reference_tokens},
                        {"tokens", g.tokens},
                        {"first_difference", g.first_difference}});
    j["greedy"] = greedy;
    if (m.speed) {
      const QuantSpeed& s = *m.speed;
      j["speed"] = {{"decode_ms", s.decode_ms},
                    {"fp32_decode_ms", s.fp32_decode_ms},
                    {"decode_speedup", s.decode_speedup},
                    {"batch_tokens_per_s", s.batch_tokens_per_s},
                    {"fp32_batch_tokens_per_s", s.fp32_batch_tokens_per_s},
                    {"batch_ratio", s.batch_ratio},
                    {"floor_ms", s.floor_ms},
                    {"fp32_floor_ms", s.fp32_floor_ms},
                    {"roofline", roofline_json({s.fp32_decode, s.decode})}};
    }
    if (m.perplexity) j["perplexity"] = *m.perplexity;
    modes_j.push_back(j);
  }
  nlohmann::json j = {{"experiment", "quantization"},
                      {"model", model},
                      {"threads", threads},
                      {"device", device},
                      {"copy_bandwidth_gbs", copy_bandwidth_gbs},
                      {"modes", modes_j},
                      {"statistic", "median over alternating repeats"}};
  if (!caveat.empty()) j["caveat"] = caveat;
  if (fp32_perplexity) j["fp32_perplexity"] = *fp32_perplexity;
  if (!perplexity_note.empty()) j["perplexity_note"] = perplexity_note;
  return j;
}

}  // namespace servelab

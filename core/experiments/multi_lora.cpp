#include "experiments/multi_lora.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <set>

#include "experiments/batch_sweep.h"  // median
#include "generate/generation.h"
#include "lora/lora_adapter.h"
#include "lora/multi_lora.h"
#include "model/model.h"
#include "tokenizer/prompt.h"
#include "util/device.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

namespace {

void check_cancel(const ExperimentControl& c) {
  if (c.cancel && c.cancel->load()) throw CancelledError();
}

void progress(const ExperimentControl& c, double f, const std::string& stage) {
  if (c.sink) c.sink->on_progress(f, stage);
}

void point(const ExperimentControl& c, const std::string& series, double x, double y) {
  if (c.sink) c.sink->on_point(series, x, y);
}

void check_params(const MultiLoraParams& p) {
  if (p.workload != "toy" && p.workload != "gpt2")
    throw InputError("unknown multi-LoRA workload '" + p.workload + "' (choose toy or gpt2)");
  if (p.strategies.empty()) throw InputError("no multi-LoRA strategy chosen (loop, gathered, segmented)");
  for (const auto& s : p.strategies) parse_multi_lora_strategy(s);
  if (p.batch_sizes.empty()) throw InputError("no batch sizes given");
  for (int64_t b : p.batch_sizes)
    if (b < 1 || b > 1024)
      throw InputError("batch size must be between 1 and 1024, got " + std::to_string(b));
  limits::check_range("repeats", p.repeats, 1, limits::kMaxRepeats);
  if (p.workload == "toy") {
    limits::check_range("toy adapters", p.toy_adapters, 1, limits::kMaxAdapters);
    limits::check_range("toy samples", p.toy_samples, 1, limits::kMaxSteps);
    limits::check_range("toy sequence length", p.toy_seq_len, 1, limits::kMaxSteps);
    if (p.toy_adapters < 1 || p.toy_rank < 1 || p.toy_rank > 10 || p.toy_samples < 1 || p.toy_seq_len < 1)
      throw InputError("toy workload needs at least 1 adapter, a rank of 1..10, 1+ samples and 1+ tokens");
    return;
  }
  limits::check_range("adapters", static_cast<int64_t>(p.adapters.size()), 0, limits::kMaxAdapters);
  if (p.adapters.empty()) {
    limits::check_range("random adapters", p.random_adapters, 1, limits::kMaxAdapters);
    limits::check_range("rank", p.random_rank, 1, limits::kMaxRank);
  }
  limits::check_range("decode steps", p.decode_steps, 1, limits::kMaxSteps);
  if (p.context < 1) throw InputError("context must be at least 1 token, got " + std::to_string(p.context));
  limits::check_range("context", p.context, 1, limits::kMaxTokens);
  if (p.assignment != "distinct" && p.assignment != "shared" && p.assignment != "mixed" &&
      p.assignment != "rows")
    throw InputError("unknown adapter assignment '" + p.assignment +
                     "' (choose distinct, shared, mixed or rows)");
  if (p.assignment == "shared")
    limits::check_range("shared adapters", p.shared_adapters, 1, limits::kMaxAdapters);
  if (p.assignment == "rows" && p.row_adapters.empty()) throw InputError("the batch composer has no rows");
  limits::check_range("new tokens", p.new_tokens, 1, limits::kMaxTokens);
}

// Every adapter of a run is held at once (and once more in the gathered stack): what the random
// ones will cost, before any is made. PEFT folders are checked by their reader.
void check_adapters_fit(const Model& model, const MultiLoraParams& p) {
  int64_t bytes = 0;
  if (p.adapters.empty()) {
    bytes = p.random_adapters * lora_adapter_bytes(model, p.random_rank);
  } else {
    for (const AdapterSource& s : p.adapters)
      if (s.peft_dir.empty()) {
        limits::check_range("rank of adapter '" + s.name + "'", s.rank, 1, limits::kMaxRank);
        bytes += lora_adapter_bytes(model, s.rank);
      }
  }
  limits::check_fits_in_memory(
      std::to_string(p.adapters.empty() ? p.random_adapters : static_cast<int64_t>(p.adapters.size())) +
          " adapters (twice, with the gathered stack)",
      2 * bytes);
}

// ---- the course's toy model (lesson 6) ----

MultiLoraResult run_toy(const MultiLoraParams& p, const ExperimentControl& control) {
  MultiLoraResult result;
  result.workload = "toy";
  result.architecture = "toy";
  result.model = "the course's toy model: embedding 10, linear 10x10 with LoRA, lm_head 10x10";
  result.threads = engine_threads();
  result.device = "cpu";
  result.assignment = "random";
  constexpr int64_t H = 10, V = 10;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(42);
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  const at::Tensor emb = at::randn({V, H}, gen, f32);
  const at::Tensor w = at::randn({H, H}, gen, f32) / std::sqrt(static_cast<double>(H));
  const at::Tensor bias = at::zeros({H}, f32);
  const at::Tensor head = at::randn({H, V}, gen, f32) / std::sqrt(static_cast<double>(H));
  std::vector<std::shared_ptr<LoraAdapter>> owned;
  std::vector<const LoraAdapter*> adapters;
  for (int64_t i = 0; i < p.toy_adapters; ++i) {
    auto a = std::make_shared<LoraAdapter>("toy-" + std::to_string(i), 1);
    a->source = "random (seed 42)";
    a->alpha = static_cast<double>(p.toy_rank);  // the course adds x A B unscaled: scale 1
    a->set(0, LinearSlot::Attn, at::randn({H, p.toy_rank}, gen, f32), at::randn({p.toy_rank, H}, gen, f32),
           1.0);
    adapters.push_back(a.get());
    owned.push_back(std::move(a));
  }
  result.adapters.push_back(owned.front()->info());
  result.shapes.push_back({"linear", H, H, p.toy_rank, H * H, p.toy_rank * 2 * H,
                           static_cast<double>(p.toy_rank * 2 * H) / static_cast<double>(H * H)});
  auto stack = std::make_shared<const LoraStack>(adapters);  // the course's loras_a / loras_b

  std::vector<std::string> methods = {"base"};
  for (const auto& s : p.strategies) methods.push_back(s);
  c10::InferenceMode guard;
  const size_t total = p.batch_sizes.size();
  for (size_t bi = 0; bi < total; ++bi) {
    const int64_t bs = p.batch_sizes[bi];
    std::vector<std::vector<double>> ms(methods.size());
    const int64_t warm = p.warmup ? std::min<int64_t>(10, p.toy_samples) : 0;
    for (int64_t s = -warm; s < p.toy_samples; ++s) {
      if (s % 50 == 0) check_cancel(control);
      const at::Tensor ids = at::randint(V, {bs, p.toy_seq_len}, gen, at::TensorOptions().dtype(at::kLong));
      const at::Tensor idx = at::randint(p.toy_adapters, {bs}, gen, at::TensorOptions().dtype(at::kLong));
      std::vector<const LoraAdapter*> rows;
      for (int64_t r = 0; r < bs; ++r) rows.push_back(adapters[static_cast<size_t>(idx[r].item<int64_t>())]);
      std::vector<int64_t> first_tokens;
      for (size_t m = 0; m < methods.size(); ++m) {
        // One token: embedding, the LoRA linear, lm_head, argmax of the last position (the course's
        // generate_token), timed end to end including building the batch's adapter rows.
        const DeviceTimer timer(at::kCPU);
        at::Tensor x = at::embedding(emb, ids).view({bs * p.toy_seq_len, H});
        at::Tensor y = at::addmm(bias, x, w);
        if (methods[m] != "base") {
          LoraBatch batch(rows, parse_multi_lora_strategy(methods[m]), stack);
          y = batch.apply(0, LinearSlot::Attn, x, y);
        }
        at::Tensor logits = at::matmul(y.view({bs, p.toy_seq_len, H}), head);
        at::Tensor next = logits.select(1, -1).argmax(-1);
        if (s >= 0) ms[m].push_back(timer.elapsed_ms());
        if (m == 1) first_tokens.assign(next.data_ptr<int64_t>(), next.data_ptr<int64_t>() + bs);
        if (m > 1 &&
            std::vector<int64_t>(next.data_ptr<int64_t>(), next.data_ptr<int64_t>() + bs) != first_tokens)
          result.strategies_agree = false;
      }
    }
    double base_mean = 0;
    for (size_t m = 0; m < methods.size(); ++m) {
      double sum = 0;
      for (double v : ms[m]) sum += v;
      const double mean = sum / static_cast<double>(ms[m].size());  // the course averages
      if (m == 0) base_mean = mean;
      MultiLoraPoint pt{
          methods[m], bs, mean, mean / base_mean, median(ms[m]), std::min<int64_t>(bs, p.toy_adapters)};
      result.points.push_back(pt);
      point(control, methods[m], static_cast<double>(bs), mean);
    }
    progress(control, static_cast<double>(bi + 1) / static_cast<double>(total),
             "batch size " + std::to_string(bs));
  }
  return result;
}

// ---- the engine's model ("gpt2": the workload's name from before Llama; any architecture) ----

std::vector<const LoraAdapter*> assign_rows(const MultiLoraParams& p, int64_t batch,
                                            const std::vector<const LoraAdapter*>& adapters) {
  std::vector<const LoraAdapter*> rows;
  const int64_t n = static_cast<int64_t>(adapters.size());
  for (int64_t i = 0; i < batch; ++i) {
    if (p.assignment == "distinct") {
      rows.push_back(adapters[static_cast<size_t>(i % n)]);
    } else if (p.assignment == "shared") {
      rows.push_back(adapters[static_cast<size_t>(i % std::min(n, p.shared_adapters))]);
    } else if (p.assignment == "mixed") {
      rows.push_back(i % 2 == 0 ? nullptr : adapters[static_cast<size_t>((i / 2) % n)]);
    } else {  // rows
      const std::string& name = p.row_adapters[static_cast<size_t>(i) % p.row_adapters.size()];
      const LoraAdapter* a = nullptr;
      if (!name.empty()) {
        for (const LoraAdapter* c : adapters)
          if (c->name() == name) a = c;
        if (!a) throw InputError("the batch composer names adapter '" + name + "', which is not loaded");
      }
      rows.push_back(a);
    }
  }
  return rows;
}

// One decode step per row from the same cache state, the per-row adapter applied by `lora`.
at::Tensor decode_step(const Model& m, KvCache& cache, const at::Tensor& ids, int64_t position,
                       const LoraBatch* lora) {
  ForwardInput in;
  in.input_ids = ids;
  in.position_ids = at::full({ids.size(0), 1}, position, ids.options());
  in.lora = lora;
  return m.forward(in, &cache);
}

}  // namespace

AdapterInfo describe_adapter(const Engine& engine, const AdapterSource& source) {
  c10::InferenceMode guard;
  return load_adapter(source, engine.model())->info();
}

MultiLoraResult run_multi_lora(const Engine& engine, const MultiLoraParams& p,
                               const ExperimentControl& control) {
  check_params(p);
  if (p.workload == "toy") return run_toy(p, control);
  check_adapters_fit(engine.model(), p);

  c10::InferenceMode guard;
  const Model& model = engine.model();
  const ModelShape& c = model.shape();
  const at::Device dev = model.device();
  MultiLoraResult result;
  result.workload = "gpt2";
  result.architecture = c.architecture;
  result.model = engine.name();
  result.caveat = engine.text_caveat();
  result.threads = engine_threads();
  result.device = dev.str();
  result.assignment = p.assignment;

  // Adapters.
  progress(control, 0.0, "loading adapters");
  std::vector<AdapterSource> sources = p.adapters;
  if (sources.empty()) {
    for (int64_t i = 0; i < p.random_adapters; ++i) {
      AdapterSource s;
      s.name = "rand-r" + std::to_string(p.random_rank) + "-" + std::to_string(i + 1);
      s.rank = p.random_rank;
      s.alpha = 2.0 * static_cast<double>(p.random_rank);
      s.seed = static_cast<uint64_t>(i + 1);
      sources.push_back(s);
    }
  }
  std::vector<std::shared_ptr<const LoraAdapter>> owned;
  std::vector<const LoraAdapter*> adapters;
  std::set<std::string> names;
  for (const AdapterSource& s : sources) {
    check_cancel(control);
    if (!names.insert(s.name).second) throw InputError("two adapters are named '" + s.name + "'");
    owned.push_back(load_adapter(s, model));
    adapters.push_back(owned.back().get());
    result.adapters.push_back(owned.back()->info());
  }
  const int64_t rank = adapters.front()->max_rank();
  for (const Projection& proj : model.projections()) {
    const int64_t in = proj.in, out = proj.out;
    LoraShapes s{proj.hf_name, in, out, rank, in * out, rank * (in + out), 0};
    s.ratio = static_cast<double>(s.ab_parameters) / static_cast<double>(s.w_parameters);
    result.shapes.push_back(s);
  }

  std::vector<std::string> methods = {"base"};
  for (const auto& s : p.strategies) methods.push_back(s);
  const bool want_gathered =
      std::find(p.strategies.begin(), p.strategies.end(), "gathered") != p.strategies.end();
  // The course's stack of every adapter, built once like its loras_a / loras_b.
  std::shared_ptr<const LoraStack> stack =
      want_gathered ? std::make_shared<const LoraStack>(adapters) : nullptr;

  // Decode steps after `context` cached tokens; every method starts from the same cache state.
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(7);
  const int64_t steps = p.decode_steps;
  if (p.context + steps + 1 > c.context)
    throw InputError("context " + std::to_string(p.context) + " + " + std::to_string(steps) +
                     " decode steps exceed the model's " + std::to_string(c.context) + " positions");
  const size_t total = p.batch_sizes.size();
  for (size_t bi = 0; bi < total; ++bi) {
    const int64_t bs = p.batch_sizes[bi];
    check_cancel(control);
    progress(control, 0.05 + 0.8 * static_cast<double>(bi) / static_cast<double>(total),
             "batch size " + std::to_string(bs));
    const std::vector<const LoraAdapter*> rows = assign_rows(p, bs, adapters);
    std::set<const LoraAdapter*> distinct(rows.begin(), rows.end());
    distinct.erase(nullptr);
    std::vector<LoraBatch> batches;
    for (size_t m = 1; m < methods.size(); ++m)
      batches.emplace_back(rows, parse_multi_lora_strategy(methods[m]), stack);

    KvCache cache = model.make_cache(bs, p.context + steps + 1);
    const at::Tensor prompt =
        at::randint(c.vocab_size, {bs, p.context}, gen, at::TensorOptions().dtype(at::kLong)).to(dev);
    {
      ForwardInput in;
      in.input_ids = prompt;
      in.position_ids = at::arange(p.context, at::TensorOptions().dtype(at::kLong))
                            .view({1, p.context})
                            .expand({bs, p.context})
                            .to(dev);
      model.forward(in, &cache);
    }
    const at::Tensor first =
        at::randint(c.vocab_size, {bs, 1}, gen, at::TensorOptions().dtype(at::kLong)).to(dev);
    auto run = [&](size_t m) {
      cache.set_length(p.context);
      at::Tensor ids = first;
      const DeviceTimer timer(dev);
      for (int64_t s = 0; s < steps; ++s) {
        at::Tensor logits = decode_step(model, cache, ids, p.context + s, m == 0 ? nullptr : &batches[m - 1]);
        ids = logits.argmax(-1).view({bs, 1});
      }
      return timer.elapsed_ms() / static_cast<double>(steps);
    };
    if (p.warmup)
      for (size_t m = 0; m < methods.size(); ++m) run(m);
    std::vector<std::vector<double>> ms(methods.size());
    for (int64_t r = 0; r < p.repeats; ++r) {
      check_cancel(control);
      // Methods take turns within a repeat, starting one further each time, so that drift of the
      // machine lands on all of them alike.
      for (size_t k = 0; k < methods.size(); ++k) {
        const size_t m = (k + static_cast<size_t>(r)) % methods.size();
        ms[m].push_back(run(m));
      }
    }
    const double base = median(ms[0]);
    for (size_t m = 0; m < methods.size(); ++m) {
      const double v = median(ms[m]);
      result.points.push_back({methods[m], bs, v, v / base, v, static_cast<int64_t>(distinct.size())});
      point(control, methods[m], static_cast<double>(bs), v);
    }
    // The strategies must agree: one step from the same cache, logits compared with the first.
    if (methods.size() > 2) {
      at::Tensor ref;
      for (size_t m = 1; m < methods.size(); ++m) {
        cache.set_length(p.context);
        at::Tensor logits = decode_step(model, cache, first, p.context, &batches[m - 1]).to(at::kFloat);
        if (!ref.defined()) {
          ref = logits;
        } else {
          result.max_strategy_difference =
              std::max(result.max_strategy_difference, (logits - ref).abs().max().item<double>());
        }
      }
    }
  }

  // The prompt through the base model and the first adapters, one batched run per strategy. An
  // adapter with a prompt of its own continues that, the base model beside it on the same prompt;
  // the base model continues params.prompt only when some adapter shown has none.
  progress(control, 0.9, "generating per adapter");
  struct TextRow {
    std::shared_ptr<const LoraAdapter> adapter;
    std::string prompt;
  };
  std::vector<TextRow> text_rows;
  std::vector<TextRow> adapter_rows;
  bool plain = false;
  for (size_t i = 0; i < owned.size() && static_cast<int64_t>(i) < p.outputs_max; ++i) {
    const auto own = p.adapter_prompts.find(owned[i]->name());
    if (own == p.adapter_prompts.end()) {
      adapter_rows.push_back({owned[i], p.prompt});
      plain = true;
    } else {
      adapter_rows.push_back({owned[i], own->second});
      adapter_rows.push_back({nullptr, own->second});
    }
  }
  if (plain || adapter_rows.empty()) text_rows.push_back({nullptr, p.prompt});
  text_rows.insert(text_rows.end(), adapter_rows.begin(), adapter_rows.end());
  std::vector<std::shared_ptr<const LoraAdapter>> out_rows;
  std::vector<std::vector<int32_t>> prompts;
  for (const TextRow& row : text_rows) {
    out_rows.push_back(row.adapter);
    prompts.push_back(encode_prompt(engine.tokenizer(), row.prompt));
    if (prompts.back().empty()) throw InputError("the prompt is empty");
  }
  for (size_t si = 0; si < p.strategies.size(); ++si) {
    check_cancel(control);
    GenerateOptions o;
    o.max_new_tokens = p.new_tokens;
    o.stop_at_eos = !p.adapter_prompts.empty();
    o.report_top = 0;
    o.cancel = control.cancel;
    o.adapters = out_rows;
    o.lora_strategy = parse_multi_lora_strategy(p.strategies[si]);
    GenerateResult g = generate(model, engine.tokenizer(), prompts, o);
    for (size_t r = 0; r < out_rows.size(); ++r) {
      if (si == 0) {
        AdapterOutput out;
        out.adapter = out_rows[r] ? out_rows[r]->name() : "";
        out.prompt = text_rows[r].prompt;
        out.tokens = g.sequences[r].generated_ids;
        for (int32_t id : out.tokens) out.pieces.push_back(engine.tokenizer().token_display(id));
        out.text = g.sequences[r].text;
        result.outputs.push_back(std::move(out));
      } else if (g.sequences[r].generated_ids != result.outputs[r].tokens) {
        result.strategies_agree = false;
      }
    }
  }
  if (result.max_strategy_difference > 1e-3) result.strategies_agree = false;
  progress(control, 1.0, "done");
  return result;
}

nlohmann::json MultiLoraResult::to_json() const {
  nlohmann::json j;
  j["workload"] = workload;
  j["architecture"] = architecture;
  j["model"] = model;
  if (!caveat.empty()) j["caveat"] = caveat;
  j["threads"] = threads;
  j["device"] = device;
  j["assignment"] = assignment;
  j["adapters"] = nlohmann::json::array();
  for (const AdapterInfo& a : adapters)
    j["adapters"].push_back({{"name", a.name},
                             {"source", a.source},
                             {"rank", a.rank},
                             {"alpha", a.alpha},
                             {"scale", a.scale},
                             {"modules", a.modules.size()},
                             {"parameters", a.parameters},
                             {"bytes", a.bytes},
                             {"base_parameters", a.base_parameters}});
  j["shapes"] = nlohmann::json::array();
  for (const LoraShapes& s : shapes)
    j["shapes"].push_back({{"module", s.module},
                           {"in", s.in},
                           {"out", s.out},
                           {"rank", s.rank},
                           {"w_parameters", s.w_parameters},
                           {"ab_parameters", s.ab_parameters},
                           {"ratio", s.ratio}});
  j["points"] = nlohmann::json::array();
  for (const MultiLoraPoint& p : points)
    j["points"].push_back({{"strategy", p.strategy},
                           {"batch", p.batch},
                           {"ms", p.ms},
                           {"ratio_to_base", p.ratio_to_base},
                           {"median_ms", p.median_ms},
                           {"distinct_adapters", p.distinct_adapters}});
  j["outputs"] = nlohmann::json::array();
  for (const AdapterOutput& o : outputs)
    j["outputs"].push_back(
        {{"adapter", o.adapter}, {"prompt", o.prompt}, {"tokens", o.tokens}, {"text", o.text}});
  j["strategies_agree"] = strategies_agree;
  j["max_strategy_difference"] = max_strategy_difference;
  return j;
}

}  // namespace servelab

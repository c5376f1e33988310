#include "experiments/speculative.h"

#include <algorithm>
#include <map>

#include "experiments/sync_vs_continuous.h"
#include "model/engine.h"
#include "tokenizer/prompt.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

namespace {

// Tasks whose answers copy their input (editing, reformatting, repeating): what prompt lookup
// drafts for free.
const char* const kGrounded[] = {
    "Rewrite this Python function with the variable x renamed to total. Reply with the code only.\n\n"
    "def count_positive(values):\n    x = 0\n    for v in values:\n        if v > 0:\n            x = x + 1\n"
    "    return x\n",
    "Copy this list and add a period after each item:\n- buy milk\n- call the bank\n- water the plants\n"
    "- book the train tickets\n- send the report to Anna",
    "Repeat this sentence three times: The meeting has been moved to Thursday at ten in the main "
    "conference room.",
    "Write these as JSON objects with the keys name, city and age. Name: Maria Lopez; City: Valencia; "
    "Age: 34. Name: Tom Becker; City: Hamburg; Age: 51. Name: Aiko Sato; City: Osaka; Age: 27.",
    "Correct the spelling in this text and write it out in full: Teh weather was vrey nice yesterday, so we "
    "went for a long walk in teh park and had lunch by teh lake with our freinds.",
    "Add a docstring to this function and return the whole function:\n\ndef area(width, height):\n"
    "    return width * height\n",
    "Turn this into a bulleted list, one item per line: apples, oranges, bananas, pears, grapes, cherries, "
    "plums, peaches.",
    "Write the numbers from 1 to 40, separated by commas.",
};

// Open questions: little in the prompt to copy.
const char* const kOpen[] = {
    "Write a short story about a robot who learns to paint.",
    "Explain why the sky is blue to a ten-year-old.",
    "Give me three ideas for a weekend trip and say why each is fun.",
    "Describe your ideal breakfast.",
    "What are the benefits of learning a second language?",
    "Write a poem about autumn leaves.",
    "How does a bicycle stay upright?",
    "Suggest a name for a new coffee shop and explain it.",
};

}  // namespace

nlohmann::json spec_decode_stats_json(const SpecDecodeStats& st) {
  return {{"num_drafts", st.num_drafts},
          {"num_draft_tokens", st.num_draft_tokens},
          {"num_accepted_tokens", st.num_accepted_tokens},
          {"accepted_per_position", st.accepted_per_position},
          {"acceptance_rate", st.acceptance_rate()},
          {"mean_accepted_length", st.mean_accepted_length()},
          {"draft_ms", st.draft_ms}};
}

nlohmann::json SpeculativeBenchResult::to_json() const {
  nlohmann::json rs = nlohmann::json::array();
  for (const SpeculativeBenchRun& r : runs) {
    const double verify_ms = r.total_ms - r.draft_ms;
    rs.push_back({{"method", speculative_method_name(r.method)},
                  {"k", r.k},
                  {"tokens_per_s", r.tokens_per_s},
                  {"speedup", r.speedup},
                  {"total_ms", r.total_ms},
                  {"draft_ms", r.draft_ms},
                  {"verify_ms", verify_ms},
                  {"identical_greedy_tokens", r.identical}});
    // The bench's draft_ms is the median round's; the counters are summed over rounds.
    nlohmann::json stats = spec_decode_stats_json(r.stats);
    stats.erase("draft_ms");
    rs.back().update(stats);
  }
  return {{"workload", params.workload},
          {"concurrency", params.concurrency},
          {"requests", static_cast<int64_t>(prompts.size())},
          {"new_tokens", params.new_tokens},
          {"rounds", params.rounds},
          {"kv", kv_strategy_name(params.kv)},
          {"prompt_lookup_max", params.prompt_lookup_max},
          {"pairing", pairing},
          {"prompts", prompts},
          {"runs", rs}};
}

std::vector<std::string> speculative_workload(const std::string& workload, int64_t count) {
  const bool grounded = workload == "grounded";
  if (!grounded && workload != "open")
    throw InputError("workload must be grounded or open, got '" + workload + "'");
  std::vector<std::string> out;
  for (int64_t i = 0; i < count; ++i) out.emplace_back(grounded ? kGrounded[i % 8] : kOpen[i % 8]);
  return out;
}

SpeculativeBenchResult run_speculative_bench(const Engine& engine, const Model& target, const Model* draft,
                                             const std::string& pairing, const SpeculativeBenchParams& p,
                                             const ExperimentControl& control) {
  limits::check_range("rounds", p.rounds, 1, limits::kMaxRepeats);
  limits::check_range("concurrency", p.concurrency, 1, 256);
  limits::check_range("requests", p.requests, 1, 256);
  limits::check_range("new tokens", p.new_tokens, 1, limits::kMaxTokens);
  if (p.ks.empty()) throw InputError("give at least one k");
  for (SpeculativeMethod m : p.methods)
    if (m == SpeculativeMethod::DraftModel && !draft)
      throw InputError("the draft method needs a draft model");
  SpeculativeBenchResult result;
  result.params = p;
  result.pairing = pairing;
  if (!p.texts.empty()) result.params.concurrency = static_cast<int64_t>(p.texts.size());
  for (const std::string& text : p.texts.empty() ? speculative_workload(p.workload, p.requests) : p.texts)
    result.prompts.push_back(p.texts.empty() || p.chat ? chat_prompt(engine.tokenizer(), text, "") : text);
  std::vector<BatchRequest> requests;
  for (const std::string& prompt : result.prompts) {
    BatchRequest r;
    r.prompt_ids = encode_prompt(engine.tokenizer(), prompt);
    r.max_new_tokens = p.new_tokens;
    requests.push_back(std::move(r));
  }
  // Plain decoding first, then each drafter at each k.
  std::vector<SpeculativeBenchRun> runs(1);
  for (SpeculativeMethod m : p.methods)
    for (int64_t k : p.ks) {
      SpeculativeBenchRun r;
      r.method = m;
      r.k = k;
      runs.push_back(r);
    }
  auto options = [&](const SpeculativeBenchRun& r) {
    BatchOptions o;
    o.max_batch = result.params.concurrency;
    o.kv = p.kv;
    o.cancel = control.cancel;
    o.speculative.method = r.method;
    o.speculative.num_speculative_tokens = std::max<int64_t>(r.k, 1);
    o.speculative.prompt_lookup_max = p.prompt_lookup_max;
    o.speculative.draft_model = draft;
    return o;
  };
  if (p.warmup)
    for (const SpeculativeBenchRun& r : runs)
      run_continuous_batching(target, engine.tokenizer(), requests, options(r));
  std::vector<std::vector<double>> tps(runs.size()), ratio(runs.size()), total(runs.size()),
      drafting(runs.size());
  const size_t n = runs.size();
  std::vector<std::vector<std::vector<int32_t>>> tokens(n);  // per configuration, the last round's
  for (int64_t round = 0; round < p.rounds; ++round) {
    std::vector<double> this_round(n, 0);
    // Each round starts one configuration later, so no configuration always runs first.
    for (size_t j = 0; j < n; ++j) {
      const size_t i = (j + static_cast<size_t>(round)) % n;
      if (control.cancel && control.cancel->load())
        throw CancelledError("speculative decoding benchmark cancelled");
      if (control.sink)
        control.sink->on_progress(
            static_cast<double>(round * static_cast<int64_t>(n) + static_cast<int64_t>(j)) /
                static_cast<double>(p.rounds * static_cast<int64_t>(n)),
            std::string(speculative_method_name(runs[i].method)) + " k " + std::to_string(runs[i].k));
      const BatchRunResult run =
          run_continuous_batching(target, engine.tokenizer(), requests, options(runs[i]));
      if (run.cancelled) throw CancelledError("speculative decoding benchmark cancelled");
      this_round[i] = static_cast<double>(run.generated_tokens) / run.total_ms * 1000.0;
      tps[i].push_back(this_round[i]);
      total[i].push_back(run.total_ms);
      drafting[i].push_back(run.speculative.draft_ms);
      runs[i].stats.add(run.speculative);
      tokens[i].clear();
      for (const RequestResult& r : run.requests) tokens[i].push_back(r.generated_ids);
    }
    // Greedy tokens of every configuration against this round's plain decoding.
    for (size_t i = 1; i < n; ++i) runs[i].identical = runs[i].identical && tokens[i] == tokens[0];
    for (size_t i = 0; i < n; ++i) ratio[i].push_back(this_round[i] / this_round[0]);
  }
  for (size_t i = 0; i < n; ++i) {
    runs[i].tokens_per_s = median_or_zero(tps[i]);
    runs[i].speedup = median_or_zero(ratio[i]);
    runs[i].total_ms = median_or_zero(total[i]);
    runs[i].draft_ms = median_or_zero(drafting[i]);
  }
  result.runs = std::move(runs);
  return result;
}

namespace {

// The model that verifies and the one that drafts for a method, alive as long as this is.
struct Pairing {
  std::shared_ptr<const Model> target_holder, draft_holder;
  const Model* target = nullptr;
  const Model* draft = nullptr;
  std::string description;
};

Pairing pairing_for(const Engine& engine, SpeculativeMethod method, int64_t lookup_max) {
  Pairing p;
  p.target = &engine.model();
  if (method == SpeculativeMethod::DraftModel) {
    Engine::DraftPair pair = engine.int4_draft_pair();
    p.target_holder = pair.target;
    p.draft_holder = pair.draft;
    p.target = pair.target.get();
    p.draft = pair.draft.get();
    p.description = pair.description;
  } else if (method == SpeculativeMethod::Ngram) {
    p.description = "prompt lookup (n-gram 1.." + std::to_string(lookup_max) + ")";
  }
  return p;
}

}  // namespace

SpeculativeBenchResult run_speculative_sweep(const Engine& engine, SpeculativeMethod method,
                                             const SpeculativeBenchParams& params,
                                             const ExperimentControl& control) {
  if (method == SpeculativeMethod::None) throw InputError("the sweep needs a drafter: ngram or draft");
  const Pairing pair = pairing_for(engine, method, params.prompt_lookup_max);
  SpeculativeBenchParams p = params;
  p.methods = {method};
  return run_speculative_bench(engine, *pair.target, pair.draft, pair.description, p, control);
}

double decode_tokens_per_s(const RequestResult& r) {
  if (r.token_ms.size() < 2) return 0;
  const double ms = r.token_ms.back() - r.token_ms.front();
  return ms > 0 ? static_cast<double>(r.token_ms.size() - 1) / ms * 1000.0 : 0;
}

nlohmann::json SpeculativeDemoResult::to_json() const {
  nlohmann::json j = {{"experiment", "speculative-decoding"},
                      {"method", speculative_method_name(params.method)},
                      {"num_speculative_tokens", params.k},
                      {"new_tokens", params.new_tokens},
                      {"rounds", params.rounds},
                      {"pairing", pairing},
                      {"prompt_tokens", prompt_ids.size()},
                      {"text", speculative.requests.empty() ? "" : speculative.requests[0].text},
                      {"generated_tokens", speculative.generated_tokens},
                      {"steps", speculative.steps.size()},
                      {"plain_steps", plain.steps.size()},
                      {"tokens_per_s", speculative_tokens_per_s},
                      {"plain_tokens_per_s", plain_tokens_per_s},
                      {"speedup", plain_tokens_per_s > 0 ? speculative_tokens_per_s / plain_tokens_per_s : 0},
                      {"total_ms", speculative.total_ms},
                      {"plain_total_ms", plain.total_ms},
                      {"identical_greedy_tokens", identical}};
  j.update(spec_decode_stats_json(speculative.speculative));
  j["roofline"] = roofline_json(roofline);
  return j;
}

SpeculativeDemoResult run_speculative_demo(const Engine& engine, const SpeculativeDemoParams& p,
                                           const ExperimentControl& control) {
  if (p.method == SpeculativeMethod::None) throw InputError("choose a drafter: ngram or draft");
  if (p.text.empty()) throw InputError("the prompt is empty");
  limits::check_range("rounds", p.rounds, 1, limits::kMaxRepeats);
  SpeculativeDemoResult result;
  result.params = p;
  const Pairing pair = pairing_for(engine, p.method, p.prompt_lookup_max);
  result.pairing = pair.description;
  const std::string prompt = p.chat ? chat_prompt(engine.tokenizer(), p.text, "") : p.text;
  result.prompt_ids = encode_prompt(engine.tokenizer(), prompt);
  BatchRequest request;
  request.prompt_ids = result.prompt_ids;
  request.max_new_tokens = p.new_tokens;
  request.stop_at_eos = p.stop_at_eos;
  BatchOptions plain;
  plain.max_batch = 1;
  plain.kv = KvStrategy::Paged;
  plain.cancel = control.cancel;
  BatchOptions spec = plain;
  spec.speculative.method = p.method;
  spec.speculative.num_speculative_tokens = p.k;
  spec.speculative.prompt_lookup_max = p.prompt_lookup_max;
  spec.speculative.draft_model = pair.draft;
  spec.speculative.validate();
  check_batch_requests(*pair.target, {request}, spec);
  auto progress = [&](double f, const std::string& stage) {
    if (control.sink) control.sink->on_progress(f, stage);
  };
  auto cancelled = [&](const BatchRunResult& r) {
    if (r.cancelled) throw CancelledError("speculative decoding cancelled");
  };
  // Warm-up: a few tokens each way, so that neither measured run pays for first use.
  progress(0, "warm-up");
  BatchRequest warm = request;
  warm.max_new_tokens = std::min<int64_t>(4, p.new_tokens);
  cancelled(run_continuous_batching(*pair.target, engine.tokenizer(), {warm}, plain));
  cancelled(run_continuous_batching(*pair.target, engine.tokenizer(), {warm}, spec));
  const std::string name =
      std::string(speculative_method_name(p.method)) + " speculation, k " + std::to_string(p.k);
  std::vector<BatchRunResult> spec_runs, plain_runs;
  for (int64_t round = 0; round < p.rounds; ++round) {
    const double at = 0.05 + 0.95 * static_cast<double>(round) / static_cast<double>(p.rounds);
    auto speculative = [&] {
      progress(at, name + ", round " + std::to_string(round + 1) + " of " + std::to_string(p.rounds));
      // Only the first round is shown live: the later ones make the same greedy steps again.
      spec_runs.push_back(run_continuous_batching(*pair.target, engine.tokenizer(), {request}, spec,
                                                  round == 0 ? control.batch : nullptr));
      cancelled(spec_runs.back());
    };
    auto plainly = [&] {
      progress(at, "plain decoding, round " + std::to_string(round + 1) + " of " + std::to_string(p.rounds));
      plain_runs.push_back(run_continuous_batching(*pair.target, engine.tokenizer(), {request}, plain));
      cancelled(plain_runs.back());
    };
    // The live run first; then the order alternates, so that neither always runs first.
    if (round % 2 == 0) {
      speculative();
      plainly();
    } else {
      plainly();
      speculative();
    }
  }
  auto median_run = [](std::vector<BatchRunResult>& runs) {
    std::sort(runs.begin(), runs.end(), [](const BatchRunResult& a, const BatchRunResult& b) {
      return decode_tokens_per_s(a.requests[0]) < decode_tokens_per_s(b.requests[0]);
    });
    return std::move(runs[runs.size() / 2]);
  };
  for (const BatchRunResult& r : spec_runs)
    result.identical =
        result.identical && r.requests[0].generated_ids == plain_runs[0].requests[0].generated_ids;
  result.speculative = median_run(spec_runs);
  result.plain = median_run(plain_runs);
  result.speculative_tokens_per_s = decode_tokens_per_s(result.speculative.requests[0]);
  result.plain_tokens_per_s = decode_tokens_per_s(result.plain.requests[0]);
  const std::string quant = pair.target == &engine.model() ? roofline_quant(engine) : "none";
  result.roofline = roofline_points(result.plain.steps, quant);
  for (RooflinePoint& point : roofline_points(result.speculative.steps, quant))
    if (point.kind != "prefill") result.roofline.push_back(std::move(point));
  progress(1, "done");
  return result;
}

}  // namespace servelab

#include "experiments/paged_kv.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <random>

#include "experiments/sync_vs_continuous.h"
#include "generate/generation.h"
#include "generate/generator.h"
#include "generate/paged_kv_memory.h"
#include "generate/slot_kv_memory.h"
#include "tokenizer/prompt.h"
#include "util/device.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

namespace {

// Decode steps of one batch through three KV layouts in turn (interleaved), each its own memory.
PagedKvDecodeStep measure_decode_step(const Engine& engine, const PagedKvParams& p, int32_t pad) {
  c10::InferenceMode guard;
  const Model& m = engine.model();
  const int64_t B = p.decode_batch, n = p.decode_context, steps = p.decode_steps;
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t i = 0; i < B; ++i)
    prompts.push_back(
        tokens_of_length(engine.tokenizer(), "Request " + std::to_string(i) + ": " + p.prompt, n));
  std::vector<PrefillRequest> admitted;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < B; ++i) {
    admitted.push_back({i, &prompts[static_cast<size_t>(i)], steps + 1});
    ids.push_back(i);
  }
  PagedKvConfig c;
  c.block_size = p.block_size;
  c.num_blocks = B * ((n + steps + c.block_size) / c.block_size);
  c.prefix_caching = false;
  std::vector<std::unique_ptr<KvMemoryManager>> kv;
  kv.push_back(std::make_unique<SlotKvMemory>(m, B, n + steps + 1, pad));
  c.kernel = PagedAttentionKernel::InPlace;
  if (m.device().is_cpu()) kv.push_back(std::make_unique<PagedKvMemory>(m, c, pad));
  c.kernel = PagedAttentionKernel::Gather;
  kv.push_back(std::make_unique<PagedKvMemory>(m, c, pad));
  std::vector<std::vector<double>> ms(kv.size());
  std::vector<int32_t> tokens(static_cast<size_t>(B));
  for (auto& k : kv) {
    const at::Tensor logits = k->prefill(admitted);
    const at::Tensor next = logits.argmax(-1).to(at::kCPU);
    for (int64_t i = 0; i < B; ++i)
      tokens[static_cast<size_t>(i)] = static_cast<int32_t>(next[i].item<int64_t>());
  }
  for (int64_t s = 0; s < steps; ++s)
    for (size_t k = 0; k < kv.size(); ++k) {
      const DeviceTimer timer(m.device());
      const at::Tensor logits = kv[k]->decode(ids, tokens);
      (void)logits.sum().item<float>();  // synchronised, as a scheduler step reads its tokens
      ms[k].push_back(timer.elapsed_ms());
    }
  PagedKvDecodeStep d;
  d.batch = B;
  d.context = n;
  d.slot_ms = median_or_zero(ms[0]);
  d.paged_gather_ms = median_or_zero(ms.back());
  if (kv.size() == 3) d.paged_in_place_ms = median_or_zero(ms[1]);
  d.in_place_vs_slot = d.slot_ms > 0 ? d.paged_in_place_ms / d.slot_ms : 0;
  d.gather_vs_slot = d.slot_ms > 0 ? d.paged_gather_ms / d.slot_ms : 0;
  return d;
}

}  // namespace

std::vector<BatchRequest> make_paged_kv_requests(const Engine& engine, const PagedKvParams& p) {
  const int64_t context = engine.shape().context;
  limits::check_range("requests", p.requests, 1, limits::kMaxRequests);
  limits::check_range("max batch", p.max_batch, 1, limits::kMaxBatch);
  if (p.long_every < 1)
    throw InputError("long-every must be at least 1, got " + std::to_string(p.long_every));
  limits::check_range("long tokens", p.long_tokens, 1, limits::kMaxTokens);
  limits::check_range("short tokens", p.short_tokens, 1, limits::kMaxTokens);
  limits::check_range("prompt tokens min", p.prompt_tokens_min, 1, context);
  limits::check_range("prompt tokens max", p.prompt_tokens_max, p.prompt_tokens_min, context);
  limits::check_range("shared prefix tokens", p.shared_prefix_tokens, 0, context);
  limits::check_range("arrival rate (requests/s)", p.arrival_rate, 0.0, 1e9);
  const std::vector<int32_t> system =
      tokens_of_length(engine.tokenizer(),
                       "You are a helpful assistant of the ServeLab course. Answer briefly, precisely and "
                       "politely, and say so when you do not know. ",
                       p.shared_prefix_tokens);
  std::mt19937_64 rng(p.seed);
  std::vector<BatchRequest> out;
  double t = 0;
  for (int64_t i = 0; i < p.requests; ++i) {
    BatchRequest r;
    const int64_t len = std::uniform_int_distribution<int64_t>(p.prompt_tokens_min, p.prompt_tokens_max)(rng);
    // Each request's own words start with its number, so that only the system prompt is shared.
    const std::vector<int32_t> own =
        tokens_of_length(engine.tokenizer(), "Request " + std::to_string(i + 1) + ": " + p.prompt, len);
    r.prompt_ids = system;
    r.prompt_ids.insert(r.prompt_ids.end(), own.begin(), own.end());
    r.max_new_tokens = i % p.long_every == 0 ? p.long_tokens : p.short_tokens;
    r.stop_at_eos = false;
    if (p.arrival_rate > 0 && i > 0) t += std::exponential_distribution<double>(p.arrival_rate)(rng) * 1000.0;
    r.arrival_ms = t;
    out.push_back(std::move(r));
  }
  return out;
}

PagedKvResult run_paged_kv(const Engine& engine, const PagedKvParams& p, const ExperimentControl& control) {
  const Model& m = engine.model();
  limits::check_range("block size", p.block_size, 1, 4096);
  limits::check_range("rounds", p.rounds, 1, 100);
  limits::check_range("decode batch", p.decode_batch, 1, limits::kMaxBatch);
  limits::check_range("decode steps", p.decode_steps, 1, limits::kMaxTokens);
  limits::check_range("decode context", p.decode_context, 1, m.shape().context - p.decode_steps - 1);
  // Ranges first: a budget converts to bytes and blocks in int64.
  limits::check_range("KV budget (MB)", p.budget_mb, 0.0, 1e7);
  limits::check_range("KV budget (blocks)", p.budget_blocks, int64_t{0}, int64_t{1} << 30);
  if ((p.budget_blocks > 0) == (p.budget_mb > 0))
    throw InputError("give the KV budget as blocks or as megabytes (exactly one of them above 0)");
  const std::vector<BatchRequest> requests = make_paged_kv_requests(engine, p);
  PagedKvResult res;
  res.params = p;
  res.block_bytes = m.kv_cache_bytes(1, p.block_size);
  res.budget_bytes =
      p.budget_blocks > 0 ? p.budget_blocks * res.block_bytes : static_cast<int64_t>(p.budget_mb * 1e6);
  for (const BatchRequest& r : requests)
    res.longest_positions = std::max<int64_t>(res.longest_positions,
                                              static_cast<int64_t>(r.prompt_ids.size()) + r.max_new_tokens);
  // The same bytes, cut two ways: slots as long as the longest request, or blocks.
  const int64_t slots = res.budget_bytes / m.kv_cache_bytes(1, res.longest_positions);
  const int64_t blocks = res.budget_bytes / res.block_bytes;
  if (slots < 1)
    throw InputError("a KV budget of " + std::to_string(res.budget_bytes) + " bytes holds no slot of " +
                     std::to_string(res.longest_positions) + " positions (" +
                     std::to_string(m.kv_cache_bytes(1, res.longest_positions)) + " bytes) for slot KV");
  struct Plan {
    std::string name;
    BatchOptions o;
  };
  std::vector<Plan> plan(3);
  for (Plan& pl : plan) {
    pl.o.cancel = control.cancel;
    pl.o.max_batch = p.max_batch;
    pl.o.max_num_batched_tokens = p.max_num_batched_tokens;
  }
  plan[0].name = "slot KV";
  plan[0].o.kv = KvStrategy::SlotKv;
  plan[0].o.max_batch = std::min(p.max_batch, slots);
  for (size_t i : {1, 2}) {
    plan[i].o.kv = KvStrategy::Paged;
    plan[i].o.kv_blocks = blocks;
    plan[i].o.kv_block_size = p.block_size;
    plan[i].o.prefix_caching = i == 2;
  }
  plan[1].name = "paged KV";
  plan[2].name = "paged KV + prefix cache";
  for (const Plan& pl : plan) check_batch_requests(m, requests, pl.o);
  if (p.warmup) {
    std::vector<BatchRequest> w(requests.begin(), requests.begin() + std::min<int64_t>(2, p.requests));
    for (auto& r : w) {
      r.max_new_tokens = std::min<int64_t>(2, r.max_new_tokens);
      r.arrival_ms = 0;
    }
    for (const Plan& pl : plan) run_continuous_batching(m, engine.tokenizer(), w, pl.o);
  }
  std::vector<std::vector<double>> totals(plan.size());
  res.runs.resize(plan.size());
  const double share = 1.0 / static_cast<double>(p.rounds * static_cast<int64_t>(plan.size()) + 1);
  int64_t done = 0;
  for (int64_t round = 0; round < p.rounds; ++round)
    for (size_t i = 0; i < plan.size(); ++i) {
      if (control.sink)
        control.sink->on_progress(share * static_cast<double>(done++),
                                  plan[i].name + ", round " + std::to_string(round + 1));
      BatchRunResult run = run_continuous_batching(m, engine.tokenizer(), requests, plan[i].o, control.batch);
      if (run.cancelled) throw CancelledError("paged-kv cancelled during " + plan[i].name);
      totals[i].push_back(run.total_ms);
      res.runs[i] = std::move(run);
    }
  std::vector<std::vector<int32_t>> solo;
  if (p.check_solo) {
    if (control.sink) control.sink->on_progress(share * static_cast<double>(done), "solo runs");
    for (const BatchRequest& r : requests) {
      GenerateOptions g;
      g.max_new_tokens = r.max_new_tokens;
      g.stop_at_eos = r.stop_at_eos;
      g.report_top = 0;
      solo.push_back(generate(m, engine.tokenizer(), {r.prompt_ids}, g).sequences[0].generated_ids);
    }
  }
  for (size_t i = 0; i < plan.size(); ++i) {
    const BatchRunResult& run = res.runs[i];
    PagedKvMethod s;
    s.method = plan[i].name;
    s.capacity_requests = plan[i].o.kv == KvStrategy::SlotKv ? plan[i].o.max_batch : 0;
    s.kv_blocks = plan[i].o.kv == KvStrategy::Paged ? blocks : 0;
    s.max_running = run.max_running;
    s.average_batch = run.average_batch;
    s.preemptions = run.preemptions;
    s.prompt_tokens = run.prompt_tokens;
    s.prefix_hit_tokens = run.prefix_hit_tokens;
    s.prefix_hit_rate = run.prompt_tokens ? static_cast<double>(run.prefix_hit_tokens) /
                                                static_cast<double>(run.prompt_tokens)
                                          : 0;
    std::vector<double> ttft;
    for (const RequestResult& q : run.requests) {
      if (q.finish_reason == "error") {
        ++s.errors;
        continue;
      }
      ttft.push_back(q.ttft_ms);
      if (p.check_solo && q.generated_ids != solo[static_cast<size_t>(q.id)]) s.same_as_solo = false;
    }
    if (!ttft.empty()) {
      s.ttft_p50 = percentile(ttft, 50);
      s.ttft_p99 = percentile(ttft, 99);
    }
    s.total_ms_rounds = totals[i];
    s.total_ms = median_or_zero(totals[i]);
    s.generated_tokens = run.generated_tokens;
    s.tokens_per_s = s.total_ms > 0 ? 1000.0 * static_cast<double>(run.generated_tokens) / s.total_ms : 0;
    double reserved = 0, used = 0;
    for (const BatchStep& st : run.steps) {
      s.kv_allocated_bytes = std::max(s.kv_allocated_bytes, st.kv_total_bytes);
      s.kv_peak_reserved_bytes = std::max(s.kv_peak_reserved_bytes, st.kv_reserved_bytes);
      s.kv_peak_used_bytes = std::max(s.kv_peak_used_bytes, st.kv_used_bytes);
      reserved += static_cast<double>(st.kv_reserved_bytes);
      used += static_cast<double>(st.kv_used_bytes);
    }
    s.kv_fragmentation = reserved > 0 ? 1.0 - used / reserved : 0;
    res.methods.push_back(s);
  }
  const PagedKvMethod &slot = res.methods[0], &paged = res.methods[1], &cached = res.methods[2];
  res.concurrency_ratio =
      slot.max_running ? static_cast<double>(paged.max_running) / static_cast<double>(slot.max_running) : 0;
  res.speedup = paged.total_ms > 0 ? slot.total_ms / paged.total_ms : 0;
  res.ttft_p50_cut = cached.ttft_p50 > 0 ? paged.ttft_p50 / cached.ttft_p50 : 0;
  if (control.sink) control.sink->on_progress(share * static_cast<double>(done), "decode step");
  res.decode = measure_decode_step(engine, p, padding_id(m, engine.tokenizer()));
  if (control.sink) control.sink->on_progress(1.0, "done");
  return res;
}

nlohmann::json PagedKvResult::to_json() const {
  nlohmann::json ms = nlohmann::json::array();
  for (const PagedKvMethod& s : methods)
    ms.push_back({{"method", s.method},
                  {"slots", s.capacity_requests},
                  {"kv_blocks", s.kv_blocks},
                  {"max_running", s.max_running},
                  {"average_batch", s.average_batch},
                  {"preemptions", s.preemptions},
                  {"prompt_tokens", s.prompt_tokens},
                  {"prefix_hit_tokens", s.prefix_hit_tokens},
                  {"prefix_hit_rate", s.prefix_hit_rate},
                  {"ttft_ms", {{"p50", s.ttft_p50}, {"p99", s.ttft_p99}}},
                  {"total_ms", s.total_ms},
                  {"total_ms_rounds", s.total_ms_rounds},
                  {"tokens_per_s", s.tokens_per_s},
                  {"generated_tokens", s.generated_tokens},
                  {"kv_allocated_bytes", s.kv_allocated_bytes},
                  {"kv_peak_reserved_bytes", s.kv_peak_reserved_bytes},
                  {"kv_peak_used_bytes", s.kv_peak_used_bytes},
                  {"kv_fragmentation", s.kv_fragmentation},
                  {"errors", s.errors},
                  {"same_as_solo", s.same_as_solo}});
  nlohmann::json detail = nlohmann::json::array();
  for (const BatchRunResult& r : runs) {
    nlohmann::json j = batch_run_json(r);
    nlohmann::json steps = nlohmann::json::array();
    for (const BatchStep& s : r.steps)
      steps.push_back({{"step", s.step},
                       {"running", s.running},
                       {"admitted", s.admitted},
                       {"preempted", s.preempted},
                       {"prefix_hit_tokens", s.prefix_hit_tokens},
                       {"kv_reserved_bytes", s.kv_reserved_bytes},
                       {"kv_used_bytes", s.kv_used_bytes},
                       {"kv_blocks_used", s.kv_blocks_used},
                       {"kv_blocks_cached", s.kv_blocks_cached}});
    j["kv_steps"] = steps;
    detail.push_back(j);
  }
  return {{"experiment", "paged-kv"},
          {"params",
           {{"requests", params.requests},
            {"max_batch", params.max_batch},
            {"long_every", params.long_every},
            {"long_tokens", params.long_tokens},
            {"short_tokens", params.short_tokens},
            {"prompt_tokens_min", params.prompt_tokens_min},
            {"prompt_tokens_max", params.prompt_tokens_max},
            {"shared_prefix_tokens", params.shared_prefix_tokens},
            {"arrival_rate", params.arrival_rate},
            {"block_size", params.block_size},
            {"rounds", params.rounds},
            {"seed", params.seed}}},
          {"budget_bytes", budget_bytes},
          {"block_bytes", block_bytes},
          {"longest_positions", longest_positions},
          {"methods", ms},
          {"concurrency_ratio", concurrency_ratio},
          {"speedup", speedup},
          {"ttft_p50_cut", ttft_p50_cut},
          {"decode_step",
           {{"batch", decode.batch},
            {"context", decode.context},
            {"slot_ms", decode.slot_ms},
            {"paged_in_place_ms", decode.paged_in_place_ms},
            {"paged_gather_ms", decode.paged_gather_ms},
            {"in_place_vs_slot", decode.in_place_vs_slot},
            {"gather_vs_slot", decode.gather_vs_slot}}},
          {"runs", detail}};
}

}  // namespace servelab

#include "generate/generator.h"

#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <optional>

#include "generate/token_picker.h"
#include "lora/multi_lora.h"
#include "model/decode_graphs.h"
#include "tokenizer/prompt.h"
#include "tokenizer/stream_decoder.h"
#include "util/device.h"
#include "util/errors.h"
#include "util/limits.h"

namespace servelab {

PaddedBatch left_padded_batch(const std::vector<std::vector<int32_t>>& prompts, int32_t pad_id) {
  const int64_t batch = static_cast<int64_t>(prompts.size());
  int64_t len = 0;
  for (const auto& p : prompts) len = std::max<int64_t>(len, static_cast<int64_t>(p.size()));
  PaddedBatch b;
  b.input_ids = at::full({batch, len}, pad_id, at::kLong);
  b.attention_mask = at::zeros({batch, len}, at::kLong);
  auto ids = b.input_ids.accessor<int64_t, 2>();
  auto mask = b.attention_mask.accessor<int64_t, 2>();
  for (int64_t r = 0; r < batch; ++r) {
    const auto& p = prompts[static_cast<size_t>(r)];
    const int64_t offset = len - static_cast<int64_t>(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      ids[r][offset + static_cast<int64_t>(i)] = p[i];
      mask[r][offset + static_cast<int64_t>(i)] = 1;
    }
  }
  b.position_ids = (b.attention_mask.cumsum(1) - 1).masked_fill(b.attention_mask == 0, 1);
  return b;
}

PaddedPrompts pad_prompts(const Model& model, const Tokenizer& tokenizer,
                          const std::vector<std::string>& prompts) {
  if (prompts.empty()) throw InputError("no prompts given");
  limits::check_range("prompts (batch size)", static_cast<int64_t>(prompts.size()), 1, limits::kMaxBatch);
  std::vector<std::vector<int32_t>> ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    ids.push_back(encode_prompt(tokenizer, prompts[i]));
    if (ids.back().empty())
      throw InputError("prompt " + std::to_string(i + 1) + " is empty: it needs at least one token");
  }
  PaddedPrompts out;
  out.pad_id = padding_id(model, tokenizer);
  const PaddedBatch pb = left_padded_batch(ids, out.pad_id);
  auto rows_of = [](const at::Tensor& t) {
    std::vector<std::vector<int64_t>> rows(static_cast<size_t>(t.size(0)));
    const auto a = t.accessor<int64_t, 2>();
    for (int64_t r = 0; r < t.size(0); ++r)
      for (int64_t c = 0; c < t.size(1); ++c) rows[static_cast<size_t>(r)].push_back(a[r][c]);
    return rows;
  };
  out.input_ids = rows_of(pb.input_ids);
  out.attention_mask = rows_of(pb.attention_mask);
  out.position_ids = rows_of(pb.position_ids);
  for (size_t r = 0; r < out.input_ids.size(); ++r) {
    std::vector<std::string> row;
    for (size_t c = 0; c < out.input_ids[r].size(); ++c)
      row.push_back(out.attention_mask[r][c]
                        ? tokenizer.token_display(static_cast<int32_t>(out.input_ids[r][c]))
                        : std::string());
    out.pieces.push_back(std::move(row));
  }
  return out;
}

std::vector<int32_t> generation_stop_ids(const Model& model, const Tokenizer& tokenizer) {
  // The tokenizer's first (its eos pads a batch), then any other id the model's config.json lists
  // (Llama 3's and Qwen's several eos_token_id).
  std::vector<int32_t> ids = tokenizer.stop_ids();
  for (int64_t e : model.shape().eos_token_ids)
    if (std::find(ids.begin(), ids.end(), static_cast<int32_t>(e)) == ids.end())
      ids.push_back(static_cast<int32_t>(e));
  return ids;
}

int32_t padding_id(const Model& model, const Tokenizer& tokenizer) {
  const std::vector<int32_t> stops = generation_stop_ids(model, tokenizer);
  return stops.empty() ? 0 : stops.front();
}

void check_generation_fits(const Model& model, const std::vector<std::vector<int32_t>>& prompts,
                           const GenerateOptions& o) {
  const ModelShape& c = model.shape();
  if (prompts.empty()) throw InputError("no prompts given");
  if (o.max_new_tokens < 1)
    throw InputError("max new tokens must be at least 1, got " + std::to_string(o.max_new_tokens));
  o.sampling.validate();
  int64_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    if (p.empty())
      throw InputError("prompt " + std::to_string(i + 1) + " is empty: it needs at least one token");
    for (int32_t id : p)
      if (id < 0 || id >= c.vocab_size)
        throw InputError("prompt " + std::to_string(i + 1) + " has token id " + std::to_string(id) +
                         " outside the vocabulary of " + std::to_string(c.vocab_size));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
    if (static_cast<int64_t>(p.size()) + o.max_new_tokens > c.context)
      throw InputError("prompt " + std::to_string(i + 1) + " has " + std::to_string(p.size()) +
                       " tokens; with " + std::to_string(o.max_new_tokens) +
                       " new tokens that exceeds the context of " + std::to_string(c.context) + " positions");
  }
  // The memory a run needs beyond the weights: the KV cache and the largest activations.
  const int64_t batch = static_cast<int64_t>(prompts.size());
  const int64_t len = longest + o.max_new_tokens;
  const int64_t elem = static_cast<int64_t>(c10::elementSize(model.dtype()));
  const int64_t kv = o.use_kv_cache ? model.kv_cache_bytes(batch, len) : 0;
  const int64_t act = batch * len * (4 * c.n_embd + c.n_inner) * elem * 2 + batch * c.n_head * len * len * 4 +
                      batch * c.vocab_size * 4 * 2;
  if (model.device().is_cpu()) {
    const int64_t avail = available_host_memory_bytes();
    if (avail > 0 && kv + act > avail) {
      auto gib = [](int64_t b) { return std::to_string(static_cast<double>(b) / (1 << 30)).substr(0, 5); };
      throw InputError("batch size " + std::to_string(batch) + " with " + std::to_string(len) +
                       " positions needs about " + gib(kv + act) + " GiB (KV cache " + gib(kv) +
                       " GiB), but only " + gib(avail) + " GiB of memory is available");
    }
  }
}

namespace {

struct RowState {
  std::optional<StreamDecoder> decoder;
  bool finished = false;
};

}  // namespace

GenerateResult generate(const Model& model, const Tokenizer& tokenizer,
                        const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o,
                        GenerationSink* sink) {
  check_generation_fits(model, prompts, o);
  c10::InferenceMode guard;
  const at::Device dev = model.device();
  const int64_t batch = static_cast<int64_t>(prompts.size());
  const std::vector<int32_t> stops = generation_stop_ids(model, tokenizer);
  const int32_t pad = padding_id(model, tokenizer);

  GenerateResult result;
  result.sequences.resize(prompts.size());
  std::vector<RowState> rows(prompts.size());
  for (size_t r = 0; r < prompts.size(); ++r) {
    result.sequences[r].prompt_ids = prompts[r];
    rows[r].decoder.emplace(tokenizer);
  }

  try {
    PaddedBatch pb = left_padded_batch(prompts, pad);
    const bool padded = !pb.attention_mask.all().item<bool>();
    at::Tensor ids = pb.input_ids.to(dev);
    at::Tensor positions = pb.position_ids.to(dev);
    at::Tensor mask = pb.attention_mask.to(dev);
    Sampler sampler(o.sampling);
    std::optional<LoraBatch> lora;
    if (!o.adapters.empty()) {
      if (static_cast<int64_t>(o.adapters.size()) != batch)
        throw InputError(std::to_string(o.adapters.size()) + " adapters given for " + std::to_string(batch) +
                         " prompts (one per prompt, or none)");
      std::vector<const LoraAdapter*> per_row;
      for (const auto& a : o.adapters) per_row.push_back(a.get());
      lora.emplace(std::move(per_row), o.lora_strategy);
      if (!lora->any()) lora.reset();
    }
    at::Tensor last_ids, last_pos = positions.select(1, -1).unsqueeze(1);
    // On a GPU the decode steps replay CUDA graphs (model/decode_graphs.h): each row at its own
    // position, its keys from the end of its left padding on. The cache and its graphs come from
    // the model's earlier runs of this shape where there was one (the capacity rounded up so that
    // runs of similar lengths share them). LoRA steps stay eager.
    const int64_t width = ids.size(1);
    result.cuda_graphs.unavailable = cuda_graphs_unavailable(model);
    if (result.cuda_graphs.unavailable.empty() && !o.use_kv_cache)
      result.cuda_graphs.unavailable = "no KV cache (every step is a whole forward)";
    if (result.cuda_graphs.unavailable.empty() && lora)
      result.cuda_graphs.unavailable = "LoRA adapters run eagerly";
    std::unique_ptr<GraphedKvCache> graphed;
    std::optional<KvCache> own_cache;
    KvCache* cache = nullptr;
    if (o.use_kv_cache) {
      const int64_t capacity = width + o.max_new_tokens;
      if (result.cuda_graphs.unavailable.empty()) {
        const int64_t rounded =
            std::max(capacity, std::min((capacity + 63) / 64 * 64, model.shape().context));
        graphed = model.take_graphed_cache(batch, rounded);
      }
      cache = graphed ? &graphed->cache : &own_cache.emplace(model.make_cache(batch, capacity));
      result.kv_cache_bytes = cache->bytes();
    }
    DecodeGraphs* graphs = graphed ? &graphed->graphs : nullptr;
    const DecodeGraphStats graphs_before = graphs ? graphs->stats() : DecodeGraphStats{};
    std::vector<int64_t> next_host(static_cast<size_t>(batch), 0);
    const DeviceTimer total(dev);
    for (int64_t step = 0; step < o.max_new_tokens; ++step) {
      if (o.cancel && o.cancel->load())
        throw CancelledError("generation cancelled after " + std::to_string(step) + " tokens");
      DeviceTimer timer(dev);
      ForwardInput in;
      if (step == 0 || !o.use_kv_cache) {
        in = {ids, positions, padded ? mask : at::Tensor(), false};
      } else {
        in = {last_ids, last_pos, padded ? mask : at::Tensor(), false};
      }
      in.lora = lora ? &*lora : nullptr;
      at::Tensor logits;
      if (step > 0 && graphs) {
        std::vector<DecodeRow> decode;
        for (int64_t r = 0; r < batch; ++r) {
          const int64_t len = static_cast<int64_t>(prompts[static_cast<size_t>(r)].size());
          decode.push_back(
              {next_host[static_cast<size_t>(r)], r, len - 1 + step, cache->length(), width - len});
        }
        logits = graphs->step(decode);
        cache->advance(1);
      } else {
        logits = model.forward(in, cache);
      }
      std::vector<PickRow> pick;
      for (int64_t r = 0; r < batch; ++r)
        pick.push_back({&o.sampling, &sampler, &prompts[static_cast<size_t>(r)],
                        &result.sequences[static_cast<size_t>(r)].generated_ids, nullptr, o.logprobs});
      const std::vector<PickedToken> picked =
          pick_tokens(logits, pick, "generation step " + std::to_string(step + 1));
      at::Tensor next = at::empty({batch}, at::kLong);
      auto picked_a = next.accessor<int64_t, 1>();
      for (int64_t r = 0; r < batch; ++r) picked_a[r] = picked[static_cast<size_t>(r)].id;
      at::Tensor top_vals, top_ids, top_probs;
      if (o.report_top > 0) {
        auto t = logits.topk(std::min<int64_t>(o.report_top, logits.size(-1)), -1);
        top_vals = std::get<0>(t).to(at::kFloat);
        // Probabilities over the whole vocabulary, exp(logit - logsumexp(logits)): only token events
        // carry them, so without a sink the decode step does not pay for the reduction.
        if (sink) top_probs = (top_vals - logits.to(at::kFloat).logsumexp(-1, true)).exp().to(at::kCPU);
        top_vals = top_vals.to(at::kCPU);
        top_ids = std::get<1>(t).to(at::kCPU);
      }
      const double ms = timer.elapsed_ms();
      result.step_ms.push_back(ms);

      auto next_a = next.accessor<int64_t, 1>();
      int64_t active = 0;
      for (int64_t r = 0; r < batch; ++r) {
        RowState& st = rows[static_cast<size_t>(r)];
        if (st.finished) {
          next_a[r] = pad;  // finished rows keep stepping on padding, as HF does, and record nothing
          continue;
        }
        ++active;
        GeneratedSequence& seq = result.sequences[static_cast<size_t>(r)];
        const int32_t id = static_cast<int32_t>(next_a[r]);
        seq.generated_ids.push_back(id);
        seq.step_ms.push_back(ms);
        if (o.logprobs) {
          seq.logprobs.push_back(picked[static_cast<size_t>(r)].logprob);
          seq.top_logprobs.push_back(picked[static_cast<size_t>(r)].top);
        }
        std::vector<TopToken> event_top;
        if (o.report_top > 0) {
          std::vector<std::pair<int32_t, float>> top;
          // Plain accessors: indexing tensors here would make views and syncs per element per step.
          const auto ids_a = top_ids.accessor<int64_t, 2>();
          const auto vals_a = top_vals.accessor<float, 2>();
          for (int64_t k = 0; k < top_ids.size(1); ++k)
            top.emplace_back(static_cast<int32_t>(ids_a[r][k]), vals_a[r][k]);
          if (sink) {
            const auto probs_a = top_probs.accessor<float, 2>();
            for (int64_t k = 0; k < top_ids.size(1); ++k)
              event_top.push_back({static_cast<int32_t>(ids_a[r][k]), vals_a[r][k], probs_a[r][k]});
          }
          seq.top.push_back(std::move(top));
        }
        std::string piece;
        if (o.stop_at_eos && std::find(stops.begin(), stops.end(), id) != stops.end()) {
          st.finished = true;
          seq.finish_reason = "eos";
        } else {
          piece = st.decoder->push(id);
          seq.text += piece;
          for (const std::string& s : o.stop_strings) {
            const size_t at = s.empty() ? std::string::npos : seq.text.find(s);
            if (at != std::string::npos) {
              seq.text.resize(at);
              st.finished = true;
              seq.finish_reason = "stop";
              break;
            }
          }
        }
        if (sink) sink->on_token({static_cast<size_t>(r), step, id, piece, ms, std::move(event_top)});
      }
      if (sink) sink->on_step({step, active, batch * ((step == 0 || !o.use_kv_cache) ? ids.size(1) : 1), ms});
      if (std::all_of(rows.begin(), rows.end(), [](const RowState& s) { return s.finished; })) break;

      for (int64_t r = 0; r < batch; ++r) next_host[static_cast<size_t>(r)] = next_a[r];
      last_ids = next.to(dev).unsqueeze(1);
      last_pos = last_pos + 1;
      if (padded) mask = at::cat({mask, at::ones({batch, 1}, mask.options())}, 1);
      if (!o.use_kv_cache) {
        ids = at::cat({ids, last_ids}, 1);
        positions = at::cat({positions, last_pos}, 1);
      }
    }
    result.total_ms = total.elapsed_ms();
    if (graphs) {
      // This run's share of the kept graphs' work.
      const DecodeGraphStats& now = graphs->stats();
      result.cuda_graphs.captured = now.captured - graphs_before.captured;
      result.cuda_graphs.capture_ms = now.capture_ms - graphs_before.capture_ms;
      result.cuda_graphs.memory_bytes = now.memory_bytes - graphs_before.memory_bytes;
      result.cuda_graphs.replays = now.replays - graphs_before.replays;
      result.cuda_graphs.eager_steps = now.eager_steps - graphs_before.eager_steps;
      result.cuda_graphs.fallback = now.fallback;
      model.keep_graphed_cache(std::move(graphed));
    }
  } catch (const c10::Error& e) {
    if (!is_out_of_memory(e)) throw;
    throw OutOfMemoryError("out of memory on " + dev.str() + " generating for a batch of " +
                           std::to_string(batch) + "; try a smaller batch or fewer new tokens");
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    GeneratedSequence& seq = result.sequences[r];
    if (!rows[r].finished) seq.finish_reason = "length";
    if (seq.finish_reason != "stop") seq.text += rows[r].decoder->flush();
  }
  return result;
}

}  // namespace servelab

#include "generate/token_picker.h"

#include <unordered_map>

#include "util/errors.h"

namespace servelab {

void apply_penalties(float* logits, int64_t vocab, const SamplingParams& p,
                     const std::vector<int32_t>* prompt, const std::vector<int32_t>* output) {
  if (p.repetition_penalty != 1.0) {
    // Once per distinct token of the prompt and the output, whatever its count.
    std::vector<bool> seen(static_cast<size_t>(vocab), false);
    const float penalty = static_cast<float>(p.repetition_penalty);
    auto penalize = [&](const std::vector<int32_t>* ids) {
      if (!ids) return;
      for (int32_t id : *ids) {
        if (id < 0 || id >= vocab || seen[static_cast<size_t>(id)]) continue;
        seen[static_cast<size_t>(id)] = true;
        float& l = logits[id];
        l = l > 0 ? l / penalty : l * penalty;
      }
    };
    penalize(prompt);
    penalize(output);
  }
  if ((p.presence_penalty != 0.0 || p.frequency_penalty != 0.0) && output) {
    std::unordered_map<int32_t, int64_t> counts;
    for (int32_t id : *output)
      if (id >= 0 && id < vocab) ++counts[id];
    for (const auto& [id, n] : counts)
      logits[id] -= static_cast<float>(p.presence_penalty + p.frequency_penalty * static_cast<double>(n));
  }
}

void fill_logprobs(PickedToken& t, const at::Tensor& row, const SamplingParams& p) {
  // Log-probabilities of what the model (and the grammar) said, before penalties and temperature.
  const at::Tensor lp = at::log_softmax(row, -1);
  t.logprob = lp[t.id].item<float>();
  t.top.clear();
  if (p.top_logprobs > 0) {
    const auto [values, ids] = lp.topk(std::min<int64_t>(p.top_logprobs, row.size(-1)));
    const auto va = values.accessor<float, 1>();
    const auto ia = ids.accessor<int64_t, 1>();
    for (int64_t k = 0; k < values.size(0); ++k) t.top.emplace_back(static_cast<int32_t>(ia[k]), va[k]);
  }
}

std::vector<PickedToken> pick_tokens(const at::Tensor& logits, const std::vector<PickRow>& rows,
                                     const std::string& where) {
  if (logits.dim() != 2 || logits.size(0) != static_cast<int64_t>(rows.size()))
    throw InputError("pick_tokens: " + std::to_string(rows.size()) + " rows for logits of shape " +
                     std::to_string(logits.dim() == 2 ? logits.size(0) : -1) + " x vocab");
  check_finite_logits(logits, where);
  const int64_t vocab = logits.size(1);
  // Masks, penalties and sampling work on a CPU fp32 copy (sampling there gives a seed the same
  // tokens on every device).
  at::Tensor l = logits.to(at::kCPU, at::kFloat).contiguous();
  float* data = l.data_ptr<float>();
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].constraint) rows[i].constraint->mask(data + static_cast<int64_t>(i) * vocab, vocab);
  std::vector<PickedToken> out(rows.size());
  // Plain greedy rows (no penalty, no grammar) take one batched argmax: a reduction per row costs
  // a dispatch each, which a large batch's step notices.
  at::Tensor batched;
  for (const PickRow& r : rows)
    if (r.params->greedy && !r.params->penalized() && !r.constraint) {
      batched = l.argmax(-1);
      break;
    }
  const int64_t* batched_ids = batched.defined() ? batched.data_ptr<int64_t>() : nullptr;
  at::Tensor shaped = l;
  bool copied = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    const SamplingParams& p = *rows[i].params;
    const int64_t row = static_cast<int64_t>(i);
    at::Tensor r = l.narrow(0, row, 1);
    if (p.penalized()) {
      if (!copied) {
        shaped = l.clone();
        copied = true;
      }
      r = shaped.narrow(0, row, 1);
      apply_penalties(r.data_ptr<float>(), vocab, p, rows[i].prompt, rows[i].output);
    }
    int64_t id = 0;
    if (p.greedy && !p.penalized() && !rows[i].constraint) {
      id = batched_ids[row];
    } else if (p.greedy) {
      id = r.argmax(-1).item<int64_t>();
    } else {
      if (!rows[i].sampler) throw InputError("pick_tokens: a sampling row without its generator");
      id = rows[i].sampler->next(r)[0].item<int64_t>();
    }
    PickedToken& t = out[i];
    t.id = static_cast<int32_t>(id);
    if (!rows[i].logprobs && p.top_logprobs == 0) continue;
    fill_logprobs(t, l.select(0, row), p);
  }
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].constraint) rows[i].constraint->accept(out[i].id);
  return out;
}

}  // namespace servelab

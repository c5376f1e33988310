#include "generate/speculative.h"

#include <algorithm>
#include <set>

#include "generate/kv_memory_manager.h"
#include "generate/ngram_proposer.h"
#include "model/model.h"
#include "util/device.h"
#include "util/errors.h"

namespace servelab {

const char* speculative_method_name(SpeculativeMethod method) {
  switch (method) {
    case SpeculativeMethod::Ngram:
      return "ngram";
    case SpeculativeMethod::DraftModel:
      return "draft";
    case SpeculativeMethod::None:
      break;
  }
  return "off";
}

SpeculativeMethod parse_speculative_method(const std::string& name) {
  if (name == "ngram") return SpeculativeMethod::Ngram;
  if (name == "draft") return SpeculativeMethod::DraftModel;
  if (name == "off" || name == "none") return SpeculativeMethod::None;
  throw InputError("speculative method must be ngram, draft or off, got '" + name + "'");
}

void SpeculativeConfig::validate() const {
  if (!enabled()) return;
  if (num_speculative_tokens < 1 || num_speculative_tokens > 16)
    throw InputError("num speculative tokens (k) must be in [1, 16], got " +
                     std::to_string(num_speculative_tokens));
  if (method == SpeculativeMethod::Ngram) {
    if (prompt_lookup_max < 1 || prompt_lookup_max > 16)
      throw InputError("prompt lookup max must be in [1, 16], got " + std::to_string(prompt_lookup_max));
    if (prompt_lookup_min < 1 || prompt_lookup_min > prompt_lookup_max)
      throw InputError("prompt lookup min must be in [1, prompt lookup max " +
                       std::to_string(prompt_lookup_max) + "], got " + std::to_string(prompt_lookup_min));
  }
  if (method == SpeculativeMethod::DraftModel && !draft_model)
    throw InputError("speculative method draft needs a draft model");
}

void SpecDecodeStats::add(const SpecDecodeStats& o) {
  num_drafts += o.num_drafts;
  num_draft_tokens += o.num_draft_tokens;
  num_accepted_tokens += o.num_accepted_tokens;
  if (accepted_per_position.size() < o.accepted_per_position.size())
    accepted_per_position.resize(o.accepted_per_position.size(), 0);
  for (size_t i = 0; i < o.accepted_per_position.size(); ++i)
    accepted_per_position[i] += o.accepted_per_position[i];
  draft_ms += o.draft_ms;
}

namespace {

class NgramDrafter : public Drafter {
 public:
  NgramDrafter(int64_t min_n, int64_t max_n) : min_n_(min_n), max_n_(max_n) {}
  std::vector<Proposal> propose(const std::vector<Row>& rows) override {
    std::vector<Proposal> out(rows.size());
    for (size_t i = 0; i < rows.size(); ++i)
      out[i].tokens = ngram_propose(*rows[i].tokens, rows[i].k, min_n_, max_n_);
    return out;
  }

 private:
  int64_t min_n_, max_n_;
};

// A second model decodes the proposals through its own slot KV memory, which follows each request:
// it catches up on the tokens it has not seen (the target's accepted and corrected ones) in one
// forward, then decodes k - 1 more steps.
class DraftModelDrafter : public Drafter {
 public:
  DraftModelDrafter(const Model& draft, int64_t slots, int64_t capacity, int32_t pad_id)
      : kv_(make_kv_memory_manager(KvStrategy::SlotKv, draft, slots, capacity, pad_id)) {}

  std::vector<Proposal> propose(const std::vector<Row>& rows) override {
    std::vector<Proposal> out(rows.size());
    if (rows.empty()) return out;
    std::vector<StepSegment> catch_up;
    for (const Row& r : rows) {
      if (!known_.count(r.id)) {
        if (!kv_->reserve(PrefillRequest{r.id, r.tokens, 0, 0}))
          throw InputError("the draft model has no KV slot for request " + std::to_string(r.id + 1));
        known_.insert(r.id);
      }
      const int64_t done = kv_->computed(r.id);
      catch_up.push_back(
          {r.id, std::vector<int32_t>(r.tokens->begin() + done, r.tokens->end()), StepSegment::Logits::Last});
    }
    at::Tensor logits = kv_->extend(catch_up);
    std::vector<size_t> active(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) active[i] = i;
    for (int64_t step = 0;; ++step) {
      // One proposal per active row from its logits row.
      for (size_t a = 0; a < active.size(); ++a) {
        const size_t i = active[a];
        const Row& r = rows[i];
        const at::Tensor row = logits.select(0, static_cast<int64_t>(a));
        int32_t token = 0;
        if (r.params->greedy) {
          token = static_cast<int32_t>(row.argmax().item<int64_t>());
        } else {
          Sampler& s = sampler(r);
          const at::Tensor q = s.probs(row.unsqueeze(0)).squeeze(0);
          token = static_cast<int32_t>(s.draw(q));
          out[i].probs = out[i].probs.defined() ? at::cat({out[i].probs, q.unsqueeze(0)}) : q.unsqueeze(0);
        }
        out[i].tokens.push_back(token);
      }
      std::vector<size_t> next;
      std::vector<int64_t> ids;
      std::vector<int32_t> fed;
      for (size_t i : active)
        if (static_cast<int64_t>(out[i].tokens.size()) < rows[i].k) {
          next.push_back(i);
          ids.push_back(rows[i].id);
          fed.push_back(out[i].tokens.back());
        }
      if (next.empty()) break;
      active = std::move(next);
      logits = kv_->decode(ids, fed);
    }
    return out;
  }

  void keep(int64_t id, int64_t positions) override {
    if (!known_.count(id)) return;
    if (kv_->computed(id) > positions) kv_->truncate(id, positions);
  }

  void finish(int64_t id) override {
    if (known_.erase(id)) kv_->retire({id});
    samplers_.erase(id);
  }

 private:
  Sampler& sampler(const Row& r) {
    auto it = samplers_.find(r.id);
    if (it == samplers_.end()) {
      // Its own stream, so that drafting never shifts the target's draws.
      SamplingParams p = *r.params;
      p.seed = r.params->seed ^ 0x9e3779b97f4a7c15ULL;
      it = samplers_.emplace(r.id, std::make_unique<Sampler>(p)).first;
    }
    return *it->second;
  }

  std::unique_ptr<KvMemoryManager> kv_;
  std::set<int64_t> known_;
  std::map<int64_t, std::unique_ptr<Sampler>> samplers_;
};

}  // namespace

std::unique_ptr<Drafter> make_drafter(const SpeculativeConfig& config, const Model& target, int64_t slots,
                                      int64_t capacity, int32_t pad_id) {
  config.validate();
  if (config.method == SpeculativeMethod::Ngram)
    return std::make_unique<NgramDrafter>(config.prompt_lookup_min, config.prompt_lookup_max);
  if (config.method != SpeculativeMethod::DraftModel)
    throw InputError("speculative decoding is off: no drafter");
  const Model& draft = *config.draft_model;
  if (draft.shape().vocab_size != target.shape().vocab_size)
    throw InputError("the draft model's vocabulary (" + std::to_string(draft.shape().vocab_size) +
                     " tokens) is not the target's (" + std::to_string(target.shape().vocab_size) +
                     "): draft and target must share a tokenizer");
  if (draft.shape().context < capacity)
    throw InputError("the draft model's context (" + std::to_string(draft.shape().context) +
                     " positions) is shorter than the requests need (" + std::to_string(capacity) + ")");
  if (draft.device() != target.device())
    throw InputError("the draft model runs on " + draft.device().str() + ", the target on " +
                     target.device().str() + ": both must be on one device");
  return std::make_unique<DraftModelDrafter>(draft, slots, capacity, pad_id);
}

Verification verify_proposal(const at::Tensor& logits, const std::vector<int32_t>& draft,
                             const at::Tensor& draft_probs, const PickRow& row, const std::string& where) {
  const int64_t k = static_cast<int64_t>(draft.size());
  if (logits.dim() != 2 || logits.size(0) != k + 1)
    throw InputError("verify_proposal: " + std::to_string(k) + " proposals need " + std::to_string(k + 1) +
                     " rows of logits");
  const SamplingParams& p = *row.params;
  // Each row's output so far includes the proposals before it (for the penalties).
  std::vector<std::vector<int32_t>> outputs(static_cast<size_t>(k + 1),
                                            row.output ? *row.output : std::vector<int32_t>{});
  for (int64_t i = 1; i <= k; ++i) {
    outputs[static_cast<size_t>(i)] = outputs[static_cast<size_t>(i - 1)];
    outputs[static_cast<size_t>(i)].push_back(draft[static_cast<size_t>(i - 1)]);
  }
  Verification v;
  if (p.greedy && row.constraint) {
    // Under a grammar, row i is masked by the grammar's state after the proposals before it, and
    // the picker advances the grammar past each choice: over the accepted proposals and the one
    // token that ends the run, never over a rejected proposal, so there is nothing to roll back.
    for (int64_t i = 0; i <= k; ++i) {
      PickRow r = row;
      r.output = &outputs[static_cast<size_t>(i)];
      v.tokens.push_back(pick_tokens(logits.narrow(0, i, 1), {r}, where).front());
      if (i == k || v.tokens.back().id != draft[static_cast<size_t>(i)]) break;
      ++v.accepted;
    }
    return v;
  }
  if (p.greedy) {
    // Every row's greedy choice at once; accepted while it equals the proposal.
    std::vector<PickRow> rows(static_cast<size_t>(k + 1), row);
    for (int64_t i = 0; i <= k; ++i) rows[static_cast<size_t>(i)].output = &outputs[static_cast<size_t>(i)];
    const std::vector<PickedToken> picked = pick_tokens(logits, rows, where);
    for (int64_t i = 0; i <= k; ++i) {
      v.tokens.push_back(picked[static_cast<size_t>(i)]);
      if (i == k || picked[static_cast<size_t>(i)].id != draft[static_cast<size_t>(i)]) break;
      ++v.accepted;
    }
    return v;
  }
  check_finite_logits(logits, where);
  if (!row.sampler) throw InputError("verify_proposal: a sampling row without its generator");
  const at::Tensor l = logits.to(at::kCPU, at::kFloat).contiguous();
  const int64_t vocab = l.size(1);
  for (int64_t i = 0; i <= k; ++i) {
    // The grammar's mask first (in the state the proposals before this row left it), as the
    // picker masks: the target distribution is the masked one, and a forbidden proposal has
    // probability 0 under it, so it is always rejected and the residual never draws it.
    at::Tensor masked = l.select(0, i).clone();
    if (row.constraint) row.constraint->mask(masked.data_ptr<float>(), vocab);
    at::Tensor shaped = row.constraint ? masked.clone() : masked;
    if (p.penalized())
      apply_penalties(shaped.data_ptr<float>(), vocab, p, row.prompt, &outputs[static_cast<size_t>(i)]);
    const at::Tensor target = row.sampler->probs(shaped.unsqueeze(0)).squeeze(0);
    PickedToken t;
    if (i == k) {
      t.id = static_cast<int32_t>(row.sampler->draw(target));
    } else {
      const int32_t d = draft[static_cast<size_t>(i)];
      const double pd = target[d].item<double>();
      const double qd = draft_probs.defined() ? draft_probs[i][d].item<double>() : 1.0;
      if (qd > 0 && row.sampler->uniform() < std::min(1.0, pd / qd)) {
        t.id = d;
        ++v.accepted;
      } else {
        // The residual max(p - q, 0), renormalised: with q a point mass, p without d.
        at::Tensor residual;
        if (draft_probs.defined()) {
          residual = (target - draft_probs[i]).clamp_min(0);
        } else {
          residual = target.clone();
          residual[d] = 0;
        }
        const double mass = residual.sum().item<double>();
        t.id = static_cast<int32_t>(row.sampler->draw(mass > 0 ? residual / mass : target));
      }
    }
    // Log-probabilities of what the model and the grammar said (`shaped` is `masked` itself, with
    // penalties applied, when there is no grammar).
    if (row.logprobs || p.top_logprobs > 0) fill_logprobs(t, row.constraint ? masked : l.select(0, i), p);
    if (row.constraint) row.constraint->accept(t.id);
    const bool rejected = i < k && t.id != draft[static_cast<size_t>(i)];
    v.tokens.push_back(std::move(t));
    if (i == k || rejected) break;
  }
  return v;
}

Speculator::Speculator(const SpeculativeConfig& config, const Model& target, int64_t slots, int64_t capacity,
                       int32_t pad_id)
    : config_(config), drafter_(make_drafter(config, target, slots, capacity, pad_id)) {}

Speculator::~Speculator() = default;

void Speculator::propose(SchedulerCore& core,
                         const std::function<const SamplingParams*(int64_t)>& params_of) {
  std::vector<Drafter::Row> rows;
  for (int64_t id : core.running()) {
    const SchedulerCore::Request& r = core.request(id);
    if (r.prefilling()) continue;
    // The verification adds a token of its own: propose at most one fewer than are left.
    const int64_t k = std::min(config_.num_speculative_tokens, r.max_new_tokens - r.generated() - 1);
    const SamplingParams* params = k >= 1 ? params_of(id) : nullptr;
    if (params) rows.push_back({id, &r.tokens, k, params});
  }
  if (rows.empty()) return;
  const DeviceTimer timer(config_.draft_model ? config_.draft_model->device() : at::Device(at::kCPU));
  std::vector<Drafter::Proposal> proposals = drafter_->propose(rows);
  stats_.draft_ms += timer.elapsed_ms();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (proposals[i].tokens.empty()) continue;
    if (proposals[i].probs.defined()) probs_[rows[i].id] = proposals[i].probs;
    core.propose(rows[i].id, std::move(proposals[i].tokens));
  }
}

Verification Speculator::verify(int64_t id, const at::Tensor& logits, const std::vector<int32_t>& draft,
                                const PickRow& row, const std::string& where) {
  at::Tensor q;
  if (const auto it = probs_.find(id); it != probs_.end()) {
    q = it->second.narrow(0, 0, static_cast<int64_t>(draft.size()));
    probs_.erase(it);
  }
  Verification v = verify_proposal(logits, draft, q, row, where);
  ++stats_.num_drafts;
  stats_.num_draft_tokens += static_cast<int64_t>(draft.size());
  stats_.num_accepted_tokens += v.accepted;
  if (stats_.accepted_per_position.size() < draft.size())
    stats_.accepted_per_position.resize(draft.size(), 0);
  for (int64_t i = 0; i < v.accepted; ++i) ++stats_.accepted_per_position[static_cast<size_t>(i)];
  return v;
}

void Speculator::settle(SchedulerCore& core, int64_t id, int64_t start, int64_t accepted) {
  if (!core.has(id)) return;  // it finished within the accepted run
  const int64_t kept = start + 1 + accepted;
  core.rewind(id, kept);
  drafter_->keep(id, kept);
}

void Speculator::finish(int64_t id) {
  probs_.erase(id);
  drafter_->finish(id);
}

}  // namespace servelab

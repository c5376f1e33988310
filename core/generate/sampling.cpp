#include "generate/sampling.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "util/errors.h"

namespace servelab {

namespace {
// %g: a temperature of 1e-45 reads as such, not as "0.000000".
std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}
}  // namespace

void SamplingParams::validate() const {
  if (!(repetition_penalty > 0.0 && std::isfinite(repetition_penalty)))
    throw InputError("repetition penalty must be > 0 and finite (1: off), got " + num(repetition_penalty));
  if (!(presence_penalty >= -2.0 && presence_penalty <= 2.0))
    throw InputError("presence penalty must be in [-2, 2], got " + num(presence_penalty));
  if (!(frequency_penalty >= -2.0 && frequency_penalty <= 2.0))
    throw InputError("frequency penalty must be in [-2, 2], got " + num(frequency_penalty));
  if (top_logprobs < 0 || top_logprobs > 20)
    throw InputError("top logprobs must be in [0, 20], got " + std::to_string(top_logprobs));
  if (greedy) return;
  // A temperature so small that logits / temperature overflows fp32 is no temperature at all.
  if (!(temperature >= 1e-5 && std::isfinite(temperature)))
    throw InputError(
        "temperature must be > 0 (at least 1e-5) and finite; greedy decoding is temperature 0. Got " +
        num(temperature));
  if (top_k < 0) throw InputError("top-k must be >= 0, got " + std::to_string(top_k));
  if (!(top_p > 0.0 && top_p <= 1.0)) throw InputError("top-p must be in (0, 1], got " + num(top_p));
  if (!(min_p >= 0.0 && min_p <= 1.0)) throw InputError("min-p must be in [0, 1], got " + num(min_p));
}

void check_finite_logits(const at::Tensor& logits, const std::string& where) {
  // One reduction: an fp32 sum is finite when every logit is. Only when it is not (NaN, an
  // infinity, or finite logits so large that their sum overflows) is the mask built.
  if (std::isfinite(logits.sum(at::kFloat).item<float>())) return;
  if (at::isfinite(logits).all().item<bool>()) return;
  const at::Tensor bad_rows = at::logical_not(at::isfinite(logits)).reshape({logits.size(0), -1}).any(1);
  const int64_t row = bad_rows.nonzero().select(1, 0)[0].item<int64_t>();
  throw ModelFormatError(where + ": the logits of batch row " + std::to_string(row + 1) +
                         " hold NaN or infinite values (the model's weights or an adapter overflow); "
                         "generation stopped");
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), generator_(at::make_generator<at::CPUGeneratorImpl>(params.seed)) {
  params_.validate();
}

at::Tensor Sampler::next(const at::Tensor& logits) {
  if (params_.greedy) return logits.argmax(-1).to(at::kCPU);
  return at::multinomial(probs(logits), 1, /*replacement=*/false, generator_).squeeze(-1);
}

at::Tensor Sampler::probs(const at::Tensor& logits) const {
  // Sampling happens on the CPU in fp32 so that a seed gives the same tokens on every device.
  at::Tensor l = logits.to(at::kCPU, at::kFloat) / params_.temperature;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const int64_t vocab = l.size(-1);
  if (params_.min_p > 0.0) {
    // Relative to the most likely token: log p_i < log p_max + log min_p, in logit space.
    const at::Tensor top = std::get<0>(l.max(-1, /*keepdim=*/true));
    l = l.masked_fill(l < top + std::log(params_.min_p), neg_inf);
  }
  if (params_.top_k > 0 && params_.top_k < vocab) {
    at::Tensor kth = std::get<0>(l.topk(params_.top_k, -1)).select(-1, params_.top_k - 1).unsqueeze(-1);
    l = l.masked_fill(l < kth, neg_inf);
  }
  if (params_.top_p < 1.0) {
    auto [sorted, order] = l.sort(-1, /*descending=*/true);
    at::Tensor cum = sorted.softmax(-1).cumsum(-1);
    // Drop a token once the mass before it already reaches top_p; the first token always stays.
    at::Tensor drop = (cum - sorted.softmax(-1)) >= params_.top_p;
    sorted = sorted.masked_fill(drop, neg_inf);
    l = at::full_like(l, neg_inf).scatter(-1, order, sorted);
  }
  return l.softmax(-1);
}

int64_t Sampler::draw(const at::Tensor& probs) {
  return at::multinomial(probs.reshape({1, -1}), 1, /*replacement=*/false, generator_).item<int64_t>();
}

double Sampler::uniform() { return at::rand({1}, generator_, at::kDouble).item<double>(); }

}  // namespace servelab

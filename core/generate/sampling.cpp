#include "generate/sampling.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <limits>

#include "util/errors.h"

namespace servelab {

void SamplingParams::validate() const {
  if (greedy) return;
  if (!(temperature > 0.0 && std::isfinite(temperature)))
    throw InputError("temperature must be > 0 and finite, got " + std::to_string(temperature));
  if (top_k < 0) throw InputError("top-k must be >= 0, got " + std::to_string(top_k));
  if (!(top_p > 0.0 && top_p <= 1.0))
    throw InputError("top-p must be in (0, 1], got " + std::to_string(top_p));
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
  // Sampling happens on the CPU in fp32 so that a seed gives the same tokens on every device.
  at::Tensor l = logits.to(at::kCPU, at::kFloat) / params_.temperature;
  const double neg_inf = -std::numeric_limits<double>::infinity();
  const int64_t vocab = l.size(-1);
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
  return at::multinomial(l.softmax(-1), 1, /*replacement=*/false, generator_).squeeze(-1);
}

}  // namespace servelab

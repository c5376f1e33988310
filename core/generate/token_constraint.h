#pragma once
// A grammar that constrains which token may come next (structured output): the token picker
// masks the logits with it before choosing, and advances it past the chosen token. Torch-free.
#include <cstdint>

namespace servelab {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of the tokens the grammar forbids next to -inf; logits: vocab fp32 values.
  virtual void mask(float* logits, int64_t vocab) = 0;
  // Advances past token; false when the grammar rejects it (which mask() prevents).
  virtual bool accept(int32_t token) = 0;
};

}  // namespace servelab

// libFuzzer target for the structured-output compiler (scripts/fuzz json_schema): the input is a
// JSON Schema as a request's response_format / TGI grammar carries it, compiled by
// StructuredOutput::json() (xgrammar) for a small fixed vocabulary built once. The contract: a
// constraint, or InputError naming the problem. An accepted schema's constraint is then walked for
// a few tokens (mask, accept an allowed token the input's bytes pick), which must hold up: a token the mask
// allows is accepted. Anything else (another exception, a sanitizer report, a crash, a failed FUZZ_CHECK) is
// a finding.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_input_file.h"
#include "fuzz_tokenizer.h"
#include "serve/structured_output.h"

using namespace servelab;

namespace {

StructuredOutput* compiler = nullptr;
int64_t vocab = 0;
constexpr int kWalkTokens = 24;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  static const fuzz::ByteTokenizer tokenizer;
  vocab = tokenizer.vocab_size();
  compiler = new StructuredOutput(tokenizer, vocab, {257});
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string schema(reinterpret_cast<const char*>(data), size);
  std::unique_ptr<TokenConstraint> constraint;
  try {
    constraint = compiler->json(schema);
  } catch (const InputError& e) {
    FUZZ_CHECK(*e.what() != '\0');
    return 0;
  }
  FUZZ_CHECK(constraint != nullptr);
  if (size == 0) return 0;
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (int step = 0; step < kWalkTokens; ++step) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    constraint->mask(logits.data(), vocab);
    std::vector<int32_t> allowed;
    for (int64_t i = 0; i < vocab; ++i)
      if (std::isfinite(logits[static_cast<size_t>(i)])) allowed.push_back(static_cast<int32_t>(i));
    // Nothing allowed: the grammar is at its end (or a dead end xgrammar's compiler allowed).
    if (allowed.empty()) break;
    // The input's own bytes choose the path, so that the fuzzer steers the walk too.
    const int32_t next = allowed[data[static_cast<size_t>(step) % size] % allowed.size()];
    if (next == 257) break;
    FUZZ_CHECK(constraint->accept(next));
  }
  return 0;
}

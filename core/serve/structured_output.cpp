#include "serve/structured_output.h"

#include "tokenizer/tokenizer.h"
#include "util/errors.h"

#ifdef SERVELAB_HAVE_XGRAMMAR
#include <xgrammar/xgrammar.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#endif

namespace servelab {

#ifdef SERVELAB_HAVE_XGRAMMAR

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t).count();
}

// Control tokens (<|im_start|>, <|endoftext|>, ...) must never be spelled inside the JSON: the
// grammar sees them as empty (xgrammar's special tokens), so only the stop tokens can end it.
bool is_control_token(const std::string& bytes) {
  return bytes.size() >= 4 && bytes.compare(0, 2, "<|") == 0 && bytes.compare(bytes.size() - 2, 2, "|>") == 0;
}

}  // namespace

struct StructuredOutput::Impl {
  std::unique_ptr<xgrammar::GrammarCompiler> compiler;
  int64_t vocab = 0;
  mutable std::mutex mutex;
  StructuredOutputStats stats;
};

namespace {

class XgrammarConstraint : public TokenConstraint {
 public:
  XgrammarConstraint(const xgrammar::CompiledGrammar& grammar, int64_t vocab, std::mutex* mutex,
                     StructuredOutputStats* stats)
      : matcher_(grammar),
        words_(static_cast<size_t>(xgrammar::GetBitmaskSize(static_cast<int>(vocab)))),
        vocab_(vocab),
        mutex_(mutex),
        stats_(stats) {}

  void mask(float* logits, int64_t vocab) override {
    const Clock::time_point t0 = Clock::now();
    int64_t shape = static_cast<int64_t>(words_.size());
    DLTensor bitmask{};
    bitmask.data = words_.data();
    bitmask.device = DLDevice{kDLCPU, 0};
    bitmask.ndim = 1;
    bitmask.dtype = xgrammar::GetBitmaskDLType();
    bitmask.shape = &shape;
    bitmask.strides = nullptr;
    bitmask.byte_offset = 0;
    matcher_.FillNextTokenBitmask(&bitmask);
    const double fill_us = us_since(t0);
    // Word by word: most words are all ones (every token allowed) or all zeros.
    const float neg_inf = -std::numeric_limits<float>::infinity();
    const int64_t n = std::min(vocab, vocab_);
    for (int64_t w = 0; w * 32 < n; ++w) {
      const uint32_t word = static_cast<uint32_t>(words_[static_cast<size_t>(w)]);
      if (word == 0xffffffffu) continue;
      const int64_t base = w * 32, end = std::min<int64_t>(base + 32, n);
      for (int64_t i = base; i < end; ++i)
        if (!(word >> (i - base) & 1u)) logits[i] = neg_inf;
    }
    for (int64_t i = n; i < vocab; ++i) logits[i] = neg_inf;
    const double us = us_since(t0);
    std::lock_guard lock(*mutex_);
    ++stats_->masked_tokens;
    stats_->mask_us_total += us;
    stats_->mask_us_max = std::max(stats_->mask_us_max, us);
    stats_->fill_us_total += fill_us;
    if (stats_->mask_us.size() < 100000) {
      stats_->mask_us.push_back(static_cast<float>(us));
      stats_->fill_us.push_back(static_cast<float>(fill_us));
    }
  }

  bool accept(int32_t token) override { return matcher_.AcceptToken(token); }

 private:
  xgrammar::GrammarMatcher matcher_;
  std::vector<int32_t> words_;
  int64_t vocab_;
  std::mutex* mutex_;
  StructuredOutputStats* stats_;
};

}  // namespace

bool StructuredOutput::available() { return true; }

StructuredOutput::StructuredOutput(const Tokenizer& tokenizer, int64_t model_vocab,
                                   std::vector<int32_t> stop_ids)
    : impl_(std::make_unique<Impl>()) {
  // RAW vocabulary: each token's own bytes, whatever the tokenizer's encoding (byte-level BPE or
  // SentencePiece); ids past the tokenizer's vocabulary (padded embedding rows) never come.
  std::vector<std::string> vocab(static_cast<size_t>(model_vocab));
  const int64_t n = std::min<int64_t>(model_vocab, tokenizer.vocab_size());
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    std::string bytes = tokenizer.token_bytes(id);
    const bool stop = std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
    vocab[static_cast<size_t>(i)] = stop || is_control_token(bytes) ? std::string() : std::move(bytes);
  }
  const xgrammar::TokenizerInfo info(vocab, xgrammar::VocabType::RAW, static_cast<int>(model_vocab),
                                     stop_ids);
  // The cache is bounded: every distinct schema a client sends would otherwise stay compiled for
  // the server's lifetime (a memory leak any client can drive).
  constexpr int64_t kCacheBytes = int64_t{64} << 20;
  impl_->compiler = std::make_unique<xgrammar::GrammarCompiler>(info, /*max_threads=*/2,
                                                                /*cache_enabled=*/true, kCacheBytes);
  impl_->vocab = model_vocab;
}

StructuredOutput::~StructuredOutput() = default;

std::unique_ptr<TokenConstraint> StructuredOutput::json(const std::string& schema) {
  const Clock::time_point t0 = Clock::now();
  xgrammar::CompiledGrammar grammar = [&] {
    try {
      // Compact JSON: with free whitespace a model may pad forever.
      if (schema.empty()) return impl_->compiler->CompileBuiltinJSONGrammar();
      return impl_->compiler->CompileJSONSchema(schema, /*any_whitespace=*/false);
    } catch (const std::exception& e) {
      throw InputError(std::string("the JSON schema cannot be used: ") + e.what());
    }
  }();
  const double ms = us_since(t0) / 1000;
  {
    std::lock_guard lock(impl_->mutex);
    // A cache hit takes microseconds; count the real compilations.
    if (ms > 1.0) {
      ++impl_->stats.grammars;
      impl_->stats.compile_ms += ms;
    }
  }
  return std::make_unique<XgrammarConstraint>(grammar, impl_->vocab, &impl_->mutex, &impl_->stats);
}

StructuredOutputStats StructuredOutput::stats() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->stats;
}

#else  // no xgrammar in this build

struct StructuredOutput::Impl {};

bool StructuredOutput::available() { return false; }

StructuredOutput::StructuredOutput(const Tokenizer&, int64_t, std::vector<int32_t>) {
  throw InputError("this build has no structured output: run scripts/build_xgrammar, then configure again");
}

StructuredOutput::~StructuredOutput() = default;

std::unique_ptr<TokenConstraint> StructuredOutput::json(const std::string&) { return nullptr; }

StructuredOutputStats StructuredOutput::stats() const { return {}; }

#endif

}  // namespace servelab

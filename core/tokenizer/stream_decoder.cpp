#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace servelab {
namespace {

// Tokens of already-emitted text kept in front of the pending ones. Decoding the new tokens
// together with some of the old ones, and subtracting the old text, makes the result the same as
// decoding everything: SentencePiece drops the space of the first piece only at the very start,
// and a stray continuation byte must stay next to what precedes it.
constexpr size_t kContextTokens = 4;

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}

std::string StreamDecoder::push(int32_t id) {
  pending_bytes_ += tokenizer_.token_bytes(id);  // throws TokenizerError for a bad id, before any change
  ids_.push_back(id);
  if (utf8::incomplete_tail(pending_bytes_) > 0) return {};
  return emit();
}

std::string StreamDecoder::flush() {
  std::string out = pending_ < ids_.size() ? emit() : std::string();
  ids_.clear();
  pending_ = 0;
  pending_bytes_.clear();
  return out;
}

size_t StreamDecoder::context_start() const {
  // Up to kContextTokens emitted tokens, and further back if those have no bytes at all (control
  // tokens), so that the window never looks like the start of the text when it is not.
  size_t ctx = pending_ > kContextTokens ? pending_ - kContextTokens : 0;
  auto has_visible = [&](size_t from) {
    for (size_t i = from; i < pending_; ++i) {
      if (!tokenizer_.token_bytes(ids_[i]).empty()) return true;
    }
    return false;
  };
  while (ctx > 0 && !has_visible(ctx)) --ctx;
  return ctx;
}

std::string StreamDecoder::emit() {
  const size_t ctx = context_start();
  const auto at = [&](size_t i) { return ids_.begin() + static_cast<std::ptrdiff_t>(i); };
  const std::string full = tokenizer_.decode(std::vector<int32_t>(at(ctx), ids_.end()));
  const std::string before =
      ctx == pending_ ? std::string() : tokenizer_.decode(std::vector<int32_t>(at(ctx), at(pending_)));
  std::string out;
  if (full.size() >= before.size() && full.compare(0, before.size(), before) == 0) {
    out = full.substr(before.size());
  } else {
    // Does not happen with GPT-2 or SentencePiece; emit the new bytes rather than lose them.
    out = utf8::lossy(pending_bytes_);
  }
  pending_ = ids_.size();
  pending_bytes_.clear();
  // Forget tokens that can no longer be context, so a long stream costs O(1) per token.
  if (pending_ > 4 * kContextTokens) {
    const size_t keep_from = context_start();
    ids_.erase(ids_.begin(), at(keep_from));
    pending_ = ids_.size();
  }
  return out;
}

}  // namespace servelab

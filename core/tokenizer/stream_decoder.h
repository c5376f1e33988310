#pragma once
// Incremental detokenizer for streaming generation. A token can end in the middle of a UTF-8
// character (GPT-2 splits emoji and CJK into byte tokens), so push() holds back a trailing
// incomplete sequence until a later token completes it, and only ever returns valid UTF-8.
// The concatenation of every push() and the final flush() equals tokenizer.decode(all ids).
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace servelab {

class StreamDecoder {
 public:
  // The tokenizer must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& tokenizer);

  // Adds one generated token; returns the text it completes (possibly empty).
  std::string push(int32_t id);
  // Returns whatever is still held back (an unfinished sequence becomes U+FFFD) and starts over.
  std::string flush();

 private:
  size_t context_start() const;
  std::string emit();

  const Tokenizer& tokenizer_;
  // Tokens from the start of the context window; ids_[0, pending_) are already emitted text.
  std::vector<int32_t> ids_;
  size_t pending_ = 0;
  std::string pending_bytes_;  // raw bytes of ids_[pending_, end)
};

}  // namespace servelab

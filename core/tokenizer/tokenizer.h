#pragma once
// The tokenizer interface the engine, CLI and GUI use. Implementations: GPT-2 byte-level BPE
// (gpt2_bpe_tokenizer.h) and SentencePiece (sentencepiece_tokenizer.h). No Qt and no libtorch here.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/errors.h"

namespace servelab {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Text to token ids. Throws TokenizerError on invalid UTF-8 (the message gives the byte offset).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // Token ids to text. Bytes are kept as they are; an invalid UTF-8 sequence (e.g. half an emoji)
  // becomes U+FFFD the way Hugging Face does it. Throws TokenizerError for an out-of-range id.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // Raw bytes of one token; may be part of a UTF-8 character. TokenizerError for an out-of-range id.
  virtual std::string token_bytes(int32_t id) const = 0;
  // Printable form of one token, as the vocabulary spells it: "Ġfox" for GPT-2, "▁the" for SP.
  virtual std::string token_display(int32_t id) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // "gpt2-bpe" or "sentencepiece".
  virtual std::string kind() const = 0;
};

// Loads the tokenizer of a model folder, choosing by the files present, in this order:
// tokenizer.json (GPT-2 BPE), vocab.json + merges.txt (GPT-2 BPE), *.model (SentencePiece).
// Throws TokenizerError naming the folder and the files it looked for when none is there.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir);

}  // namespace servelab

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
  // The beginning-of-sequence token, if the tokenizer names one.
  virtual std::optional<int32_t> bos_id() const { return std::nullopt; }
  // Tokens that end generation: eos first, then any others the model stops on (SmolLM2 also stops
  // on <|endoftext|>); no duplicates.
  virtual std::vector<int32_t> stop_ids() const {
    if (const auto eos = eos_id()) return {*eos};
    return {};
  }
  // Whether the caller should put bos_id() before the ids of a prompt: encode() never adds it.
  virtual bool add_bos() const { return false; }
  // The model's Jinja chat template (tokenizer_config.json's or the GGUF's); empty when none.
  virtual const std::string& chat_template() const {
    static const std::string none;
    return none;
  }
  // "gpt2-bpe" or "sentencepiece".
  virtual std::string kind() const = 0;
};

// What a Hugging Face model folder says about its tokenizer besides the tokenizer files.
struct TokenizerConfig {
  // chat_template.jinja, else tokenizer_config.json's chat_template (a string, or the list form's
  // "default" entry); empty when none.
  std::string chat_template;
  std::optional<bool> add_bos;                      // tokenizer_config.json add_bos_token
  std::optional<std::string> bos_token, eos_token;  // tokenizer_config.json, as spelled there
  std::vector<int32_t> eos_ids;                     // generation_config.json eos_token_id (one or a list)
  std::string source;                               // the file(s) read, for messages
};

// Reads tokenizer_config.json, chat_template.jinja and generation_config.json of a model folder;
// absent files leave their fields empty. TokenizerError naming the file for malformed JSON or a
// field of the wrong type.
TokenizerConfig read_tokenizer_config(const std::string& dir);

// Loads the tokenizer of a model folder, choosing by the files present, in this order:
// tokenizer.json (GPT-2 BPE), vocab.json + merges.txt (GPT-2 BPE), *.model (SentencePiece),
// with what read_tokenizer_config() finds there (chat template, bos/eos tokens, add_bos).
// Throws TokenizerError naming the folder and the files it looked for when none is there.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir);

}  // namespace servelab

#pragma once
// GPT-2 byte-level BPE, equal to Hugging Face tokenizers' BPE + ByteLevel (and to transformers'
// GPT2Tokenizer): the GPT-2 pre-tokenizer regex (run with PCRE2 in UTF + UCP mode), the GPT-2
// byte-to-unicode table, merges applied by rank, and added tokens such as <|endoftext|> matched
// in the text before pre-tokenizing so that they are never split.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace servelab {

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // From the two files of the original GPT-2 release. "<|endoftext|>", when in the vocabulary, is
  // a special token (as transformers' GPT2Tokenizer makes it).
  static std::unique_ptr<Gpt2BpeTokenizer> from_vocab_merges(const std::string& vocab_json_path,
                                                             const std::string& merges_txt_path);
  // From a Hugging Face tokenizer.json with a BPE model: model.vocab, model.merges (either
  // "a b" strings or [a, b] pairs) and added_tokens.
  static std::unique_ptr<Gpt2BpeTokenizer> from_tokenizer_json(const std::string& tokenizer_json_path);

  ~Gpt2BpeTokenizer() override;
  Gpt2BpeTokenizer(const Gpt2BpeTokenizer&) = delete;
  Gpt2BpeTokenizer& operator=(const Gpt2BpeTokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string token_bytes(int32_t id) const override;
  std::string token_display(int32_t id) const override;
  int32_t vocab_size() const override;
  std::optional<int32_t> eos_id() const override;
  std::string kind() const override { return "gpt2-bpe"; }

  // Number of merge rules loaded.
  size_t merge_count() const;
  // The printable character GPT-2 uses for byte `b` (e.g. 0x20 -> "Ġ"), UTF-8 encoded.
  static std::string byte_symbol(uint8_t b);

 private:
  struct Impl;
  explicit Gpt2BpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace servelab

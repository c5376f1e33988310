#pragma once
// SentencePiece tokenizer (a .model file), wrapping libsentencepiece. The library's headers stay
// in the .cpp (pimpl): it brings protobuf-lite, and libtorch may bring its own protobuf, so no
// other translation unit should see either.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace servelab {

// A SentencePiece vocabulary given piece by piece (a GGUF file's tokenizer.ggml.* with model
// "llama": Llama 2, TinyLlama, Mistral v0.1), run by libsentencepiece as a BPE model with byte
// fallback, as those tokenizers were trained.
struct SentencePieceVocabulary {
  std::vector<std::string> pieces;
  std::vector<float> scores;  // one per piece: the merge priority
  // One per piece, SentencePiece's numbering (which GGUF's token_type shares): 1 normal,
  // 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
  std::vector<int32_t> types;
  std::optional<int32_t> unk_id, bos_id, eos_id;
  bool add_space_prefix = true;  // SentencePiece's add_dummy_prefix
  std::string source;            // for messages: the file the vocabulary came from
};

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // TokenizerError naming the source for an inconsistent vocabulary (counts that disagree, an
  // unknown type, no unknown piece, an id out of range, what libsentencepiece refuses).
  static std::unique_ptr<SentencePieceTokenizer> from_vocabulary(const SentencePieceVocabulary& vocabulary,
                                                                 const TokenizerConfig& config = {});

  // Throws TokenizerError naming the file when it is missing or not a SentencePiece model. The
  // config (a model folder's tokenizer_config.json) may name the bos/eos pieces, add_bos and the
  // chat template; without it add_bos() is true when the model has a bos piece, as transformers'
  // LlamaTokenizer does.
  explicit SentencePieceTokenizer(const std::string& model_path, const TokenizerConfig& config = {});
  ~SentencePieceTokenizer() override;
  SentencePieceTokenizer(const SentencePieceTokenizer&) = delete;
  SentencePieceTokenizer& operator=(const SentencePieceTokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  // The piece's text with "▁" as a space; a byte piece (<0xE3>) gives its byte; control pieces
  // (<s>, </s>) give nothing; the unknown piece gives what decode() shows for it.
  std::string token_bytes(int32_t id) const override;
  std::string token_display(int32_t id) const override;
  int32_t vocab_size() const override;
  std::optional<int32_t> eos_id() const override;
  std::optional<int32_t> bos_id() const override;
  std::vector<int32_t> stop_ids() const override;
  bool add_bos() const override;
  const std::string& chat_template() const override;
  std::string kind() const override { return "sentencepiece"; }

 private:
  SentencePieceTokenizer();
  void configure(const TokenizerConfig& config);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace servelab

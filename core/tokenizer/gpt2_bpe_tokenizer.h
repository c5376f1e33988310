#pragma once
// Byte-level BPE, equal to Hugging Face tokenizers' BPE + ByteLevel (and to transformers'
// GPT2Tokenizer): the GPT-2 byte-to-unicode table, merges applied by rank, and added (control)
// tokens such as <|endoftext|> matched in the text before pre-tokenizing so that they are never
// split. The pre-tokenizer is one of a few named kinds (GPT-2's regex, SmolLM2's isolated digits
// then GPT-2's regex, Llama 3's and Qwen2's split regexes), run with PCRE2 in UTF + UCP mode and
// resolved once at construction.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace servelab {

namespace bpe_detail {
struct RawTokenizer;  // what a loader collects (tokenizer/bpe_detail.h)
}  // namespace bpe_detail

// How text is cut into words before BPE.
enum class PreTokenizerKind {
  Gpt2,    // GPT-2's regex (HF ByteLevel with use_regex=true)
  Smollm,  // every \p{N} code point alone, then GPT-2's regex in each piece (HF Digits + ByteLevel)
  Llama3,  // the Llama 3 split regex (\p{N}{1,3}, letters with one leading non-letter, ...)
  Qwen2,   // Llama 3's regex with single digits (\p{N})
  Regex,   // a tokenizer.json Split regex that is none of the above, run as given
};

// "gpt2", "smollm", "llama3", "qwen2" or "regex".
const char* pre_tokenizer_name(PreTokenizerKind kind);
// The kind a GGUF `tokenizer.ggml.pre` value names, as llama.cpp reads it: "gpt2" and "default"
// are GPT-2 (note: llama.cpp's own "default" is a different, older regex); "smollm"; "llama3",
// "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2" are Llama 3;
// "qwen2" is Qwen2. nullopt for any other name.
std::optional<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name);

// A byte-level BPE vocabulary given as plain parts, as a GGUF file's tokenizer.ggml.* metadata
// holds it. Nothing here refers to a file: `source` only names it in error messages.
struct BpeParts {
  std::vector<std::string> tokens;  // id -> token as the vocabulary spells it (byte-level symbols)
  std::vector<std::string> merges;  // "a b" in rank order
  // GGUF token_type per id (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte;
  // 0 undefined counts as normal); empty: all normal. Control and user-defined tokens are matched
  // whole in the text before BPE, longest first.
  std::vector<int32_t> token_types;
  std::string pre = "gpt2";  // pre-tokenizer name, as pre_tokenizer_from_name() reads it
  std::optional<int32_t> bos_id, eos_id, unk_id, pad_id;
  std::vector<int32_t> extra_stop_ids;  // e.g. <|endoftext|> for SmolLM2 (stop on 2 and 0)
  bool add_bos = false;
  // Whether a word that is itself in the vocabulary is taken whole without merging (HF BPE's
  // ignore_merges). nullopt: as llama.cpp decides from the pre-tokenizer (true for llama3 only).
  std::optional<bool> ignore_merges;
  std::string chat_template;  // tokenizer.chat_template, "" when none
  std::string source;         // names the file in error messages
};

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  // From the two files of the original GPT-2 release. "<|endoftext|>", when in the vocabulary, is
  // a special token and the bos and eos token (as transformers' GPT2Tokenizer makes it).
  static std::unique_ptr<Gpt2BpeTokenizer> from_vocab_merges(const std::string& vocab_json_path,
                                                             const std::string& merges_txt_path,
                                                             const TokenizerConfig& config = {});
  // From a Hugging Face tokenizer.json with a BPE model: model.vocab, model.merges (either
  // "a b" strings or [a, b] pairs), added_tokens and the pre_tokenizer (ByteLevel; Digits +
  // ByteLevel; Split(regex) + ByteLevel(use_regex=false); anything else is refused by name).
  // An added "<|endoftext|>" is bos, eos and a stop token, as for GPT-2; a TemplateProcessing
  // post_processor that starts with a special token makes that token bos and add_bos() true; the
  // config (tokenizer_config.json and friends, see load_tokenizer) overrides both.
  static std::unique_ptr<Gpt2BpeTokenizer> from_tokenizer_json(const std::string& tokenizer_json_path,
                                                               const TokenizerConfig& config = {});
  // From plain parts (a GGUF's metadata). TokenizerError naming parts.source and the culprit for
  // an empty vocabulary, a duplicate token, a malformed or unknown merge, a size mismatch, an
  // out-of-range id or token type, or an unknown pre-tokenizer name.
  static std::unique_ptr<Gpt2BpeTokenizer> from_parts(const BpeParts& parts);

  ~Gpt2BpeTokenizer() override;
  Gpt2BpeTokenizer(const Gpt2BpeTokenizer&) = delete;
  Gpt2BpeTokenizer& operator=(const Gpt2BpeTokenizer&) = delete;

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::string token_bytes(int32_t id) const override;
  std::string token_display(int32_t id) const override;
  int32_t vocab_size() const override;
  std::optional<int32_t> eos_id() const override;
  std::optional<int32_t> bos_id() const override;
  std::vector<int32_t> stop_ids() const override;
  bool add_bos() const override;
  const std::string& chat_template() const override;
  std::string kind() const override { return "gpt2-bpe"; }

  // Number of merge rules loaded.
  size_t merge_count() const;
  PreTokenizerKind pre_tokenizer() const;
  // The id of the token the vocabulary spells `spelling` ("Ġfox", "<|im_end|>"), if any.
  std::optional<int32_t> token_id(const std::string& spelling) const;
  // Bytes that have no single-byte token in the vocabulary (21 for SmolLM2). encode() drops them,
  // as Hugging Face does for a BPE without an unknown token; decode(encode(x)) then lacks them.
  const std::vector<uint8_t>& unencodable_bytes() const;
  // The printable character GPT-2 uses for byte `b` (e.g. 0x20 -> "Ġ"), UTF-8 encoded.
  static std::string byte_symbol(uint8_t b);

 private:
  struct Impl;
  explicit Gpt2BpeTokenizer(std::unique_ptr<Impl> impl);
  // What the loaders end in (gpt2_bpe_loaders.cpp): checks what they collected and builds the
  // tokenizer. TokenizerError naming the source for a gap in the ids, a missing byte token, an
  // unknown merge or an out-of-range special id.
  static std::unique_ptr<Gpt2BpeTokenizer> from_raw(bpe_detail::RawTokenizer raw);
  std::unique_ptr<Impl> impl_;
};

}  // namespace servelab

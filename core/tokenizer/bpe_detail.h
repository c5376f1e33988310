#pragma once
// Internals of the byte-level BPE (tokenizer/gpt2_bpe_tokenizer.h), shared by its loaders
// (gpt2_bpe_loaders.cpp) and its engine (gpt2_bpe_tokenizer.cpp): the pre-tokenizer regexes,
// GPT-2's byte-to-unicode table, and what a loader collects before the tokenizer is built. Not part
// of the tokenizer's interface: only those two files include it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/gpt2_bpe_tokenizer.h"

namespace servelab::bpe_detail {

// GPT-2's pre-tokenizer regex. HF tokenizers runs it with Oniguruma, whose Unicode \s and \S are
// the White_Space property; PCRE2's UCP \s differs (it also takes U+180E), so the property is
// spelled out. Everything else is the original pattern.
inline constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
    R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";

// The split regexes as tokenizer.json files spell them (Oniguruma syntax), to recognise them.
inline constexpr const char* kGpt2Split =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
inline constexpr const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The pre-tokenizer, resolved once: the PCRE2 word regex, and whether \p{N} code points are cut
// out one by one first (SmolLM2).
struct PreTokenizerSpec {
  PreTokenizerKind kind = PreTokenizerKind::Gpt2;
  std::string pattern = kPattern;
  bool isolate_digits = false;
};

PreTokenizerSpec pre_tokenizer_spec(PreTokenizerKind kind, const std::string& split_regex = {});

// Bytes a byte-level vocabulary must have a token for: tab, newline, carriage return and
// printable ASCII. Others may be missing (SmolLM2 lacks 21, among them bytes no UTF-8 text has).
bool byte_required(int b);

// GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the other 68 bytes are moved
// to U+0100 and up, in byte order. So every byte has a visible character and no token has spaces.
const std::array<char32_t, 256>& byte_to_unicode();

// Raw bytes of a byte-level spelling (each character one of the 256 byte symbols); nullopt when
// some character is not one of them.
std::optional<std::string> byte_level_to_bytes(const std::string& token);

// Raw bytes of a vocabulary string, as HF's ByteLevel decoder gets them: each character mapped
// back to its byte, or, when some character is not one of the 256, the string's own UTF-8 bytes.
std::string vocab_string_to_bytes(const std::string& token);

// A token matched whole in the text before BPE (HF's added tokens, GGUF's control and user-defined
// tokens), with HF's matching options.
struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = true;
};

// What the loaders collect before building the tokenizer.
struct RawTokenizer {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<size_t> merge_lines;  // line (merges.txt) or index of each merge
  std::vector<AddedToken> added;
  std::string vocab_source;
  std::string merges_source;
  bool merges_are_lines = true;
  PreTokenizerSpec pre;
  bool ignore_merges = false;
  std::optional<int32_t> bos, eos, unk, pad;
  std::vector<int32_t> extra_stops;
  bool add_bos = false;
  std::string chat_template;
  std::string specials_source;  // where bos/eos/stop ids come from, for messages
};

}  // namespace servelab::bpe_detail

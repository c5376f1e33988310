// The pre-tokenizers (their names and PCRE2 regexes) and GPT-2's byte-to-unicode table, for the
// byte-level BPE's loaders and engine (bpe_detail.h).
#include "tokenizer/bpe_detail.h"

#include <string_view>

namespace servelab {

namespace bpe_detail {
namespace {

// An Oniguruma pattern (HF tokenizers) for PCRE2: Oniguruma's Unicode \s and \S are the White_Space
// property, PCRE2's UCP \s is not quite (see kPattern), so they are spelled out, in and out of
// character classes. An escaped backslash stays as it is.
std::string oniguruma_to_pcre2(const std::string& pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\' && i + 1 < pattern.size()) {
      const char c = pattern[++i];
      if (c == 's') {
        out += "\\p{White_Space}";
      } else if (c == 'S') {
        out += "\\P{White_Space}";
      } else {
        out += '\\';
        out += c;
      }
    } else {
      out += pattern[i];
    }
  }
  return out;
}

// The table byte_to_unicode() returns (bpe_detail.h), made once.
std::array<char32_t, 256> make_byte_to_unicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

// Inverse of byte_to_unicode() for the 256 code points it uses (all below U+0144).
std::optional<uint8_t> unicode_to_byte(char32_t cp) {
  static const std::array<int, 0x144> inverse = [] {
    std::array<int, 0x144> inv{};
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[byte_to_unicode()[b]] = b;
    return inv;
  }();
  if (cp >= inverse.size() || inverse[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(inverse[cp]);
}

}  // namespace

PreTokenizerSpec pre_tokenizer_spec(PreTokenizerKind kind, const std::string& split_regex) {
  PreTokenizerSpec spec;
  spec.kind = kind;
  switch (kind) {
    case PreTokenizerKind::Gpt2:
      break;
    case PreTokenizerKind::Smollm:
      spec.isolate_digits = true;
      break;
    case PreTokenizerKind::Llama3:
      spec.pattern = oniguruma_to_pcre2(kLlama3Split);
      break;
    case PreTokenizerKind::Qwen2:
      spec.pattern = oniguruma_to_pcre2(kQwen2Split);
      break;
    case PreTokenizerKind::Regex:
      spec.pattern = oniguruma_to_pcre2(split_regex);
      break;
  }
  return spec;
}

bool byte_required(int b) { return b == '\t' || b == '\n' || b == '\r' || (b >= 0x20 && b <= 0x7E); }

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> table = make_byte_to_unicode();
  return table;
}

std::optional<std::string> byte_level_to_bytes(const std::string& token) {
  std::string bytes;
  size_t i = 0;
  while (i < token.size()) {
    const auto b0 = static_cast<uint8_t>(token[i]);
    char32_t cp = 0;
    size_t len = 1;
    if (b0 < 0x80) {
      cp = b0;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3F);
      len = 2;
    } else {
      return std::nullopt;  // a character beyond U+07FF is never one of the 256
    }
    const auto b = unicode_to_byte(cp);
    if (!b) return std::nullopt;
    bytes.push_back(static_cast<char>(*b));
    i += len;
  }
  return bytes;
}

std::string vocab_string_to_bytes(const std::string& token) {
  return byte_level_to_bytes(token).value_or(token);
}

}  // namespace bpe_detail

const char* pre_tokenizer_name(PreTokenizerKind kind) {
  switch (kind) {
    case PreTokenizerKind::Gpt2:
      return "gpt2";
    case PreTokenizerKind::Smollm:
      return "smollm";
    case PreTokenizerKind::Llama3:
      return "llama3";
    case PreTokenizerKind::Qwen2:
      return "qwen2";
    case PreTokenizerKind::Regex:
      return "regex";
  }
  return "?";
}

std::optional<PreTokenizerKind> pre_tokenizer_from_name(std::string_view name) {
  // "gpt-2" is what llama.cpp's converter writes for GPT-2 itself.
  if (name == "gpt2" || name == "gpt-2" || name == "default") return PreTokenizerKind::Gpt2;
  if (name == "smollm") return PreTokenizerKind::Smollm;
  for (const char* llama3 :
       {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"}) {
    if (name == llama3) return PreTokenizerKind::Llama3;
  }
  if (name == "qwen2") return PreTokenizerKind::Qwen2;
  return std::nullopt;
}

}  // namespace servelab

#include "tokenizer/utf8.h"

#include <cstdint>

#include "util/errors.h"

namespace servelab::utf8 {
namespace {

struct Step {
  size_t length;   // bytes of the character, or of the maximal ill-formed subpart
  bool valid;      // a complete, well-formed character
  bool truncated;  // ill-formed only because the input ended in the middle of the sequence
};

// Reads one character at `i` following the well-formed byte sequences of Unicode 15, table 3-7.
// The second byte's range depends on the lead (this is what excludes overlongs, surrogates and
// code points above U+10FFFF); later bytes are always 80..BF.
Step step(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) return {1, true, false};
  size_t need = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 == 0xE0) {
    need = 2, lo = 0xA0;
  } else if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) {
    need = 2;
  } else if (b0 == 0xED) {
    need = 2, hi = 0x9F;
  } else if (b0 == 0xF0) {
    need = 3, lo = 0x90;
  } else if (b0 >= 0xF1 && b0 <= 0xF3) {
    need = 3;
  } else if (b0 == 0xF4) {
    need = 3, hi = 0x8F;
  } else {
    return {1, false, false};  // 80..C1 or F5..FF can never start a character
  }
  size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= s.size()) return {k, false, true};
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (b < lo || b > hi) return {k, false, false};
    lo = 0x80, hi = 0xBF;
  }
  return {need + 1, true, false};
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

std::optional<size_t> first_invalid(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    // ASCII fast path: most text is ASCII and encode() checks every byte of it.
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const Step st = step(text, i);
    if (!st.valid) return i;
    i += st.length;
  }
  return std::nullopt;
}

void check_valid(std::string_view text, std::string_view what) {
  if (const auto bad = first_invalid(text)) {
    const Step st = step(text, *bad);
    std::string msg = std::string(what) + ": invalid UTF-8 at byte offset " + std::to_string(*bad);
    msg += st.truncated ? " (truncated multi-byte sequence at end of text)" : " (ill-formed byte sequence)";
    throw TokenizerError(msg);
  }
}

void append_lossy(std::string& out, std::string_view bytes) {
  size_t i = 0;
  size_t run_start = 0;  // start of the pending run of valid bytes, appended in one go
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const Step st = step(bytes, i);
    if (st.valid) {
      i += st.length;
      continue;
    }
    out.append(bytes.substr(run_start, i - run_start));
    out.append(kReplacement);
    i += st.length;
    run_start = i;
  }
  out.append(bytes.substr(run_start));
}

std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  append_lossy(out, bytes);
  return out;
}

size_t incomplete_tail(std::string_view bytes) {
  // A truncated sequence is at most 3 bytes long, so only the last 3 lead positions matter.
  const size_t n = bytes.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t i = n - back;
    const auto b = static_cast<uint8_t>(bytes[i]);
    if (b < 0x80) return 0;
    if (b >= 0xC0) {
      const Step st = step(bytes, i);
      return st.truncated ? back : 0;
    }
  }
  return 0;
}

void append_code_point(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace servelab::utf8

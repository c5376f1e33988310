#pragma once
// UTF-8 helpers shared by the tokenizers and the stream decoder. The replacement rule is the one
// of Rust's String::from_utf8_lossy and Python's bytes.decode("utf-8", "replace") (each maximal
// subpart of an ill-formed sequence becomes one U+FFFD), so decoded text equals Hugging Face's.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace servelab::utf8 {

// Byte offset of the first ill-formed or truncated sequence, or nullopt when `text` is valid UTF-8.
std::optional<size_t> first_invalid(std::string_view text);

// Throws TokenizerError("<what>: invalid UTF-8 at byte offset N ...") when `text` is not valid UTF-8.
void check_valid(std::string_view text, std::string_view what);

// Appends `bytes` to `out`, replacing ill-formed sequences with U+FFFD.
void append_lossy(std::string& out, std::string_view bytes);
std::string lossy(std::string_view bytes);

// Length of the trailing part of `bytes` that is a valid but incomplete UTF-8 sequence (0 to 3):
// bytes that a following token could still complete into a character.
size_t incomplete_tail(std::string_view bytes);

// Appends the UTF-8 encoding of code point `cp` (which must be a Unicode scalar value).
void append_code_point(std::string& out, char32_t cp);

}  // namespace servelab::utf8

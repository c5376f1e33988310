#pragma once
// Regular expressions through PCRE2 (Perl/Python syntax, as PEFT's target_modules use), for code
// that must not depend on std::regex (slow, and GCC 12 warns inside it under sanitizers).
#include <optional>
#include <string>
#include <vector>

namespace servelab {

// Whether the whole text matches (Python's re.fullmatch). InputError naming the pattern when it
// does not compile.
bool regex_full_match(const std::string& pattern, const std::string& text);

// The first match anywhere in text: group 0 (the match) then each capture group ("" for a group
// that took no part); nullopt when nothing matches.
std::optional<std::vector<std::string>> regex_search(const std::string& pattern, const std::string& text);

}  // namespace servelab

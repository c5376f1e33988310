#include "util/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "util/errors.h"

namespace servelab {

namespace {

struct Compiled {
  std::unique_ptr<pcre2_code, decltype(&pcre2_code_free)> code{nullptr, pcre2_code_free};
};

Compiled compile(const std::string& pattern, uint32_t options) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  Compiled c;
  c.code.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             options | PCRE2_UTF, &err, &offset, nullptr));
  if (!c.code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw InputError("invalid regular expression '" + pattern + "' at offset " + std::to_string(offset) +
                     ": " + reinterpret_cast<const char*>(msg));
  }
  return c;
}

}  // namespace

bool regex_full_match(const std::string& pattern, const std::string& text) {
  Compiled c = compile(pattern, PCRE2_ANCHORED | PCRE2_ENDANCHORED);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(c.code.get(), nullptr), pcre2_match_data_free);
  return pcre2_match(c.code.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, md.get(),
                     nullptr) >= 0;
}

std::optional<std::vector<std::string>> regex_search(const std::string& pattern, const std::string& text) {
  Compiled c = compile(pattern, 0);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(c.code.get(), nullptr), pcre2_match_data_free);
  const int rc = pcre2_match(c.code.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0,
                             md.get(), nullptr);
  if (rc < 0) return std::nullopt;
  uint32_t groups = 0;
  pcre2_pattern_info(c.code.get(), PCRE2_INFO_CAPTURECOUNT, &groups);
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
  std::vector<std::string> out;
  for (uint32_t g = 0; g <= groups; ++g) {
    if (ov[2 * g] == PCRE2_UNSET) {
      out.emplace_back();
    } else {
      out.push_back(text.substr(ov[2 * g], ov[2 * g + 1] - ov[2 * g]));
    }
  }
  return out;
}

}  // namespace servelab

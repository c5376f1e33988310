#pragma once
// A tokenizer for the load generator's suites (test_load_generator, test_load_readers): one token
// per space-separated word; ids index a small vocabulary (unknown words share an id).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "util/errors.h"

namespace servelab::test {

class WordTokenizer final : public Tokenizer {
 public:
  WordTokenizer() {
    words_ = {"<eos>", "<unk>"};
    for (const char* w :
         {"alpha",  "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa",
          "lambda", "mu",   "nu",    "xi",    "omicron", "pi",   "rho", "sigma", "tau",  "upsilon"})
      words_.push_back(w);
  }
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    std::istringstream in{std::string(text)};
    for (std::string w; in >> w;) {
      const auto it = std::find(words_.begin(), words_.end(), w);
      ids.push_back(it == words_.end() ? 1 : static_cast<int32_t>(it - words_.begin()));
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += token_bytes(id);
    return out;
  }
  std::string token_bytes(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) throw TokenizerError("id out of range");
    return " " + words_[static_cast<size_t>(id)];
  }
  std::string token_display(int32_t id) const override { return token_bytes(id); }
  int32_t vocab_size() const override { return static_cast<int32_t>(words_.size()); }
  std::optional<int32_t> eos_id() const override { return 0; }
  std::string kind() const override { return "words"; }

 private:
  std::vector<std::string> words_;
};

}  // namespace servelab::test

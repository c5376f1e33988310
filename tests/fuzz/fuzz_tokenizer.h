#pragma once
// A tokenizer for the fuzzers that need one without reading files: bytes, ChatML's control tokens
// (matched whole, as the real tokenizers match added tokens), a few multi-byte JSON pieces (so
// that the grammar matcher walks a token trie, not only single bytes), and SmolLM2's chat template.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace servelab::fuzz {

// ids 0-255: the bytes; 256-258 the control tokens (257 is eos); then kPieces, never produced by
// encode() (as a real BPE may spell a text several ways).
class ByteTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    utf8::check_valid(text, "the fuzz prompt");
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size();) {
      bool matched = false;
      for (size_t c = 0; c < kControl.size(); ++c) {
        if (text.substr(i, kControl[c].size()) == kControl[c]) {
          ids.push_back(static_cast<int32_t>(256 + c));
          i += kControl[c].size();
          matched = true;
          break;
        }
      }
      if (!matched) ids.push_back(static_cast<uint8_t>(text[i++]));
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string out;
    for (int32_t id : ids) out += token_bytes(id);
    return out;
  }
  std::string token_bytes(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) throw TokenizerError("token id out of range");
    if (id < 256) return std::string(1, static_cast<char>(id));
    const size_t i = static_cast<size_t>(id - 256);
    return i < kControl.size() ? kControl[i] : kPieces[i - kControl.size()];
  }
  std::string token_display(int32_t id) const override { return token_bytes(id); }
  int32_t vocab_size() const override { return static_cast<int32_t>(256 + kControl.size() + kPieces.size()); }
  std::optional<int32_t> eos_id() const override { return 257; }
  std::optional<int32_t> bos_id() const override { return 256; }
  const std::string& chat_template() const override { return kTemplate; }
  std::string kind() const override { return "fuzz-bytes"; }

 private:
  const std::vector<std::string> kControl = {"<|im_start|>", "<|im_end|>", "<|endoftext|>"};
  const std::vector<std::string> kPieces = {"{\"",       "\":",  "\",\"",    "\"}",          "},",   "[{",
                                            "}]",        "true", "false",    "null",         "name", "age",
                                            "\"name\":", "  ",   "\n",       "00",           "1.",   "e+",
                                            "\\u",       "\\\"", "\xc3\xa9", "\xf0\x9f\x98", "\x80"};
  const std::string kTemplate =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
      "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n' "
      "}}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
};

}  // namespace servelab::fuzz

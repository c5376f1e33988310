#include "tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <set>

#include "tokenizer/gpt2_bpe_tokenizer.h"
#include "util/errors.h"

namespace servelab {

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufFile& f) {
  const std::string model = f.find_string("tokenizer.ggml.model").value_or("");
  if (model.empty()) throw TokenizerError(f.path() + ": no tokenizer (tokenizer.ggml.model is missing)");
  if (model != "gpt2")
    throw TokenizerError(
        f.path() + ": tokenizer.ggml.model \"" + model +
        "\" is not supported from GGUF (supported: gpt2, the byte-level BPE of GPT-2, Llama 3, "
        "SmolLM and Qwen 2)");
  BpeParts p;
  p.source = f.path();
  p.tokens = f.get_string_array("tokenizer.ggml.tokens");
  p.merges = f.get_string_array("tokenizer.ggml.merges");
  if (f.has("tokenizer.ggml.token_type")) {
    for (int64_t t : f.get_int_array("tokenizer.ggml.token_type"))
      p.token_types.push_back(static_cast<int32_t>(t));
  }
  p.pre = f.find_string("tokenizer.ggml.pre").value_or("default");
  auto id = [&](const char* key) -> std::optional<int32_t> {
    const std::optional<int64_t> v = f.find_int(key);
    if (!v) return std::nullopt;
    if (*v < 0 || *v >= static_cast<int64_t>(p.tokens.size()))
      throw TokenizerError(f.path() + ": " + key + " " + std::to_string(*v) +
                           " is outside the vocabulary of " + std::to_string(p.tokens.size()));
    return static_cast<int32_t>(*v);
  };
  p.bos_id = id("tokenizer.ggml.bos_token_id");
  p.eos_id = id("tokenizer.ggml.eos_token_id");
  p.unk_id = id("tokenizer.ggml.unknown_token_id");
  p.pad_id = id("tokenizer.ggml.padding_token_id");
  if (f.has("tokenizer.ggml.add_bos_token")) p.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  p.chat_template = f.find_string("tokenizer.chat_template").value_or("");
  // Generation also ends on the end-of-turn tokens the vocabulary has as control tokens, as
  // llama.cpp's end-of-generation set does (SmolLM2's eos is <|im_end|>; <|endoftext|> ends too).
  std::set<int32_t> stops;
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (const auto s = id(key)) stops.insert(*s);
  static const char* kEndOfTurn[] = {"<|endoftext|>", "<|im_end|>",    "<|eot_id|>", "<|eom_id|>",
                                     "<|end|>",       "<end_of_turn>", "</s>"};
  for (size_t i = 0; i < p.tokens.size(); ++i) {
    const bool control = i < p.token_types.size() && p.token_types[i] == 3;
    if (control &&
        std::find(std::begin(kEndOfTurn), std::end(kEndOfTurn), p.tokens[i]) != std::end(kEndOfTurn))
      stops.insert(static_cast<int32_t>(i));
  }
  p.extra_stop_ids.assign(stops.begin(), stops.end());
  return Gpt2BpeTokenizer::from_parts(p);
}

}  // namespace servelab

#include "tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <set>

#include "tokenizer/gpt2_bpe_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "util/errors.h"

namespace servelab {

namespace {

// An id a tokenizer.ggml.* key gives, checked against the vocabulary.
std::optional<int32_t> token_id(const GgufFile& f, const char* key, size_t vocabulary) {
  const std::optional<int64_t> v = f.find_int(key);
  if (!v) return std::nullopt;
  if (*v < 0 || *v >= static_cast<int64_t>(vocabulary))
    throw TokenizerError(f.path() + ": " + key + " " + std::to_string(*v) + " is outside the vocabulary of " +
                         std::to_string(vocabulary));
  return static_cast<int32_t>(*v);
}

// Generation also ends on the end-of-turn tokens the vocabulary has as control tokens, as
// llama.cpp's end-of-generation set does (SmolLM2's eos is <|im_end|>; <|endoftext|> ends too).
std::vector<int32_t> end_of_turn_ids(const GgufFile& f, const std::vector<std::string>& tokens,
                                     const std::vector<int32_t>& types) {
  std::set<int32_t> stops;
  for (const char* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (const auto s = token_id(f, key, tokens.size())) stops.insert(*s);
  static const char* kEndOfTurn[] = {"<|endoftext|>", "<|im_end|>",    "<|eot_id|>", "<|eom_id|>",
                                     "<|end|>",       "<end_of_turn>", "</s>"};
  for (size_t i = 0; i < tokens.size(); ++i) {
    const bool control = i < types.size() && types[i] == 3;
    if (control && std::find(std::begin(kEndOfTurn), std::end(kEndOfTurn), tokens[i]) != std::end(kEndOfTurn))
      stops.insert(static_cast<int32_t>(i));
  }
  return {stops.begin(), stops.end()};
}

std::vector<int32_t> token_types(const GgufFile& f) {
  std::vector<int32_t> types;
  if (f.has("tokenizer.ggml.token_type"))
    for (int64_t t : f.get_int_array("tokenizer.ggml.token_type")) types.push_back(static_cast<int32_t>(t));
  return types;
}

// tokenizer.ggml.model "llama": a SentencePiece vocabulary (pieces, scores, types).
std::unique_ptr<Tokenizer> load_sentencepiece(const GgufFile& f) {
  SentencePieceVocabulary v;
  v.source = f.path();
  v.pieces = f.get_string_array("tokenizer.ggml.tokens");
  if (!f.has("tokenizer.ggml.scores"))
    throw TokenizerError(f.path() +
                         ": tokenizer.ggml.scores is missing (a SentencePiece vocabulary needs them)");
  for (double s : f.get_float_array("tokenizer.ggml.scores")) v.scores.push_back(static_cast<float>(s));
  v.types = token_types(f);
  if (v.types.empty())
    throw TokenizerError(f.path() +
                         ": tokenizer.ggml.token_type is missing (a SentencePiece vocabulary needs them)");
  v.unk_id = token_id(f, "tokenizer.ggml.unknown_token_id", v.pieces.size());
  v.bos_id = token_id(f, "tokenizer.ggml.bos_token_id", v.pieces.size());
  v.eos_id = token_id(f, "tokenizer.ggml.eos_token_id", v.pieces.size());
  if (f.has("tokenizer.ggml.add_space_prefix"))
    v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix");
  TokenizerConfig config;
  config.source = f.path();
  if (f.has("tokenizer.ggml.add_bos_token")) config.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  config.chat_template = f.find_string("tokenizer.chat_template").value_or("");
  config.eos_ids = end_of_turn_ids(f, v.pieces, v.types);
  return SentencePieceTokenizer::from_vocabulary(v, config);
}

}  // namespace

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const GgufFile& f) {
  const std::string model = f.find_string("tokenizer.ggml.model").value_or("");
  if (model.empty()) throw TokenizerError(f.path() + ": no tokenizer (tokenizer.ggml.model is missing)");
  if (model == "llama") return load_sentencepiece(f);
  if (model != "gpt2")
    throw TokenizerError(
        f.path() + ": tokenizer.ggml.model \"" + model +
        "\" is not supported from GGUF (supported: gpt2, the byte-level BPE of GPT-2, Llama 3, "
        "SmolLM and Qwen 2; llama, the SentencePiece vocabulary of Llama 2, TinyLlama and "
        "Mistral)");
  BpeParts p;
  p.source = f.path();
  p.tokens = f.get_string_array("tokenizer.ggml.tokens");
  p.merges = f.get_string_array("tokenizer.ggml.merges");
  p.token_types = token_types(f);
  p.pre = f.find_string("tokenizer.ggml.pre").value_or("default");
  p.bos_id = token_id(f, "tokenizer.ggml.bos_token_id", p.tokens.size());
  p.eos_id = token_id(f, "tokenizer.ggml.eos_token_id", p.tokens.size());
  p.unk_id = token_id(f, "tokenizer.ggml.unknown_token_id", p.tokens.size());
  p.pad_id = token_id(f, "tokenizer.ggml.padding_token_id", p.tokens.size());
  if (f.has("tokenizer.ggml.add_bos_token")) p.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  p.chat_template = f.find_string("tokenizer.chat_template").value_or("");
  p.extra_stop_ids = end_of_turn_ids(f, p.tokens, p.token_types);
  return Gpt2BpeTokenizer::from_parts(p);
}

}  // namespace servelab

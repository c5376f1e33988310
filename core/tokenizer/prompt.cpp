#include "tokenizer/prompt.h"

#include "util/errors.h"

namespace servelab {

std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text) {
  std::vector<int32_t> ids = tokenizer.encode(text);
  if (tokenizer.add_bos() && tokenizer.bos_id() && (ids.empty() || ids.front() != *tokenizer.bos_id()))
    ids.insert(ids.begin(), *tokenizer.bos_id());
  return ids;
}

std::vector<int32_t> tokens_of_length(const Tokenizer& tokenizer, const std::string& text, int64_t n) {
  const std::vector<int32_t> base = encode_prompt(tokenizer, text);
  if (base.empty()) throw InputError("the prompt is empty");
  std::vector<int32_t> out;
  while (static_cast<int64_t>(out.size()) < n) out.push_back(base[out.size() % base.size()]);
  return out;
}

std::string chat_prompt(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const ChatTemplateOptions& options) {
  if (tokenizer.chat_template().empty())
    throw TokenizerError(
        "the model has no chat template (tokenizer_config.json chat_template or GGUF "
        "tokenizer.chat_template): give the prompt as plain text instead");
  auto spelling = [&](std::optional<int32_t> id) { return id ? tokenizer.token_bytes(*id) : std::string(); };
  const ChatTemplate chat = ChatTemplate::from_jinja(tokenizer.chat_template(), spelling(tokenizer.bos_id()),
                                                     spelling(tokenizer.eos_id()));
  return chat.format(messages, add_generation_prompt, options);
}

std::string chat_prompt(const Tokenizer& tokenizer, const std::string& user_message,
                        const std::string& system_message) {
  std::vector<ChatMessage> messages;
  if (!system_message.empty()) messages.push_back({"system", system_message});
  messages.push_back({"user", user_message});
  return chat_prompt(tokenizer, messages);
}

}  // namespace servelab

#pragma once
// A multi-turn chat: a system prompt and alternating user/assistant turns, formatted through the
// model's own chat template (the server's /v1/chat/completions formats its messages the same way,
// through chat_prompt), fitted to the context, and kept as OpenAI messages or Markdown. Torch-free:
// the GUI and the CLI include it.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace servelab {

struct Conversation {
  std::string system;              // empty: the template's own default (SmolLM2 inserts one)
  std::vector<ChatMessage> turns;  // "user" and "assistant", alternating, a user turn first

  // InputError when the turn would break the alternation (two user turns in a row, an answer
  // with no question before it).
  void add_user(std::string text);
  void add_assistant(std::string text);
  // Whether the last turn is a user turn waiting for its answer.
  bool awaiting_answer() const { return !turns.empty() && turns.back().role == "user"; }
  // The messages the template sees: the system message (when set), then the turns.
  std::vector<ChatMessage> messages() const;
};

// The prompt of a conversation whose last turn is the user's, fitted to the context.
//
// The policy when the transcript outgrows the context: the oldest whole exchanges (a user turn and
// the assistant's answer to it) are left out, one at a time, until the prompt plus the answer's
// budget fits. The system prompt and the newest user turn are never left out; when those alone
// do not fit, that is an InputError naming the numbers.
struct ChatPrompt {
  std::string text;          // the template's rendering, ending where the answer begins
  std::vector<int32_t> ids;  // text's tokens, as the server encodes them
  int64_t dropped_exchanges = 0;
  int64_t dropped_messages = 0;  // user and assistant turns left out, together
  int64_t context = 0;           // the model's context, in tokens
  int64_t answer_budget = 0;     // tokens kept free for the answer
  // "left out the 2 oldest exchanges (4 turns) to fit ...": empty when nothing was left out.
  std::string dropped_note() const;
};

ChatPrompt fit_chat_prompt(const Tokenizer& tokenizer, const Conversation& conversation, int64_t context,
                           int64_t answer_budget);

// The conversation as OpenAI chat messages: [{"role": "system", "content": ...}, {"role": "user", ...}].
nlohmann::json conversation_to_json(const Conversation& conversation);
// A conversation from OpenAI chat messages: a list, or an object with a "messages" list. InputError
// naming the message and field at fault: not a list, a message not an object, a role other than
// system (first only), user or assistant, a content that is not a string, turns not alternating.
Conversation conversation_from_json(const nlohmann::json& messages);
// The same from JSON text (InputError naming the parse error's place).
Conversation conversation_from_json_text(const std::string& text);
// A readable transcript: a title, the system prompt, then each turn under its speaker's heading.
std::string conversation_to_markdown(const Conversation& conversation);

}  // namespace servelab

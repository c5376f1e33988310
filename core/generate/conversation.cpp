#include "generate/conversation.h"

#include "tokenizer/prompt.h"
#include "util/errors.h"

namespace servelab {

namespace {

std::string plural(int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

const char* json_kind(const nlohmann::json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "a list";
  return "an object";
}

}  // namespace

void Conversation::add_user(std::string text) {
  if (awaiting_answer())
    throw InputError("the conversation already ends with a user turn: answer it before the next one");
  turns.push_back({"user", std::move(text)});
}

void Conversation::add_assistant(std::string text) {
  if (!awaiting_answer()) throw InputError("an assistant turn must answer a user turn");
  turns.push_back({"assistant", std::move(text)});
}

std::vector<ChatMessage> Conversation::messages() const {
  std::vector<ChatMessage> out;
  if (!system.empty()) out.push_back({"system", system});
  out.insert(out.end(), turns.begin(), turns.end());
  return out;
}

std::string ChatPrompt::dropped_note() const {
  if (dropped_exchanges == 0) return {};
  return "left out the " + plural(dropped_exchanges, "oldest exchange", "oldest exchanges") + " (" +
         plural(dropped_messages, "turn", "turns") + ") so that the prompt (" + std::to_string(ids.size()) +
         " tokens) and the answer (up to " + std::to_string(answer_budget) + ") fit the context of " +
         std::to_string(context) + " tokens";
}

ChatPrompt fit_chat_prompt(const Tokenizer& tokenizer, const Conversation& conversation, int64_t context,
                           int64_t answer_budget) {
  if (!conversation.awaiting_answer())
    throw InputError("the conversation must end with a user turn for the model to answer");
  ChatPrompt p;
  p.context = context;
  p.answer_budget = answer_budget;
  Conversation kept = conversation;
  while (true) {
    p.text = chat_prompt(tokenizer, kept.messages());
    p.ids = tokenizer.encode(p.text);
    const auto needed = static_cast<int64_t>(p.ids.size());
    if (needed + answer_budget <= context) return p;
    if (kept.turns.size() == 1)
      throw InputError(
          "the newest user turn needs " + std::to_string(needed) +
          " prompt tokens with the system prompt and the template's markup, but the context of " +
          std::to_string(context) + " tokens leaves " + std::to_string(context - answer_budget) +
          " after the " + std::to_string(answer_budget) +
          " kept for the answer: shorten the turn or the system prompt, or ask for fewer new tokens");
    // The oldest exchange: a user turn and its answer (the turns alternate from a user turn).
    kept.turns.erase(kept.turns.begin(), kept.turns.begin() + 2);
    ++p.dropped_exchanges;
    p.dropped_messages += 2;
  }
}

nlohmann::json conversation_to_json(const Conversation& conversation) {
  nlohmann::json out = nlohmann::json::array();
  for (const ChatMessage& m : conversation.messages())
    out.push_back({{"role", m.role}, {"content", m.content}});
  return out;
}

Conversation conversation_from_json(const nlohmann::json& j) {
  const nlohmann::json* list = &j;
  if (j.is_object()) {
    if (!j.contains("messages")) throw InputError("a conversation object needs a \"messages\" list");
    list = &j["messages"];
  }
  if (!list->is_array())
    throw InputError(std::string("messages must be a list of {role, content}, got ") + json_kind(*list));
  Conversation c;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& m = (*list)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw InputError(where + " must be an object, got " + json_kind(m));
    if (!m.contains("role") || !m["role"].is_string())
      throw InputError(where + ".role must be a string (system, user or assistant)" +
                       (m.contains("role") ? std::string(", got ") + json_kind(m["role"]) : std::string()));
    if (!m.contains("content") || !m["content"].is_string())
      throw InputError(
          where + ".content must be a string" +
          (m.contains("content") ? std::string(", got ") + json_kind(m["content"]) : std::string()));
    const std::string role = m["role"].get<std::string>();
    std::string content = m["content"].get<std::string>();
    if (role == "system") {
      if (i != 0) throw InputError(where + " is a system message: only the first message may be one");
      c.system = std::move(content);
    } else if (role == "user" || role == "assistant") {
      const std::string expected = c.awaiting_answer() ? "assistant" : "user";
      if (role != expected)
        throw InputError(where + ".role is " + role + " where the turns alternating from a user turn need " +
                         expected);
      c.turns.push_back({role, std::move(content)});
    } else {
      throw InputError(where + ".role must be system, user or assistant, got \"" + role + "\"");
    }
  }
  return c;
}

Conversation conversation_from_json_text(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(std::string("the conversation is not valid JSON: ") + e.what());
  }
  return conversation_from_json(j);
}

std::string conversation_to_markdown(const Conversation& conversation) {
  std::string out = "# Conversation\n";
  if (!conversation.system.empty()) out += "\n## System\n\n" + conversation.system + "\n";
  for (const ChatMessage& m : conversation.turns)
    out += std::string("\n## ") + (m.role == "user" ? "User" : "Assistant") + "\n\n" + m.content + "\n";
  return out;
}

}  // namespace servelab

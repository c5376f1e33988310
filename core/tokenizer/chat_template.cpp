#include "tokenizer/chat_template.h"

#include <cstdint>
#include <string_view>

#include "tokenizer/utf8.h"
#include "util/errors.h"

namespace servelab {
namespace {

bool has(const std::string& text, std::string_view marker) { return text.find(marker) != std::string::npos; }

// Python's str.isspace() for one code point (what Jinja's trim filter and str.strip() remove):
// the characters with bidirectional type WS, B or S or general category Zs.
bool python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Decodes the code point at `i` of valid UTF-8 and its length.
char32_t code_point_at(std::string_view s, size_t i, size_t& len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    len = 1;
    return b0;
  }
  len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
  char32_t cp = b0 & (len == 4 ? 0x07 : len == 3 ? 0x0F : 0x1F);
  for (size_t k = 1; k < len && i + k < s.size(); ++k)
    cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  return cp;
}

// Jinja's `| trim` and Python's str.strip(): Unicode whitespace off both ends (format() has
// checked that the text is valid UTF-8).
std::string python_strip(const std::string& text) {
  size_t begin = 0, len = 0;
  while (begin < text.size() && python_space(code_point_at(text, begin, len))) begin += len;
  size_t end = text.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    if (!python_space(code_point_at(text, start, len))) break;
    end = start;
  }
  return text.substr(begin, end - begin);
}

[[noreturn]] void template_raises(const std::string& message) {
  throw InputError("chat template: " + message);
}

const char* const kAlternate = "Conversation roles must alternate user/assistant/user/assistant/...";
const char* const kMistralAlternate =
    "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...";
const char* const kMistralRoles =
    "Only user and assistant roles are supported, with the exception of an initial optional system message!";

// The templates' check `(message['role'] == 'user') != (loop.index0 % 2 == 0)` over the messages
// from `first` on.
void check_alternation(const std::vector<ChatMessage>& messages, size_t first, const char* message) {
  for (size_t i = first; i < messages.size(); ++i) {
    if ((messages[i].role == "user") != ((i - first) % 2 == 0)) template_raises(message);
  }
}

// The default system message a ChatML template writes when the first message is not a system one:
// the body of a string literal '<|im_start|>system\n...<|im_end|>' in the template text, Jinja
// escapes undone. Only a literal with nothing but text between the two markers counts.
std::string chatml_default_system(const std::string& jinja) {
  static constexpr std::string_view kOpen = "<|im_start|>system";
  static constexpr std::string_view kClose = "<|im_end|>";
  for (size_t at = jinja.find(kOpen); at != std::string::npos; at = jinja.find(kOpen, at + 1)) {
    if (at == 0 || (jinja[at - 1] != '\'' && jinja[at - 1] != '"')) continue;
    const char quote = jinja[at - 1];
    size_t i = at + kOpen.size();
    if (jinja.compare(i, 1, "\n") == 0) {
      i += 1;
    } else if (jinja.compare(i, 2, "\\n") == 0) {
      i += 2;
    } else {
      continue;
    }
    const size_t close = jinja.find(kClose, i);
    if (close == std::string::npos) continue;
    std::string body;
    bool plain = true;
    for (size_t k = i; k < close && plain; ++k) {
      const char c = jinja[k];
      if (c == quote) {
        plain = false;  // the literal ended before <|im_end|>: an expression follows
      } else if (c == '\\' && k + 1 < close) {
        const char e = jinja[++k];
        body += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      } else {
        body += c;
      }
    }
    if (plain && !body.empty()) return body;
  }
  return {};
}

// How a template starts, on one line, for messages.
std::string template_start(const std::string& jinja) {
  std::string out;
  for (const char c : jinja.substr(0, 80)) {
    if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  if (jinja.size() > 80) out += "...";
  return out;
}

}  // namespace

std::optional<ChatFamily> detect_chat_family(const std::string& t) {
  // llama.cpp's order; families we do not render give nullopt where llama.cpp takes them.
  if (has(t, "<|im_start|>")) {
    if (has(t, "<|im_sep|>") || has(t, "<end_of_utterance>")) return std::nullopt;  // Phi-4, SmolVLM
    return ChatFamily::ChatML;
  }
  if (t.starts_with("mistral") || has(t, "[INST]")) {
    if (has(t, "[SYSTEM_PROMPT]") || has(t, "' [INST] ' + system_message") || has(t, "[AVAILABLE_TOOLS]")) {
      return ChatFamily::Mistral;
    }
    return ChatFamily::Llama2;
  }
  if (has(t, "<|assistant|>") && has(t, "<|end|>")) {
    // Phi-3's published templates (user, assistant and system turns spelled out); llama.cpp's
    // generic spelling ('<|' + role + '|>', any role) and others are not rendered here.
    if (has(t, "'<|user|>\\n' + message['content'] + '<|end|>\\n'") &&
        has(t, "'<|assistant|>\\n' + message['content'] + '<|end|>\\n'"))
      return ChatFamily::Phi3;
    return std::nullopt;
  }
  if (has(t, "[gMASK]<sop>")) return std::nullopt;  // ChatGLM 4
  if (has(t, "<|user|>") &&
      (has(t, "<|endoftext|>") || has(t, "'<|user|>\\n' + message['content'] + eos_token") ||
       has(t, "'<|user|>\n' + message['content'] + eos_token"))) {
    return ChatFamily::Zephyr;
  }
  if (has(t, "<|assistant|>") && has(t, "<|user|>")) return std::nullopt;  // Falcon 3, GLM-Edge
  if (has(t, "<|{{ item['role'] }}|>") && has(t, "<|begin_of_image|>")) return std::nullopt;
  if (has(t, "bos_token + message['role']")) return std::nullopt;  // Monarch
  if (has(t, "<start_of_turn>")) return ChatFamily::Gemma;
  for (const char* other :
       {"'\\n\\nAssistant: ' + eos_token", "GPT4 Correct ", "### Instruction:", "<|START_OF_TURN_TOKEN|>"}) {
    if (has(t, other)) return std::nullopt;  // Orion, OpenChat, DeepSeek Coder, Command-R
  }
  if (has(t, "USER: ") && has(t, "ASSISTANT: ")) return std::nullopt;  // Vicuna
  if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) return ChatFamily::Llama3;
  return std::nullopt;
}

const char* chat_family_name(ChatFamily family) {
  switch (family) {
    case ChatFamily::ChatML:
      return "chatml";
    case ChatFamily::Llama2:
      return "llama2";
    case ChatFamily::Llama3:
      return "llama3";
    case ChatFamily::Zephyr:
      return "zephyr";
    case ChatFamily::Gemma:
      return "gemma";
    case ChatFamily::Mistral:
      return "mistral";
    case ChatFamily::Phi3:
      return "phi3";
  }
  return "?";
}

ChatTemplate::ChatTemplate(ChatFamily family, Variant variant, std::string bos, std::string eos,
                           std::string default_system)
    : family_(family),
      variant_(variant),
      bos_(std::move(bos)),
      eos_(std::move(eos)),
      default_system_(std::move(default_system)) {}

ChatTemplate ChatTemplate::from_jinja(const std::string& jinja, std::string bos_token,
                                      std::string eos_token) {
  const auto refuse = [&](const std::string& why) -> ChatTemplate {
    throw TokenizerError("chat template not recognised" + (why.empty() ? std::string() : " (" + why + ")") +
                         " (starts: " + template_start(jinja) + ")");
  };
  const auto family = detect_chat_family(jinja);
  if (!family) return refuse("");
  const std::string& t = jinja;
  const auto make = [&](Variant v, std::string default_system = {}) {
    return ChatTemplate(*family, v, std::move(bos_token), std::move(eos_token), std::move(default_system));
  };
  switch (*family) {
    case ChatFamily::ChatML:
      // Qwen3's template: reasoning blocks in the assistant's turns and the enable_thinking switch.
      if (has(t, "enable_thinking") && has(t, "last_query_index") && has(t, "reasoning_content"))
        return make(Variant::Qwen3);
      if (has(t, "<think>")) return refuse("a ChatML template with reasoning blocks other than Qwen3's");
      return make(Variant::ChatML, chatml_default_system(t));
    case ChatFamily::Llama2: {
      // llama.cpp's variant markers: Llama 2 chat has all three, Mistral's first template none.
      const int markers = has(t, "<<SYS>>") + has(t, "content.strip()") + has(t, "bos_token + '[INST]");
      if (markers == 3) return make(Variant::Llama2Chat);
      if (markers == 0) return make(Variant::Llama2Inst);
      return refuse("a Llama 2 variant with only some of <<SYS>>, content.strip(), bos_token + '[INST]'");
    }
    case ChatFamily::Llama3:
      if (has(t, "Cutting Knowledge Date"))
        return refuse("Llama 3.1-style template with a dated system header");
      return make(Variant::Llama3);
    case ChatFamily::Zephyr:
      return make(Variant::Zephyr);
    case ChatFamily::Gemma:
      if (has(t, "first_user_prefix")) return make(Variant::Gemma3);
      if (has(t, "System role not supported")) return make(Variant::Gemma);
      return refuse("a Gemma variant that neither refuses system messages nor merges them");
    case ChatFamily::Mistral:
      if (has(t, "[SYSTEM_PROMPT]")) {
        if (has(t, "[SYSTEM_PROMPT] ")) return make(Variant::MistralV7);
        return refuse("Mistral v7-tekken");
      }
      if (has(t, " [INST]")) return make(Variant::MistralV1);
      if (has(t, "\"[INST]\"")) return make(Variant::MistralV3Tekken);
      return make(Variant::MistralV3);
    case ChatFamily::Phi3: {
      ChatTemplate phi = make(Variant::Phi3);
      phi.skips_empty_system_ = has(t, "message['role'] == 'system' and message['content']");
      return phi;
    }
  }
  return refuse("");
}

const char* ChatTemplate::variant() const {
  switch (variant_) {
    case Variant::ChatML:
      return "chatml";
    case Variant::Llama2Chat:
      return "llama2-chat";
    case Variant::Llama2Inst:
      return "llama2-inst";
    case Variant::Llama3:
      return "llama3";
    case Variant::Zephyr:
      return "zephyr";
    case Variant::Gemma:
      return "gemma";
    case Variant::Gemma3:
      return "gemma3";
    case Variant::MistralV1:
      return "mistral-v1";
    case Variant::MistralV3:
      return "mistral-v3";
    case Variant::MistralV3Tekken:
      return "mistral-v3-tekken";
    case Variant::MistralV7:
      return "mistral-v7";
    case Variant::Phi3:
      return "phi3";
    case Variant::Qwen3:
      return "qwen3";
  }
  return "?";
}

std::string ChatTemplate::format(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const ChatTemplateOptions& options) const {
  if (messages.empty()) throw InputError("chat template: no messages to format");
  for (const ChatMessage& m : messages) {
    utf8::check_valid(m.role, "chat message role");
    utf8::check_valid(m.content, "chat message content");
  }
  if (options.enable_thinking && !has_thinking_switch())
    throw InputError(std::string("enable_thinking: this model's chat template (") + variant() +
                     ") has no thinking switch; only Qwen3's has");
  std::string out;
  const bool leading_system = messages.front().role == "system";
  switch (variant_) {
    case Variant::ChatML:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0 && !leading_system && !default_system_.empty()) {
          out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
        }
        out += "<|im_start|>" + messages[i].role + "\n" + messages[i].content + "<|im_end|>\n";
      }
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;

    case Variant::Llama2Chat: {
      // meta-llama/Llama-2-*-chat-hf: the system message goes inside the first user turn; every
      // user turn opens with bos; contents are stripped; no generation prompt.
      const size_t first = leading_system ? 1 : 0;
      check_alternation(messages, first, kAlternate);
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        std::string content = m.content;
        if (i == first && leading_system)
          content = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n" + m.content;
        if (m.role == "user") {
          out += bos_ + "[INST] " + python_strip(content) + " [/INST]";
        } else if (m.role == "assistant") {
          out += " " + python_strip(content) + " " + eos_;
        }
      }
      break;
    }

    case Variant::Llama2Inst:
      // mistralai/Mistral-7B-Instruct-v0.1/v0.2's first template: no system role at all.
      out += bos_;
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if ((m.role == "user") != (i % 2 == 0)) template_raises(kAlternate);
        if (m.role == "user") {
          out += "[INST] " + m.content + " [/INST]";
        } else if (m.role == "assistant") {
          out += m.content + eos_;
        } else {
          template_raises("Only user and assistant roles are supported!");
        }
      }
      break;

    case Variant::Llama3:
      for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0) out += bos_;
        out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" +
               python_strip(messages[i].content) + "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;

    case Variant::Phi3:
      // microsoft/Phi-3(.5)-mini-instruct: other roles are skipped; eos ends a conversation that asks
      // for no generation prompt.
      for (const ChatMessage& m : messages) {
        if (m.role == "system" && skips_empty_system_ && m.content.empty()) continue;
        if (m.role == "user" || m.role == "system" || m.role == "assistant") {
          out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
        }
      }
      out += add_generation_prompt ? "<|assistant|>\n" : eos_;
      break;

    case Variant::Zephyr:
      // HuggingFaceH4/zephyr-7b-beta: other roles are skipped; the generation prompt follows the
      // last message.
      for (const ChatMessage& m : messages) {
        if (m.role == "user" || m.role == "system" || m.role == "assistant") {
          out += "<|" + m.role + "|>\n" + m.content + eos_ + "\n";
        }
      }
      if (add_generation_prompt) out += "<|assistant|>\n";
      break;

    case Variant::Gemma:
    case Variant::Gemma3: {
      // google/gemma-7b-it refuses a system message; Gemma 3 puts it before the first user turn.
      out += bos_;
      std::string prefix;
      size_t first = 0;
      if (leading_system) {
        if (variant_ == Variant::Gemma) template_raises("System role not supported");
        prefix = messages[0].content + "\n\n";
        first = 1;
      }
      check_alternation(messages, first, kAlternate);
      for (size_t i = first; i < messages.size(); ++i) {
        const std::string role = messages[i].role == "assistant" ? "model" : messages[i].role;
        out += "<start_of_turn>" + role + "\n" + (i == first ? prefix : std::string()) +
               python_strip(messages[i].content) + "<end_of_turn>\n";
      }
      if (add_generation_prompt) out += "<start_of_turn>model\n";
      break;
    }

    case Variant::MistralV1:
    case Variant::MistralV3:
    case Variant::MistralV3Tekken: {
      // mistralai's v1 / v3 / v3-tekken templates: an optional leading system message goes into the
      // first (v1) or the last (v3) user turn; v1 spaces [INST] out, tekken not at all.
      const size_t first = leading_system ? 1 : 0;
      const bool v1 = variant_ == Variant::MistralV1, tekken = variant_ == Variant::MistralV3Tekken;
      if (!v1) {
        // v3 checks the roles of the whole conversation before writing anything; v1 checks each
        // message as it goes (below). v3's tool messages need tool-call ids we do not carry.
        for (size_t i = first; i < messages.size(); ++i) {
          if (messages[i].role == "tool" || messages[i].role == "tool_results") {
            throw InputError("chat template: tool messages are not supported by this renderer");
          }
        }
        check_alternation(messages, first, kMistralAlternate);
      }
      const std::string open = v1 ? " [INST] " : tekken ? "[INST]" : "[INST] ";
      const std::string close = v1 ? " [/INST]" : "[/INST]";
      out += bos_;
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (v1 && (m.role == "user") != ((i - first) % 2 == 0)) template_raises(kMistralAlternate);
        if (m.role == "user") {
          const bool with_system = leading_system && (v1 ? i == first : i + 1 == messages.size());
          out += open + (with_system ? messages[0].content + "\n\n" : std::string()) + m.content + close;
        } else if (m.role == "assistant") {
          out += v1       ? " " + m.content + eos_
                 : tekken ? m.content + eos_
                          : " " + python_strip(m.content) + eos_;
        } else {
          template_raises(kMistralRoles);
        }
      }
      break;
    }

    case Variant::MistralV7:
      out += bos_;
      for (const ChatMessage& m : messages) {
        if (m.role == "user") {
          out += "[INST] " + m.content + "[/INST]";
        } else if (m.role == "system") {
          out += "[SYSTEM_PROMPT] " + m.content + "[/SYSTEM_PROMPT]";
        } else if (m.role == "assistant") {
          out += " " + m.content + eos_;
        } else {
          template_raises("Only user, system and assistant roles are supported!");
        }
      }
      break;

    case Variant::Qwen3:
      return format_qwen3(messages, add_generation_prompt, options.enable_thinking.value_or(true));
  }
  return out;
}

// Qwen3's published template without tools: a system turn only when given; the assistant turns
// after the last user question keep their reasoning in a <think> block, earlier ones lose it; a
// tool's answers are wrapped in <tool_response> inside a user turn; other roles write nothing.
std::string ChatTemplate::format_qwen3(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                       bool enable_thinking) const {
  const auto strip_newlines = [](std::string_view v, bool left, bool right) {
    while (left && !v.empty() && v.front() == '\n') v.remove_prefix(1);
    while (right && !v.empty() && v.back() == '\n') v.remove_suffix(1);
    return std::string(v);
  };
  const auto is_tool_response = [](const std::string& c) {
    return c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
  };
  const int64_t n = static_cast<int64_t>(messages.size());
  int64_t last_query = n - 1;
  for (int64_t i = n - 1; i >= 0; --i) {
    const ChatMessage& m = messages[static_cast<size_t>(i)];
    if (m.role == "user" && !is_tool_response(m.content)) {
      last_query = i;
      break;
    }
  }
  std::string out;
  if (messages.front().role == "system")
    out += "<|im_start|>system\n" + messages.front().content + "<|im_end|>\n";
  for (int64_t i = 0; i < n; ++i) {
    const ChatMessage& m = messages[static_cast<size_t>(i)];
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      std::string content = m.content, reasoning;
      if (const size_t close = m.content.find("</think>"); close != std::string::npos) {
        const size_t last_close = m.content.rfind("</think>");
        content = strip_newlines(std::string_view(m.content).substr(last_close + 8), true, false);
        const std::string before = strip_newlines(std::string_view(m.content).substr(0, close), false, true);
        const size_t open = before.rfind("<think>");
        reasoning = strip_newlines(open == std::string::npos ? before : before.substr(open + 7), true, false);
      }
      if (i > last_query && (i == n - 1 || !reasoning.empty())) {
        out += "<|im_start|>assistant\n<think>\n" + strip_newlines(reasoning, true, true) + "\n</think>\n\n" +
               strip_newlines(content, true, false);
      } else {
        out += "<|im_start|>assistant\n" + content;
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || messages[static_cast<size_t>(i - 1)].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i == n - 1 || messages[static_cast<size_t>(i + 1)].role != "tool") out += "<|im_end|>\n";
    }
  }
  if (add_generation_prompt) {
    out += "<|im_start|>assistant\n";
    if (!enable_thinking) out += "<think>\n\n</think>\n\n";
  }
  return out;
}

}  // namespace servelab

#pragma once
// Chat templates without a Jinja interpreter: the template's family is recognised from marker
// strings the way llama.cpp's llm_chat_detect_template does, and the prompt is then built by code
// that renders the family's reference template byte for byte as transformers' apply_chat_template
// does (tests/oracle/make_chat_fixtures.py checks each one against it). A template of a known family
// but in a variant we do not render (Llama 3.1's dated system header, Mistral v7-tekken, ...) is
// refused rather than approximated.
#include <optional>
#include <string>
#include <vector>

namespace servelab {

enum class ChatFamily { ChatML, Llama2, Llama3, Zephyr, Gemma, Mistral, Phi3 };

struct ChatMessage {
  std::string role, content;
};

// The family of a Jinja chat template from its marker strings ("<|im_start|>", "[INST]",
// "<|start_header_id|>", "<|user|>", "<start_of_turn>"), in llama.cpp's order, so that templates
// llama.cpp gives to another family (Phi-3/4, SmolVLM, Falcon 3, GLM, Vicuna, ...) are not taken for
// ours. One deviation: HF's Zephyr template (eos_token after each turn) is Zephyr here; llama.cpp
// only knows the variant spelling <|endoftext|>. nullopt when not recognised.
std::optional<ChatFamily> detect_chat_family(const std::string& jinja);

// "chatml", "llama2", "llama3", "zephyr", "gemma", "mistral", "phi3".
const char* chat_family_name(ChatFamily family);

// What a chat template's variables beyond the messages may switch (vLLM's chat_template_kwargs).
struct ChatTemplateOptions {
  // Qwen3's thinking switch: false opens the assistant's turn with an empty <think></think> block,
  // so the model answers without reasoning first. nullopt: the template's default (thinking on).
  std::optional<bool> enable_thinking;
};

class ChatTemplate {
 public:
  // TokenizerError "chat template not recognised (starts: ...)" for a template of no known family,
  // or of a known family in a variant we do not render; never assumes ChatML silently. bos_token
  // and eos_token are the texts the template's bos_token and eos_token stand for.
  static ChatTemplate from_jinja(const std::string& jinja, std::string bos_token, std::string eos_token);

  ChatFamily family() const { return family_; }
  // The reference template format() renders: "chatml", "llama2-chat", "llama2-inst", "llama3",
  // "zephyr", "gemma", "gemma3", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7", "phi3",
  // "qwen3".
  const char* variant() const;

  // The prompt text for these messages, ending with the assistant turn's opening when
  // add_generation_prompt (templates that have none, Llama 2's and Mistral's, ignore it). The text
  // holds the template's special tokens as text (bos included where the template writes it), so
  // encode it with control tokens matched and do not add bos again. InputError for no messages, and
  // where the template raises (roles not alternating user/assistant, a system role it refuses, a
  // role it does not know), with the template's own message.
  // options.enable_thinking on a template without Qwen3's switch is an InputError naming it.
  std::string format(const std::vector<ChatMessage>& messages, bool add_generation_prompt = true,
                     const ChatTemplateOptions& options = {}) const;
  // Whether the template has Qwen3's enable_thinking switch.
  bool has_thinking_switch() const { return variant_ == Variant::Qwen3; }

  // The template's default system message: what it inserts when the first message is not a system
  // message (SmolLM2's "You are a helpful AI assistant named SmolLM, trained by Hugging Face", read
  // out of the template text); empty when it inserts none.
  const std::string& default_system() const { return default_system_; }

 private:
  enum class Variant {
    ChatML,
    Llama2Chat,
    Llama2Inst,
    Llama3,
    Zephyr,
    Gemma,
    Gemma3,
    MistralV1,
    MistralV3,
    MistralV3Tekken,
    MistralV7,
    Phi3,
    Qwen3
  };
  std::string format_qwen3(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                           bool enable_thinking) const;
  ChatTemplate(ChatFamily family, Variant variant, std::string bos, std::string eos,
               std::string default_system);

  ChatFamily family_;
  Variant variant_;
  std::string bos_, eos_, default_system_;
  bool skips_empty_system_ = false;  // Phi-3.5's template writes a system turn only when it has content
};

}  // namespace servelab

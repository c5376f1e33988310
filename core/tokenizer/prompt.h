#pragma once
// Prompts as a model expects them: token ids with the beginning-of-sequence token where the
// tokenizer asks for one, and chat messages in the model's own template.
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace servelab {

// encode(text), with bos_id() in front when add_bos() says the model was trained so (Llama 2,
// TinyLlama); GPT-2 and SmolLM2 add none.
std::vector<int32_t> encode_prompt(const Tokenizer& tokenizer, std::string_view text);

// encode_prompt(text)'s tokens repeated, or cut, to exactly n (a workload's prompt of a chosen
// length). InputError when the text has no token.
std::vector<int32_t> tokens_of_length(const Tokenizer& tokenizer, const std::string& text, int64_t n);

// One user turn (after an optional system message) in the tokenizer's chat template, ending
// where the assistant's answer begins. TokenizerError when the model has no chat template or one
// that is not recognised (never a silent ChatML).
std::string chat_prompt(const Tokenizer& tokenizer, const std::string& user_message,
                        const std::string& system_message = "");
// These messages in the tokenizer's chat template, ending where the assistant's answer begins when
// add_generation_prompt: the one formatting of the server's chat routes, the Generate tab's chat and
// `servelab-cli chat`. The same errors as above, and the template's own for messages it refuses.
std::string chat_prompt(const Tokenizer& tokenizer, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt = true, const ChatTemplateOptions& options = {});

}  // namespace servelab

#include "serve/openai_fields.h"

#include <nlohmann/json.hpp>

#include "serve/request_parser.h"

namespace servelab {

const std::vector<UnimplementedField>& unimplemented_openai_fields() {
  // name, values that change nothing, what honouring it would take, chat, completions.
  static const std::vector<UnimplementedField> fields = {
      // OpenAI
      {"tools", {"[]"}, "tool calling is not implemented for any chat template here", true, false},
      {"tool_choice", {"\"none\""}, "tool calling is not implemented", true, false},
      {"functions", {"[]"}, "function calling is not implemented", true, false},
      {"function_call", {"\"none\""}, "function calling is not implemented", true, false},
      {"audio", {}, "the models here are text-only", true, false},
      {"modalities", {"[\"text\"]"}, "the models here are text-only", true, false},
      {"prediction", {}, "predicted outputs are not implemented", true, false},
      {"web_search_options", {}, "there is no web search", true, false},
      {"reasoning_effort", {}, "no model here has a reasoning-effort control", true, false},
      {"verbosity", {}, "no model here has a verbosity control", true, false},
      {"store", {"false"}, "answers are not stored", true, true},
      {"service_tier", {"\"auto\"", "\"default\""}, "there is one service tier", true, true},
      // vLLM's extra parameters
      {"use_beam_search", {"false"}, "beam search is not implemented", true, true},
      {"length_penalty", {"1", "1.0"}, "it applies to beam search only", true, true},
      {"min_tokens", {"0"}, "a minimum length is not implemented", true, true},
      {"stop_token_ids", {"[]"}, "stop token ids are not implemented (stop strings are)", true, true},
      {"include_stop_str_in_output", {"false"}, "the stop string is always cut from the text", true, true},
      {"skip_special_tokens", {"true"}, "special tokens are always left out of the text", true, true},
      {"spaces_between_special_tokens", {"true"}, "special tokens are never in the text", true, true},
      {"truncate_prompt_tokens", {}, "prompt truncation is TGI's `truncate` here", true, true},
      {"prompt_logprobs", {"0"}, "prompt log-probabilities are not computed", true, true},
      {"allowed_token_ids", {"[]"}, "token allow-lists are not implemented", true, true},
      {"bad_words", {"[]"}, "bad-word lists are not implemented", true, true},
      {"guided_regex", {}, "regular-expression grammars are not implemented (JSON schemas are)", true, true},
      {"guided_choice", {}, "choice grammars are not implemented (JSON schemas are)", true, true},
      {"guided_grammar", {}, "EBNF grammars are not implemented (JSON schemas are)", true, true},
      {"structural_tag", {}, "structural tags are not implemented", true, true},
      {"structured_outputs", {}, "use response_format or guided_json", true, true},
      {"guided_decoding_backend", {}, "there is one grammar engine (xgrammar)", true, true},
      {"guided_whitespace_pattern", {}, "the grammar's whitespace is xgrammar's default", true, true},
      {"logits_processors", {"[]"}, "custom logits processors are not implemented", true, true},
      {"return_tokens_as_token_ids", {"false"}, "tokens are returned as text", true, true},
      {"return_token_ids", {"false"}, "token ids are not returned (/tokenize has them)", true, true},
      {"priority", {"0"}, "requests are served first come, first served", true, true},
      {"request_id", {}, "send it as the X-Request-Id header instead", true, true},
      {"cache_salt", {}, "the prefix cache is shared by all requests", true, true},
      {"kv_transfer_params", {}, "there is no disaggregated prefill", true, true},
      {"vllm_xargs", {}, "there are no extension arguments", true, true},
      {"echo", {"false"}, "chat answers never repeat the conversation", true, false},
      {"add_generation_prompt", {"true"}, "the assistant's turn is always opened", true, false},
      {"continue_final_message", {"false"}, "the final message is never continued", true, false},
      {"add_special_tokens", {"false"}, "the chat template writes the special tokens", true, false},
      {"add_special_tokens",
       {"true"},
       "the prompt always gets the model's beginning-of-text token",
       false,
       true},
      {"documents", {}, "retrieval documents are not passed to the template", true, false},
      {"chat_template", {}, "the model's own chat template is used", true, false},
      {"mm_processor_kwargs", {}, "the models here are text-only", true, true},
      {"media_io_kwargs", {}, "the models here are text-only", true, false},
      {"prompt_embeds", {}, "prompts are text", false, true},
  };
  return fields;
}

const std::vector<std::pair<std::string, std::string>>& accepted_openai_fields_without_effect() {
  static const std::vector<std::pair<std::string, std::string>> fields = {
      {"user", "an end-user id for the provider's abuse monitoring; nothing here reads it"},
      {"safety_identifier", "as user"},
      {"metadata", "tags for stored answers; nothing is stored"},
      {"parallel_tool_calls", "it only means something with tools, which are refused"},
      {"prompt_cache_key",
       "a routing hint for the provider's prompt cache; the prefix cache here finds shared "
       "prefixes by their tokens"},
  };
  return fields;
}

void refuse_unimplemented_openai_fields(const nlohmann::json& body, bool chat) {
  if (!body.is_object()) return;
  for (const UnimplementedField& f : unimplemented_openai_fields()) {
    if (chat ? !f.chat : !f.completions) continue;
    const auto it = body.find(f.name);
    if (it == body.end() || it->is_null()) continue;
    bool harmless = false;
    for (const std::string& ok : f.accepted) harmless = harmless || *it == nlohmann::json::parse(ok);
    if (harmless) continue;
    std::string message = f.name + " is not supported by this server";
    if (!f.accepted.empty()) message += " (only " + f.accepted.front() + ")";
    if (!f.why.empty()) message += ": " + f.why;
    throw validation_error(message);
  }
}

}  // namespace servelab

#pragma once
// The fields OpenAI's and vLLM's completion and chat-completion requests define that this server
// does not implement. A client that sends one expects its effect, so each is refused by name (400
// on the OpenAI routes) unless its value is the one that changes nothing: `tools: []`,
// `skip_special_tokens: true`, `min_tokens: 0`. Fields defined by neither are ignored, as vLLM
// ignores them. docs/serving.md lists both kinds. Torch- and Qt-free.
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace servelab {

// ApiError (validation: 400 on the OpenAI routes) naming the first unimplemented field of `body`
// that is set to something other than its no-op value. chat: /v1/chat/completions, else
// /v1/completions.
void refuse_unimplemented_openai_fields(const nlohmann::json& body, bool chat);

// Every field the check refuses (for the docs' test), with the value it lets through ("" if none).
struct UnimplementedField {
  std::string name;
  // JSON texts of the values that change nothing and so pass ("false", "[]", "1"); none: any
  // value but null is refused.
  std::vector<std::string> accepted;
  std::string why;  // what the server would have to do to honour it
  bool chat = true, completions = true;
};
const std::vector<UnimplementedField>& unimplemented_openai_fields();

// Fields both APIs define that are accepted and have no effect on the answer here, with why.
const std::vector<std::pair<std::string, std::string>>& accepted_openai_fields_without_effect();

}  // namespace servelab

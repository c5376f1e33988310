#pragma once
// The server's request bodies read into requests, apart from HTTP and the engine: JSON parsing and
// every field's validation for LoRAX/TGI (POST /, /generate, /generate_stream) and OpenAI
// (/v1/completions, /v1/chat/completions). What it needs of the server (the tokenizer, adapter
// resolution, schema compilation) comes in through RequestParserContext, so that the fuzzer
// (tests/fuzz/fuzz_serve_request.cpp) runs exactly this code without a model or a socket.
// Torch-, Qt- and httplib-free.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "generate/continuous_batching.h"
#include "serve/structured_output.h"
#include "tokenizer/tokenizer.h"
#include "util/errors.h"

namespace servelab {

// A request the server answers with an HTTP error before the first byte: the status (4xx, or
// 424/503 when generation failed) and LoRAX's error_type ("validation", "overloaded", ...).
class ApiError : public Error {
 public:
  ApiError(int status, std::string type, const std::string& message)
      : Error(ErrorKind::Input, message), status_(status), type_(std::move(type)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  int retry_after = 0;  // seconds, sent as Retry-After when > 0

 private:
  int status_;
  std::string type_;
};

// 422 validation, the status TGI and LoRAX answer malformed parameters with.
ApiError validation_error(const std::string& message);

enum class ApiEndpoint {
  LoraxRoot,        // POST /: a JSON list answer, or a stream when "stream": true
  Generate,         // POST /generate
  GenerateStream,   // POST /generate_stream: always a stream
  Completions,      // POST /v1/completions
  ChatCompletions,  // POST /v1/chat/completions
};

// Bodies nested deeper than this are refused (422) before anything recurses over them.
constexpr int kMaxJsonDepth = 64;

struct RequestParserContext {
  const Tokenizer* tokenizer = nullptr;
  std::string model_id;          // the base model's name (OpenAI "model" selecting no adapter)
  int64_t max_total_tokens = 0;  // prompt + new tokens a request may use
  // Compiles a JSON constraint: a JSON Schema as compact JSON text, "" for any JSON. Empty when
  // this build has no structured output (such requests then get 422). InputError for a schema the
  // compiler refuses.
  std::function<std::unique_ptr<TokenConstraint>(const std::string& schema)> json_constraint;
  // The scheduler's name for the adapter a request names (adapter_id with adapter_source "",
  // "hub" or "local"; OpenAI's model with source ""); ApiError 404 when it is unknown, ApiError 422
  // or InputError when it cannot be used.
  std::function<std::string(const std::string& id, const std::string& source)> resolve_adapter;
  // A seed for a sampling request that names none; empty: one from std::random_device.
  std::function<uint64_t()> fresh_seed;
};

struct ParsedRequest {
  std::string prompt_text;
  BatchRequest request;  // prompt_ids non-empty, max_new_tokens >= 1
  bool stream = false;
  bool details = false;
  bool full_text = false;        // TGI return_full_text, OpenAI echo
  std::optional<uint64_t> seed;  // reported back when sampling
  std::string model;             // OpenAI: the name asked for
  bool include_usage = false;
  // Log-probabilities asked for: -1 none; N >= 0: each token's, with its N most likely alternatives
  // (OpenAI's logprobs / top_logprobs, TGI's top_n_tokens).
  int64_t logprobs = -1;
  std::unique_ptr<TokenConstraint> constraint;  // structured output
};

// The body of a POST to endpoint as a request, or ApiError (422, naming the field) /
// TokenizerError (a prompt that cannot be encoded) / InputError (a schema the compiler refuses).
// Nothing here allocates in proportion to a number in the body.
ParsedRequest parse_api_request(ApiEndpoint endpoint, std::string_view body,
                                const RequestParserContext& context);

// vLLM's POST /tokenize (detokenize false) and /detokenize (true): the answer's JSON text, or
// ApiError (422, naming the field). /tokenize takes {"prompt", "add_special_tokens" (true)} or
// {"messages", "add_generation_prompt" (true), "add_special_tokens" (false)}, both with
// "return_token_strs" and "model"; it answers {count, max_model_len, tokens, token_strs}.
// /detokenize takes {"tokens"} and answers {"prompt"}. Fields vLLM reads that we do not implement
// (chat_template, continue_final_message, tools, mm_processor_kwargs) are refused by name;
// chat_template_kwargs may hold Qwen3's enable_thinking only.
std::string tokenize_api(std::string_view body, const RequestParserContext& context, bool detokenize);

}  // namespace servelab

// libFuzzer target for the server's request parser (scripts/fuzz serve_request): the first byte
// picks the endpoint (POST /, /generate, /generate_stream, /v1/completions, /v1/chat/completions,
// /tokenize, /detokenize), the rest is the body, read by parse_api_request() (tokenize_api() for
// the last two), the code every one of those handlers runs. /tokenize must answer known ids.
// The contract: a request the engine may take (non-empty prompt of known ids, max_new_tokens >= 1,
// sampling that validates), or an error the server turns into a 4xx (ApiError 4xx, InputError,
// TokenizerError). Any other exception, a sanitizer report, a crash or a failed FUZZ_CHECK is a
// finding. No model: a byte tokenizer with ChatML control tokens and SmolLM2's chat template.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fuzz_input_file.h"
#include "fuzz_tokenizer.h"
#include "serve/request_parser.h"

using namespace servelab;

namespace {

class NoConstraint final : public TokenConstraint {
 public:
  void mask(float*, int64_t) override {}
  bool accept(int32_t) override { return true; }
};

const fuzz::ByteTokenizer* tokenizer = nullptr;
RequestParserContext* context = nullptr;

constexpr ApiEndpoint kEndpoints[] = {ApiEndpoint::LoraxRoot, ApiEndpoint::Generate,
                                      ApiEndpoint::GenerateStream, ApiEndpoint::Completions,
                                      ApiEndpoint::ChatCompletions};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizer = new fuzz::ByteTokenizer();
  context = new RequestParserContext();
  context->tokenizer = tokenizer;
  context->model_id = "fuzz-model";
  context->max_total_tokens = 2048;
  // What reaches the schema compiler: an object's compact text, or "" for any JSON.
  context->json_constraint = [](const std::string& schema) -> std::unique_ptr<TokenConstraint> {
    if (!schema.empty()) FUZZ_CHECK(nlohmann::json::parse(schema).is_object());
    return std::make_unique<NoConstraint>();
  };
  // As the server: registered names pass, any other is a 404 naming it.
  context->resolve_adapter = [](const std::string& id, const std::string& source) -> std::string {
    FUZZ_CHECK(!id.empty());
    if ((source.empty() || source == "hub") && (id == "predibase/conllpp" || id == "local-adapter"))
      return id;
    throw ApiError(404, "not_found", "unknown adapter '" + id + "'");
  };
  context->fresh_seed = [] { return uint64_t{42}; };
  return 0;
}

namespace {

// Runs one request through f: it either passes f's own checks or is refused as the server refuses
// (an ApiError 4xx, an InputError or a TokenizerError, each with a message).
template <typename F>
void answered_or_refused(F f) {
  try {
    f();
  } catch (const ApiError& e) {
    FUZZ_CHECK(e.status() >= 400 && e.status() < 500);
    FUZZ_CHECK(*e.what() != '\0');
  } catch (const InputError& e) {
    FUZZ_CHECK(*e.what() != '\0');
  } catch (const TokenizerError& e) {
    FUZZ_CHECK(*e.what() != '\0');
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int route = data[0] % 7;  // the five generation endpoints, then /tokenize and /detokenize
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  if (route >= 5) {
    answered_or_refused([&] {
      const nlohmann::json out = nlohmann::json::parse(tokenize_api(body, *context, route == 6));
      if (route == 6) {
        FUZZ_CHECK(out.at("prompt").is_string());
      } else {
        FUZZ_CHECK(out.at("count").get<size_t>() == out.at("tokens").size());
        for (const auto& id : out.at("tokens"))
          FUZZ_CHECK(id.get<int32_t>() >= 0 && id.get<int32_t>() < tokenizer->vocab_size());
      }
    });
    return 0;
  }
  const ApiEndpoint endpoint = kEndpoints[route];
  answered_or_refused([&] {
    const ParsedRequest r = parse_api_request(endpoint, body, *context);
    FUZZ_CHECK(!r.request.prompt_ids.empty());
    for (int32_t id : r.request.prompt_ids) FUZZ_CHECK(id >= 0 && id < tokenizer->vocab_size());
    FUZZ_CHECK(r.request.max_new_tokens >= 1);
    if (!r.request.sampling.greedy) {
      const SamplingParams& p = r.request.sampling;
      FUZZ_CHECK(p.temperature > 0 && p.top_k >= 0 && p.top_p > 0 && p.top_p <= 1);
      FUZZ_CHECK(r.seed.has_value() && *r.seed == p.seed);
    }
    if (endpoint == ApiEndpoint::GenerateStream) FUZZ_CHECK(r.stream);
  });
  return 0;
}

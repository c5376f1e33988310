// libFuzzer target for what the load generator reads from the network and from users' files
// (scripts/fuzz loadgen): the first byte picks the reader, the second where the input is cut in two.
//   0, 1, 2: a server's event stream (OpenAI completions, OpenAI chat, TGI/LoRAX), fed to
//            StreamParser in one piece and again in two pieces cut anywhere; then the token counts.
//   3:       a dataset file (JSONL or ShareGPT JSON) through parse_dataset, with and without a tokenizer.
//   4:       a server's /metrics text through parse_prometheus_text and server_load.
// The contract: the parser never throws, reads the same whatever the cut, and its counts are counts
// (the chunks' shares sum to the total); the dataset reader returns prompts that are valid UTF-8 or
// throws InputError; the metrics reader returns named samples or throws InputError naming the line,
// and a load it reads is counts and a fraction where the engine publishes them. Any other exception, a
// sanitizer report or a failed FUZZ_CHECK is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_input_file.h"
#include "fuzz_tokenizer.h"
#include "serve/load_dataset.h"
#include "serve/load_stream.h"
#include "serve/server_scrape.h"
#include "tokenizer/utf8.h"
#include "util/errors.h"

using namespace servelab;

namespace servelab {
// The shipped set is compiled in by CMake; the fuzzer builds from sources alone.
const std::string& shipped_prompts_jsonl() {
  static const std::string none;
  return none;
}
}  // namespace servelab

namespace {

const fuzz::ByteTokenizer* tokenizer = nullptr;

void check_counts(StreamProtocol protocol, StreamParser& p, const Tokenizer* tok) {
  TokenCountSource source{};
  const int64_t total = assign_chunk_tokens(protocol, p, tok, &source);
  int64_t sum = 0;
  for (const StreamChunk& c : p.chunks()) {
    if (total < 0) {
      FUZZ_CHECK(c.tokens == -1);
      continue;
    }
    FUZZ_CHECK(c.tokens >= 0);
    sum += c.tokens;
  }
  if (protocol == StreamProtocol::Tgi) {
    FUZZ_CHECK(sum == static_cast<int64_t>(p.chunks().size()));
  } else if (total >= 0 && !p.chunks().empty()) {
    FUZZ_CHECK(sum == total);
  }
  FUZZ_CHECK((total < 0) == (source == TokenCountSource::None));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizer = new fuzz::ByteTokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int which = data[0] % 5;
  const std::string_view input(reinterpret_cast<const char*>(data + 2), size - 2);
  if (which < 3) {
    const StreamProtocol protocol = which == 0   ? StreamProtocol::OpenAICompletions
                                    : which == 1 ? StreamProtocol::OpenAIChat
                                                 : StreamProtocol::Tgi;
    StreamParser whole(protocol);
    whole.feed(input, 1.0);
    whole.finish(2.0);
    const size_t cut = input.empty() ? 0 : data[1] * input.size() / 255;
    StreamParser parts(protocol);
    parts.feed(input.substr(0, cut), 1.0);
    parts.feed(input.substr(cut), 1.0);
    parts.finish(2.0);
    FUZZ_CHECK(whole.failed() == parts.failed());
    FUZZ_CHECK(whole.error_kind() == parts.error_kind());
    FUZZ_CHECK(whole.ended() == parts.ended());
    FUZZ_CHECK(whole.text() == parts.text());
    FUZZ_CHECK(whole.chunks().size() == parts.chunks().size());
    FUZZ_CHECK(whole.usage_output_tokens() == parts.usage_output_tokens());
    FUZZ_CHECK(whole.failed() != whole.error().empty());
    FUZZ_CHECK(whole.usage_output_tokens() >= -1);
    check_counts(protocol, whole, nullptr);
    check_counts(protocol, parts, tokenizer);
    return 0;
  }
  if (which == 4) {
    try {
      const std::vector<PromSample> samples = parse_prometheus_text(input);
      for (const PromSample& s : samples) FUZZ_CHECK(!s.name.empty());
      const ServerLoad load = server_load(samples);
      FUZZ_CHECK(load.engine.empty() == (!load.running && !load.waiting));
    } catch (const InputError& e) {
      FUZZ_CHECK(std::string_view(e.what()).rfind("/metrics", 0) == 0);
    }
    return 0;
  }
  for (const Tokenizer* tok :
       {static_cast<const Tokenizer*>(nullptr), static_cast<const Tokenizer*>(tokenizer)}) {
    try {
      for (const DatasetEntry& e : parse_dataset(input, "fuzz.jsonl", tok)) {
        FUZZ_CHECK(!e.prompt.empty());
        FUZZ_CHECK(!utf8::first_invalid(e.prompt));
        FUZZ_CHECK(e.output_tokens == -1 || (e.output_tokens >= 1 && e.output_tokens <= kMaxOutputLen));
      }
    } catch (const InputError&) {
    }
  }
  return 0;
}

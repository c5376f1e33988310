#pragma once
// What a load-generator client reads from a streamed completion: the server-sent events of the
// TGI/LoRAX stream (/generate_stream) and of OpenAI's (/v1/completions, /v1/chat/completions), the
// token counts the server reports in them (OpenAI's usage chunk, TGI's details), and how many tokens
// each chunk carried. Pure and torch-free: bytes in, a record out, so that it can be fuzzed
// (tests/fuzz/fuzz_loadgen.cpp) and tested without a network.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace servelab {

class Tokenizer;

// Why a request failed, by kind (the report counts errors by these names).
enum class LoadErrorKind {
  None,
  Connect,      // nothing answered at the address (refused, unreachable, TLS handshake)
  Timeout,      // the server went silent longer than the read timeout
  Http,         // an HTTP status other than 200
  ServerError,  // an error event inside a stream that had started
  BadResponse,  // an answer that is not the protocol's: not an event stream, an event that is not
                // JSON or lacks its fields, a token count that is not a count
  Incomplete,   // the connection closed before the stream's last event
  Cancelled,    // the run was stopped (its time bound, or the caller)
  Client,       // a request this client could not make (bad options for this API)
};
const char* load_error_kind_name(LoadErrorKind kind);

enum class StreamProtocol {
  Tgi,                // data:{"token": {...}, "generated_text": null|"...", "details": null|{...}}
  OpenAICompletions,  // data:{"choices": [{"text": ...}]} ... data:{"choices": [], "usage": {...}} data:
                      // [DONE]
  OpenAIChat,         // the same with choices[].delta.content
};

// One event that carried output. `tokens` is how many tokens it carried: exact when the protocol says
// (TGI: one token per event; OpenAI chunks with usage in every chunk), else the request's total spread
// over its chunks (assign_chunk_tokens); -1 until known.
struct StreamChunk {
  double ms = 0;  // since the request was sent
  std::string text;
  int64_t tokens = -1;
  int64_t cumulative_usage = -1;  // OpenAI: usage.completion_tokens in this very chunk, if sent
};

// Reads a streamed answer as it arrives. Feed the body's bytes in order; the parser splits lines
// itself (events may be cut anywhere, "\r\n" or "\n"). Never throws for what the server sends: a
// protocol violation sets error/error_kind and the parser ignores what follows.
class StreamParser {
 public:
  explicit StreamParser(StreamProtocol protocol) : protocol_(protocol) {}

  // Bytes that arrived `ms` after the request was sent. False once the stream is in error.
  bool feed(std::string_view bytes, double ms);
  // The connection ended: a last line without its newline is read too.
  void finish(double ms);

  bool ended() const { return ended_; }  // the stream's last event arrived
  bool failed() const { return kind_ != LoadErrorKind::None; }
  LoadErrorKind error_kind() const { return kind_; }
  const std::string& error() const { return error_; }

  const std::vector<StreamChunk>& chunks() const { return chunks_; }
  std::vector<StreamChunk>& chunks() { return chunks_; }
  const std::string& text() const { return text_; }
  const std::string& finish_reason() const { return finish_reason_; }
  // What the server reported: OpenAI's usage (completion_tokens, prompt_tokens), TGI/LoRAX's
  // details (generated_tokens, prompt_tokens). -1: not reported.
  int64_t usage_output_tokens() const { return usage_output_; }
  int64_t usage_prompt_tokens() const { return usage_prompt_; }
  int64_t events() const { return events_; }

 private:
  void line(std::string_view line, double ms);
  void event(const std::string& data, double ms);
  void fail(LoadErrorKind kind, std::string message);

  StreamProtocol protocol_;
  std::string pending_;
  bool ended_ = false;
  LoadErrorKind kind_ = LoadErrorKind::None;
  std::string error_;
  std::vector<StreamChunk> chunks_;
  std::string text_, finish_reason_;
  int64_t usage_output_ = -1, usage_prompt_ = -1;
  int64_t events_ = 0;
};

// Where a request's output token count came from.
enum class TokenCountSource {
  None,         // the server reported none and no tokenizer was given: unknown
  Usage,        // the server's own count (OpenAI usage, TGI/LoRAX details.generated_tokens)
  TokenEvents,  // TGI/LoRAX events without details: the protocol sends one event per token
  Tokenizer,    // the text tokenized with the model's tokenizer
};
const char* token_count_source_name(TokenCountSource source);

// The request's output token count and each chunk's share of it, never the number of chunks:
// - TGI/LoRAX: one token per token event; the total from details.generated_tokens when sent.
// - OpenAI: the total from the usage chunk, else from tokenizing the text (when `tokenizer`); each
//   chunk's share from usage sent in every chunk when the server does, else from tokenizing the text
//   received so far (when `tokenizer`; a chunk that ends inside a UTF-8 character gets its tokens with
//   the chunk that completes it), else the total spread evenly over the chunks that carried output.
// Sets every chunk's `tokens` (-1 when the total is unknown) and returns the total (-1: unknown).
int64_t assign_chunk_tokens(StreamProtocol protocol, StreamParser& parser, const Tokenizer* tokenizer,
                            TokenCountSource* source);

}  // namespace servelab

#include "serve/load_stream.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace servelab {

using nlohmann::json;

namespace {

constexpr size_t kMaxLine = 16u << 20;        // one event's text at most
constexpr int64_t kMaxCount = 1'000'000'000;  // a token count above this is not a count

std::string excerpt(std::string_view s) {
  std::string out = utf8::lossy(s.substr(0, 120));
  std::replace(out.begin(), out.end(), '\n', ' ');
  std::replace(out.begin(), out.end(), '\r', ' ');
  return out;
}

// The message of an error event: {"error": "..."} (TGI/LoRAX) or {"error": {"message": ...}} (OpenAI).
std::string error_text(const json& e) {
  const json& err = e["error"];
  if (err.is_string()) return err.get<std::string>();
  if (err.is_object() && err.contains("message") && err["message"].is_string())
    return err["message"].get<std::string>();
  return excerpt(err.dump());
}

// A token count the server reports: a non-negative integer; -2 for anything else.
int64_t count_of(const json& obj, const char* key) {
  if (!obj.contains(key) || obj[key].is_null()) return -1;
  const json& v = obj[key];
  if (v.is_number_unsigned() || v.is_number_integer()) {
    const int64_t n = v.get<int64_t>();
    return n >= 0 && n <= kMaxCount ? n : -2;
  }
  return -2;
}

// Tokens in a text, or -1 when the tokenizer cannot read it. An incomplete UTF-8 character at the
// end is left out (the caller carries it to the next chunk); ill-formed bytes count as U+FFFD.
int64_t token_count(const Tokenizer& tokenizer, std::string_view text) {
  try {
    return static_cast<int64_t>(tokenizer.encode(utf8::lossy(text)).size());
  } catch (const std::exception&) {
    return -1;
  }
}

// Splits `total` over items in proportion to `weights` (largest remainder), so that the parts sum to
// `total` exactly. Equal weights: total / n each, the first (total % n) items one more.
std::vector<int64_t> apportion(const std::vector<double>& weights, int64_t total) {
  std::vector<int64_t> out(weights.size(), 0);
  double sum = 0;
  for (double w : weights) sum += w;
  if (weights.empty() || total <= 0) return out;
  std::vector<double> w = weights;
  if (!(sum > 0)) {
    std::fill(w.begin(), w.end(), 1.0);
    sum = static_cast<double>(w.size());
  }
  int64_t given = 0;
  std::vector<std::pair<double, size_t>> rest;
  for (size_t i = 0; i < w.size(); ++i) {
    const double exact = w[i] * static_cast<double>(total) / sum;
    out[i] = static_cast<int64_t>(std::floor(exact));
    given += out[i];
    rest.emplace_back(exact - std::floor(exact), i);
  }
  std::stable_sort(rest.begin(), rest.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t j = 0; given < total; j = (j + 1) % rest.size(), ++given) ++out[rest[j].second];
  return out;
}

}  // namespace

const char* load_error_kind_name(LoadErrorKind kind) {
  switch (kind) {
    case LoadErrorKind::None:
      return "none";
    case LoadErrorKind::Connect:
      return "connect";
    case LoadErrorKind::Timeout:
      return "timeout";
    case LoadErrorKind::Http:
      return "http";
    case LoadErrorKind::ServerError:
      return "server_error";
    case LoadErrorKind::BadResponse:
      return "bad_response";
    case LoadErrorKind::Incomplete:
      return "incomplete";
    case LoadErrorKind::Cancelled:
      return "cancelled";
    case LoadErrorKind::Client:
      return "client";
  }
  return "?";
}

const char* token_count_source_name(TokenCountSource source) {
  switch (source) {
    case TokenCountSource::None:
      return "none";
    case TokenCountSource::Usage:
      return "usage";
    case TokenCountSource::TokenEvents:
      return "token_events";
    case TokenCountSource::Tokenizer:
      return "tokenizer";
  }
  return "?";
}

void StreamParser::fail(LoadErrorKind kind, std::string message) {
  if (failed()) return;
  kind_ = kind;
  error_ = std::move(message);
}

bool StreamParser::feed(std::string_view bytes, double ms) {
  if (failed()) return false;
  pending_.append(bytes);
  size_t start = 0;
  for (size_t eol; !failed() && (eol = pending_.find('\n', start)) != std::string::npos; start = eol + 1)
    line(std::string_view(pending_).substr(start, eol - start), ms);
  pending_.erase(0, start);
  if (pending_.size() > kMaxLine) fail(LoadErrorKind::BadResponse, "an event line longer than 16 MiB");
  return !failed();
}

void StreamParser::finish(double ms) {
  if (!failed() && !pending_.empty()) line(pending_, ms);
  pending_.clear();
}

void StreamParser::line(std::string_view l, double ms) {
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  if (l.empty() || l.front() == ':') return;  // event separator, comment (a keep-alive)
  if (l.rfind("data:", 0) != 0) {
    // The other fields of the event-stream format carry nothing we read; anything else is not one.
    for (const char* field : {"event:", "id:", "retry:"})
      if (l.rfind(field, 0) == 0) return;
    fail(LoadErrorKind::BadResponse, "the answer is not an event stream: '" + excerpt(l) + "'");
    return;
  }
  std::string_view d = l.substr(5);
  if (!d.empty() && d.front() == ' ') d.remove_prefix(1);
  event(std::string(d), ms);
}

void StreamParser::event(const std::string& data, double ms) {
  if (ended_) return;  // whatever follows the last event
  ++events_;
  if (data == "[DONE]") {
    if (protocol_ != StreamProtocol::Tgi) ended_ = true;
    return;
  }
  const json e = json::parse(data, nullptr, false);
  if (!e.is_object()) {
    fail(LoadErrorKind::BadResponse, "an event is not a JSON object: '" + excerpt(data) + "'");
    return;
  }
  if (e.contains("error") && !e["error"].is_null()) {
    fail(LoadErrorKind::ServerError, "the server ended the stream with an error: " + error_text(e));
    return;
  }
  auto bad = [&](const std::string& what) {
    fail(LoadErrorKind::BadResponse, what + ": '" + excerpt(data) + "'");
  };

  if (protocol_ == StreamProtocol::Tgi) {
    const bool has_token = e.contains("token") && !e["token"].is_null();
    const bool last = e.contains("generated_text") && !e["generated_text"].is_null();
    if (!has_token && !last) return bad("an event with neither a token nor generated_text");
    if (has_token) {
      const json& tok = e["token"];
      if (!tok.is_object()) return bad("an event's token is not an object");
      std::string piece;
      if (tok.contains("text") && !tok["text"].is_null()) {
        if (!tok["text"].is_string()) return bad("a token's text is not a string");
        piece = tok["text"].get<std::string>();
      }
      const bool special =
          tok.contains("special") && tok["special"].is_boolean() && tok["special"].get<bool>();
      if (special) piece.clear();
      text_ += piece;
      chunks_.push_back({ms, piece, 1, -1});
    }
    if (last) {
      if (!e["generated_text"].is_string()) return bad("generated_text is not a string");
      if (e.contains("details") && !e["details"].is_null()) {
        const json& det = e["details"];
        if (!det.is_object()) return bad("details is not an object");
        usage_output_ = count_of(det, "generated_tokens");
        usage_prompt_ = count_of(det, "prompt_tokens");
        if (usage_output_ == -2 || usage_prompt_ == -2) return bad("a token count in details is not a count");
        if (det.contains("finish_reason") && det["finish_reason"].is_string())
          finish_reason_ = det["finish_reason"].get<std::string>();
      }
      ended_ = true;
    }
    return;
  }

  // OpenAI: chunks with choices, and a last one with empty choices and the usage.
  const bool has_choices = e.contains("choices") && !e["choices"].is_null();
  const bool has_usage = e.contains("usage") && !e["usage"].is_null();
  if (has_usage) {
    const json& u = e["usage"];
    if (!u.is_object()) return bad("usage is not an object");
    const int64_t out = count_of(u, "completion_tokens"), in = count_of(u, "prompt_tokens");
    if (out == -2 || in == -2) return bad("a token count in usage is not a count");
    if (has_choices && e["choices"].is_array() && !e["choices"].empty()) {
      // Usage in every chunk (vLLM's continuous_usage_stats): this chunk's running count.
      if (out >= 0) usage_output_ = out;
    } else {
      usage_output_ = out;
      if (in >= 0) usage_prompt_ = in;
    }
  }
  if (!has_choices) {
    if (!has_usage) bad("an event with neither choices nor usage");
    return;
  }
  const json& choices = e["choices"];
  if (!choices.is_array()) return bad("choices is not an array");
  if (choices.empty()) return;
  const json& c = choices[0];
  if (!c.is_object()) return bad("a choice is not an object");
  bool finish = false;
  if (c.contains("finish_reason") && !c["finish_reason"].is_null()) {
    if (!c["finish_reason"].is_string()) return bad("finish_reason is not a string");
    finish_reason_ = c["finish_reason"].get<std::string>();
    finish = true;
  }
  std::string piece;
  bool carried = false;
  if (protocol_ == StreamProtocol::OpenAICompletions) {
    if (!c.contains("text") || !c["text"].is_string()) return bad("a completion chunk without text");
    piece = c["text"].get<std::string>();
    // An empty text carried a token whose bytes the server holds back (half a UTF-8 character),
    // unless it is the chunk that only says why the stream ended.
    carried = !piece.empty() || !finish;
  } else {
    if (!c.contains("delta") || !c["delta"].is_object()) return bad("a chat chunk without a delta");
    const json& delta = c["delta"];
    bool role = delta.contains("role") && !delta["role"].is_null();
    bool reasoning = false;
    for (const char* key : {"reasoning_content", "reasoning"})
      if (delta.contains(key) && delta[key].is_string() && !delta[key].get<std::string>().empty())
        reasoning = true;
    if (delta.contains("content") && !delta["content"].is_null()) {
      if (!delta["content"].is_string()) return bad("a delta's content is not a string");
      piece = delta["content"].get<std::string>();
      carried = !piece.empty() || (!role && !finish);
    }
    carried = carried || reasoning;
  }
  text_ += piece;
  if (carried) {
    int64_t cumulative = -1;
    if (has_usage && e["usage"].is_object()) cumulative = count_of(e["usage"], "completion_tokens");
    chunks_.push_back({ms, piece, -1, cumulative});
  }
}

int64_t assign_chunk_tokens(StreamProtocol protocol, StreamParser& parser, const Tokenizer* tokenizer,
                            TokenCountSource* source) {
  std::vector<StreamChunk>& chunks = parser.chunks();
  TokenCountSource src = TokenCountSource::None;
  int64_t total = -1;
  if (protocol == StreamProtocol::Tgi) {
    for (StreamChunk& c : chunks) c.tokens = 1;
    if (parser.usage_output_tokens() >= 0) {
      total = parser.usage_output_tokens();
      src = TokenCountSource::Usage;
    } else {
      total = static_cast<int64_t>(chunks.size());
      src = TokenCountSource::TokenEvents;
    }
    if (source) *source = src;
    return total;
  }
  if (parser.usage_output_tokens() >= 0) {
    total = parser.usage_output_tokens();
    src = TokenCountSource::Usage;
  } else if (tokenizer) {
    total = token_count(*tokenizer, parser.text());
    if (total >= 0) src = TokenCountSource::Tokenizer;
  }
  if (source) *source = src;
  if (total < 0) {
    for (StreamChunk& c : chunks) c.tokens = -1;
    return -1;
  }
  // Each chunk's share: the server's running count in every chunk, else the tokenizer's count of
  // each chunk's text (an incomplete character carried to the chunk that completes it), else equal.
  bool continuous = !chunks.empty();
  for (size_t i = 0; i < chunks.size() && continuous; ++i)
    continuous = chunks[i].cumulative_usage >= 0 &&
                 (i == 0 || chunks[i].cumulative_usage >= chunks[i - 1].cumulative_usage);
  std::vector<double> weights(chunks.size(), 1.0);
  if (continuous) {
    int64_t before = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      weights[i] = static_cast<double>(chunks[i].cumulative_usage - before);
      before = chunks[i].cumulative_usage;
    }
    if (before == total) {
      for (size_t i = 0; i < chunks.size(); ++i) chunks[i].tokens = static_cast<int64_t>(weights[i]);
      return total;
    }
  } else if (tokenizer) {
    std::string carry;
    bool ok = true;
    for (size_t i = 0; i < chunks.size() && ok; ++i) {
      std::string bytes = carry + chunks[i].text;
      const size_t tail = utf8::incomplete_tail(bytes);
      carry = bytes.substr(bytes.size() - tail);
      bytes.resize(bytes.size() - tail);
      const int64_t n = bytes.empty() ? 0 : token_count(*tokenizer, bytes);
      ok = n >= 0;
      weights[i] = static_cast<double>(n);
    }
    if (!ok) std::fill(weights.begin(), weights.end(), 1.0);
  }
  if (!continuous && !tokenizer && chunks.size() > 1 && total >= 1) {
    // Nothing tells the chunks apart: the first holds the prefill's one token (as it does on vLLM,
    // TGI, llama.cpp and ours without speculative decoding), the rest share the others evenly.
    chunks[0].tokens = 1;
    const std::vector<int64_t> parts = apportion(std::vector<double>(chunks.size() - 1, 1.0), total - 1);
    for (size_t i = 1; i < chunks.size(); ++i) chunks[i].tokens = parts[i - 1];
    return total;
  }
  const std::vector<int64_t> parts = apportion(weights, total);
  for (size_t i = 0; i < chunks.size(); ++i) chunks[i].tokens = parts[i];
  return total;
}

}  // namespace servelab

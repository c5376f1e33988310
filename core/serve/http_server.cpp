#include "serve/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "tokenizer/chat_template.h"
#include "tokenizer/prompt.h"
#include "util/errors.h"

namespace servelab {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// An answer other than 200 before the first byte: HTTP status, LoRAX's error_type.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, const std::string& message)
      : std::runtime_error(message), status(status), type(std::move(type)) {}
  int status;
  std::string type;
  int retry_after = 0;
};

ApiError validation(const std::string& message) { return ApiError(422, "validation", message); }

// ---- reading request bodies -------------------------------------------------------------------

const char* json_type(const json& j) {
  switch (j.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a number";
    default:
      return "an integer";
  }
}

// A field of an object; null and absent both mean "default".
const json* field(const json& obj, const char* key) {
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::optional<double> get_number(const json& obj, const char* key, const std::string& where) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw validation(where + key + " must be a number, got " + json_type(*v));
  return v->get<double>();
}

std::optional<int64_t> get_int(const json& obj, const char* key, const std::string& where) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
      std::abs(v->get<double>()) < 1e15)
    return static_cast<int64_t>(v->get<double>());
  if (!v->is_number_integer()) throw validation(where + key + " must be an integer, got " + json_type(*v));
  // get<int64_t>() would wrap 2^64 - 1 to -1 and misreport it.
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    throw validation(where + key + " must be at most " + std::to_string(INT64_MAX) + ", got " + v->dump());
  return v->get<int64_t>();
}

std::optional<bool> get_bool(const json& obj, const char* key, const std::string& where) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw validation(where + key + " must be true or false, got " + json_type(*v));
  return v->get<bool>();
}

std::optional<std::string> get_string(const json& obj, const char* key, const std::string& where) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) throw validation(where + key + " must be a string, got " + json_type(*v));
  return v->get<std::string>();
}

// A string or a list of strings (stop sequences).
std::vector<std::string> get_strings(const json& obj, const char* key, const std::string& where) {
  const json* v = field(obj, key);
  if (!v) return {};
  if (v->is_string()) return {v->get<std::string>()};
  if (!v->is_array()) throw validation(where + key + " must be a list of strings, got " + json_type(*v));
  std::vector<std::string> out;
  for (const json& s : *v) {
    if (!s.is_string()) throw validation(where + key + " must hold strings only, got " + json_type(s));
    out.push_back(s.get<std::string>());
  }
  return out;
}

// TGI's default max_stop_sequences, and what OpenAI allows: each sequence is matched against the
// text after every token, so their number and length bound a request's per-token work.
constexpr size_t kMaxStopSequences = 4;
constexpr size_t kMaxStopBytes = 256;

void check_stop_strings(const std::vector<std::string>& stops, const std::string& name) {
  if (stops.size() > kMaxStopSequences)
    throw validation(name + " takes at most " + std::to_string(kMaxStopSequences) + " sequences, got " +
                     std::to_string(stops.size()));
  for (const std::string& s : stops) {
    if (s.empty()) throw validation(name + " holds an empty sequence");
    if (s.size() > kMaxStopBytes)
      throw validation(name + " sequences must be at most " + std::to_string(kMaxStopBytes) + " bytes, got " +
                       std::to_string(s.size()));
  }
}

json parse_body(const httplib::Request& req) {
  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::exception& e) {
    // Not only parse_error: a number beyond the double range (1e400) is an out_of_range.
    throw validation(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!body.is_object())
    throw validation(std::string("the body must be a JSON object, got ") + json_type(body));
  return body;
}

uint64_t fresh_seed() {
  static std::atomic<uint64_t> counter{0};
  return (static_cast<uint64_t>(std::random_device{}()) << 20) ^ counter++;
}

// ---- the parsed request -----------------------------------------------------------------------

struct Call {
  std::string prompt_text;
  BatchRequest request;
  bool stream = false;
  bool details = false;
  bool full_text = false;
  std::optional<uint64_t> seed;  // reported back when sampling
  std::string model;             // OpenAI: the name asked for
  bool include_usage = false;
  std::unique_ptr<TokenConstraint> constraint;  // structured output
};

}  // namespace

std::string hf_cache_snapshot(const std::string& repo_id, std::string* searched) {
  fs::path hub;
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? v : "";
  };
  if (!env("HF_HUB_CACHE").empty())
    hub = env("HF_HUB_CACHE");
  else if (!env("HF_HOME").empty())
    hub = fs::path(env("HF_HOME")) / "hub";
  else if (!env("XDG_CACHE_HOME").empty())
    hub = fs::path(env("XDG_CACHE_HOME")) / "huggingface" / "hub";
  else
    hub = fs::path(env("HOME")) / ".cache" / "huggingface" / "hub";
  std::string folder = "models--" + repo_id;
  for (size_t at = folder.find('/'); at != std::string::npos; at = folder.find('/', at + 2))
    folder.replace(at, 1, "--");
  const fs::path repo = hub / folder;
  if (searched) *searched = repo.string();
  std::error_code ec;
  if (repo_id.empty() || repo_id.find("..") != std::string::npos || !fs::is_directory(repo / "snapshots", ec))
    return "";
  std::ifstream ref(repo / "refs" / "main");
  std::string revision;
  if (ref && std::getline(ref, revision) && fs::is_directory(repo / "snapshots" / revision, ec))
    return (repo / "snapshots" / revision).string();
  fs::path newest;
  fs::file_time_type newest_time{};
  for (const auto& d : fs::directory_iterator(repo / "snapshots", ec)) {
    if (!d.is_directory(ec)) continue;
    const auto t = d.last_write_time(ec);
    if (newest.empty() || t > newest_time) {
      newest = d.path();
      newest_time = t;
    }
  }
  return newest.string();
}

struct HttpServer::Impl {
  ServeScheduler& scheduler;
  const Tokenizer& tokenizer;
  HttpServerOptions options;
  httplib::Server server;
  std::atomic<int64_t> next_id{0};

  Impl(ServeScheduler& s, const Tokenizer& t, HttpServerOptions o)
      : scheduler(s), tokenizer(t), options(std::move(o)) {}

  // The adapter a request names: one registered with --adapter, a local PEFT folder, or a Hub
  // repository in the local Hugging Face cache. Returns the scheduler's name for it.
  std::string resolve_adapter(const std::string& id, const std::string& source) {
    if (id.empty()) return "";
    if (source.empty() || source == "hub") {
      if (scheduler.knows_adapter(id)) return id;
      std::string searched;
      const std::string dir = hf_cache_snapshot(id, &searched);
      if (dir.empty() || !fs::exists(fs::path(dir) / "adapter_config.json"))
        throw validation("unknown adapter '" + id + "': not registered with --adapter and not in the local " +
                         "Hugging Face cache (looked for " + searched + "/snapshots/*/adapter_config.json)");
      AdapterSource a;
      a.name = id;
      a.peft_dir = dir;
      scheduler.register_adapter(a);
      return id;
    }
    if (source == "local") {
      if (scheduler.knows_adapter(id)) return id;
      std::error_code ec;
      if (!fs::exists(fs::path(id) / "adapter_config.json", ec))
        throw validation("adapter_id '" + id + "' with adapter_source local must be a PEFT folder " +
                         "(adapter_config.json + adapter_model.safetensors)");
      AdapterSource a;
      a.name = a.peft_dir = id;
      scheduler.register_adapter(a);
      return id;
    }
    throw validation("adapter_source '" + source + "' is not supported here: use local or hub");
  }

  // Both APIs: stop strings, sampling, seed.
  void set_sampling(Call& c, bool sample, std::optional<double> temperature, std::optional<int64_t> top_k,
                    std::optional<double> top_p, std::optional<int64_t> seed) {
    SamplingParams& p = c.request.sampling;
    // A JSON number beyond the double range (1e400) parses as infinity.
    if (temperature && !(*temperature >= 0 && std::isfinite(*temperature)))
      throw validation("temperature must be a finite number >= 0, got " + std::to_string(*temperature));
    if (top_k && *top_k < 1) throw validation("top_k must be > 0, got " + std::to_string(*top_k));
    if (top_p && !(*top_p > 0 && *top_p <= 1))
      throw validation("top_p must be in (0, 1], got " + std::to_string(*top_p));
    if (seed && *seed < 0) throw validation("seed must be >= 0, got " + std::to_string(*seed));
    p.greedy = !sample || (temperature && *temperature == 0);
    if (p.greedy) return;
    p.temperature = temperature.value_or(1.0);
    p.top_k = top_k.value_or(0);
    p.top_p = top_p.value_or(1.0);
    c.seed = seed ? static_cast<uint64_t>(*seed) : fresh_seed();
    p.seed = *c.seed;
  }

  void set_prompt(Call& c, std::vector<int32_t> ids) {
    if (ids.empty()) throw validation("the prompt is empty: it needs at least one token");
    c.request.prompt_ids = std::move(ids);
  }

  // LoRAX / TGI: {"inputs", "parameters": {...}, "stream"}.
  Call parse_lorax(const json& body, bool stream_default) {
    Call c;
    const json* inputs = field(body, "inputs");
    if (!inputs) throw validation("inputs is required: the prompt text");
    if (!inputs->is_string())
      throw validation(std::string("inputs must be a string, got ") + json_type(*inputs));
    c.prompt_text = inputs->get<std::string>();
    c.stream = get_bool(body, "stream", "").value_or(stream_default);
    static const json empty = json::object();
    const json* pp = field(body, "parameters");
    if (pp && !pp->is_object())
      throw validation(std::string("parameters must be an object, got ") + json_type(*pp));
    const json& p = pp ? *pp : empty;
    const std::string w = "parameters.";
    const int64_t max_new = get_int(p, "max_new_tokens", w).value_or(20);
    if (max_new < 1)
      throw validation("parameters.max_new_tokens must be at least 1, got " + std::to_string(max_new));
    c.request.max_new_tokens = max_new;
    const auto temperature = get_number(p, "temperature", w);
    const auto top_k = get_int(p, "top_k", w);
    const auto top_p = get_number(p, "top_p", w);
    const auto typical_p = get_number(p, "typical_p", w);
    if (typical_p && *typical_p != 1)
      throw validation("parameters.typical_p is not supported by this server");
    // TGI samples when asked to, or when any warper is set.
    const bool sample = get_bool(p, "do_sample", w).value_or(false) || (temperature && *temperature != 1.0) ||
                        top_k.has_value() || (top_p && *top_p < 1.0);
    set_sampling(c, sample, temperature, top_k, top_p, get_int(p, "seed", w));
    c.request.stop_strings = get_strings(p, "stop", w);
    check_stop_strings(c.request.stop_strings, "parameters.stop");
    c.request.stop_at_eos = !get_bool(p, "ignore_eos_token", w).value_or(false);
    c.details = get_bool(p, "details", w).value_or(false);
    c.full_text = get_bool(p, "return_full_text", w).value_or(false);
    if (const auto rp = get_number(p, "repetition_penalty", w); rp && *rp != 1.0)
      throw validation("parameters.repetition_penalty is not supported by this server (got " +
                       std::to_string(*rp) + ")");
    if (const auto best_of = get_int(p, "best_of", w); best_of && *best_of != 1)
      throw validation("parameters.best_of must be 1 here, got " + std::to_string(*best_of));
    if (get_bool(p, "watermark", w).value_or(false))
      throw validation("parameters.watermark is not supported");
    // Asked-for extras the answer would silently lack: refused rather than ignored.
    for (const char* k : {"top_n_tokens", "return_k_alternatives"})
      if (const auto v = get_int(p, k, w); v && *v != 0)
        throw validation(w + k + " is not supported by this server (got " + std::to_string(*v) + ")");
    if (get_bool(p, "decoder_input_details", w).value_or(false))
      throw validation("parameters.decoder_input_details is not supported by this server");
    if (field(p, "merged_adapters"))
      throw validation("parameters.merged_adapters is not supported by this server");
    if (const json* rf = field(p, "response_format")) {
      // LoRAX: {"type": "json_object", "schema": {...}}; no schema: any JSON.
      if (!rf->is_object() || rf->value("type", "") != "json_object")
        throw validation("parameters.response_format must be {\"type\": \"json_object\", \"schema\": {...}}");
      c.constraint = json_constraint(field(*rf, "schema"), "parameters.response_format.schema");
    } else if (const json* g = field(p, "grammar")) {
      // TGI: {"type": "json", "value": schema}; regular expressions are not supported.
      if (!g->is_object() || g->value("type", "") != "json")
        throw validation(
            "parameters.grammar must be {\"type\": \"json\", \"value\": schema} (regex is not supported)");
      c.constraint = json_constraint(field(*g, "value"), "parameters.grammar.value");
    }
    if (const auto truncate = get_int(p, "truncate", w); truncate && *truncate < 1)
      throw validation("parameters.truncate must be at least 1, got " + std::to_string(*truncate));
    const std::string adapter_id = get_string(p, "adapter_id", w).value_or("");
    const std::string source = get_string(p, "adapter_source", w).value_or("");
    c.request.adapter = resolve_adapter(adapter_id, source);
    std::vector<int32_t> ids = encode_prompt(tokenizer, c.prompt_text);
    if (const auto truncate = get_int(p, "truncate", w);
        truncate && static_cast<int64_t>(ids.size()) > *truncate)
      ids.erase(ids.begin(), ids.end() - *truncate);
    set_prompt(c, std::move(ids));
    return c;
  }

  // The adapter an OpenAI "model" names: the base model (its id, "tgi", or nothing) or an adapter.
  std::string openai_model(Call& c, const json& body) {
    c.model = get_string(body, "model", "").value_or(options.model_id);
    if (c.model.empty() || c.model == options.model_id || c.model == "tgi") {
      c.model = options.model_id;
      return "";
    }
    return resolve_adapter(c.model, "");
  }

  void parse_openai_common(Call& c, const json& body, int64_t prompt_tokens, int64_t default_max) {
    std::optional<int64_t> max = get_int(body, "max_completion_tokens", "");
    if (!max) max = get_int(body, "max_tokens", "");
    if (max && *max < 1) throw validation("max_tokens must be at least 1, got " + std::to_string(*max));
    c.request.max_new_tokens = max.value_or(
        std::max<int64_t>(1, std::min(default_max, scheduler.max_total_tokens() - prompt_tokens)));
    const auto temperature = get_number(body, "temperature", "");
    if (temperature && *temperature > 2)
      throw validation("temperature must be in [0, 2], got " + std::to_string(*temperature));
    // OpenAI's default temperature is 1: sampling unless temperature is 0.
    set_sampling(c, true, temperature.value_or(1.0), std::nullopt, get_number(body, "top_p", ""),
                 get_int(body, "seed", ""));
    c.request.stop_strings = get_strings(body, "stop", "");
    check_stop_strings(c.request.stop_strings, "stop");
    // vLLM's extension (llama.cpp's server takes it too): load generators ask for whole budgets.
    c.request.stop_at_eos = !get_bool(body, "ignore_eos", "").value_or(false);
    if (const auto n = get_int(body, "n", ""); n && *n != 1)
      throw validation("n must be 1 here, got " + std::to_string(*n));
    for (const char* k : {"presence_penalty", "frequency_penalty"})
      if (const auto v = get_number(body, k, ""); v && *v != 0)
        throw validation(std::string(k) + " is not supported by this server");
    // Log probabilities (completions: an integer; chat: a bool plus top_logprobs), best_of, a
    // logit bias or a suffix would be missing from the answer: refused rather than ignored.
    if (const json* lp = field(body, "logprobs");
        lp && !(lp->is_boolean() ? !lp->get<bool>() : lp->is_number() && lp->get<double>() == 0))
      throw validation("logprobs is not supported by this server (got " + lp->dump() + ")");
    if (const auto v = get_int(body, "top_logprobs", ""); v && *v != 0)
      throw validation("top_logprobs is not supported by this server (got " + std::to_string(*v) + ")");
    if (const auto v = get_int(body, "best_of", ""); v && *v != 1)
      throw validation("best_of must be 1 here, got " + std::to_string(*v));
    if (const json* bias = field(body, "logit_bias"); bias && !(bias->is_object() && bias->empty()))
      throw validation("logit_bias is not supported by this server");
    if (const auto suffix = get_string(body, "suffix", ""); suffix && !suffix->empty())
      throw validation("suffix is not supported by this server");
    if (const json* rf = field(body, "response_format")) {
      const std::string type = rf->is_object() ? rf->value("type", "") : "";
      if (type == "json_object") {
        c.constraint = json_constraint(nullptr, "response_format");
      } else if (type == "json_schema") {
        const json* js = field(*rf, "json_schema");
        const json* schema = js && js->is_object() ? field(*js, "schema") : nullptr;
        if (!schema) throw validation("response_format json_schema needs json_schema.schema");
        c.constraint = json_constraint(schema, "response_format.json_schema.schema");
      } else if (type != "text") {
        throw validation("response_format.type must be text, json_object or json_schema");
      }
    }
    c.stream = get_bool(body, "stream", "").value_or(false);
    if (const json* so = field(body, "stream_options")) {
      if (!so->is_object())
        throw validation(std::string("stream_options must be an object, got ") + json_type(*so));
      c.include_usage = get_bool(*so, "include_usage", "stream_options.").value_or(false);
    }
  }

  Call parse_completion(const json& body) {
    Call c;
    c.request.adapter = openai_model(c, body);
    const json* prompt = field(body, "prompt");
    if (!prompt) throw validation("prompt is required");
    if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) prompt = &(*prompt)[0];
    if (!prompt->is_string())
      throw validation(std::string("prompt must be a string, got ") + json_type(*prompt));
    c.prompt_text = prompt->get<std::string>();
    if (get_bool(body, "echo", "").value_or(false)) c.full_text = true;
    set_prompt(c, encode_prompt(tokenizer, c.prompt_text));
    parse_openai_common(c, body, static_cast<int64_t>(c.request.prompt_ids.size()), 16);
    return c;
  }

  Call parse_chat(const json& body) {
    Call c;
    c.request.adapter = openai_model(c, body);
    const json* messages = field(body, "messages");
    if (!messages || !messages->is_array() || messages->empty())
      throw validation("messages is required: a non-empty list of {role, content}");
    std::vector<ChatMessage> chat;
    for (size_t i = 0; i < messages->size(); ++i) {
      const json& m = (*messages)[i];
      const std::string w = "messages[" + std::to_string(i) + "].";
      if (!m.is_object())
        throw validation(w.substr(0, w.size() - 1) + " must be an object, got " + json_type(m));
      const auto role = get_string(m, "role", w);
      if (!role) throw validation(w + "role is required");
      std::string content;
      if (const json* ct = field(m, "content")) {
        if (ct->is_string()) {
          content = ct->get<std::string>();
        } else if (ct->is_array()) {
          for (const json& part : *ct) {
            if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
                !part["text"].is_string())
              throw validation(w + "content parts must be {\"type\": \"text\", \"text\": ...}");
            content += part["text"].get<std::string>();
          }
        } else {
          throw validation(w + "content must be a string or a list of text parts, got " + json_type(*ct));
        }
      }
      chat.push_back({*role, content});
    }
    if (tokenizer.chat_template().empty())
      throw validation("the model has no chat template: use /v1/completions with plain text");
    auto spelling = [&](std::optional<int32_t> id) {
      return id ? tokenizer.token_bytes(*id) : std::string();
    };
    const ChatTemplate tmpl = ChatTemplate::from_jinja(
        tokenizer.chat_template(), spelling(tokenizer.bos_id()), spelling(tokenizer.eos_id()));
    c.prompt_text = tmpl.format(chat, true);
    set_prompt(c, tokenizer.encode(c.prompt_text));
    parse_openai_common(c, body, static_cast<int64_t>(c.request.prompt_ids.size()), 1 << 30);
    return c;
  }

  // A JSON constraint: schema (a JSON Schema object) or, when null, any JSON.
  std::unique_ptr<TokenConstraint> json_constraint(const json* schema, const std::string& what) {
    if (!scheduler.structured_output())
      throw validation(
          "structured output is not available in this build (scripts/build_xgrammar, then configure)");
    if (schema && !schema->is_object())
      throw validation(what + " must be a JSON Schema object, got " + json_type(*schema));
    return scheduler.structured_output()->json(schema ? schema->dump() : "");
  }

  std::shared_ptr<RequestStream> submit(Call& c) {
    try {
      return scheduler.submit(c.request, std::move(c.constraint));
    } catch (const OverloadedError& e) {
      ApiError err(e.shutting_down() ? 503 : 429, "overloaded", e.what());
      err.retry_after = 1;
      throw err;
    }
  }

  // Waits for the request's first token (or its end) and takes it; an ApiError (424) when it
  // failed before producing anything, so that the status line can still say so.
  static RequestStream::Update first_update(RequestStream& stream) {
    while (!stream.wait_started(std::chrono::milliseconds(200))) {
    }
    RequestStream::Update u = stream.take(std::chrono::milliseconds(0));
    if (u.done && u.tokens.empty()) {
      if (!u.error.empty()) throw ApiError(424, u.error_type, u.error);
      if (u.result.finish_reason == "cancelled")
        throw ApiError(503, "generation",
                       "the request was cancelled before it started (the server is stopping)");
    }
    return u;
  }

  // Everything: the tokens and the result. ApiError when it failed or was cancelled.
  static std::vector<ServeToken> collect(RequestStream& stream, RequestResult& result) {
    std::vector<ServeToken> tokens;
    for (;;) {
      RequestStream::Update u = stream.take(std::chrono::milliseconds(200));
      for (ServeToken& t : u.tokens) tokens.push_back(std::move(t));
      if (!u.done) continue;
      if (!u.error.empty()) throw ApiError(424, u.error_type, u.error);
      if (u.result.finish_reason == "cancelled")
        throw ApiError(503, "generation", "the request was cancelled (the server is stopping)");
      result = u.result;
      return tokens;
    }
  }

  // Streams events: writer turns an update into zero or more events (one chunk each); the last
  // update (done) must be turned into the last events.
  using Writer = std::function<std::vector<std::string>(RequestStream::Update&)>;
  static void stream_events(httplib::Response& res, std::shared_ptr<RequestStream> stream,
                            RequestStream::Update first, Writer writer) {
    struct State {
      std::shared_ptr<RequestStream> stream;
      std::optional<RequestStream::Update> first;
      Writer writer;
    };
    auto st = std::make_shared<State>(State{std::move(stream), std::move(first), std::move(writer)});
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [st](size_t, httplib::DataSink& sink) {
          for (;;) {
            RequestStream::Update u;
            if (st->first) {
              u = std::move(*st->first);
              st->first.reset();
            } else {
              u = st->stream->take(std::chrono::milliseconds(100));
            }
            for (const std::string& e : st->writer(u)) {
              if (!sink.write(e.data(), e.size())) {
                st->stream->cancel();
                return false;
              }
            }
            if (u.done) {
              sink.done();
              return true;
            }
            if (!sink.is_writable()) {
              st->stream->cancel();
              return false;
            }
          }
        },
        [st](bool success) {
          if (!success) st->stream->cancel();
        });
  }

  static std::string sse(const json& j) {
    return "data:" + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  }

  static const char* tgi_finish(const std::string& reason) {
    if (reason == "eos") return "eos_token";
    if (reason == "stop") return "stop_sequence";
    return "length";
  }
  static const char* openai_finish(const std::string& reason) {
    return reason == "length" ? "length" : "stop";
  }

  static json token_json(const ServeToken& t) {
    return {{"id", t.id},
            {"text", t.text},
            {"logprob", std::isfinite(t.logprob) ? t.logprob : -1e30},
            {"special", t.special}};
  }

  json seed_json(const Call& c) const { return c.seed ? json(*c.seed) : json(nullptr); }

  // ---- LoRAX / TGI ----
  void lorax(const httplib::Request& req, httplib::Response& res, bool stream_default, bool as_list,
             bool force_stream) {
    Call c = parse_lorax(parse_body(req), stream_default);
    if (force_stream) c.stream = true;
    std::shared_ptr<RequestStream> stream = submit(c);
    if (!c.stream) {
      RequestResult r;
      const std::vector<ServeToken> tokens = collect(*stream, r);
      json out = {{"generated_text", (c.full_text ? c.prompt_text : "") + r.text}};
      if (c.details) {
        json toks = json::array();
        for (const ServeToken& t : tokens) toks.push_back(token_json(t));
        out["details"] = {{"finish_reason", tgi_finish(r.finish_reason)},
                          {"prompt_tokens", r.prompt_ids.size()},
                          {"generated_tokens", r.generated_ids.size()},
                          {"skipped_tokens", 0},
                          {"seed", seed_json(c)},
                          {"prefill", json::array()},
                          {"tokens", toks}};
      } else {
        out["details"] = nullptr;
      }
      res.set_content(
          (as_list ? json::array({out}) : out).dump(-1, ' ', false, json::error_handler_t::replace),
          "application/json");
      return;
    }
    RequestStream::Update first = first_update(*stream);
    auto held = std::make_shared<std::optional<ServeToken>>();
    const std::string prefix = c.full_text ? c.prompt_text : "";
    const json seed = seed_json(c);
    stream_events(res, stream, std::move(first), [held, prefix, seed](RequestStream::Update& u) {
      std::vector<std::string> events;
      for (ServeToken& t : u.tokens) {
        // The last token carries the result, which follows it at once: hold it until then.
        if (t.final) {
          *held = std::move(t);
          continue;
        }
        events.push_back(sse({{"token", token_json(t)}, {"generated_text", nullptr}, {"details", nullptr}}));
      }
      if (!u.done) return events;
      if (!u.error.empty()) {
        events.push_back(sse({{"error", u.error}, {"error_type", u.error_type}}));
      } else if (!held->has_value()) {
        events.push_back(sse({{"error", "the request was " + std::string(u.result.finish_reason == "cancelled"
                                                                             ? "cancelled"
                                                                             : "ended without a token")},
                              {"error_type", "generation"}}));
      } else {
        const RequestResult& r = u.result;
        events.push_back(sse({{"token", token_json(**held)},
                              {"generated_text", prefix + r.text},
                              {"details",
                               {{"finish_reason", tgi_finish(r.finish_reason)},
                                {"prompt_tokens", r.prompt_ids.size()},
                                {"generated_tokens", r.generated_ids.size()},
                                {"seed", seed}}}}));
      }
      return events;
    });
  }

  // ---- OpenAI ----
  void openai(const httplib::Request& req, httplib::Response& res, bool chat) {
    const json body = parse_body(req);
    Call c = chat ? parse_chat(body) : parse_completion(body);
    std::shared_ptr<RequestStream> stream = submit(c);
    const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    const char* object = chat ? "chat.completion" : "text_completion";
    auto usage = [](const RequestResult& r) {
      return json{{"prompt_tokens", r.prompt_ids.size()},
                  {"completion_tokens", r.generated_ids.size()},
                  {"total_tokens", r.prompt_ids.size() + r.generated_ids.size()}};
    };
    if (!c.stream) {
      RequestResult r;
      collect(*stream, r);
      const std::string text = (c.full_text ? c.prompt_text : "") + r.text;
      json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", openai_finish(r.finish_reason)}};
      if (chat)
        choice["message"] = {{"role", "assistant"}, {"content", text}};
      else
        choice["text"] = text;
      const json out = {{"id", id},         {"object", object},    {"created", created},
                        {"model", c.model}, {"choices", {choice}}, {"usage", usage(r)}};
      res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
      return;
    }
    RequestStream::Update first = first_update(*stream);
    const std::string chunk_object = chat ? "chat.completion.chunk" : "text_completion";
    const json base = {{"id", id}, {"object", chunk_object}, {"created", created}, {"model", c.model}};
    auto started = std::make_shared<bool>(false);
    const bool include_usage = c.include_usage;
    const std::string echo = c.full_text ? c.prompt_text : "";
    stream_events(res, stream, std::move(first), [=](RequestStream::Update& u) {
      std::vector<std::string> events;
      auto chunk = [&](const std::string& text, const json& finish, bool role) {
        json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}};
        if (chat) {
          json delta = {{"content", text}};
          if (role) delta["role"] = "assistant";
          choice["delta"] = delta;
        } else {
          choice["text"] = text;
        }
        json j = base;
        j["choices"] = json::array({choice});
        if (include_usage) j["usage"] = nullptr;
        return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
      };
      if (!*started) {
        *started = true;
        if (chat || !echo.empty()) events.push_back(chunk(echo, nullptr, true));
      }
      for (const ServeToken& t : u.tokens)
        if (!t.special && !t.text.empty()) events.push_back(chunk(t.text, nullptr, false));
      if (!u.done) return events;
      if (!u.error.empty() || u.result.finish_reason == "cancelled") {
        const json err = {{"error",
                           {{"message", u.error.empty() ? "the request was cancelled" : u.error},
                            {"type", "server_error"},
                            {"param", nullptr},
                            {"code", nullptr}}}};
        events.push_back("data: " + err.dump() + "\n\n");
      } else {
        events.push_back(chunk("", openai_finish(u.result.finish_reason), false));
        if (include_usage) {
          json j = base;
          j["choices"] = json::array();
          j["usage"] = usage(u.result);
          events.push_back("data: " + j.dump() + "\n\n");
        }
      }
      events.push_back("data: [DONE]\n\n");
      return events;
    });
  }

  void info(httplib::Response& res) {
    const ServeStats s = scheduler.stats();
    json j = {{"model_id", options.model_id},
              {"version", "servelab"},
              {"sha", nullptr},
              {"docker_label", nullptr},
              {"max_concurrent_requests", scheduler.options().max_batch + scheduler.options().max_queue},
              {"max_batch_size", scheduler.options().max_batch},
              {"max_queue", scheduler.options().max_queue},
              {"max_total_tokens", scheduler.max_total_tokens()},
              {"max_input_length", scheduler.max_total_tokens() - 1},
              {"max_body_bytes", options.max_body_bytes},
              {"adapters", scheduler.adapter_names()},
              {"adapter_cache", scheduler.options().adapter_cache_capacity},
              {"running", s.running},
              {"waiting", s.waiting},
              {"requests",
               {{"submitted", s.submitted},
                {"finished", s.finished},
                {"cancelled", s.cancelled},
                {"failed", s.failed}}},
              {"generated_tokens", s.generated_tokens},
              {"structured_output", structured_json()},
              {"steps", s.steps}};
    if (!options.model_info.empty()) j["model"] = json::parse(options.model_info, nullptr, false);
    res.set_content(j.dump(), "application/json");
  }

  static double quantile(std::vector<float> v, double q) {
    if (v.empty()) return 0;
    const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  }

  json structured_json() const {
    const StructuredOutput* so = scheduler.structured_output();
    if (!so) return {{"available", false}};
    const StructuredOutputStats st = so->stats();
    return {
        {"available", true},
        {"grammars_compiled", st.grammars},
        {"compile_ms", st.compile_ms},
        {"masked_tokens", st.masked_tokens},
        {"mask_us_mean", st.masked_tokens ? st.mask_us_total / static_cast<double>(st.masked_tokens) : 0.0},
        {"mask_us_max", st.mask_us_max},
        {"fill_us_mean", st.masked_tokens ? st.fill_us_total / static_cast<double>(st.masked_tokens) : 0.0},
        {"mask_us_p50", quantile(st.mask_us, 0.5)},
        {"mask_us_p99", quantile(st.mask_us, 0.99)},
        {"fill_us_p50", quantile(st.fill_us, 0.5)},
        {"fill_us_p99", quantile(st.fill_us, 0.99)}};
  }

  void models(httplib::Response& res) {
    json data = json::array(
        {{{"id", options.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "servelab"}}});
    for (const std::string& a : scheduler.adapter_names())
      data.push_back({{"id", a},
                      {"object", "model"},
                      {"created", 0},
                      {"owned_by", "servelab"},
                      {"parent", options.model_id}});
    res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
  }

  // Runs a handler; its errors become the API's error bodies.
  void guarded(httplib::Response& res, bool openai_errors, const std::function<void()>& handler) {
    auto reply = [&](int status, const std::string& type, const std::string& message, int retry_after) {
      res.status = status;
      if (retry_after > 0) res.set_header("Retry-After", std::to_string(retry_after));
      json body;
      if (openai_errors) {
        body = {{"error",
                 {{"message", message},
                  {"type", status == 429 || status == 503 ? "server_error"
                           : status >= 500                ? "server_error"
                                                          : "invalid_request_error"},
                  {"param", nullptr},
                  {"code", nullptr}}}};
      } else {
        body = {{"error", message}, {"error_type", type}};
      }
      res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
    };
    try {
      handler();
    } catch (const ApiError& e) {
      reply(e.status, e.type, e.what(), e.retry_after);
    } catch (const InputError& e) {
      reply(422, "validation", e.what(), 0);
    } catch (const TokenizerError& e) {
      reply(422, "validation", e.what(), 0);
    } catch (const std::exception& e) {
      reply(500, "generation", e.what(), 0);
    }
  }
};

HttpServer::HttpServer(ServeScheduler& scheduler, const Tokenizer& tokenizer, HttpServerOptions options)
    : impl_(std::make_unique<Impl>(scheduler, tokenizer, std::move(options))) {
  Impl& m = *impl_;
  httplib::Server& s = m.server;
  const int threads =
      m.options.threads > 0
          ? m.options.threads
          : static_cast<int>(scheduler.options().max_batch + scheduler.options().max_queue + 8);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // httplib's default sets SO_REUSEPORT, with which a second server binds a port already in use
  // and the kernel splits the connections between the two: SO_REUSEADDR alone refuses that and
  // still lets a restarted server take its port back from TIME_WAIT.
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.set_payload_max_length(static_cast<size_t>(m.options.max_body_bytes));
  s.set_keep_alive_timeout(1);
  s.set_read_timeout(30);
  auto lorax = [&m](bool stream_default, bool as_list, bool force_stream) {
    return [&m, stream_default, as_list, force_stream](const httplib::Request& req, httplib::Response& res) {
      m.guarded(res, false, [&] { m.lorax(req, res, stream_default, as_list, force_stream); });
    };
  };
  s.Post("/", lorax(false, true, false));
  s.Post("/generate", lorax(false, false, false));
  s.Post("/generate_stream", lorax(true, false, true));
  s.Post("/v1/completions", [&m](const httplib::Request& req, httplib::Response& res) {
    m.guarded(res, true, [&] { m.openai(req, res, false); });
  });
  s.Post("/v1/chat/completions", [&m](const httplib::Request& req, httplib::Response& res) {
    m.guarded(res, true, [&] { m.openai(req, res, true); });
  });
  s.Get("/info", [&m](const httplib::Request&, httplib::Response& res) { m.info(res); });
  s.Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });
  s.Get("/v1/models", [&m](const httplib::Request&, httplib::Response& res) { m.models(res); });
  s.Get("/metrics", [&m](const httplib::Request&, httplib::Response& res) {
    res.set_content(prometheus_text(m.scheduler.metrics(), m.options.model_id),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  // httplib's own refusals (413 body too large, 404, 400) get a JSON body too.
  s.set_error_handler([&m](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    const bool openai = req.path.rfind("/v1/", 0) == 0;
    std::string message = res.status == 413 ? "the body is larger than the server's limit of " +
                                                  std::to_string(m.options.max_body_bytes) + " bytes"
                          : res.status == 404 ? "no such endpoint: " + req.method + " " + req.path
                                              : "bad request (HTTP " + std::to_string(res.status) + ")";
    const json body = openai ? json{{"error",
                                     {{"message", message},
                                      {"type", "invalid_request_error"},
                                      {"param", nullptr},
                                      {"code", nullptr}}}}
                             : json{{"error", message}, {"error_type", "validation"}};
    res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string message = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    res.status = 500;
    res.set_content(json{{"error", message}, {"error_type", "generation"}}.dump(
                        -1, ' ', false, json::error_handler_t::replace),
                    "application/json");
  });
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  httplib::Server& s = impl_->server;
  if (impl_->options.port == 0) {
    port_ = s.bind_to_any_port(impl_->options.host);
    if (port_ <= 0) throw InputError("cannot listen on " + impl_->options.host + " (any port)");
  } else {
    if (impl_->options.port < 0 || impl_->options.port > 65535 ||
        !s.bind_to_port(impl_->options.host, impl_->options.port))
      throw InputError("cannot listen on " + impl_->options.host + ":" + std::to_string(impl_->options.port) +
                       " (in use, or not an address of this machine)");
    port_ = impl_->options.port;
  }
  return port_;
}

void HttpServer::serve() { impl_->server.listen_after_bind(); }

bool HttpServer::running() const { return impl_->server.is_running(); }

void HttpServer::stop() {
  if (impl_->server.is_running()) impl_->server.stop();
}

}  // namespace servelab

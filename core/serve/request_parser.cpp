#include "serve/request_parser.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>

#include "serve/openai_fields.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/prompt.h"

namespace servelab {

using nlohmann::json;

ApiError validation_error(const std::string& message) { return ApiError(422, "validation", message); }

namespace {

ApiError validation(const std::string& message) { return validation_error(message); }

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
  // Above INT64_MAX get<int64_t>() would wrap to a negative number and blame the wrong value.
  if (v->is_number_unsigned() &&
      v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw validation(where + key + " is too large: at most " +
                     std::to_string(std::numeric_limits<int64_t>::max()) + ", got " + v->dump());
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

// An object's "type" when it is a string, else "": the caller's message then names the shapes it
// takes (json::value() would throw a type_error, a 500, for {"type": 1}).
std::string type_of(const json& obj) {
  const auto it = obj.find("type");
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
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

// The body as a JSON object. The depth limit comes first: everything after (dump(), the schema
// compiler) recurses over the tree, and a 2 MiB body of brackets would overflow the stack.
json parse_body(std::string_view text) {
  json body;
  try {
    body = json::parse(text, [](int depth, json::parse_event_t, json&) {
      if (depth > kMaxJsonDepth)
        throw validation("the body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      return true;
    });
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number past double's range (1e309).
    throw validation(std::string("the body is not valid JSON: ") + e.what());
  }
  if (!body.is_object())
    throw validation(std::string("the body must be a JSON object, got ") + json_type(body));
  return body;
}

uint64_t random_seed() {
  static std::atomic<uint64_t> counter{0};
  return (static_cast<uint64_t>(std::random_device{}()) << 20) ^ counter++;
}

class Parser {
 public:
  explicit Parser(const RequestParserContext& context) : ctx_(context), tokenizer_(*context.tokenizer) {}

  // The adapter a LoRAX/TGI request names; an unknown one is a 422 there, as LoRAX answers it.
  std::string adapter(const std::string& id, const std::string& source) const {
    try {
      return resolve(id, source);
    } catch (const ApiError& e) {
      if (e.status() == 404) throw validation(e.what());
      throw;
    }
  }
  // The scheduler's name for an adapter; ApiError 404 when it is unknown (OpenAI's model not found).
  std::string resolve(const std::string& id, const std::string& source) const {
    if (id.empty()) return "";
    if (!ctx_.resolve_adapter)
      throw ApiError(404, "not_found", "this server has no adapters: unknown adapter '" + id + "'");
    return ctx_.resolve_adapter(id, source);
  }

  // Both APIs: stop strings, sampling, seed.
  void set_sampling(ParsedRequest& c, bool sample, std::optional<double> temperature,
                    std::optional<int64_t> top_k, std::optional<double> top_p, std::optional<int64_t> seed) {
    SamplingParams& p = c.request.sampling;
    // A JSON number beyond the double range that got this far would be infinite.
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
    c.seed = seed ? static_cast<uint64_t>(*seed) : (ctx_.fresh_seed ? ctx_.fresh_seed() : random_seed());
    p.seed = *c.seed;
  }

  // The penalties (greedy decoding too): repetition > 0 (1: off), presence and frequency in
  // [-2, 2] (0: off), each refused by its name `w + key` outside its range.
  void set_penalties(ParsedRequest& c, const json& p, const std::string& w) {
    SamplingParams& s = c.request.sampling;
    if (const auto rp = get_number(p, "repetition_penalty", w)) {
      if (!(*rp > 0 && *rp <= 100))
        throw validation(w + "repetition_penalty must be in (0, 100] (1: off), got " + std::to_string(*rp));
      s.repetition_penalty = *rp;
    }
    for (const char* k : {"presence_penalty", "frequency_penalty"})
      if (const auto v = get_number(p, k, w)) {
        if (!(*v >= -2 && *v <= 2))
          throw validation(w + k + " must be in [-2, 2], got " + std::to_string(*v));
        (std::string(k) == "presence_penalty" ? s.presence_penalty : s.frequency_penalty) = *v;
      }
  }

  void set_logprobs(ParsedRequest& c, int64_t alternatives) {
    c.logprobs = alternatives;
    c.request.sampling.top_logprobs = alternatives;
  }

  void set_prompt(ParsedRequest& c, std::vector<int32_t> ids) {
    if (ids.empty()) throw validation("the prompt is empty: it needs at least one token");
    c.request.prompt_ids = std::move(ids);
  }

  // LoRAX / TGI: {"inputs", "parameters": {...}, "stream"}.
  ParsedRequest parse_lorax(const json& body, bool stream_default) {
    ParsedRequest c;
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
    set_penalties(c, p, w);
    if (const auto best_of = get_int(p, "best_of", w); best_of && *best_of != 1)
      throw validation("parameters.best_of must be 1 here, got " + std::to_string(*best_of));
    if (get_bool(p, "watermark", w).value_or(false))
      throw validation("parameters.watermark is not supported");
    // Asked-for extras the answer would silently lack: refused rather than ignored.
    if (const auto v = get_int(p, "return_k_alternatives", w); v && *v != 0)
      throw validation(w + "return_k_alternatives is not supported by this server (got " +
                       std::to_string(*v) + ")");
    if (const auto n = get_int(p, "top_n_tokens", w); n && *n != 0) {
      if (*n < 0 || *n > 20)
        throw validation(w + "top_n_tokens must be in [0, 20], got " + std::to_string(*n));
      set_logprobs(c, *n);
    }
    if (get_bool(p, "decoder_input_details", w).value_or(false))
      throw validation("parameters.decoder_input_details is not supported by this server");
    if (field(p, "merged_adapters"))
      throw validation("parameters.merged_adapters is not supported by this server");
    if (const json* rf = field(p, "response_format")) {
      // LoRAX: {"type": "json_object", "schema": {...}}; no schema: any JSON.
      if (!rf->is_object() || type_of(*rf) != "json_object")
        throw validation("parameters.response_format must be {\"type\": \"json_object\", \"schema\": {...}}");
      c.constraint = json_constraint(field(*rf, "schema"), "parameters.response_format.schema");
    } else if (const json* g = field(p, "grammar")) {
      // TGI: {"type": "json", "value": schema}; regular expressions are not supported.
      if (!g->is_object() || type_of(*g) != "json")
        throw validation(
            "parameters.grammar must be {\"type\": \"json\", \"value\": schema} (regex is not supported)");
      c.constraint = json_constraint(field(*g, "value"), "parameters.grammar.value");
    }
    if (const auto truncate = get_int(p, "truncate", w); truncate && *truncate < 1)
      throw validation("parameters.truncate must be at least 1, got " + std::to_string(*truncate));
    const std::string adapter_id = get_string(p, "adapter_id", w).value_or("");
    const std::string source = get_string(p, "adapter_source", w).value_or("");
    c.request.adapter = adapter(adapter_id, source);
    std::vector<int32_t> ids = encode_prompt(tokenizer_, c.prompt_text);
    if (const auto truncate = get_int(p, "truncate", w);
        truncate && static_cast<int64_t>(ids.size()) > *truncate)
      ids.erase(ids.begin(), ids.end() - *truncate);
    set_prompt(c, std::move(ids));
    return c;
  }

  // The adapter an OpenAI "model" names: the base model (its id, "tgi", or nothing) or an adapter.
  std::string openai_model(ParsedRequest& c, const json& body) {
    c.model = get_string(body, "model", "").value_or(ctx_.model_id);
    if (c.model.empty() || c.model == ctx_.model_id || c.model == "tgi") {
      c.model = ctx_.model_id;
      return "";
    }
    return resolve(c.model, "");
  }

  void parse_openai_common(ParsedRequest& c, const json& body, int64_t prompt_tokens, int64_t default_max,
                           bool chat) {
    std::optional<int64_t> max = get_int(body, "max_completion_tokens", "");
    if (!max) max = get_int(body, "max_tokens", "");
    if (max && *max < 1) throw validation("max_tokens must be at least 1, got " + std::to_string(*max));
    c.request.max_new_tokens =
        max.value_or(std::max<int64_t>(1, std::min(default_max, ctx_.max_total_tokens - prompt_tokens)));
    const auto temperature = get_number(body, "temperature", "");
    if (temperature && *temperature > 2)
      throw validation("temperature must be in [0, 2], got " + std::to_string(*temperature));
    // OpenAI's default temperature is 1: sampling unless temperature is 0. top_k and min_p are
    // vLLM's extensions (top_k -1 or 0: off, as vLLM takes them).
    std::optional<int64_t> top_k = get_int(body, "top_k", "");
    if (top_k && (*top_k == -1 || *top_k == 0)) top_k.reset();
    set_sampling(c, true, temperature.value_or(1.0), top_k, get_number(body, "top_p", ""),
                 get_int(body, "seed", ""));
    if (const auto min_p = get_number(body, "min_p", "")) {
      if (!(*min_p >= 0 && *min_p <= 1))
        throw validation("min_p must be in [0, 1], got " + std::to_string(*min_p));
      if (!c.request.sampling.greedy) c.request.sampling.min_p = *min_p;
    }
    set_penalties(c, body, "");
    c.request.stop_strings = get_strings(body, "stop", "");
    check_stop_strings(c.request.stop_strings, "stop");
    // vLLM's extension (llama.cpp's server takes it too): load generators ask for whole budgets.
    c.request.stop_at_eos = !get_bool(body, "ignore_eos", "").value_or(false);
    if (const auto n = get_int(body, "n", ""); n && *n != 1)
      throw validation("n must be 1 here, got " + std::to_string(*n));
    // Log-probabilities: chat takes logprobs (a bool) and top_logprobs, completions logprobs: N.
    if (chat) {
      const bool on = get_bool(body, "logprobs", "").value_or(false);
      const auto top = get_int(body, "top_logprobs", "");
      if (top && (*top < 0 || *top > 20))
        throw validation("top_logprobs must be in [0, 20], got " + std::to_string(*top));
      if (top && *top > 0 && !on) throw validation("top_logprobs needs logprobs: true");
      if (on) set_logprobs(c, top.value_or(0));
    } else {
      if (const auto n = get_int(body, "logprobs", "")) {
        if (*n < 0 || *n > 20) throw validation("logprobs must be in [0, 20], got " + std::to_string(*n));
        set_logprobs(c, *n);
      }
      if (const auto v = get_int(body, "top_logprobs", ""); v && *v != 0)
        throw validation("top_logprobs is a chat completions field; completions take logprobs: N");
    }
    // best_of, a logit bias or a suffix would be missing from the answer: refused, not ignored.
    if (const auto v = get_int(body, "best_of", ""); v && *v != 1)
      throw validation("best_of must be 1 here, got " + std::to_string(*v));
    if (const json* bias = field(body, "logit_bias"); bias && !(bias->is_object() && bias->empty()))
      throw validation("logit_bias is not supported by this server");
    if (const auto suffix = get_string(body, "suffix", ""); suffix && !suffix->empty())
      throw validation("suffix is not supported by this server");
    if (const json* rf = field(body, "response_format")) {
      const std::string type = rf->is_object() ? type_of(*rf) : "";
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
    // vLLM's guided_json: a JSON Schema, as an object or as its text.
    if (const json* g = field(body, "guided_json")) {
      if (c.constraint) throw validation("give response_format or guided_json, not both");
      json schema = *g;
      if (g->is_string()) {
        schema = json::parse(g->get<std::string>(), nullptr, false);
        if (schema.is_discarded()) throw validation("guided_json is a string that is not JSON");
      }
      if (!schema.is_object())
        throw validation(std::string("guided_json must be a JSON Schema object, got ") + json_type(schema));
      c.constraint = json_constraint(&schema, "guided_json");
    }
    c.stream = get_bool(body, "stream", "").value_or(false);
    if (const json* so = field(body, "stream_options")) {
      if (!so->is_object())
        throw validation(std::string("stream_options must be an object, got ") + json_type(*so));
      c.include_usage = get_bool(*so, "include_usage", "stream_options.").value_or(false);
    }
  }

  ParsedRequest parse_completion(const json& body) {
    refuse_unimplemented_openai_fields(body, /*chat=*/false);
    ParsedRequest c;
    c.request.adapter = openai_model(c, body);
    const json* prompt = field(body, "prompt");
    if (!prompt) throw validation("prompt is required");
    if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) prompt = &(*prompt)[0];
    if (!prompt->is_string())
      throw validation(std::string("prompt must be a string, got ") + json_type(*prompt));
    c.prompt_text = prompt->get<std::string>();
    if (get_bool(body, "echo", "").value_or(false)) c.full_text = true;
    set_prompt(c, encode_prompt(tokenizer_, c.prompt_text));
    parse_openai_common(c, body, static_cast<int64_t>(c.request.prompt_ids.size()), 16, /*chat=*/false);
    return c;
  }

  ParsedRequest parse_chat(const json& body) {
    refuse_unimplemented_openai_fields(body, /*chat=*/true);
    ParsedRequest c;
    c.request.adapter = openai_model(c, body);
    c.prompt_text = chat_text(chat_messages(body), true, template_options(body));
    set_prompt(c, tokenizer_.encode(c.prompt_text));
    parse_openai_common(c, body, static_cast<int64_t>(c.request.prompt_ids.size()), 1 << 30, /*chat=*/true);
    return c;
  }

  // vLLM's /tokenize, completion form ({"prompt"}) or chat form ({"messages"}).
  json tokenize(const json& body) {
    for (const char* name : {"chat_template", "continue_final_message", "tools", "mm_processor_kwargs"})
      if (field(body, name))
        throw validation(std::string(name) + " is not supported here: the model's own chat template is used");
    ParsedRequest unused;
    openai_model(unused, body);
    const json* messages = field(body, "messages");
    const json* prompt = field(body, "prompt");
    if (messages && prompt) throw validation("give prompt or messages, not both");
    std::vector<int32_t> ids;
    if (messages) {
      const bool generation_prompt = get_bool(body, "add_generation_prompt", "").value_or(true);
      const std::string text = chat_text(chat_messages(body), generation_prompt, template_options(body));
      // The template writes its special tokens as text; add_special_tokens adds bos besides.
      ids = get_bool(body, "add_special_tokens", "").value_or(false) ? encode_prompt(tokenizer_, text)
                                                                     : tokenizer_.encode(text);
    } else {
      if (!prompt) throw validation("prompt or messages is required");
      if (!prompt->is_string())
        throw validation(std::string("prompt must be a string, got ") + json_type(*prompt));
      const std::string text = prompt->get<std::string>();
      ids = get_bool(body, "add_special_tokens", "").value_or(true) ? encode_prompt(tokenizer_, text)
                                                                    : tokenizer_.encode(text);
    }
    json out = {{"count", ids.size()},
                {"max_model_len", ctx_.max_total_tokens},
                {"tokens", ids},
                {"token_strs", nullptr}};
    if (get_bool(body, "return_token_strs", "").value_or(false)) {
      json strs = json::array();
      for (const int32_t id : ids) strs.push_back(tokenizer_.token_display(id));
      out["token_strs"] = strs;
    }
    return out;
  }

  // vLLM's /detokenize: {"tokens": [ids]}.
  json detokenize(const json& body) {
    ParsedRequest unused;
    openai_model(unused, body);
    const json* tokens = field(body, "tokens");
    if (!tokens) throw validation("tokens is required: a list of token ids");
    if (!tokens->is_array())
      throw validation(std::string("tokens must be a list, got ") + json_type(*tokens));
    std::vector<int32_t> ids;
    ids.reserve(tokens->size());
    for (size_t i = 0; i < tokens->size(); ++i) {
      const json& t = (*tokens)[i];
      const std::string w = "tokens[" + std::to_string(i) + "]";
      if (!t.is_number_integer()) throw validation(w + " must be an integer, got " + json_type(t));
      const int64_t id =
          t.is_number_unsigned() &&
                  t.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
              ? -1
              : t.get<int64_t>();
      if (id < 0 || id >= tokenizer_.vocab_size())
        throw validation(w + " is " + t.dump() + ": token ids are in [0, " +
                         std::to_string(tokenizer_.vocab_size()) + ")");
      ids.push_back(static_cast<int32_t>(id));
    }
    return {{"prompt", tokenizer_.decode(ids)}};
  }

  // A chat body's messages: each {role, content}, content a string or a list of text parts.
  std::vector<ChatMessage> chat_messages(const json& body) {
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
            if (!part.is_object() || type_of(part) != "text" || !part.contains("text") ||
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
    return chat;
  }

  // The messages in the model's own chat template.
  std::string chat_text(const std::vector<ChatMessage>& chat, bool add_generation_prompt,
                        const ChatTemplateOptions& options = {}) {
    if (tokenizer_.chat_template().empty())
      throw validation("the model has no chat template: use /v1/completions with plain text");
    try {
      return chat_prompt(tokenizer_, chat, add_generation_prompt, options);
    } catch (const InputError& e) {
      if (options.enable_thinking) throw validation(std::string("chat_template_kwargs.") + e.what());
      throw;
    }
  }

  // vLLM's chat_template_kwargs: the template variables a request may set. Only Qwen3's
  // enable_thinking is one here; any other is refused by name rather than ignored.
  ChatTemplateOptions template_options(const json& body) {
    ChatTemplateOptions o;
    const json* kw = field(body, "chat_template_kwargs");
    if (!kw) return o;
    if (!kw->is_object())
      throw validation(std::string("chat_template_kwargs must be an object, got ") + json_type(*kw));
    for (const auto& [key, value] : kw->items()) {
      if (key != "enable_thinking")
        throw validation("chat_template_kwargs." + key +
                         " is not supported: the only template variable here is enable_thinking (Qwen3's)");
      if (value.is_null()) continue;
      if (!value.is_boolean())
        throw validation(std::string("chat_template_kwargs.enable_thinking must be a boolean, got ") +
                         json_type(value));
      o.enable_thinking = value.get<bool>();
    }
    return o;
  }

  // A JSON constraint: schema (a JSON Schema object) or, when null, any JSON.
  std::unique_ptr<TokenConstraint> json_constraint(const json* schema, const std::string& what) {
    if (!ctx_.json_constraint)
      throw validation(
          "structured output is not available in this build (scripts/build_xgrammar, then configure)");
    if (schema && !schema->is_object())
      throw validation(what + " must be a JSON Schema object, got " + json_type(*schema));
    return ctx_.json_constraint(schema ? schema->dump() : "");
  }

 private:
  const RequestParserContext& ctx_;
  const Tokenizer& tokenizer_;
};

}  // namespace

std::string tokenize_api(std::string_view body, const RequestParserContext& context, bool detokenize) {
  if (!context.tokenizer) throw InputError("tokenize_api: no tokenizer in the context");
  Parser parser(context);
  const json j = parse_body(body);
  const json out = detokenize ? parser.detokenize(j) : parser.tokenize(j);
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

ParsedRequest parse_api_request(ApiEndpoint endpoint, std::string_view body,
                                const RequestParserContext& context) {
  if (!context.tokenizer) throw InputError("parse_api_request: no tokenizer in the context");
  Parser parser(context);
  const json j = parse_body(body);
  switch (endpoint) {
    case ApiEndpoint::LoraxRoot:
    case ApiEndpoint::Generate:
      return parser.parse_lorax(j, false);
    case ApiEndpoint::GenerateStream: {
      ParsedRequest c = parser.parse_lorax(j, true);
      c.stream = true;
      return c;
    }
    case ApiEndpoint::Completions:
      return parser.parse_completion(j);
    case ApiEndpoint::ChatCompletions:
      return parser.parse_chat(j);
  }
  throw InputError("parse_api_request: unknown endpoint");
}

}  // namespace servelab

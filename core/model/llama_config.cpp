#include "model/llama_config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "util/errors.h"

namespace servelab {
namespace {

using nlohmann::json;

json read_json_file(const std::string& path, std::string* file_out) {
  std::string file = path;
  struct stat st {};
  // A folder stands for its config.json; a folder named config.json is not one.
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
      std::filesystem::path(path).filename() != "config.json")
    file = path + "/config.json";
  if (const std::string why = file_problem(file); !why.empty())
    throw ModelFormatError("config.json at " + file + ": " + why);
  *file_out = file;
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw ModelFormatError("config.json at " + file + ": " +
                           (err == ENOENT ? std::string("not found") : std::string(std::strerror(err))));
  }
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw ModelFormatError("config.json at " + file + ": not valid JSON: " + e.what());
  }
}

class Reader {
 public:
  Reader(const json& j, std::string source) : j_(j), source_(std::move(source)) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw ModelFormatError("config.json at " + source_ + ": " + what);
  }
  const json* find(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t positive(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    const json* v = find(key);
    if (!v) {
      if (fallback) return *fallback;
      fail(std::string("missing key \"") + key + "\"");
    }
    if (!v->is_number_integer() || v->get<int64_t>() <= 0 || v->get<int64_t>() > (int64_t{1} << 40))
      fail(std::string("key \"") + key + "\" must be a positive integer, got " + v->dump());
    return v->get<int64_t>();
  }
  double positive_number(const char* key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_number() || !(v->get<double>() > 0))
      fail(std::string("key \"") + key + "\" must be a positive number, got " + v->dump());
    return v->get<double>();
  }
  bool flag(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(std::string("key \"") + key + "\" must be true or false, got " + v->dump());
    return v->get<bool>();
  }

 private:
  const json& j_;
  std::string source_;
};

}  // namespace

int64_t LlamaConfig::num_parameters() const {
  const int64_t E = hidden_size, F = intermediate_size, D = head_dim;
  const int64_t attn = E * n_head * D * 2 + E * n_kv_head * D * 2 +
                       (attention_bias ? n_head * D + 2 * n_kv_head * D : 0) + (o_bias ? E : 0);
  const int64_t mlp = 3 * E * F + (mlp_bias ? 2 * F + E : 0);
  const int64_t per_layer = attn + mlp + (gemma_norms ? 4 : 2) * E + (qk_norm ? 2 * D : 0);
  return vocab_size * E * (tie_word_embeddings ? 1 : 2) + n_layer * per_layer + E;
}

nlohmann::json LlamaConfig::to_json() const {
  json j;
  j["model_type"] = model_type;
  static const std::map<std::string, std::string> kClasses = {
      {"qwen2", "Qwen2ForCausalLM"},        {"qwen3", "Qwen3ForCausalLM"},
      {"mistral", "MistralForCausalLM"},    {"gemma2", "Gemma2ForCausalLM"},
      {"gemma3_text", "Gemma3ForCausalLM"}, {"phi3", "Phi3ForCausalLM"}};
  const auto cls = kClasses.find(model_type);
  j["architectures"] = {cls != kClasses.end() ? cls->second : "LlamaForCausalLM"};
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = n_layer;
  j["num_attention_heads"] = n_head;
  j["num_key_value_heads"] = n_kv_head;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = context;
  j["rms_norm_eps"] = rms_norm_eps;
  j["rope_theta"] = rope_theta;
  j["hidden_act"] = hidden_act;
  if (sliding_window > 0) {
    j["sliding_window"] = sliding_window;
    if (!sliding_layers.empty()) {
      json types = json::array();
      for (bool slides : sliding_layers) types.push_back(slides ? "sliding_attention" : "full_attention");
      j["layer_types"] = types;
    }
  }
  if (local_rope_theta > 0) j["rope_local_base_freq"] = local_rope_theta;
  if (rotary_dim > 0 && rotary_dim != head_dim)
    j["partial_rotary_factor"] = static_cast<double>(rotary_dim) / static_cast<double>(head_dim);
  if (query_pre_attn_scalar > 0) j["query_pre_attn_scalar"] = query_pre_attn_scalar;
  if (attn_logit_softcap > 0) j["attn_logit_softcapping"] = attn_logit_softcap;
  if (final_logit_softcap > 0) j["final_logit_softcapping"] = final_logit_softcap;
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["attention_bias"] = attention_bias;
  j["mlp_bias"] = mlp_bias;
  if (!rope_scaling.type.empty()) {
    json r = {{"rope_type", rope_scaling.type}, {"factor", rope_scaling.factor}};
    if (rope_scaling.type == "llama3") {
      r["low_freq_factor"] = rope_scaling.low_freq_factor;
      r["high_freq_factor"] = rope_scaling.high_freq_factor;
      r["original_max_position_embeddings"] = rope_scaling.original_context;
    }
    j["rope_scaling"] = r;
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["bos_token_id"] = bos_token_id >= 0 ? json(bos_token_id) : json(nullptr);
  j["eos_token_id"] = eos_token_ids.size() == 1 ? json(eos_token_ids.front()) : json(eos_token_ids);
  return j;
}

LlamaConfig llama_config_from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw ModelFormatError("config.json at " + source + ": not a JSON object");
  Reader r(j, source);
  std::string model_type = "llama";
  if (const json* t = r.find("model_type"); t && t->is_string()) model_type = t->get<std::string>();
  if (model_type != "llama" && model_type != "mistral" && model_type != "qwen2")
    r.fail("model_type \"" + model_type + "\" is not a Llama-family model (llama, mistral, qwen2)");
  return llama_family_config_from_json(j, source);
}

LlamaConfig llama_family_config_from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw ModelFormatError("config.json at " + source + ": not a JSON object");
  Reader r(j, source);
  LlamaConfig c;
  if (const json* t = r.find("model_type"); t && t->is_string()) c.model_type = t->get<std::string>();
  if (const json* a = r.find("hidden_act")) {
    if (!a->is_string() || (a->get<std::string>() != "silu" && a->get<std::string>() != "gelu_pytorch_tanh"))
      r.fail("hidden_act " + a->dump() + " is not supported (supported: silu, gelu_pytorch_tanh)");
    c.hidden_act = a->get<std::string>();
  }
  c.vocab_size = r.positive("vocab_size");
  c.hidden_size = r.positive("hidden_size");
  c.intermediate_size = r.positive("intermediate_size");
  c.n_layer = r.positive("num_hidden_layers");
  c.n_head = r.positive("num_attention_heads");
  c.n_kv_head = r.positive("num_key_value_heads", c.n_head);
  if (c.n_head % c.n_kv_head != 0)
    r.fail("num_attention_heads " + std::to_string(c.n_head) + " is not a multiple of num_key_value_heads " +
           std::to_string(c.n_kv_head));
  if (!r.find("head_dim") && c.hidden_size % c.n_head != 0)
    r.fail("hidden_size " + std::to_string(c.hidden_size) + " is not a multiple of num_attention_heads " +
           std::to_string(c.n_head));
  c.head_dim = r.positive("head_dim", c.hidden_size / c.n_head);
  if (c.head_dim % 2 != 0)
    r.fail("head_dim " + std::to_string(c.head_dim) + " must be even for rotary embeddings");
  c.context = r.positive("max_position_embeddings", 2048);
  // Sliding windows: Mistral's and Phi-3's on every layer, Qwen2's and Qwen3's only with
  // use_sliding_window (on the layers from max_window_layers on), Gemma's where layer_types says;
  // Llama has none.
  const bool qwen = c.model_type == "qwen2" || c.model_type == "qwen3";
  if (c.model_type != "llama" && r.find("sliding_window") && (!qwen || r.flag("use_sliding_window", false))) {
    c.sliding_window = r.positive("sliding_window");
    if (const json* types = r.find("layer_types"); types && c.model_type != "mistral") {
      if (!types->is_array() || static_cast<int64_t>(types->size()) != c.n_layer)
        r.fail("layer_types must list one type per layer (" + std::to_string(c.n_layer) + "), got " +
               types->dump());
      for (const json& t : *types) {
        const std::string type = t.is_string() ? t.get<std::string>() : t.dump();
        if (type != "sliding_attention" && type != "full_attention")
          r.fail("layer type \"" + type +
                 "\" is not supported (supported: sliding_attention, full_attention)");
        c.sliding_layers.push_back(type == "sliding_attention");
      }
    } else if (qwen) {
      const int64_t from = r.positive("max_window_layers", c.n_layer);
      for (int64_t l = 0; l < c.n_layer; ++l) c.sliding_layers.push_back(l >= from);
    }
  }
  c.rms_norm_eps = r.positive_number("rms_norm_eps", 1e-6);
  // transformers 5 writes rope_parameters (rope_theta and the scaling in one object); older
  // configs have rope_theta beside rope_scaling.
  const json* rope_params = r.find("rope_parameters");
  if (rope_params && !rope_params->is_object())
    r.fail("rope_parameters must be an object, got " + rope_params->dump());
  c.rope_theta =
      rope_params ? Reader(*rope_params, source + " rope_parameters").positive_number("rope_theta", 10000.0)
                  : r.positive_number("rope_theta", 10000.0);
  // Phi's partial rotary embedding: the first head_dim * partial_rotary_factor dimensions turn.
  const json* partial = rope_params && rope_params->contains("partial_rotary_factor")
                            ? &(*rope_params)["partial_rotary_factor"]
                            : r.find("partial_rotary_factor");
  if (partial && !partial->is_null()) {
    if (!partial->is_number() || partial->get<double>() <= 0 || partial->get<double>() > 1)
      r.fail("partial_rotary_factor must be in (0, 1], got " + partial->dump());
    c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * partial->get<double>());
    if (c.rotary_dim < 2 || c.rotary_dim % 2 != 0)
      r.fail("partial_rotary_factor " + partial->dump() + " gives " + std::to_string(c.rotary_dim) +
             " rotary dimensions; an even number of at least 2 is needed");
    if (c.rotary_dim == c.head_dim) c.rotary_dim = 0;
  }
  c.tie_word_embeddings = r.flag("tie_word_embeddings", false);
  c.attention_bias = r.flag("attention_bias", c.model_type == "qwen2");
  c.o_bias = c.model_type == "qwen2" ? false : c.attention_bias;
  c.mlp_bias = r.flag("mlp_bias", false);
  if (const json* s = rope_params ? rope_params : r.find("rope_scaling")) {
    if (!s->is_object()) r.fail("rope_scaling must be an object or null, got " + s->dump());
    std::string type = s->value("rope_type", s->value("type", std::string()));
    if (type == "default") type.clear();
    if (!type.empty() && type != "linear" && type != "llama3")
      r.fail("rope_scaling type \"" + type + "\" is not supported (supported: linear, llama3)");
    c.rope_scaling.type = type;
    if (!type.empty()) {
      Reader rs(*s, source + " rope_scaling");
      c.rope_scaling.factor = rs.positive_number("factor", 1.0);
      if (type == "llama3") {
        c.rope_scaling.low_freq_factor = rs.positive_number("low_freq_factor", 1.0);
        c.rope_scaling.high_freq_factor = rs.positive_number("high_freq_factor", 4.0);
        if (c.rope_scaling.high_freq_factor <= c.rope_scaling.low_freq_factor)
          r.fail("rope_scaling high_freq_factor must exceed low_freq_factor");
        c.rope_scaling.original_context = rs.positive("original_max_position_embeddings", 8192);
      }
    }
  }
  auto token_id = [&](const json& v, const char* key) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.vocab_size)
      r.fail(std::string("key \"") + key + "\" must hold token ids below vocab_size " +
             std::to_string(c.vocab_size) + ", got " + v.dump());
    return v.get<int64_t>();
  };
  if (const json* b = r.find("bos_token_id")) c.bos_token_id = token_id(*b, "bos_token_id");
  if (const json* e = r.find("eos_token_id")) {
    if (e->is_array()) {
      for (const json& x : *e) c.eos_token_ids.push_back(token_id(x, "eos_token_id"));
    } else {
      c.eos_token_ids.push_back(token_id(*e, "eos_token_id"));
    }
  }
  return c;
}

LlamaConfig llama_family_config_of_type(const std::string& path, const std::string& model_type,
                                        const std::string& architecture) {
  std::string file;
  const json j = read_json_file(path, &file);
  LlamaConfig c = llama_family_config_from_json(j, file);
  if (c.model_type != model_type)
    throw ModelFormatError("config.json at " + file + ": model_type \"" + c.model_type + "\" is not " +
                           model_type);
  c.architecture = architecture;
  return c;
}

nlohmann::json read_llama_family_json(const std::string& path, std::string* file) {
  return read_json_file(path, file);
}

LlamaConfig parse_llama_config(const std::string& path) {
  std::string file;
  const json j = read_json_file(path, &file);
  return llama_config_from_json(j, file);
}

std::string read_model_type(const std::string& folder) {
  std::string file;
  const json j = read_json_file(folder, &file);
  if (!j.is_object())
    throw ModelFormatError("config.json at " + file + ": must be a JSON object, got " +
                           (j.is_array() ? "an array" : std::string("a ") + j.type_name()));
  if (!j.contains("model_type") || !j["model_type"].is_string())
    throw ModelFormatError("config.json at " + file + ": missing key \"model_type\"");
  return j["model_type"].get<std::string>();
}

}  // namespace servelab

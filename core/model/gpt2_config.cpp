#include "model/gpt2_config.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/errors.h"

namespace servelab {
namespace {

using nlohmann::json;

constexpr const char* kActivations[] = {"gelu_new", "gelu_pytorch_tanh", "gelu", "relu"};

std::string in_quotes(const std::string& s) { return "\"" + s + "\""; }

std::string excerpt(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Builds the errors of one config, all prefixed alike so the user sees which file is at fault.
class Checker {
 public:
  Checker(const json& j, const std::string& source) : j_(j), source_(source) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ModelFormatError("config.json at " + source_ + ": " + what);
  }

  // The first of `keys` present (HF renamed some keys over the years; the GPT-2 names come first).
  const json* lookup(std::initializer_list<const char*> keys, std::string* found) const {
    for (const char* k : keys) {
      if (auto it = j_.find(k); it != j_.end()) {
        *found = k;
        return &*it;
      }
    }
    return nullptr;
  }

  // JSON parsed from text holds non-negative integers as unsigned, JSON built in code as signed.
  int64_t positive_int(const std::string& key, const json& v) const {
    const bool ok = v.is_number_unsigned()
                        ? v.get<uint64_t>() > 0 && v.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)
                        : v.is_number_integer() && v.get<int64_t>() > 0;
    if (!ok) fail("key " + in_quotes(key) + " must be a positive integer, got " + excerpt(v));
    return v.get<int64_t>();
  }

  int64_t required_int(std::initializer_list<const char*> keys) const {
    std::string found;
    const json* v = lookup(keys, &found);
    if (!v) {
      std::string msg = "missing key " + in_quotes(*keys.begin());
      if (keys.size() > 1) {
        msg += " (or";
        for (auto it = keys.begin() + 1; it != keys.end(); ++it) msg += " " + in_quotes(*it);
        msg += ")";
      }
      fail(msg);
    }
    return positive_int(found, *v);
  }

  const json* optional(const char* key) const {
    auto it = j_.find(key);
    return it == j_.end() ? nullptr : &*it;
  }

  void read_bool(const char* key, bool* out) const {
    const json* v = optional(key);
    if (!v) return;
    if (!v->is_boolean()) fail("key " + in_quotes(key) + " must be true or false, got " + excerpt(*v));
    *out = v->get<bool>();
  }

  // Token ids: null means the model has none (-1); otherwise an id inside the vocabulary.
  void read_token_id(const char* key, int64_t vocab_size, int64_t* out) const {
    const json* v = optional(key);
    if (!v) return;
    if (v->is_null()) {
      *out = -1;
      return;
    }
    if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() >= vocab_size)
      fail("key " + in_quotes(key) + " must be a token id in [0, " + std::to_string(vocab_size) + "), got " +
           excerpt(*v));
    *out = v->get<int64_t>();
  }

 private:
  const json& j_;
  const std::string& source_;
};

}  // namespace

int64_t Gpt2Config::inner_dim() const { return n_inner > 0 ? n_inner : 4 * n_embd; }

int64_t Gpt2Config::head_dim() const { return n_embd / n_head; }

int64_t Gpt2Config::num_parameters() const {
  const int64_t e = n_embd, m = inner_dim();
  const int64_t embeddings = vocab_size * e + n_positions * e;  // wte (shared with lm_head) + wpe
  const int64_t layer_norm = 2 * e;                             // weight + bias
  const int64_t attention = (e * 3 * e + 3 * e) + (e * e + e);  // c_attn + c_proj
  const int64_t mlp = (e * m + m) + (m * e + e);                // c_fc + c_proj
  const int64_t block = 2 * layer_norm + attention + mlp;
  return embeddings + n_layer * block + layer_norm;  // + ln_f
}

Gpt2Config Gpt2Config::gpt2_small() { return Gpt2Config{}; }

nlohmann::json Gpt2Config::to_json() const {
  json j = {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", model_type},
            {"vocab_size", vocab_size},
            {"n_positions", n_positions},
            {"n_embd", n_embd},
            {"n_layer", n_layer},
            {"n_head", n_head},
            {"n_inner", nullptr},
            {"layer_norm_epsilon", layer_norm_epsilon},
            {"activation_function", activation_function},
            {"bos_token_id", nullptr},
            {"eos_token_id", nullptr},
            {"scale_attn_weights", scale_attn_weights},
            {"scale_attn_by_inverse_layer_idx", scale_attn_by_inverse_layer_idx},
            {"reorder_and_upcast_attn", reorder_and_upcast_attn}};
  if (n_inner > 0) j["n_inner"] = n_inner;
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_id >= 0) j["eos_token_id"] = eos_token_id;
  return j;
}

Gpt2Config gpt2_config_from_json(const nlohmann::json& j, const std::string& source_name) {
  const Checker c(j, source_name);
  if (!j.is_object()) c.fail("expected a JSON object, got " + excerpt(j));

  Gpt2Config cfg;
  // model_type first: a llama config would otherwise fail on a missing GPT-2 key, which misleads.
  if (const json* v = c.optional("model_type")) {
    if (!v->is_string() || v->get<std::string>() != "gpt2")
      c.fail("model_type " + excerpt(*v) + " is not supported (only \"gpt2\")");
    cfg.model_type = v->get<std::string>();
  }

  cfg.n_embd = c.required_int({"n_embd", "hidden_size"});
  cfg.n_layer = c.required_int({"n_layer", "num_hidden_layers"});
  cfg.n_head = c.required_int({"n_head", "num_attention_heads"});
  cfg.vocab_size = c.required_int({"vocab_size"});
  cfg.n_positions = c.required_int({"n_positions", "n_ctx"});
  if (cfg.n_embd % cfg.n_head != 0)
    c.fail("n_embd " + std::to_string(cfg.n_embd) + " is not divisible by n_head " +
           std::to_string(cfg.n_head));

  if (const json* v = c.optional("n_inner"); v && !v->is_null()) cfg.n_inner = c.positive_int("n_inner", *v);

  if (const json* v = c.optional("layer_norm_epsilon")) {
    if (!v->is_number() || !(v->get<double>() > 0) || !std::isfinite(v->get<double>()))
      c.fail("key \"layer_norm_epsilon\" must be a positive number, got " + excerpt(*v));
    cfg.layer_norm_epsilon = v->get<double>();
  }

  if (const json* v = c.optional("activation_function")) {
    bool known = false;
    for (const char* a : kActivations) known = known || (v->is_string() && v->get<std::string>() == a);
    if (!known) {
      std::string list;
      for (const char* a : kActivations) list += (list.empty() ? "" : ", ") + std::string(a);
      c.fail("activation_function " + excerpt(*v) + " is not supported (supported: " + list + ")");
    }
    cfg.activation_function = v->get<std::string>();
  }

  c.read_token_id("bos_token_id", cfg.vocab_size, &cfg.bos_token_id);
  c.read_token_id("eos_token_id", cfg.vocab_size, &cfg.eos_token_id);
  c.read_bool("scale_attn_weights", &cfg.scale_attn_weights);
  c.read_bool("scale_attn_by_inverse_layer_idx", &cfg.scale_attn_by_inverse_layer_idx);
  c.read_bool("reorder_and_upcast_attn", &cfg.reorder_and_upcast_attn);
  return cfg;
}

Gpt2Config parse_gpt2_config(const std::string& path) {
  std::string file = path;
  struct stat st {};
  // A folder stands for its config.json; a folder named config.json is not one.
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) &&
      std::filesystem::path(path).filename() != "config.json")
    file = path + "/config.json";
  if (const std::string why = file_problem(file); !why.empty())
    throw ModelFormatError("config.json at " + file + ": " + why);

  std::ifstream in(file, std::ios::binary);
  if (!in) {
    const int err = errno;
    throw ModelFormatError("config.json at " + file + ": " +
                           (err == ENOENT ? std::string("not found") : std::string(std::strerror(err))));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ModelFormatError("config.json at " + file + ": read failed");
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {
    throw ModelFormatError("config.json at " + file + ": not valid JSON: " + e.what());
  }
  return gpt2_config_from_json(j, file);
}

}  // namespace servelab

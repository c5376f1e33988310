#pragma once
// Helpers shared by the engine test suites (libtorch side).
#include <ATen/ATen.h>

#include <QString>
#include <cstdlib>
#include <functional>
#include <string>

#include "tokenizer/tokenizer.h"
#include "util/cpu_features.h"
#include "util/errors.h"

namespace servelab::test {

// Runs our kernels under `isa` for the scope, then restores the ISA they ran before.
class IsaScope {
 public:
  explicit IsaScope(Isa isa) : before_(active_isa()) { set_active_isa(isa, "test"); }
  ~IsaScope() { set_active_isa(before_, "test"); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;

 private:
  Isa before_;
};

// A tokenizer over bare ids for models with a made-up vocabulary (the oracle checkpoints).
class IdTokenizer : public Tokenizer {
 public:
  IdTokenizer(int32_t vocab, int32_t eos) : vocab_(vocab), eos_(eos) {}
  std::vector<int32_t> encode(std::string_view) const override {
    throw TokenizerError("IdTokenizer cannot encode");
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids) s += token_bytes(id);
    return s;
  }
  std::string token_bytes(int32_t id) const override { return "<" + std::to_string(id) + ">"; }
  std::string token_display(int32_t id) const override { return token_bytes(id); }
  int32_t vocab_size() const override { return vocab_; }
  std::optional<int32_t> eos_id() const override { return eos_; }
  std::string kind() const override { return "ids"; }

 private:
  int32_t vocab_, eos_;
};

// One token per byte, with the chat template given (none by default): the server's request
// parsing and chat formatting without a model.
class ByteTokenizer : public Tokenizer {
 public:
  explicit ByteTokenizer(std::string chat_template = "") : template_(std::move(chat_template)) {}
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string s;
    for (int32_t id : ids) s += static_cast<char>(id);
    return s;
  }
  std::string token_bytes(int32_t id) const override { return std::string(1, static_cast<char>(id)); }
  std::string token_display(int32_t id) const override { return token_bytes(id); }
  int32_t vocab_size() const override { return 256; }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  const std::string& chat_template() const override { return template_; }
  std::string kind() const override { return "bytes"; }

 private:
  std::string template_;
};

inline std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// The message of the servelab::Error of kind `kind` that fn throws, or a marker no check matches.
inline std::string error_of(ErrorKind kind, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    if (e.kind() != kind)
      return std::string("<wrong kind: ") + error_kind_name(e.kind()) + ": " + e.what() + ">";
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a servelab::Error: ") + e.what() + ">";
  }
  return "<no exception>";
}

inline double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kFloat) - b.to(at::kFloat)).abs().max().item<double>();
}

}  // namespace servelab::test

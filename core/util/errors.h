#pragma once
// Typed errors of the engine. Every message names the file, field or value at fault, so the
// GUI can show it as is and the CLI can print it as its one line.
#include <stdexcept>
#include <string>

namespace servelab {

enum class ErrorKind { ModelFormat, Tokenizer, Input, OutOfMemory, Cancelled, Device };

const char* error_kind_name(ErrorKind kind);

// Why `path` cannot be read as a file ("not found", "is a directory, expected a file", "cannot
// open: <reason>"), or an empty string when it can. Readers check it first, so that a folder
// where a file belongs is named as such instead of surfacing as a stream's read error.
std::string file_problem(const std::string& path);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

// A model file or folder is missing, truncated, corrupt or not a GPT-2 the engine understands.
class ModelFormatError : public Error {
 public:
  explicit ModelFormatError(const std::string& m) : Error(ErrorKind::ModelFormat, m) {}
};
// Tokenizer files are missing or malformed, or a text cannot be tokenized.
class TokenizerError : public Error {
 public:
  explicit TokenizerError(const std::string& m) : Error(ErrorKind::Tokenizer, m) {}
};
// A request the engine cannot serve: empty or too-long prompt, impossible batch size, bad option.
class InputError : public Error {
 public:
  explicit InputError(const std::string& m) : Error(ErrorKind::Input, m) {}
};
// The device ran out of memory; the engine stays usable.
class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(const std::string& m) : Error(ErrorKind::OutOfMemory, m) {}
};
// The user stopped the run.
class CancelledError : public Error {
 public:
  explicit CancelledError(const std::string& m = "run cancelled") : Error(ErrorKind::Cancelled, m) {}
};
// The requested device or dtype is not available here.
class DeviceError : public Error {
 public:
  explicit DeviceError(const std::string& m) : Error(ErrorKind::Device, m) {}
};

}  // namespace servelab

#include "util/errors.h"

namespace servelab {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::ModelFormat:
      return "model format error";
    case ErrorKind::Tokenizer:
      return "tokenizer error";
    case ErrorKind::Input:
      return "input error";
    case ErrorKind::OutOfMemory:
      return "out of memory";
    case ErrorKind::Cancelled:
      return "cancelled";
    case ErrorKind::Device:
      return "device error";
  }
  return "error";
}

}  // namespace servelab

#include "util/errors.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace servelab {

std::string file_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return errno == ENOENT ? std::string("not found") : std::string("cannot open: ") + std::strerror(errno);
  if (S_ISDIR(st.st_mode)) return "is a directory, expected a file";
  if (!S_ISREG(st.st_mode)) return "is not a regular file";
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::string("cannot open: ") + std::strerror(errno);
  return {};
}

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

#pragma once
// The fuzz input as a file the readers can open by path and map: an anonymous in-memory file
// (memfd) rewritten for each input and opened as /proc/self/fd/N, so the fuzzers run the readers'
// real open() (stat, mmap) without touching the disk.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace servelab::fuzz {

class FuzzInputFile {
 public:
  explicit FuzzInputFile(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  FuzzInputFile(const FuzzInputFile&) = delete;
  FuzzInputFile& operator=(const FuzzInputFile&) = delete;
  ~FuzzInputFile() { ::close(fd_); }

  // Replaces the file's contents with the input.
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0 ||
        (size > 0 && ::pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size))) {
      std::perror("writing the fuzz input");
      std::abort();
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

// Reads every byte, so that a span outside the mapping is an ASan report (or a fault) here.
inline uint8_t touch(const void* data, size_t nbytes) {
  const auto* p = static_cast<const volatile uint8_t*>(data);
  uint8_t x = 0;
  for (size_t i = 0; i < nbytes; ++i) x = static_cast<uint8_t>(x ^ p[i]);
  return x;
}

// A broken invariant of a reader that accepted the input: a finding, even without a sanitizer report.
#define FUZZ_CHECK(cond)                                                            \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                 \
    }                                                                               \
  } while (0)

}  // namespace servelab::fuzz

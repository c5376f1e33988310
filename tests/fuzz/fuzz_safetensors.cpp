// libFuzzer target for SafetensorsFile (scripts/fuzz safetensors). Any input must either open or be
// refused with a servelab::Error; an accepted file must hold every tensor's bytes inside it, matching
// its dtype and shape. Anything else (another exception, a sanitizer report, a crash, a failed
// FUZZ_CHECK) is a finding.
#include <cstddef>
#include <cstdint>

#include "fuzz_input_file.h"
#include "model/safetensors_file.h"
#include "util/errors.h"

using namespace servelab;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::FuzzInputFile input("fuzz.safetensors");
  const std::string& path = input.write(data, size);
  try {
    const SafetensorsFile f = SafetensorsFile::open(path);
    FUZZ_CHECK(f.file_size() == size);
    size_t total = 0;
    for (const StTensor& t : f.tensors()) {
      FUZZ_CHECK(f.find(t.name) != nullptr);
      FUZZ_CHECK(t.numel() >= 0 && static_cast<size_t>(t.numel()) * dtype_size(t.dtype) == t.nbytes);
      total += t.nbytes;
      FUZZ_CHECK(total <= size - 8);  // the tensors do not overlap and the data follows the 8-byte length
      (void)fuzz::touch(t.data, t.nbytes);
    }
    for (const auto& [key, value] : f.metadata()) (void)fuzz::touch(value.data(), value.size());
  } catch (const Error&) {
    // A refusal is the expected outcome for most inputs.
  }
  return 0;
}

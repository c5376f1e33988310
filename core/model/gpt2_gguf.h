#pragma once
// A GPT-2 out of a GGUF file (llama.cpp's "gpt2" architecture): the config from the gpt2.*
// metadata, the weights dequantized from any block type the reader knows and put back into Hugging
// Face's Conv1D layout ([in, out]), which llama.cpp's converter transposed to [out, in].
#include <ATen/ATen.h>

#include "model/gguf_file.h"
#include "model/gpt2_config.h"
#include "model/gpt2_weights.h"

namespace servelab {

// ModelFormatError naming the file and key for a missing or inconsistent value.
Gpt2Config gpt2_config_from_gguf(const GgufFile& file);

// ModelFormatError naming the file and tensor for a missing tensor or a shape the metadata does
// not imply.
Gpt2Weights load_gpt2_gguf(const GgufFile& file, const Gpt2Config& config, at::Device device,
                           at::ScalarType dtype);

}  // namespace servelab

#pragma once
// Writes seeded random GPT-2 weights as a Hugging Face GPT-2 folder (config.json,
// model.safetensors, vocab.json + merges.txt). The CLI's export-demo uses it for the built-in
// model; tests use it for tiny models with GPT-2's real vocabulary. Torch-free header.
#include <cstdint>
#include <string>

#include "model/gpt2_config.h"

namespace servelab {

// A GPT-2-vocabulary model small enough to build and run in milliseconds: 2 layers, 4 heads,
// 32 wide, 256 positions.
Gpt2Config tiny_gpt2_config();

// tokenizer_dir: a folder with vocab.json and merges.txt (empty: default_tokenizer_dir()).
void export_random_gpt2_folder(const std::string& dir, const Gpt2Config& config, std::uint64_t seed,
                               const std::string& tokenizer_dir = "");

}  // namespace servelab

#pragma once
// Where ServeLab's read-only data (the built-in model, GPT-2's tokenizer) is found. Torch-free.
#include <filesystem>
#include <string>
#include <vector>

namespace servelab {

// The folders searched for data, in order:
//   1. <folder of the running executable>/../share/servelab: an installed tree, wherever it lies;
//   2. $XDG_DATA_HOME/servelab (default ~/.local/share/servelab);
//   3. each $XDG_DATA_DIRS entry + /servelab (default /usr/local/share and /usr/share).
// Inside each: gpt2/{vocab.json,merges.txt} and models/<name>.gguf. (The engine tries the build
// tree's copy, compiled in, after these: see default_model_path.)
std::vector<std::filesystem::path> data_dirs();

// The first of data_dirs() that holds every one of relatives; empty when none does.
std::filesystem::path find_data_dir(const std::vector<std::string>& relatives);

// data_dirs() as one line for error messages: "a, b, c".
std::string data_dirs_text();

// Whether the build tree's copies of the data (paths compiled into the engine and the built-in
// adapters) are searched after data_dirs(): CMake's SERVELAB_BUILD_TREE_DATA, OFF for packages.
bool build_tree_data_allowed();

}  // namespace servelab

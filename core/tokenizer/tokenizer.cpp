#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "tokenizer/gpt2_bpe_tokenizer.h"
#include "tokenizer/sentencepiece_tokenizer.h"

namespace servelab {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path folder(dir);
  if (!fs::is_directory(folder, ec)) {
    throw TokenizerError("tokenizer folder '" + dir + "' does not exist or is not a folder");
  }
  const auto has = [&](const char* name) { return fs::is_regular_file(folder / name, ec); };
  if (has("tokenizer.json"))
    return Gpt2BpeTokenizer::from_tokenizer_json((folder / "tokenizer.json").string());
  if (has("vocab.json") && has("merges.txt")) {
    return Gpt2BpeTokenizer::from_vocab_merges((folder / "vocab.json").string(),
                                               (folder / "merges.txt").string());
  }
  // SentencePiece: prefer the conventional name, else the first *.model in name order.
  std::vector<fs::path> models;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    if (entry.is_regular_file(ec) && entry.path().extension() == ".model") models.push_back(entry.path());
  }
  if (!models.empty()) {
    std::sort(models.begin(), models.end());
    const auto named = std::find_if(models.begin(), models.end(),
                                    [](const fs::path& p) { return p.filename() == "tokenizer.model"; });
    return std::make_unique<SentencePieceTokenizer>(
        (named != models.end() ? *named : models.front()).string());
  }
  std::string msg = "no tokenizer in folder '" + dir +
                    "': looked for tokenizer.json, vocab.json + merges.txt, or a SentencePiece *.model file";
  if (has("vocab.json")) msg += " (vocab.json is there but merges.txt is missing)";
  if (has("merges.txt")) msg += " (merges.txt is there but vocab.json is missing)";
  throw TokenizerError(msg);
}

}  // namespace servelab

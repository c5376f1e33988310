#include "tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "tokenizer/utf8.h"

namespace servelab {

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  std::string path;

  void check_id(int32_t id) const {
    if (id < 0 || id >= sp.GetPieceSize()) {
      throw TokenizerError("token id " + std::to_string(id) + " is out of range (vocabulary size " +
                           std::to_string(sp.GetPieceSize()) + " of " + path + ")");
    }
  }
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : impl_(std::make_unique<Impl>()) {
  impl_->path = model_path;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(model_path, ec)) {
    throw TokenizerError(model_path + ": SentencePiece model file not found");
  }
  const auto status = impl_->sp.Load(model_path);
  if (!status.ok()) {
    throw TokenizerError(model_path + ": not a valid SentencePiece model (" + status.ToString() + ")");
  }
  if (impl_->sp.GetPieceSize() <= 0) throw TokenizerError(model_path + ": SentencePiece model has no pieces");
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  utf8::check_valid(text, "encode");
  std::vector<int> ids;
  const auto status = impl_->sp.Encode(text, &ids);
  if (!status.ok()) throw TokenizerError("encode with " + impl_->path + " failed: " + status.ToString());
  return {ids.begin(), ids.end()};
}

std::string SentencePieceTokenizer::decode(const std::vector<int32_t>& ids) const {
  for (const int32_t id : ids) impl_->check_id(id);
  std::string text;
  const auto status = impl_->sp.Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  if (!status.ok()) throw TokenizerError("decode with " + impl_->path + " failed: " + status.ToString());
  return text;
}

std::string SentencePieceTokenizer::token_bytes(int32_t id) const {
  impl_->check_id(id);
  const auto& sp = impl_->sp;
  if (sp.IsControl(id)) return {};
  if (sp.IsUnknown(id) || sp.IsByte(id)) {
    // Byte pieces are spelled <0xAB>; decoding the piece alone would turn a lone byte into U+FFFD.
    const std::string& piece = sp.IdToPiece(id);
    if (sp.IsByte(id) && piece.size() == 6)
      return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    std::string text;
    if (sp.Decode(std::vector<int>{id}, &text).ok()) return text;
    return piece;
  }
  std::string piece = sp.IdToPiece(id);
  // "▁" (U+2581) is SentencePiece's space.
  static constexpr std::string_view kSpace = "\xE2\x96\x81";
  std::string out;
  out.reserve(piece.size());
  for (size_t i = 0; i < piece.size();) {
    if (std::string_view(piece).substr(i, kSpace.size()) == kSpace) {
      out.push_back(' ');
      i += kSpace.size();
    } else {
      out.push_back(piece[i++]);
    }
  }
  return out;
}

std::string SentencePieceTokenizer::token_display(int32_t id) const {
  impl_->check_id(id);
  return impl_->sp.IdToPiece(id);
}

int32_t SentencePieceTokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }

std::optional<int32_t> SentencePieceTokenizer::eos_id() const {
  const int id = impl_->sp.eos_id();
  if (id < 0) return std::nullopt;
  return id;
}

}  // namespace servelab

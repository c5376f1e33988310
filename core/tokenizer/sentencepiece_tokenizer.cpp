#include "tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "tokenizer/utf8.h"

namespace servelab {

struct SentencePieceTokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
  std::string path;
  std::optional<int32_t> bos, eos;
  std::vector<int32_t> stops;
  bool add_bos = false;
  std::string chat_template;

  // The id of a piece the config names; TokenizerError naming the config file when absent.
  int32_t piece_id(const std::string& piece, const char* field, const std::string& source) const {
    const int id = sp.PieceToId(piece);
    if (id < 0 || sp.IdToPiece(id) != piece) {
      throw TokenizerError(source + ": " + field + " '" + piece + "' is not a piece of " + path);
    }
    return id;
  }

  void check_id(int32_t id) const {
    if (id < 0 || id >= sp.GetPieceSize()) {
      throw TokenizerError("token id " + std::to_string(id) + " is out of range (vocabulary size " +
                           std::to_string(sp.GetPieceSize()) + " of " + path + ")");
    }
  }
};

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path, const TokenizerConfig& config)
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
  if (impl_->sp.bos_id() >= 0) impl_->bos = impl_->sp.bos_id();
  if (impl_->sp.eos_id() >= 0) impl_->eos = impl_->sp.eos_id();
  if (config.bos_token) impl_->bos = impl_->piece_id(*config.bos_token, "bos_token", config.source);
  if (config.eos_token) impl_->eos = impl_->piece_id(*config.eos_token, "eos_token", config.source);
  impl_->add_bos = config.add_bos.value_or(impl_->bos.has_value());
  impl_->chat_template = config.chat_template;
  if (impl_->eos) impl_->stops.push_back(*impl_->eos);
  for (const int32_t id : config.eos_ids) {
    impl_->check_id(id);
    if (std::find(impl_->stops.begin(), impl_->stops.end(), id) == impl_->stops.end())
      impl_->stops.push_back(id);
  }
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
    if (sp.IsByte(id) && piece.size() == 6 && std::isxdigit(static_cast<unsigned char>(piece[3])) &&
        std::isxdigit(static_cast<unsigned char>(piece[4])))
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

std::optional<int32_t> SentencePieceTokenizer::eos_id() const { return impl_->eos; }
std::optional<int32_t> SentencePieceTokenizer::bos_id() const { return impl_->bos; }
std::vector<int32_t> SentencePieceTokenizer::stop_ids() const { return impl_->stops; }
bool SentencePieceTokenizer::add_bos() const { return impl_->add_bos; }
const std::string& SentencePieceTokenizer::chat_template() const { return impl_->chat_template; }

}  // namespace servelab

#include "tokenizer/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
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

SentencePieceTokenizer::SentencePieceTokenizer() : impl_(std::make_unique<Impl>()) {}

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path, const TokenizerConfig& config)
    : SentencePieceTokenizer() {
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
  configure(config);
}

void SentencePieceTokenizer::configure(const TokenizerConfig& config) {
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

namespace {

// Protocol-buffer wire format, just what a sentencepiece.ModelProto needs: libsentencepiece
// builds its model from serialized bytes, and Debian ships no header for the message classes.
struct ProtoWriter {
  std::string out;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  }
  void key(int field, int wire) { varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire)); }
  void integer(int field, int64_t v) {  // int32, enum and bool fields (negative values as int64 does)
    key(field, 0);
    varint(static_cast<uint64_t>(v));
  }
  void bytes(int field, std::string_view b) {
    key(field, 2);
    varint(b.size());
    out.append(b);
  }
  void float32(int field, float f) {
    key(field, 5);
    char le[4];
    std::memcpy(le, &f, 4);  // little-endian hosts only, as the GGUF reader
    out.append(le, 4);
  }
};

// sentencepiece_model.proto's field numbers.
enum : int {
  kModelPieces = 1,
  kModelTrainerSpec = 2,
  kModelNormalizerSpec = 3,
  kPiecePiece = 1,
  kPieceScore = 2,
  kPieceType = 3,
  kTrainerModelType = 3,
  kTrainerVocabSize = 4,
  kTrainerByteFallback = 35,
  kTrainerUnkId = 40,
  kTrainerBosId = 41,
  kTrainerEosId = 42,
  kTrainerPadId = 43,
  kTrainerUnkPiece = 45,
  kTrainerBosPiece = 46,
  kTrainerEosPiece = 47,
  kNormalizerName = 1,
  kNormalizerAddDummyPrefix = 3,
  kNormalizerRemoveExtraWhitespaces = 4,
  kNormalizerEscapeWhitespaces = 5,
};
constexpr int kModelTypeBpe = 2;
constexpr int32_t kTypeNormal = 1, kTypeUnknown = 2, kTypeControl = 3, kTypeByte = 6;

std::string serialize_model(const SentencePieceVocabulary& v, std::optional<int32_t> unk) {
  const auto n = static_cast<int64_t>(v.pieces.size());
  ProtoWriter model;
  bool bytes = false;
  for (int64_t i = 0; i < n; ++i) {
    ProtoWriter piece;
    piece.bytes(kPiecePiece, v.pieces[static_cast<size_t>(i)]);
    piece.float32(kPieceScore, v.scores[static_cast<size_t>(i)]);
    // The unknown piece as libsentencepiece needs it, whatever type the file gave it (see below).
    piece.integer(kPieceType, unk && i == *unk ? kTypeUnknown : v.types[static_cast<size_t>(i)]);
    model.bytes(kModelPieces, piece.out);
    bytes = bytes || v.types[static_cast<size_t>(i)] == kTypeByte;
  }
  ProtoWriter trainer;
  trainer.integer(kTrainerModelType, kModelTypeBpe);
  trainer.integer(kTrainerVocabSize, n);
  trainer.integer(kTrainerByteFallback, bytes ? 1 : 0);
  // The processor finds unk/bos/eos by piece text; the ids say the same for readers of the proto.
  auto special = [&](int id_field, int piece_field, std::optional<int32_t> id) {
    trainer.integer(id_field, id ? *id : -1);
    if (id) trainer.bytes(piece_field, v.pieces[static_cast<size_t>(*id)]);
  };
  special(kTrainerUnkId, kTrainerUnkPiece, unk);
  special(kTrainerBosId, kTrainerBosPiece, v.bos_id);
  special(kTrainerEosId, kTrainerEosPiece, v.eos_id);
  trainer.integer(kTrainerPadId, -1);
  model.bytes(kModelTrainerSpec, trainer.out);
  // Llama's tokenizers: no normalization, spaces kept as they are, "▁" for a space.
  ProtoWriter normalizer;
  normalizer.bytes(kNormalizerName, "identity");
  normalizer.integer(kNormalizerAddDummyPrefix, v.add_space_prefix ? 1 : 0);
  normalizer.integer(kNormalizerRemoveExtraWhitespaces, 0);
  normalizer.integer(kNormalizerEscapeWhitespaces, 1);
  model.bytes(kModelNormalizerSpec, normalizer.out);
  return model.out;
}

}  // namespace

std::unique_ptr<SentencePieceTokenizer> SentencePieceTokenizer::from_vocabulary(
    const SentencePieceVocabulary& v, const TokenizerConfig& config) {
  const std::string& src = v.source;
  const size_t n = v.pieces.size();
  if (n == 0) throw TokenizerError(src + ": the SentencePiece vocabulary is empty");
  if (v.scores.size() != n || v.types.size() != n)
    throw TokenizerError(src + ": the SentencePiece vocabulary has " + std::to_string(n) + " pieces but " +
                         std::to_string(v.scores.size()) + " scores and " + std::to_string(v.types.size()) +
                         " token types");
  std::optional<int32_t> unk = v.unk_id;
  for (size_t i = 0; i < n; ++i) {
    const int32_t t = v.types[i];
    if (t < kTypeNormal || t > kTypeByte)
      throw TokenizerError(src + ": token " + std::to_string(i) + " has type " + std::to_string(t) +
                           " (SentencePiece types are 1 to 6)");
    if (!std::isfinite(v.scores[i]))
      throw TokenizerError(src + ": token " + std::to_string(i) + " has a score that is not finite");
    if (t == kTypeUnknown && !unk) unk = static_cast<int32_t>(i);
  }
  for (const auto& [name, id] : {std::pair{"unknown", unk}, {"bos", v.bos_id}, {"eos", v.eos_id}}) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= n))
      throw TokenizerError(src + ": the " + std::string(name) + " token id " + std::to_string(*id) +
                           " is outside the vocabulary of " + std::to_string(n));
  }
  // llama.cpp's Gemma converter marks <unk> as a control token and names it with
  // tokenizer.ggml.unknown_token_id: a piece the file names is the unknown piece if it is of the
  // unknown or the control type (llama.cpp reads the id alone).
  if (!unk || (v.types[static_cast<size_t>(*unk)] != kTypeUnknown &&
               v.types[static_cast<size_t>(*unk)] != kTypeControl))
    throw TokenizerError(src + ": the SentencePiece vocabulary has no piece of the unknown type");
  for (const auto& [name, id] : {std::pair{"bos", v.bos_id}, {"eos", v.eos_id}}) {
    if (id && v.types[static_cast<size_t>(*id)] != kTypeControl)
      throw TokenizerError(src + ": the " + std::string(name) + " token " + std::to_string(*id) + " ('" +
                           v.pieces[static_cast<size_t>(*id)] + "') is not a control token");
  }
  std::unique_ptr<SentencePieceTokenizer> tok(new SentencePieceTokenizer());
  Impl& impl = *tok->impl_;
  impl.path = src;
  const auto status = impl.sp.LoadFromSerializedProto(serialize_model(v, unk));
  if (!status.ok())
    throw TokenizerError(src + ": libsentencepiece refused the vocabulary (" + status.ToString() + ")");
  impl.bos = v.bos_id;
  impl.eos = v.eos_id;
  tok->configure(config);
  return tok;
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

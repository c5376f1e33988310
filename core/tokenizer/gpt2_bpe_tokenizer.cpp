#include "tokenizer/gpt2_bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "tokenizer/utf8.h"

namespace servelab {
namespace {

using json = nlohmann::json;

// GPT-2's pre-tokenizer regex. HF tokenizers runs it with Oniguruma, whose Unicode \s and \S are
// the White_Space property; PCRE2's UCP \s differs (it also takes U+180E), so the property is
// spelled out. Everything else is the original pattern.
constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
    R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";

// HF's BPE caches words shorter than this many bytes, up to this many entries; then it stops adding.
constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kCacheCapacity = 10000;

// GPT-2's bytes_to_unicode(): printable bytes stand for themselves, the other 68 bytes are moved
// to U+0100 and up, in byte order. So every byte has a visible character and no token has spaces.
std::array<char32_t, 256> make_byte_to_unicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

const std::array<char32_t, 256>& byte_to_unicode() {
  static const std::array<char32_t, 256> table = make_byte_to_unicode();
  return table;
}

// Inverse of byte_to_unicode() for the 256 code points it uses (all below U+0144).
std::optional<uint8_t> unicode_to_byte(char32_t cp) {
  static const std::array<int, 0x144> inverse = [] {
    std::array<int, 0x144> inv{};
    inv.fill(-1);
    for (int b = 0; b < 256; ++b) inv[byte_to_unicode()[b]] = b;
    return inv;
  }();
  if (cp >= inverse.size() || inverse[cp] < 0) return std::nullopt;
  return static_cast<uint8_t>(inverse[cp]);
}

// Raw bytes of a vocabulary string, as HF's ByteLevel decoder gets them: each character mapped
// back to its byte, or, when some character is not one of the 256, the string's own UTF-8 bytes.
std::string vocab_string_to_bytes(const std::string& token) {
  std::string bytes;
  size_t i = 0;
  while (i < token.size()) {
    const auto b0 = static_cast<uint8_t>(token[i]);
    char32_t cp = 0;
    size_t len = 1;
    if (b0 < 0x80) {
      cp = b0;
    } else if ((b0 & 0xE0) == 0xC0 && i + 1 < token.size()) {
      cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | (static_cast<uint8_t>(token[i + 1]) & 0x3F);
      len = 2;
    } else {
      return token;  // a character beyond U+07FF is never one of the 256
    }
    const auto b = unicode_to_byte(cp);
    if (!b) return token;
    bytes.push_back(static_cast<char>(*b));
    i += len;
  }
  return bytes;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError(path + ": cannot open tokenizer file (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw TokenizerError(path + ": read error");
  return ss.str();
}

json parse_json(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw TokenizerError(path + ": malformed JSON: " + e.what());
  }
}

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = true;
};

struct MergeRule {
  uint32_t rank;
  int32_t new_id;
};

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// One piece of the input after added tokens are cut out: either an added token or plain text.
struct Segment {
  size_t begin;
  size_t end;
  int32_t added_id;  // -1 for plain text
};

// What both loaders collect before building the tokenizer.
struct RawTokenizer {
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<size_t> merge_lines;  // line (merges.txt) or index (tokenizer.json) of each merge
  std::vector<AddedToken> added;
  std::string vocab_source;
  std::string merges_source;
  bool merges_are_lines = true;
};

// Length in bytes of the character at `i` of valid UTF-8.
size_t char_length(std::string_view s, size_t i) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  return b0 < 0x80 ? 1 : b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : 2;
}

// Start of the code point that ends at `end` (exclusive) in valid UTF-8.
size_t code_point_before(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  return i;
}

}  // namespace

struct Gpt2BpeTokenizer::Impl {
  std::vector<std::string> id_bytes;    // raw bytes of each token
  std::vector<std::string> id_display;  // the vocabulary's spelling
  std::array<int32_t, 256> byte_id{};   // token of each single byte
  std::unordered_map<uint64_t, MergeRule> merges;
  // Added tokens, in HF's two passes: those matched on the raw text (normalized == false), then
  // those matched on the normalized text (no normalizer here, so the same text).
  std::vector<AddedToken> raw_added;
  std::vector<AddedToken> normalized_added;
  std::optional<int32_t> eos;

  pcre2_code* regex = nullptr;
  bool jit = false;
  // Rust regex's \w and \s, for the single_word, lstrip and rstrip options of added tokens.
  pcre2_code* word_char = nullptr;
  pcre2_code* space_char = nullptr;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  // Checks the collected vocabulary, merges and added tokens and builds the lookup tables.
  static std::unique_ptr<Impl> build(RawTokenizer raw);

  ~Impl() {
    if (regex) pcre2_code_free(regex);
    if (word_char) pcre2_code_free(word_char);
    if (space_char) pcre2_code_free(space_char);
  }

  static pcre2_code* compile(const char* pattern) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                     PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (!code) {
      std::array<PCRE2_UCHAR, 256> buf{};
      pcre2_get_error_message(error_code, buf.data(), buf.size());
      throw TokenizerError(std::string("GPT-2 tokenizer regex does not compile: ") +
                           reinterpret_cast<const char*>(buf.data()));
    }
    return code;
  }

  void compile_regexes() {
    regex = compile(kPattern);
    // JIT is a speed-up only; without it pcre2_match interprets the same pattern.
    jit = pcre2_jit_compile(regex, PCRE2_JIT_COMPLETE) == 0;
    word_char = compile(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])");
    space_char = compile(R"(\p{White_Space})");
  }

  // Splits `text` at added tokens (leftmost-longest, as HF's Aho-Corasick) into `out`. Only plain
  // text segments of `in` are split further.
  void split_added(std::string_view text, const std::vector<AddedToken>& tokens,
                   const std::vector<Segment>& in, std::vector<Segment>& out, pcre2_match_data* md) const {
    for (const Segment& seg : in) {
      if (seg.added_id >= 0 || tokens.empty()) {
        out.push_back(seg);
        continue;
      }
      const std::string_view part = text.substr(0, seg.end);
      size_t pos = seg.begin;  // everything before pos is handled
      size_t search = seg.begin;
      while (search < seg.end) {
        // Leftmost match; among those starting at the same place, the longest.
        size_t best_start = std::string_view::npos;
        const AddedToken* best = nullptr;
        for (const AddedToken& tok : tokens) {
          if (tok.content.empty()) continue;
          const size_t at = part.find(tok.content, search);
          if (at == std::string_view::npos) continue;
          if (at < best_start || (at == best_start && tok.content.size() > best->content.size())) {
            best_start = at;
            best = &tok;
          }
        }
        if (!best) break;
        size_t start = best_start;
        size_t stop = best_start + best->content.size();
        if (best->single_word && !is_single_word(part, start, stop, seg.begin, md)) {
          search = stop;  // HF's match iterator also goes on after the discarded match
          continue;
        }
        if (best->lstrip) {
          while (start > pos) {
            const size_t prev = code_point_before(part, start);
            if (!char_is(space_char, part, prev, md)) break;
            start = prev;
          }
        }
        if (best->rstrip) {
          while (stop < seg.end) {
            if (!char_is(space_char, part, stop, md)) break;
            stop += char_length(part, stop);
          }
        }
        if (start > pos) out.push_back({pos, start, -1});
        out.push_back({start, stop, best->id});
        pos = stop;
        search = stop;
      }
      if (pos < seg.end) out.push_back({pos, seg.end, -1});
    }
  }

  // Whether the character at byte `i` of valid UTF-8 `part` matches the one-character class `code`.
  static bool char_is(const pcre2_code* code, std::string_view part, size_t i, pcre2_match_data* md) {
    const size_t len = char_length(part, i);
    return pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(part.data() + i), len, 0,
                       PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, md, nullptr) >= 0;
  }

  // HF's single_word rule: the match must not touch a word character on either side within its
  // segment.
  bool is_single_word(std::string_view part, size_t start, size_t stop, size_t seg_begin,
                      pcre2_match_data* md) const {
    if (start > seg_begin && char_is(word_char, part, code_point_before(part, start), md)) return false;
    if (stop < part.size() && char_is(word_char, part, stop, md)) return false;
    return true;
  }

  // BPE of one pre-tokenized word, exactly as HF's Word::merge_all: a queue of candidate merges
  // ordered by rank, then by position; entries made stale by earlier merges are skipped.
  void bpe(std::string_view word, std::vector<int32_t>& out) const {
    if (word.size() == 1) {
      out.push_back(byte_id[static_cast<uint8_t>(word[0])]);
      return;
    }
    const bool cacheable = word.size() < kCacheMaxWordBytes;
    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mutex);
      const auto it = cache.find(std::string(word));
      if (it != cache.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }

    struct Symbol {
      int32_t id;
      int32_t prev;
      int32_t next;
      bool removed;
    };
    struct Candidate {
      uint32_t rank;
      int32_t pos;
      int32_t new_id;
      bool operator<(const Candidate& o) const {  // std::priority_queue pops the largest
        return rank != o.rank ? rank > o.rank : pos > o.pos;
      }
    };
    const auto n = static_cast<int32_t>(word.size());
    std::vector<Symbol> symbols(word.size());
    for (int32_t i = 0; i < n; ++i) {
      symbols[i] = {byte_id[static_cast<uint8_t>(word[i])], i - 1, i + 1 < n ? i + 1 : -1, false};
    }
    std::priority_queue<Candidate> queue;
    for (int32_t i = 0; i + 1 < n; ++i) {
      const auto it = merges.find(pair_key(symbols[i].id, symbols[i + 1].id));
      if (it != merges.end()) queue.push({it->second.rank, i, it->second.new_id});
    }
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& cur = symbols[top.pos];
      if (cur.removed || cur.next < 0) continue;
      const Symbol right = symbols[cur.next];
      const auto it = merges.find(pair_key(cur.id, right.id));
      if (it == merges.end() || it->second.new_id != top.new_id) continue;  // stale entry
      cur.id = top.new_id;
      symbols[cur.next].removed = true;
      cur.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = top.pos;
      if (cur.prev >= 0) {
        const auto p = merges.find(pair_key(symbols[cur.prev].id, cur.id));
        if (p != merges.end()) queue.push({p->second.rank, cur.prev, p->second.new_id});
      }
      if (cur.next >= 0) {
        const auto q = merges.find(pair_key(cur.id, symbols[cur.next].id));
        if (q != merges.end()) queue.push({q->second.rank, top.pos, q->second.new_id});
      }
    }
    const size_t first_out = out.size();
    for (int32_t i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);

    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mutex);
      if (cache.size() < kCacheCapacity) {
        cache.emplace(std::string(word), std::vector<int32_t>(out.begin() + first_out, out.end()));
      }
    }
  }

  // Splits plain text with the GPT-2 regex (matches and, should any exist, the gaps between them,
  // as HF's Split with the Isolated behaviour) and runs BPE on each piece's bytes.
  void encode_plain(std::string_view text, pcre2_match_data* md, std::vector<int32_t>& out) const {
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0;
    while (offset < text.size()) {
      // NO_UTF_CHECK: encode() validated the whole text once; checking at every call is quadratic.
      const int rc =
          jit ? pcre2_jit_match(regex, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr)
              : pcre2_match(regex, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) {
        bpe(text.substr(offset), out);
        return;
      }
      if (rc < 0) {
        std::array<PCRE2_UCHAR, 256> buf{};
        pcre2_get_error_message(rc, buf.data(), buf.size());
        throw TokenizerError("GPT-2 pre-tokenizer failed at byte offset " + std::to_string(offset) + ": " +
                             reinterpret_cast<const char*>(buf.data()));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t start = ov[0], end = ov[1];
      if (start > offset) bpe(text.substr(offset, start - offset), out);
      if (end > start) {
        bpe(text.substr(start, end - start), out);
        offset = end;
      } else {
        // The pattern cannot match empty; should it ever, step one character to make progress.
        offset = start + char_length(text, start);
        if (start < offset) bpe(text.substr(start, offset - start), out);
      }
    }
  }
};

namespace {

// Checks that ids 0..size-1 each name a token and that all 256 single-byte tokens exist, then
// fills the byte table. `source` names the file for messages.
void finish_vocab(std::vector<std::string>& id_display, std::vector<std::string>& id_bytes,
                  const std::vector<bool>& present, std::array<int32_t, 256>& byte_id,
                  const std::unordered_map<std::string, int32_t>& vocab, const std::string& source) {
  for (size_t id = 0; id < present.size(); ++id) {
    if (!present[id]) {
      throw TokenizerError(source + ": vocabulary size mismatch: largest id is " +
                           std::to_string(present.size() - 1) + " but id " + std::to_string(id) +
                           " has no token (ids must be 0.." + std::to_string(present.size() - 1) + ")");
    }
  }
  for (int b = 0; b < 256; ++b) {
    std::string sym;
    utf8::append_code_point(sym, byte_to_unicode()[b]);
    const auto it = vocab.find(sym);
    if (it == vocab.end()) {
      throw TokenizerError(source + ": vocabulary lacks the byte token '" + sym + "' (byte " +
                           std::to_string(b) + "); a byte-level BPE vocabulary needs all 256");
    }
    byte_id[b] = it->second;
  }
  for (size_t id = 0; id < id_display.size(); ++id) {
    if (id_bytes[id].empty()) id_bytes[id] = vocab_string_to_bytes(id_display[id]);
  }
}

}  // namespace

Gpt2BpeTokenizer::Gpt2BpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Gpt2BpeTokenizer::~Gpt2BpeTokenizer() = default;

namespace {

std::unordered_map<std::string, int32_t> vocab_from_json(const json& j, const std::string& source) {
  if (!j.is_object()) throw TokenizerError(source + ": vocabulary must be a JSON object of token -> id");
  std::unordered_map<std::string, int32_t> vocab;
  vocab.reserve(j.size());
  for (const auto& [token, id] : j.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      throw TokenizerError(source + ": token '" + token + "' has id " + id.dump() +
                           "; ids must be non-negative integers");
    }
    vocab.emplace(token, static_cast<int32_t>(id.get<int64_t>()));
  }
  return vocab;
}

}  // namespace

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::from_vocab_merges(const std::string& vocab_json_path,
                                                                      const std::string& merges_txt_path) {
  RawTokenizer raw;
  raw.vocab_source = vocab_json_path;
  raw.merges_source = merges_txt_path;
  raw.vocab = vocab_from_json(parse_json(vocab_json_path), vocab_json_path);

  const std::string text = read_file(merges_txt_path);
  size_t line_no = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      throw TokenizerError(merges_txt_path + ": line " + std::to_string(line_no) +
                           ": expected two tokens separated by one space, got '" + std::string(line) + "'");
    }
    raw.merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
    raw.merge_lines.push_back(line_no);
  }
  // transformers' GPT2Tokenizer registers <|endoftext|> as its bos/eos/unk special token.
  if (raw.vocab.count("<|endoftext|>")) {
    AddedToken eot;
    eot.content = "<|endoftext|>";
    eot.id = raw.vocab.at("<|endoftext|>");
    raw.added.push_back(eot);
  }
  return std::unique_ptr<Gpt2BpeTokenizer>(new Gpt2BpeTokenizer(Impl::build(std::move(raw))));
}

std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::from_tokenizer_json(const std::string& path) {
  const json j = parse_json(path);
  auto fail = [&](const std::string& what) { throw TokenizerError(path + ": " + what); };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) fail("no \"model\" object");
  const json& model = j["model"];
  if (model.contains("type") && model["type"] != "BPE") {
    fail("model.type is " + model["type"].dump() + "; only BPE (GPT-2 style) is supported here");
  }
  // Options that would change the result and that GPT-2 does not use: refuse rather than ignore.
  if (j.contains("normalizer") && !j["normalizer"].is_null()) fail("a normalizer is not supported");
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null()) {
    const json& pt = j["pre_tokenizer"];
    if (pt.value("type", "") != "ByteLevel")
      fail("pre_tokenizer must be ByteLevel, got " + pt.value("type", "?"));
    if (pt.value("add_prefix_space", false)) fail("pre_tokenizer.add_prefix_space=true is not supported");
    if (!pt.value("use_regex", true)) fail("pre_tokenizer.use_regex=false is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      fail(std::string("model.") + key + " is not supported");
    }
  }
  if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"].get<double>() > 0) {
    fail("model.dropout is not supported");
  }
  if (!model.contains("vocab")) fail("no model.vocab");
  if (!model.contains("merges") || !model["merges"].is_array()) fail("no model.merges list");

  RawTokenizer raw;
  raw.vocab_source = path + " (model.vocab)";
  raw.merges_source = path + " (model.merges)";
  raw.merges_are_lines = false;
  raw.vocab = vocab_from_json(model["vocab"], raw.vocab_source);
  const json& merges = model["merges"];
  raw.merges.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& m = merges[i];
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos) {
        fail("model.merges[" + std::to_string(i) + "] is \"" + s + "\"; expected \"a b\"");
      }
      raw.merges.emplace_back(s.substr(0, space), s.substr(space + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      raw.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      fail("model.merges[" + std::to_string(i) + "] is " + m.dump() + "; expected \"a b\" or [\"a\", \"b\"]");
    }
    raw.merge_lines.push_back(i);
  }
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    if (!j["added_tokens"].is_array()) fail("added_tokens must be a list");
    for (const json& t : j["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
          !t["content"].is_string() || t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() > INT32_MAX) {
        fail("added_tokens entry " + t.dump() +
             " needs a non-negative integer \"id\" and a string \"content\"");
      }
      AddedToken a;
      a.id = static_cast<int32_t>(t["id"].get<int64_t>());
      a.content = t["content"].get<std::string>();
      a.single_word = t.value("single_word", false);
      a.lstrip = t.value("lstrip", false);
      a.rstrip = t.value("rstrip", false);
      a.normalized = t.value("normalized", true);
      a.special = t.value("special", false);
      raw.added.push_back(std::move(a));
    }
  }
  return std::unique_ptr<Gpt2BpeTokenizer>(new Gpt2BpeTokenizer(Impl::build(std::move(raw))));
}

std::unique_ptr<Gpt2BpeTokenizer::Impl> Gpt2BpeTokenizer::Impl::build(RawTokenizer raw) {
  auto impl = std::make_unique<Gpt2BpeTokenizer::Impl>();

  // Added tokens may lie outside model.vocab (HF gives them their own ids); they count for the size.
  int64_t max_id = -1;
  for (const auto& [tok, id] : raw.vocab) max_id = std::max<int64_t>(max_id, id);
  for (const AddedToken& a : raw.added) max_id = std::max<int64_t>(max_id, a.id);
  if (max_id < 0) throw TokenizerError(raw.vocab_source + ": the vocabulary is empty");
  const auto size = static_cast<size_t>(max_id + 1);
  impl->id_display.assign(size, {});
  impl->id_bytes.assign(size, {});
  std::vector<bool> present(size, false);
  for (const auto& [tok, id] : raw.vocab) {
    if (present[id]) {
      throw TokenizerError(raw.vocab_source + ": id " + std::to_string(id) + " is used by both '" +
                           impl->id_display[id] + "' and '" + tok + "'");
    }
    present[id] = true;
    impl->id_display[id] = tok;
  }
  for (const AddedToken& a : raw.added) {
    // An added token's text is taken as is when decoding (HF: its content, through the decoder).
    present[a.id] = true;
    impl->id_display[a.id] = a.content;
    impl->id_bytes[a.id] = vocab_string_to_bytes(a.content);
  }
  finish_vocab(impl->id_display, impl->id_bytes, present, impl->byte_id, raw.vocab, raw.vocab_source);

  impl->merges.reserve(raw.merges.size());
  for (size_t rank = 0; rank < raw.merges.size(); ++rank) {
    const auto& [a, b] = raw.merges[rank];
    const std::string where = raw.merges_source + (raw.merges_are_lines ? ": line " : ": merge #") +
                              std::to_string(raw.merge_lines[rank]);
    const auto ia = raw.vocab.find(a);
    const auto ib = raw.vocab.find(b);
    if (ia == raw.vocab.end() || ib == raw.vocab.end()) {
      throw TokenizerError(where + ": merge '" + a + " " + b + "' refers to unknown token '" +
                           (ia == raw.vocab.end() ? a : b) + "'");
    }
    const auto ic = raw.vocab.find(a + b);
    if (ic == raw.vocab.end()) {
      throw TokenizerError(where + ": merge '" + a + " " + b + "' makes '" + a + b +
                           "', which is not in the vocabulary");
    }
    // A repeated pair keeps its last rank, as HF's HashMap and GPT-2's dict do.
    impl->merges[pair_key(ia->second, ib->second)] = {static_cast<uint32_t>(rank), ic->second};
  }

  for (AddedToken& a : raw.added) {
    if (a.content == "<|endoftext|>") impl->eos = a.id;
    (a.normalized ? impl->normalized_added : impl->raw_added).push_back(std::move(a));
  }
  impl->compile_regexes();
  return impl;
}

std::vector<int32_t> Gpt2BpeTokenizer::encode(std::string_view text) const {
  utf8::check_valid(text, "encode");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  if (text.empty()) return out;

  // Per call, not per tokenizer: match data is scratch space, and encode() must stay const.
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(impl_->regex, nullptr), &pcre2_match_data_free);
  if (!md) throw TokenizerError("encode: out of memory for regex match data");

  std::vector<Segment> segments{{0, text.size(), -1}};
  if (!impl_->raw_added.empty() || !impl_->normalized_added.empty()) {
    std::vector<Segment> first, second;
    impl_->split_added(text, impl_->raw_added, segments, first, md.get());
    impl_->split_added(text, impl_->normalized_added, first, second, md.get());
    segments = std::move(second);
  }
  for (const Segment& seg : segments) {
    if (seg.added_id >= 0) {
      out.push_back(seg.added_id);
    } else {
      // Each segment is its own subject: the regex's look-ahead must not see past an added token.
      impl_->encode_plain(text.substr(seg.begin, seg.end - seg.begin), md.get(), out);
    }
  }
  return out;
}

std::string Gpt2BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_bytes.size()) {
      throw TokenizerError("decode: token id " + std::to_string(id) + " is out of range (vocabulary size " +
                           std::to_string(impl_->id_bytes.size()) + ")");
    }
    bytes += impl_->id_bytes[id];
  }
  return utf8::lossy(bytes);
}

std::string Gpt2BpeTokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_bytes.size()) {
    throw TokenizerError("token id " + std::to_string(id) + " is out of range (vocabulary size " +
                         std::to_string(impl_->id_bytes.size()) + ")");
  }
  return impl_->id_bytes[id];
}

std::string Gpt2BpeTokenizer::token_display(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_display.size()) {
    throw TokenizerError("token id " + std::to_string(id) + " is out of range (vocabulary size " +
                         std::to_string(impl_->id_display.size()) + ")");
  }
  return impl_->id_display[id];
}

int32_t Gpt2BpeTokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_bytes.size()); }

std::optional<int32_t> Gpt2BpeTokenizer::eos_id() const { return impl_->eos; }

size_t Gpt2BpeTokenizer::merge_count() const { return impl_->merges.size(); }

std::string Gpt2BpeTokenizer::byte_symbol(uint8_t b) {
  std::string s;
  utf8::append_code_point(s, byte_to_unicode()[b]);
  return s;
}

}  // namespace servelab

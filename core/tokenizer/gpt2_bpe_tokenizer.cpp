// The byte-level BPE's engine: the tables built from what a loader collected (gpt2_bpe_loaders.cpp),
// added tokens cut out of the text, the pre-tokenizer's regex, BPE by merge rank, and decoding.
#include "tokenizer/gpt2_bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/bpe_detail.h"
#include "tokenizer/utf8.h"

namespace servelab {
namespace {

using bpe_detail::AddedToken;
using bpe_detail::byte_level_to_bytes;
using bpe_detail::byte_required;
using bpe_detail::byte_to_unicode;
using bpe_detail::PreTokenizerSpec;
using bpe_detail::RawTokenizer;
using bpe_detail::vocab_string_to_bytes;

// HF's BPE caches words shorter than this many bytes, up to this many entries; then it stops adding.
constexpr size_t kCacheMaxWordBytes = 256;
constexpr size_t kCacheCapacity = 10000;

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

// Hash and equality that look a std::string key up by std::string_view without a copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using WordIds = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

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
  std::unordered_map<std::string, int32_t> spelling_ids;  // vocabulary spelling -> id
  std::vector<uint8_t> missing_bytes;                     // bytes without a token (byte_id -1)
  std::optional<int32_t> bos, eos;
  std::vector<int32_t> stops;
  bool add_bos = false;
  std::string chat_template;

  PreTokenizerKind pre_kind = PreTokenizerKind::Gpt2;
  pcre2_code* regex = nullptr;
  bool jit = false;
  // SmolLM2: \p{N} code points are cut out one by one before the word regex runs on the rest.
  pcre2_code* digit_regex = nullptr;
  bool digit_jit = false;
  // HF BPE's ignore_merges (Llama 3): a word that is itself a token is taken whole.
  bool ignore_merges = false;
  WordIds whole_words;  // raw bytes -> id of every plain vocabulary token
  // Rust regex's \w and \s, for the single_word, lstrip and rstrip options of added tokens.
  pcre2_code* word_char = nullptr;
  pcre2_code* space_char = nullptr;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;

  // Checks the collected vocabulary, merges and added tokens and builds the lookup tables.
  static std::unique_ptr<Impl> build(RawTokenizer raw);

  ~Impl() {
    if (regex) pcre2_code_free(regex);
    if (digit_regex) pcre2_code_free(digit_regex);
    if (word_char) pcre2_code_free(word_char);
    if (space_char) pcre2_code_free(space_char);
  }

  static pcre2_code* compile(const std::string& pattern, const std::string& source = {}) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (!code) {
      std::array<PCRE2_UCHAR, 256> buf{};
      pcre2_get_error_message(error_code, buf.data(), buf.size());
      throw TokenizerError((source.empty() ? std::string() : source + ": ") +
                           "pre-tokenizer regex does not compile at offset " + std::to_string(error_offset) +
                           ": " + reinterpret_cast<const char*>(buf.data()) + " (regex: " + pattern + ")");
    }
    return code;
  }

  void compile_regexes(const PreTokenizerSpec& pre, const std::string& source) {
    pre_kind = pre.kind;
    regex = compile(pre.pattern, source);
    // JIT is a speed-up only; without it pcre2_match interprets the same pattern.
    jit = pcre2_jit_compile(regex, PCRE2_JIT_COMPLETE) == 0;
    if (pre.isolate_digits) {
      digit_regex = compile(R"(\p{N})");
      digit_jit = pcre2_jit_compile(digit_regex, PCRE2_JIT_COMPLETE) == 0;
    }
    word_char = compile(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])");
    space_char = compile(R"(\p{White_Space})");
  }

  static constexpr size_t kUnknown = std::string_view::npos - 1;

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
      // Each token's next occurrence at or after `search`, found once and kept until passed: the
      // text is scanned about once per token, not once per token and match (a long chat prompt
      // against Llama 3's 256 control tokens).
      std::vector<size_t> next(tokens.size(), kUnknown);
      while (search < seg.end) {
        // Leftmost match; among those starting at the same place, the longest.
        size_t best_start = std::string_view::npos;
        const AddedToken* best = nullptr;
        for (size_t k = 0; k < tokens.size(); ++k) {
          const AddedToken& tok = tokens[k];
          if (tok.content.empty()) continue;
          if (next[k] == kUnknown || (next[k] != std::string_view::npos && next[k] < search)) {
            next[k] = part.find(tok.content, search);
          }
          const size_t at = next[k];
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
  // A byte without a token (byte_id -1) is left out before merging, so its neighbours may merge
  // with each other: HF's BPE does the same with a character it has no token for when the model
  // has no unk_token (the tokenizer HF makes from SmolLM2's GGUF), and llama.cpp drops such bytes
  // too. Mapping them to unk instead would put <|endoftext|> (SmolLM2's unk, a stop token) in a
  // prompt.
  void bpe(std::string_view word, std::vector<int32_t>& out) const {
    if (ignore_merges) {
      const auto it = whole_words.find(word);
      if (it != whole_words.end()) {
        out.push_back(it->second);
        return;
      }
    }
    if (word.size() == 1) {
      const int32_t id = byte_id[static_cast<uint8_t>(word[0])];
      if (id >= 0) out.push_back(id);
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
    std::vector<Symbol> symbols;
    symbols.reserve(word.size());
    for (const char c : word) {
      const int32_t id = byte_id[static_cast<uint8_t>(c)];
      if (id >= 0) symbols.push_back({id, 0, 0, false});
    }
    const auto n = static_cast<int32_t>(symbols.size());
    for (int32_t i = 0; i < n; ++i) {
      symbols[i].prev = i - 1;
      symbols[i].next = i + 1 < n ? i + 1 : -1;
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
    for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);

    if (cacheable) {
      std::lock_guard<std::mutex> lock(cache_mutex);
      if (cache.size() < kCacheCapacity) {
        cache.emplace(std::string(word), std::vector<int32_t>(out.begin() + first_out, out.end()));
      }
    }
  }

  // Pre-tokenizes plain text (no added tokens in it) and runs BPE on each word. SmolLM2's Digits
  // step makes every \p{N} code point a piece of its own; each other piece is a subject of its own
  // for the word regex, whose look-ahead must not see past it (HF splits the same way).
  void encode_plain(std::string_view text, pcre2_match_data* md, std::vector<int32_t>& out) const {
    if (!digit_regex) {
      split_words(text, md, out);
      return;
    }
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0;
    while (offset < text.size()) {
      const int rc =
          digit_jit
              ? pcre2_jit_match(digit_regex, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr)
              : pcre2_match(digit_regex, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, md, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) throw_match_error(rc, offset);
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
      const size_t start = ov[0], end = ov[1];
      if (start > offset) split_words(text.substr(offset, start - offset), md, out);
      bpe(text.substr(start, end - start), out);
      offset = end;
    }
    if (offset < text.size()) split_words(text.substr(offset), md, out);
  }

  [[noreturn]] static void throw_match_error(int rc, size_t offset) {
    std::array<PCRE2_UCHAR, 256> buf{};
    pcre2_get_error_message(rc, buf.data(), buf.size());
    throw TokenizerError("pre-tokenizer failed at byte offset " + std::to_string(offset) + ": " +
                         reinterpret_cast<const char*>(buf.data()));
  }

  // Splits text with the word regex (matches and, should any exist, the gaps between them, as
  // HF's Split with the Isolated behaviour) and runs BPE on each piece's bytes.
  void split_words(std::string_view text, pcre2_match_data* md, std::vector<int32_t>& out) const {
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
      if (rc < 0) throw_match_error(rc, offset);
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

// Checks that ids 0..size-1 each name a token and that the single-byte tokens exist (all 256, or
// at least those of byte_required()), then fills the byte table (-1 for a missing byte) and the
// list of missing bytes. `source` names the file for messages.
void finish_vocab(std::vector<std::string>& id_display, std::vector<std::string>& id_bytes,
                  const std::vector<bool>& present, std::array<int32_t, 256>& byte_id,
                  std::vector<uint8_t>& missing, const std::unordered_map<std::string, int32_t>& vocab,
                  const std::string& source) {
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
      if (byte_required(b)) {
        throw TokenizerError(source + ": vocabulary lacks the byte token '" + sym + "' (byte " +
                             std::to_string(b) +
                             "); a byte-level BPE vocabulary has the 256 byte tokens, or at least those of "
                             "tab, newline, carriage return and printable ASCII");
      }
      byte_id[b] = -1;
      missing.push_back(static_cast<uint8_t>(b));
      continue;
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
std::unique_ptr<Gpt2BpeTokenizer> Gpt2BpeTokenizer::from_raw(RawTokenizer raw) {
  return std::unique_ptr<Gpt2BpeTokenizer>(new Gpt2BpeTokenizer(Impl::build(std::move(raw))));
}

std::unique_ptr<Gpt2BpeTokenizer::Impl> Gpt2BpeTokenizer::Impl::build(RawTokenizer raw) {
  auto impl = std::make_unique<Gpt2BpeTokenizer::Impl>();

  // Added tokens may lie outside model.vocab (HF gives them their own ids); they count for the size.
  int64_t max_id = -1;
  std::string max_token;
  for (const auto& [tok, id] : raw.vocab)
    if (id > max_id) max_id = id, max_token = tok;
  for (const AddedToken& a : raw.added)
    if (a.id > max_id) max_id = a.id, max_token = a.content;
  if (max_id < 0) throw TokenizerError(raw.vocab_source + ": the vocabulary is empty");
  // The tables below are indexed by id and ids must be dense (finish_vocab): more ids than tokens
  // is a gap, refused before a vocabulary with an id of 10^8 allocates gigabytes of tables.
  const int64_t entries = static_cast<int64_t>(raw.vocab.size() + raw.added.size());
  if (max_id >= entries)
    throw TokenizerError(raw.vocab_source + ": vocabulary size mismatch: token '" + max_token + "' has id " +
                         std::to_string(max_id) + " but there are only " + std::to_string(entries) +
                         " tokens (ids must be 0.." + std::to_string(entries - 1) + ")");
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
  std::unordered_set<int32_t> added_ids;
  for (const AddedToken& a : raw.added) {
    // An added token's text is taken as is when decoding (HF: its content, through the decoder).
    present[a.id] = true;
    impl->id_display[a.id] = a.content;
    impl->id_bytes[a.id] = vocab_string_to_bytes(a.content);
    added_ids.insert(a.id);
  }
  finish_vocab(impl->id_display, impl->id_bytes, present, impl->byte_id, impl->missing_bytes, raw.vocab,
               raw.vocab_source);

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

  // Special ids: in range, and the stop list is eos first, then the others, once each.
  const auto check = [&](const std::optional<int32_t>& id, const char* what) {
    if (id && (*id < 0 || static_cast<size_t>(*id) >= size)) {
      throw TokenizerError(raw.specials_source + ": " + what + " " + std::to_string(*id) +
                           " is out of range (vocabulary size " + std::to_string(size) + ")");
    }
  };
  check(raw.bos, "bos id");
  check(raw.eos, "eos id");
  check(raw.unk, "unk id");
  check(raw.pad, "padding id");
  for (const int32_t id : raw.extra_stops) check(id, "stop id");
  impl->bos = raw.bos;
  impl->eos = raw.eos;
  if (raw.eos) impl->stops.push_back(*raw.eos);
  for (const int32_t id : raw.extra_stops) {
    if (std::find(impl->stops.begin(), impl->stops.end(), id) == impl->stops.end()) impl->stops.push_back(id);
  }
  impl->add_bos = raw.add_bos;
  impl->chat_template = std::move(raw.chat_template);

  impl->ignore_merges = raw.ignore_merges;
  if (impl->ignore_merges) {
    // HF looks the word up in model.vocab; only tokens that are byte-level spellings can be words.
    impl->whole_words.reserve(raw.vocab.size());
    for (const auto& [tok, id] : raw.vocab) {
      if (added_ids.count(id)) continue;
      if (auto bytes = byte_level_to_bytes(tok)) impl->whole_words.emplace(std::move(*bytes), id);
    }
  }

  impl->spelling_ids = std::move(raw.vocab);
  for (AddedToken& a : raw.added) {
    impl->spelling_ids.emplace(a.content, a.id);
    (a.normalized ? impl->normalized_added : impl->raw_added).push_back(std::move(a));
  }
  impl->compile_regexes(raw.pre, raw.vocab_source);
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
std::optional<int32_t> Gpt2BpeTokenizer::bos_id() const { return impl_->bos; }
std::vector<int32_t> Gpt2BpeTokenizer::stop_ids() const { return impl_->stops; }
bool Gpt2BpeTokenizer::add_bos() const { return impl_->add_bos; }
const std::string& Gpt2BpeTokenizer::chat_template() const { return impl_->chat_template; }

size_t Gpt2BpeTokenizer::merge_count() const { return impl_->merges.size(); }

PreTokenizerKind Gpt2BpeTokenizer::pre_tokenizer() const { return impl_->pre_kind; }

std::optional<int32_t> Gpt2BpeTokenizer::token_id(const std::string& spelling) const {
  const auto it = impl_->spelling_ids.find(spelling);
  if (it == impl_->spelling_ids.end()) return std::nullopt;
  return it->second;
}

const std::vector<uint8_t>& Gpt2BpeTokenizer::unencodable_bytes() const { return impl_->missing_bytes; }

std::string Gpt2BpeTokenizer::byte_symbol(uint8_t b) {
  std::string s;
  utf8::append_code_point(s, byte_to_unicode()[b]);
  return s;
}

}  // namespace servelab
#include "serve/load_dataset.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"
#include "util/errors.h"

namespace servelab {

using nlohmann::json;

namespace {

// Plain words random prompts are made of (256 of them: three words spell an index below 2^24).
constexpr const char* kWords[] = {
    "river",   "stone",     "garden",  "window",   "market",   "silver",   "winter",  "candle",  "forest",
    "harbor",  "pencil",    "bridge",  "meadow",   "lantern",  "copper",   "valley",  "thunder", "basket",
    "mirror",  "orchard",   "saddle",  "island",   "violin",   "ladder",   "compass", "pepper",  "canyon",
    "feather", "marble",    "tunnel",  "anchor",   "blanket",  "castle",   "desert",  "engine",  "falcon",
    "glacier", "hammer",    "jacket",  "kettle",   "lemon",    "magnet",   "needle",  "oyster",  "parrot",
    "quarry",  "rocket",    "signal",  "timber",   "umbrella", "velvet",   "wagon",   "yellow",  "zephyr",
    "acorn",   "barrel",    "cactus",  "dolphin",  "ember",    "fabric",   "goblet",  "hollow",  "iron",
    "jungle",  "kitten",    "lizard",  "mango",    "nectar",   "otter",    "pillow",  "quiver",  "ribbon",
    "spider",  "tomato",    "unicorn", "vessel",   "walnut",   "yogurt",   "zebra",   "album",   "bishop",
    "carpet",  "donkey",    "easel",   "fountain", "gravel",   "helmet",   "insect",  "jigsaw",  "kayak",
    "lobster", "mitten",    "napkin",  "olive",    "puzzle",   "quilt",    "radish",  "shovel",  "teapot",
    "urchin",  "vapor",     "whistle", "yarn",     "zipper",   "arrow",    "beacon",  "cobalt",  "dune",
    "echo",    "fern",      "granite", "honey",    "ivory",    "jasmine",  "kernel",  "lagoon",  "mosaic",
    "nickel",  "orbit",     "prism",   "quartz",   "raven",    "sapphire", "tulip",   "uplift",  "violet",
    "willow",  "xylophone", "yacht",   "zinc",     "amber",    "breeze",   "cedar",   "delta",   "eclipse",
    "flint",   "grove",     "haze",    "indigo",   "juniper",  "kelp",     "lilac",   "maple",   "nova",
    "onyx",    "pebble",    "quill",   "reef",     "slate",    "tide",     "umber",   "vine",    "wheat",
    "yew",     "zenith",    "apron",   "bucket",   "cradle",   "drum",     "elbow",   "fiddle",  "glove",
    "hinge",   "inkwell",   "jar",     "knob",     "ledger",   "mallet",   "nozzle",  "oar",     "paddle",
    "quarter", "rake",      "spindle", "thimble",  "usher",    "vault",    "wrench",  "yoke",    "zither",
    "almond",  "biscuit",   "cherry",  "date",     "eggplant", "fig",      "ginger",  "hazel",   "icicle",
    "jelly",   "kiwi",      "lime",    "melon",    "nutmeg",   "onion",    "peach",   "quince",  "raisin",
    "sesame",  "thyme",     "vanilla", "wafer",    "yam",      "zucchini", "atlas",   "ballad",  "chapter",
    "diary",   "essay",     "fable",   "glossary", "haiku",    "index",    "journal", "kingdom", "legend",
    "memoir",  "novel",     "opera",   "poem",     "quest",    "riddle",   "sonnet",  "tale",    "utopia",
    "verse",   "whisper",   "yarrow",  "zealot",   "badger",   "camel",    "eagle",   "ferret",  "gazelle",
    "heron",   "ibis",      "jackal",  "koala",    "lemur",    "moose",    "newt",    "ocelot",  "panda",
    "quokka",  "robin",     "salmon",  "toucan",   "vulture",  "walrus",   "wombat",  "yak",     "beetle",
    "cricket", "dragonfly", "firefly", "gnat"};
constexpr uint64_t kWordCount = sizeof(kWords) / sizeof(kWords[0]);
static_assert(kWordCount == 256);

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::mt19937_64 rng_for(uint64_t seed, uint64_t stream, int64_t index) {
  return std::mt19937_64(
      mix(mix(seed) ^ mix(stream + 0x51ED27ull) ^ mix(static_cast<uint64_t>(index) * 7919u)));
}

// A length drawn uniformly from [len * (1 - r), len * (1 + r)], at least 1.
int64_t draw_len(std::mt19937_64& rng, int64_t len, double r) {
  if (r <= 0) return std::max<int64_t>(1, len);
  const auto lo = static_cast<int64_t>(std::floor(static_cast<double>(len) * (1 - r)));
  const auto hi = static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1 + r)));
  return std::max<int64_t>(1, std::uniform_int_distribution<int64_t>(lo, hi)(rng));
}

// Streams of the generator: prompts, shared prefixes, lengths.
constexpr uint64_t kPromptStream = 1, kPrefixStream = 2, kLengthStream = 3, kPermStream = 4;

void check_range(int64_t v, int64_t lo, int64_t hi, const std::string& flag) {
  if (v < lo || v > hi)
    throw InputError(flag + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                     std::to_string(v));
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw InputError("--dataset-path: cannot read '" + path + "'");
  const std::streamoff size = f.tellg();
  if (size < 0) throw InputError("--dataset-path: cannot read '" + path + "'");
  if (size > kMaxDatasetFileBytes) throw InputError("--dataset-path: '" + path + "' is larger than 1 GiB");
  std::string text(static_cast<size_t>(size), '\0');
  f.seekg(0);
  if (!f.read(text.data(), size)) throw InputError("--dataset-path: cannot read '" + path + "'");
  return text;
}

// One JSONL line's or ShareGPT item's entry; false to skip it (a conversation without a prompt).
bool entry_of(const json& item, const Tokenizer* tokenizer, DatasetEntry& out, const std::string& where) {
  if (!item.is_object()) throw InputError(where + ": not a JSON object");
  if (item.contains("prompt")) {
    if (!item["prompt"].is_string()) throw InputError(where + ": \"prompt\" is not a string");
    out.prompt = item["prompt"].get<std::string>();
    if (item.contains("output_tokens") && !item["output_tokens"].is_null()) {
      const json& n = item["output_tokens"];
      if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > kMaxOutputLen)
        throw InputError(where + ": \"output_tokens\" must be an integer in [1, " +
                         std::to_string(kMaxOutputLen) + "]");
      out.output_tokens = n.get<int64_t>();
    }
  } else if (item.contains("conversations")) {
    const json& turns = item["conversations"];
    if (!turns.is_array()) throw InputError(where + ": \"conversations\" is not a list");
    bool have_prompt = false;
    for (const json& t : turns) {
      if (!t.is_object() || !t.contains("from") || !t["from"].is_string() || !t.contains("value") ||
          !t["value"].is_string())
        throw InputError(where + ": a turn needs \"from\" and \"value\" strings");
      const std::string from = t["from"].get<std::string>();
      if (!have_prompt && (from == "human" || from == "user")) {
        out.prompt = t["value"].get<std::string>();
        have_prompt = true;
      } else if (have_prompt && (from == "gpt" || from == "assistant" || from == "chatgpt")) {
        if (tokenizer) {
          try {
            out.output_tokens = std::clamp<int64_t>(
                static_cast<int64_t>(tokenizer->encode(utf8::lossy(t["value"].get<std::string>())).size()), 1,
                kMaxOutputLen);
          } catch (const std::exception&) {
          }
        }
        break;
      }
    }
    if (!have_prompt) return false;
  } else {
    throw InputError(where + ": needs \"prompt\" (JSONL) or \"conversations\" (ShareGPT)");
  }
  if (out.prompt.empty()) return false;
  if (const auto bad = utf8::first_invalid(out.prompt))
    throw InputError(where + ": the prompt is not valid UTF-8 at byte " + std::to_string(*bad));
  if (tokenizer) {
    try {
      out.prompt_tokens = static_cast<int64_t>(tokenizer->encode(out.prompt).size());
    } catch (const std::exception&) {
    }
  }
  return true;
}

}  // namespace

std::vector<DatasetEntry> parse_dataset(std::string_view text, const std::string& source,
                                        const Tokenizer* tokenizer) {
  std::vector<DatasetEntry> out;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) throw InputError(source + " holds no prompts");
  auto add = [&](const json& item, const std::string& where) {
    if (static_cast<int64_t>(out.size()) >= kMaxDatasetEntries)
      throw InputError(source + " holds more than " + std::to_string(kMaxDatasetEntries) + " prompts");
    DatasetEntry e;
    if (entry_of(item, tokenizer, e, where)) out.push_back(std::move(e));
  };
  if (text[first] == '[') {  // ShareGPT: one JSON list
    const json all = json::parse(text, nullptr, false);
    if (!all.is_array()) throw InputError(source + " is not a JSON list (ShareGPT) nor JSON lines");
    for (size_t i = 0; i < all.size(); ++i) add(all[i], source + " entry " + std::to_string(i + 1));
  } else {
    size_t start = 0;
    for (int64_t line_no = 1; start < text.size(); ++line_no) {
      size_t eol = text.find('\n', start);
      if (eol == std::string_view::npos) eol = text.size();
      std::string_view line = text.substr(start, eol - start);
      start = eol + 1;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      const std::string where = source + " line " + std::to_string(line_no);
      const json item = json::parse(line, nullptr, false);
      if (item.is_discarded()) throw InputError(where + ": not JSON");
      add(item, where);
    }
  }
  if (out.empty()) throw InputError(source + " holds no prompts");
  return out;
}

LoadDataset::LoadDataset(const DatasetOptions& o, const Tokenizer* tokenizer)
    : options_(o), tokenizer_(tokenizer) {
  check_range(o.output_len, 1, kMaxOutputLen, "--max-new-tokens");
  if (!(o.range_ratio >= 0 && o.range_ratio < 1))
    throw InputError("--range-ratio must be in [0, 1), got " + (std::ostringstream() << o.range_ratio).str());
  if (o.name == "fixed") {
    if (o.prompt.empty()) throw InputError("--prompt is empty");
    entries_.push_back({o.prompt, -1, -1});
    if (tokenizer) {
      try {
        entries_[0].prompt_tokens = static_cast<int64_t>(tokenizer->encode(o.prompt).size());
      } catch (const std::exception&) {
      }
    }
  } else if (o.name == "random" || o.name == "prefix-repetition") {
    check_range(o.input_len, 1, kMaxPromptLen, "--input-len");
    check_range(o.prefix_len, 0, kMaxPromptLen, "--prefix-len");
    if (o.name == "prefix-repetition") {
      check_range(o.prefix_len, 1, kMaxPromptLen, "--prefix-len");
      check_range(o.num_prefixes, 1, 100'000, "--num-prefixes");
      check_range(o.suffix_len, 1, kMaxPromptLen, "--suffix-len");
    }
    if (tokenizer) {
      // Tokens whose text reads back as itself: valid UTF-8, no control characters, not a special token.
      std::vector<int32_t> skip = tokenizer->stop_ids();
      if (const auto bos = tokenizer->bos_id()) skip.push_back(*bos);
      for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
        if (std::find(skip.begin(), skip.end(), id) != skip.end()) continue;
        std::string bytes;
        try {
          bytes = tokenizer->token_bytes(id);
        } catch (const std::exception&) {
          continue;
        }
        if (bytes.empty() || utf8::first_invalid(bytes) || bytes.find("<|") != std::string::npos ||
            bytes.find("|>") != std::string::npos || (bytes.front() == '<' && bytes.back() == '>'))
          continue;
        if (std::any_of(bytes.begin(), bytes.end(),
                        [](char c) { return static_cast<unsigned char>(c) < 0x20; }))
          continue;
        vocab_.push_back(id);
      }
      if (vocab_.size() < 16)
        throw InputError("--tokenizer: the tokenizer has too few plain tokens for prompts");
      // A seeded order, so that the index-spelling first tokens are not the vocabulary's first ones.
      std::mt19937_64 rng = rng_for(o.seed, kPermStream, 0);
      std::shuffle(vocab_.begin(), vocab_.end(), rng);
    }
  } else if (o.name == "shipped") {
    entries_ = parse_dataset(shipped_prompts_jsonl(), "the shipped prompts", tokenizer);
  } else if (o.name == "file") {
    if (o.path.empty()) throw InputError("--dataset file needs --dataset-path FILE");
    entries_ = parse_dataset(read_file(o.path), o.path, tokenizer);
  } else {
    throw InputError("--dataset: unknown dataset '" + o.name +
                     "' (use random, prefix-repetition, shipped, file or fixed)");
  }
}

std::vector<int32_t> LoadDataset::ids(uint64_t stream, int64_t index, int64_t count, bool unique_head) const {
  std::mt19937_64 rng = rng_for(options_.seed, stream, index);
  const auto n = static_cast<int64_t>(vocab_.size());
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(count));
  // The head spells the index in base n (three digits), so heads differ between indices.
  uint64_t rest = static_cast<uint64_t>(index);
  for (int64_t i = 0; i < count; ++i) {
    if (unique_head && i < 3) {
      // Digit d at position i as a seeded, one-to-one choice of token (a rotation per position, so
      // that index 0 is not one token three times).
      const uint64_t rotate = mix(options_.seed + static_cast<uint64_t>(i)) % static_cast<uint64_t>(n);
      out.push_back(
          vocab_[static_cast<size_t>((rest % static_cast<uint64_t>(n) + rotate) % static_cast<uint64_t>(n))]);
      rest /= static_cast<uint64_t>(n);
    } else {
      out.push_back(vocab_[static_cast<size_t>(pick(rng))]);
    }
  }
  return out;
}

std::string LoadDataset::words(uint64_t stream, int64_t index, int64_t count, bool unique_head) const {
  std::mt19937_64 rng = rng_for(options_.seed, stream, index);
  std::uniform_int_distribution<int64_t> pick(0, static_cast<int64_t>(kWordCount) - 1);
  std::string out;
  uint64_t rest = static_cast<uint64_t>(index);
  for (int64_t i = 0; i < count; ++i) {
    int64_t w;
    if (unique_head && i < 3) {
      // Digit d at position i as a seeded, one-to-one choice of word (167 is odd: a bijection mod 256;
      // a rotation per position, so that index 0 is not one word three times).
      w = static_cast<int64_t>(
          (rest % kWordCount * 167 + mix(options_.seed + static_cast<uint64_t>(i)) % kWordCount) %
          kWordCount);
      rest /= kWordCount;
    } else {
      w = pick(rng);
    }
    if (i > 0) out += ' ';
    out += kWords[w];
  }
  return out;
}

std::string LoadDataset::piece(uint64_t stream, int64_t index, int64_t count, bool unique_head,
                               int64_t* tokens) const {
  if (vocab_.empty()) return words(stream, index, count, unique_head);
  std::string text = tokenizer_->decode(ids(stream, index, count, unique_head));
  if (tokens) *tokens = count;
  return text;
}

DatasetEntry LoadDataset::at(int64_t i) const {
  const DatasetOptions& o = options_;
  DatasetEntry e;
  if (!entries_.empty()) {
    e = entries_[static_cast<size_t>(i % static_cast<int64_t>(entries_.size()))];
    if (e.output_tokens < 0) e.output_tokens = o.output_len;
    return e;
  }
  std::mt19937_64 len_rng = rng_for(o.seed, kLengthStream, i);
  if (o.name == "random") {
    const int64_t in = draw_len(len_rng, o.input_len, o.range_ratio);
    e.output_tokens = draw_len(len_rng, o.output_len, o.range_ratio);
    std::string prefix;
    if (o.prefix_len > 0) prefix = piece(kPrefixStream, 0, o.prefix_len, false, nullptr);
    e.prompt = piece(kPromptStream, i, in, true, nullptr);
    if (!prefix.empty()) e.prompt = prefix + (vocab_.empty() ? " " : "") + e.prompt;
  } else {  // prefix-repetition: request i gets prefix i % N, each prefix its own head
    const int64_t which = i % o.num_prefixes;
    e.output_tokens = o.output_len;
    const std::string prefix = piece(kPrefixStream, which, o.prefix_len, true, nullptr);
    e.prompt = prefix + (vocab_.empty() ? " " : "") + piece(kPromptStream, i, o.suffix_len, true, nullptr);
  }
  if (tokenizer_) {
    try {
      e.prompt_tokens = static_cast<int64_t>(tokenizer_->encode(e.prompt).size());
    } catch (const std::exception&) {
    }
  }
  return e;
}

}  // namespace servelab

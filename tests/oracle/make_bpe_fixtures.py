#!/usr/bin/env python3
"""Hugging Face reference ids for the byte-level BPE tokenizers beyond GPT-2, for
tests/core/test_tokenizer_oracle.cpp. Run by CTest as a fixture (also in SERVELAB_BASE_ONLY builds):

    .venv/bin/python tests/oracle/make_bpe_fixtures.py --out build/base/tokenizer_oracle

It writes into --out:
  smollm2/tokenizer.json   HF's tokenizer made from SmolLM2's GGUF, with its pre-tokenizer fixed
                           (transformers does not know GGUF's `smollm` and falls back to plain
                           ByteLevel; the fix is Sequence[Digits(individual_digits=True), ByteLevel])
  smollm2_parts.json       the GGUF's tokenizer.ggml.* metadata, for Gpt2BpeTokenizer::from_parts
  llama3/tokenizer.json    a tiny BPE trained here with Llama 3's pre-tokenizer (Split regex +
                           ByteLevel(use_regex=false)), ignore_merges and a bos post-processor
  llama3_parts.json        the same vocabulary as GGUF-style parts (pre = llama-bpe)
  qwen2/tokenizer.json     likewise with Qwen2's regex (no NFC normalizer: we refuse normalizers)
  regex/tokenizer.json     likewise with a Split regex that is none of the known ones
  bpe_cases.json           for each tokenizer: text, HF ids, HF decode of those ids

When the GGUF is absent, bpe_cases.json says so under "smollm2_skip" and the SmolLM2 checks skip.
The output is deterministic (fixed seeds, no dates).
"""

import argparse
import json
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_GGUF = REPO / ".venv" / "share" / "servelab" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# None of the known ones: runs of letters with an optional space, single digits, the rest.
CUSTOM_REGEX = r" ?\p{L}+|\p{N}|\s+|[^\s\p{L}\p{N}]+"

DIGIT_CASES = [
    ("digits_double_space", "a  1"),
    ("digits_spaced", "1 2  3   4"),
    ("digits_pi", "3.14159"),
    ("digits_date", "2025-11-24"),
    ("digits_fullwidth", "\uff11\uff12\uff13"),
    ("digits_fullwidth_mixed", "abc\uff11\uff12\uff13def"),
    ("digits_arabic_indic", "\u0663"),
    ("digits_arabic_indic_run", "\u0661\u0662\u0663 \u0664"),
    ("digits_other_numbers", "x\u00b2 \u216b \u00bd \u2460"),
    ("digits_long", "12345678901234567890"),
    ("digits_leading_space", " 1"),
    ("digits_two_spaces", "  12"),
    ("digits_newline", "a\n1\n\n22"),
    ("digits_money", "$100.00 and \u20ac5,99"),
    ("digits_ordinals", "1st 2nd 3rd 4th"),
    ("digits_words", "x1y22z333"),
    ("digits_trailing_space", "7   "),
]

CONTROL_CASES = [
    ("control_prompt", "<|im_start|>user\nHi<|im_end|>\n"),
    ("control_chat", "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
                     "<|im_start|>assistant\n"),
    ("control_endoftext", "<|endoftext|>"),
    ("control_inside_word", "a<|im_end|>b"),
    ("control_adjacent", "<|im_start|><|im_end|><|endoftext|>"),
    ("control_unfinished", "<|im_start"),
    ("control_nested", "<<|im_start|>|>"),
    ("control_spaced", " <|im_start|>  spaced  <|im_end|> "),
    ("control_repo", "<repo_name>servelab<file_sep>main.cpp<gh_stars>100"),
    ("llama3_specials", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"),
]

# Bytes whose symbol SmolLM2's vocabulary lacks (0x04, 0x06, 0x13, 0x14, 0x16, 0x1D; F1/F2 lead bytes).
MISSING_BYTE_CASES = [
    ("missing_04", "\x04"),
    ("missing_between", "a\x04b"),
    ("missing_inside_word", "t\x04he"),
    ("missing_all_ascii", "\x04\x06\x13\x14\x16\x1d"),
    ("missing_in_text", "hello\x04 world\x1d!"),
    ("missing_spaces", " \x13 \x14 "),
    ("missing_digit", "1\x042"),
    ("missing_f1_lead", "a\U00040000b"),
    ("missing_f2_lead", "\U00080000"),
    ("missing_and_control", "\x06<|im_end|>\x06"),
    # Inside one regex piece (punctuation and controls group together) the neighbours of a dropped
    # byte become adjacent and may merge.
    ("missing_merge_across", "..\x04.. !!\x1d!! ::\x13\x14::"),
    ("missing_f1_in_punct", "!\U00040000!"),
]

LLAMA3_CASES = [
    ("l3_contractions_case", "I'M here, DON'T go, it'S 'LL 'Re"),
    ("l3_long_s", "it'\u017f"),
    ("l3_numbers", "1 12 123 1234 12345 1234567"),
    ("l3_newlines", "a\n\n b\r\n\r\nc \n  \n"),
    ("l3_punct_newline", "end...!!!\n\nnext"),
    ("l3_leading_symbol", "$hello _foo #bar @baz"),
    ("l3_qwerty_whole", " qwertyuiop"),
    ("l3_qwerty_start", "qwertyuiop"),
    ("l3_qwerty_in_text", "type qwertyuiop and  qwertyuiop."),
    ("l3_tabs", "\tx\t\ty"),
]

TRAIN_CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 12:30 and we're 100% sure.",
    "hello world, hello there! Serving models is fun; tokens and pieces make words.",
    "def f(x):\n    return x ** 2  # square\n\n",
    "Ünïcödé café naïve 日本語のテキスト 中文 text 한국어 🐍🚀",
    "I'll've don't WE'RE they'd she's 2025-11-24 3.14159 $100.00",
    "user assistant system <|im_start|> begin end header text of the",
]


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def random_cases(seed, n, extra_pool):
    pool = (
        list("abcXYZ") + list("0123456789") + list("'''") + list(" " * 8) + list("\t\n\r")
        + ["\u00a0", "\u3000", "\u2028", "\u0085", "\u180e", "\u200b", "\x0b", "\x1c"]
        + list(".,!?-_()\"#@$") + ["é", "ß", "Ü", "\u0301", "ñ", "ſ", "K"]
        + ["日", "本", "한", "ア"] + ["٣", "²", "Ⅻ", "½", "１", "٠"]
        + ["🐍", "👍🏽", "\u200d", "\ufe0f"]
        + ["'s", "'ll", "'RE", "'S", "'T"]
        + extra_pool
    )
    rng = random.Random(seed)
    return [(f"random_{i:03d}", "".join(rng.choice(pool) for _ in range(rng.randint(1, 24)))) for i in range(n)]


def corpus_cases():
    fixture = json.loads((REPO / "tests" / "fixtures" / "tokenizer_cases.json").read_text(encoding="ascii"))
    return [("corpus_" + c["name"], c["text"]) for c in fixture["cases"]]


def run_cases(tok, cases):
    out = []
    for name, text in cases:
        ids = tok.encode(text, add_special_tokens=False).ids
        out.append({"name": name, "text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    return out


def tiny_tokenizer(split_regex, specials, ignore_merges, bos):
    """A small byte-level BPE trained on TRAIN_CORPUS with a Split(regex) + ByteLevel(use_regex=False)
    pre-tokenizer, as Llama 3 and Qwen2 ship theirs; plus one token (" qwertyuiop") that no merge
    makes, so that ignore_merges shows."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split_regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=1, show_progress=False, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN_CORPUS * 3, trainer=trainer)
    doc = json.loads(tok.to_str())
    vocab = doc["model"]["vocab"]
    vocab["Ġqwertyuiop"] = max(vocab.values()) + 1
    if bos:
        doc["post_processor"] = json.loads(processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab[bos])]).__getstate__())
    return Tokenizer.from_str(json.dumps(doc))


def parts_of(tok, pre, specials, source):
    """GGUF-style parts of a tokenizers.Tokenizer: tokens by id, merges, token types (3 for specials)."""
    doc = json.loads(tok.to_str())
    vocab = doc["model"]["vocab"]
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
        tokens[i] = t
    merges = [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]
    types = [3 if t in specials else 1 for t in tokens]
    return {"tokens": tokens, "merges": merges, "token_types": types, "pre": pre, "source": source}


def smollm2(gguf_path, out_dir):
    import gguf
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
    backend = tok.backend_tokenizer
    backend.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False),
    ])
    (out_dir / "smollm2").mkdir(parents=True, exist_ok=True)
    backend.save(str(out_dir / "smollm2" / "tokenizer.json"))

    reader = gguf.GGUFReader(str(gguf_path))

    def field(key):
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    parts = {
        "tokens": field("tokenizer.ggml.tokens"),
        "merges": field("tokenizer.ggml.merges"),
        "token_types": field("tokenizer.ggml.token_type"),
        "pre": field("tokenizer.ggml.pre"),
        "model": field("tokenizer.ggml.model"),
        "bos_id": field("tokenizer.ggml.bos_token_id"),
        "eos_id": field("tokenizer.ggml.eos_token_id"),
        "unk_id": field("tokenizer.ggml.unknown_token_id"),
        "pad_id": field("tokenizer.ggml.padding_token_id"),
        "add_bos": field("tokenizer.ggml.add_bos_token"),
        "chat_template": field("tokenizer.chat_template"),
        "source": str(gguf_path),
    }
    (out_dir / "smollm2_parts.json").write_text(json.dumps(parts, ensure_ascii=True), encoding="ascii")

    b2u = bytes_to_unicode()
    vocab = backend.get_vocab(with_added_tokens=True)
    missing = [b for b in range(256) if b2u[b] not in vocab]
    cases = run_cases(backend, corpus_cases() + DIGIT_CASES + CONTROL_CASES + MISSING_BYTE_CASES + LLAMA3_CASES
                      + random_cases(77, 200, ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "\x04", "\x1d"]))
    info = {
        "missing_bytes": missing,
        "hf_bos": tok.bos_token, "hf_eos": tok.eos_token, "hf_unk": tok.unk_token, "hf_pad": tok.pad_token,
        "chat_template_default_system": "You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    }
    return cases, info


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--gguf", type=Path, default=DEFAULT_GGUF)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import tokenizers

    result = {"tokenizers_version": tokenizers.__version__}
    llama3_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                       "<|eot_id|>"]
    common = corpus_cases() + DIGIT_CASES + CONTROL_CASES + LLAMA3_CASES
    for name, regex, ignore_merges, bos in [("llama3", LLAMA3_REGEX, True, "<|begin_of_text|>"),
                                            ("qwen2", QWEN2_REGEX, False, None),
                                            ("regex", CUSTOM_REGEX, False, None)]:
        tok = tiny_tokenizer(regex, llama3_specials, ignore_merges, bos)
        (args.out / name).mkdir(parents=True, exist_ok=True)
        tok.save(str(args.out / name / "tokenizer.json"))
        result[name] = run_cases(tok, common + random_cases(5, 150, llama3_specials))
        if name == "llama3":
            parts = parts_of(tok, "llama-bpe", llama3_specials, "tiny-llama3.gguf")
            parts["bos_id"] = tok.token_to_id(bos)
            (args.out / "llama3_parts.json").write_text(json.dumps(parts, ensure_ascii=True), encoding="ascii")

    import transformers
    result["transformers_version"] = transformers.__version__
    if args.gguf.is_file():
        result["smollm2"], result["smollm2_info"] = smollm2(args.gguf, args.out)
    else:
        result["smollm2_skip"] = f"{args.gguf} not found (scripts/bootstrap puts SmolLM2's GGUF there)"
        print(f"note: {result['smollm2_skip']}; the SmolLM2 checks will skip", file=sys.stderr)

    (args.out / "bpe_cases.json").write_text(json.dumps(result, ensure_ascii=True, indent=0), encoding="ascii")
    counts = {k: len(v) for k, v in result.items() if isinstance(v, list)}
    print(f"wrote {args.out}: {counts}", file=sys.stderr)


if __name__ == "__main__":
    main()

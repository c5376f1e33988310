#!/usr/bin/env python3
"""Writes tests/fixtures/tokenizer_cases.json: GPT-2 token ids from Hugging Face `tokenizers`
for a corpus of tricky strings, which tests/core/test_tokenizer.cpp compares our C++ tokenizer with.

Regenerate (from the repository root, with the project venv made by scripts/bootstrap):

    SERVELAB_SHARED=/work/shared .venv/bin/python tests/oracle/make_tokenizer_fixtures.py

Options: --tokenizer-dir DIR (default $SERVELAB_SHARED/data/gpt2, which holds tokenizer.json),
--out FILE (default tests/fixtures/tokenizer_cases.json). The output is deterministic: the random
cases come from a fixed seed. When transformers is installed the script also checks that its slow
GPT2Tokenizer (vocab.json + merges.txt, Python `regex`) gives the same ids and reports any case
where it does not (the fixture always holds the `tokenizers` answer, the one the C++ code copies).
"""

import argparse
import json
import os
import random
import sys
from pathlib import Path

import tokenizers

REPO = Path(__file__).resolve().parents[2]

# (name, text). Names are what a failing C++ test prints.
NAMED_CASES = [
    ("seed", "The quick brown fox jumped over the"),
    ("spain", "The rain in Spain falls"),
    ("must", "What comes up must"),
    ("empty", ""),
    ("one_space", " "),
    ("spaces_between", "a   b"),
    ("trailing_spaces", "hello   "),
    ("leading_spaces", "   hello"),
    ("tabs", "a\tb\t\tc\t"),
    ("two_newlines", "\n\n"),
    ("space_newline_space", " \n "),
    ("newlines_in_text", "line one\nline two\n\nline four\r\nwindows"),
    ("mixed_whitespace_runs", "x \t \n  y\n \n\tz   \n"),
    ("contractions", "I'll've don't WE'RE"),
    ("contractions_all", "it's can't you're we've I'm she'll he'd 'S 'T 'Re ''s '"),
    ("numbers", "12345 3.14 1,000,000"),
    ("long_number", "31415926535897932384626433832795028841971"),
    ("accents", "café naïve Ünïcödé"),
    ("combining_marks", "cafe\u0301 n\u0303 a\u0308\u0301"),
    ("cjk", "日本語のテキスト"),
    ("cjk_mixed", "中文 text 한국어 テスト123"),
    ("emoji", "I love 🐍 and 🚀!"),
    ("emoji_zwj_family", "👨‍👩‍👧‍👦 family"),
    ("emoji_zwj_and_flags", "👩🏽‍💻 🏳️‍🌈 🇯🇵🇫🇷 ❤️‍🔥"),
    ("endoftext_inside", "Hello<|endoftext|>World"),
    ("endoftext_spaced", "end. <|endoftext|> The next"),
    ("endoftext_only", "<|endoftext|>"),
    ("endoftext_twice", "<|endoftext|><|endoftext|>a"),
    ("endoftext_broken", "<|endoftext|<|endoftext|>|>"),
    ("unicode_spaces", "a\u00a0b\u3000c\u2028d\u0085e\u2009f\u1680g\u202fh\u205fi"),
    ("mongolian_vowel_separator", "a\u180eb \u180e c"),
    ("zero_width", "a\u200bb\ufeffc\u200dd"),
    ("control_chars", "a\x0bb\x0cc\x1cd\x1fe\x00f\x7f"),
    ("other_numbers", "٣٤ ߀ ² Ⅻ ½ ١٢٣"),
    ("punctuation_runs", "Hello!!! ...what?! (yes) [no] {x: 1}; a--b"),
    ("code", "def f(x):\n    return x ** 2  # square\n"),
    ("url", "https://example.com/path?q=1&r=2#frag"),
    ("apostrophe_variants", "don’t it‘s ʼs"),
    ("rtl", "مرحبا بالعالم שלום"),
    ("devanagari", "नमस्ते दुनिया"),
    ("math", "∀x∈ℝ: x² ≥ 0 ⇒ √x"),
    ("repeated_char", "a" * 300),
    ("repeated_space_word", "ab " * 50),
]

# Characters the random cases draw from: every class the regex distinguishes, plus whitespace
# that only Unicode-aware \s knows and characters whose class differs between regex engines.
POOL = (
    list("abcXYZ") + list("019") + list("'''") + list(" " * 8) + list("\t\n\r")
    + ["\u00a0", "\u3000", "\u2028", "\u0085", "\u180e", "\u200b", "\u2009", "\x0b", "\x0c", "\x1c"]
    + list(".,!?-_()\"#@") + ["é", "ß", "Ü", "\u0301", "ñ"]
    + ["日", "本", "한", "ア"] + ["٣", "²", "Ⅻ", "½"]
    + ["🐍", "👍🏽", "\u200d", "\ufe0f", "😀"]
    + ["<|endoftext|>", "'s", "'ll", "'RE"]
)


def random_cases(n, seed=1234):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = rng.randint(1, 24)
        out.append((f"random_{i:03d}", "".join(rng.choice(POOL) for _ in range(length))))
    return out


def decode_cases(tok):
    """Id sequences whose bytes are not valid UTF-8 on their own, with HF's decoded text."""
    cases = []

    def add(name, ids):
        cases.append({"name": name, "ids": ids, "text": tok.decode(ids, skip_special_tokens=False)})

    for text in ["🐍", "日本語", "👨‍👩‍👧‍👦", "é"]:
        ids = tok.encode(text, add_special_tokens=False).ids
        for cut in range(1, len(ids)):
            add(f"prefix_{cut}_of_{text}", ids[:cut])
            add(f"suffix_from_{cut}_of_{text}", ids[cut:])
    vocab = tok.get_vocab()
    byte_tok = lambda b: vocab[bytes_to_unicode()[b]]  # noqa: E731
    add("lone_lead_e3", [byte_tok(0xE3)])
    add("lone_continuation", [byte_tok(0x81)])
    add("lead_then_ascii", [byte_tok(0xE3), byte_tok(0x81), vocab["a"]])
    add("f0_truncated_twice", [byte_tok(0xF0), byte_tok(0x9F), byte_tok(0xF0), byte_tok(0x9F), byte_tok(0x90)])
    add("overlong_c0", [byte_tok(0xC0), byte_tok(0xAF)])
    add("surrogate_ed_a0", [byte_tok(0xED), byte_tok(0xA0), byte_tok(0x80)])
    add("ff_byte", [byte_tok(0xFF), vocab["a"]])
    add("f4_above_max", [byte_tok(0xF4), byte_tok(0x90), byte_tok(0x80), byte_tok(0x80)])
    add("endoftext_between", [vocab["a"], 50256, byte_tok(0xE3), 50256])
    return cases


def added_token_options():
    """A tiny byte-level BPE whose added tokens use lstrip, rstrip, single_word and normalized=False,
    which GPT-2's own <|endoftext|> does not, with HF's ids for texts that exercise them."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = [("h", "e"), ("l", "l"), ("ll", "o"), ("he", "llo"), ("Ġ", "w")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([
        AddedToken("<mask>", lstrip=True, rstrip=True, single_word=True, normalized=False),
        AddedToken("[SEP]", normalized=False),
        AddedToken("[SEP]x", normalized=True),
    ])
    tok.add_tokens([AddedToken("ask", single_word=False), AddedToken("wörd", single_word=True, lstrip=True)])
    texts = [
        "hello <mask> world", "hello\t<mask>\u2000there", "a<mask> <mask>b <mask>", "x <mask>, <mask>- \u25cc\u0330<mask>",
        "[SEP][SEP]x [SEP]xx", "mask ask task", "wörd a wörd wördy _wörd \u3000wörd", "   <mask>   <mask>   ", "",
    ]
    cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in texts]
    return {"tokenizer": json.loads(tok.to_str()), "cases": cases}


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


def cross_check_slow(tok_dir, cases):
    try:
        from transformers import GPT2Tokenizer
    except Exception as e:  # transformers is optional for this script
        print(f"note: transformers not importable ({e}); skipping the slow-tokenizer cross-check", file=sys.stderr)
        return
    slow = GPT2Tokenizer(str(tok_dir / "vocab.json"), str(tok_dir / "merges.txt"))
    bad = 0
    for c in cases:
        ids = slow.encode(c["text"])
        if ids != c["ids"]:
            bad += 1
            print(f"note: transformers GPT2Tokenizer differs on {c['name']!r}: {ids} vs {c['ids']}", file=sys.stderr)
    print(f"slow-tokenizer cross-check: {len(cases) - bad}/{len(cases)} cases agree", file=sys.stderr)


def main():
    shared = os.environ.get("SERVELAB_SHARED")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer-dir", type=Path, default=Path(shared) / "data" / "gpt2" if shared else None)
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "tokenizer_cases.json")
    args = ap.parse_args()
    if args.tokenizer_dir is None:
        ap.error("set SERVELAB_SHARED or pass --tokenizer-dir (a folder with GPT-2's tokenizer.json)")

    tok = tokenizers.Tokenizer.from_file(str(args.tokenizer_dir / "tokenizer.json"))
    cases = []
    for name, text in NAMED_CASES + random_cases(150):
        enc = tok.encode(text, add_special_tokens=False)
        cases.append({"name": name, "text": text, "ids": enc.ids})
        back = tok.decode(enc.ids, skip_special_tokens=False)
        if back != text:
            print(f"warning: HF decode(encode(x)) != x for {name!r}", file=sys.stderr)

    fixture = {
        "about": "GPT-2 ids from Hugging Face tokenizers; regenerate with tests/oracle/make_tokenizer_fixtures.py",
        "tokenizers_version": tokenizers.__version__,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "cases": cases,
        "decode_cases": decode_cases(tok),
        "added_token_options": added_token_options(),
    }
    cross_check_slow(args.tokenizer_dir, cases)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    # One case per line: small diffs when the corpus changes, and still plain JSON.
    dump = lambda v: json.dumps(v, ensure_ascii=True, separators=(",", ":"))  # noqa: E731
    lines = ["{"]
    for key, value in fixture.items():
        if key == "added_token_options":
            lines.append(f'{dump(key)}:{{"tokenizer":{dump(value["tokenizer"])},"cases":[')
            lines.append(",\n".join("  " + dump(v) for v in value["cases"]))
            lines.append("]},")
        elif isinstance(value, list):
            items = ",\n".join("  " + dump(v) for v in value)
            lines.append(f"{dump(key)}:[\n{items}\n],")
        else:
            lines.append(f"{dump(key)}:{dump(value)},")
    lines[-1] = lines[-1].rstrip(",")
    lines.append("}")
    with open(args.out, "w", encoding="ascii") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(cases)} encode and {len(fixture['decode_cases'])} decode cases to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()

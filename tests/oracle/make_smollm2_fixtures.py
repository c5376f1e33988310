#!/usr/bin/env python3
"""What Hugging Face transformers computes with the built-in model (SmolLM2-135M-Instruct, the Q4_1
GGUF; docs: docs/models.md), for test_smollm2_oracle.

HF loads the very same file (AutoModelForCausalLM.from_pretrained(dir, gguf_file=name,
dtype=float32): every tensor dequantized to fp32 by gguf-py, the Q/K rows un-permuted by transformers)
and its tokenizer from the file's metadata, with the pre-tokenizer docs/models.md says transformers gets
wrong for `smollm` replaced by Sequence([Digits(individual_digits=True), ByteLevel]). Written:

  OUT/reference.safetensors  logits_<i>: HF's logits at every position of prompt i, fp32 [T, 49152]
  OUT/reference.json         per prompt: text, HF's ids, HF's greedy tokens (16 new for the course
                             prompts, 40 for the chat one; generation does not stop at eos) and the
                             gap between HF's top two logits at every greedy step; a prompt whose
                             greedy next token is <|im_end|>; HF's ids for a few texts only the
                             tokenizers see (digits, spaces, UTF-8, control tokens); a stamp of
                             the inputs (this script, the model file, the library versions)
  OUT/skipped.txt            instead, when the model file is absent or memory is short: why

One model load per run (about 1.5 GB; 20 s in all on one thread, which a busy 2-core machine runs
faster than two); a run whose stamp matches the existing output does nothing.

Run:  .venv/bin/python tests/oracle/make_smollm2_fixtures.py --out build/oracle-smollm2 [--model PATH]
"""
import argparse
import json
import os
import sys
import time

from fixture_common import available_gib, skip, stamp

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loader draws progress bars

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.join(ROOT, ".venv", "share", "servelab", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
COURSE = ["The quick brown fox jumped over the", "The rain in Spain falls", "What comes up must"]
CHAT_USER = "What is deep learning?"
# A prompt whose greedy next token ends generation (checked below). SmolLM2 does not predict
# <|endoftext|> on short prompts; the C++ suite forces that one.
STOP_PROMPTS = [
    ("<|im_start|>user\nSay yes.<|im_end|>\n<|im_start|>assistant\nYes.", 2),
]
# Texts only the tokenizers see: digits one by one (llama.cpp's `smollm` pre-tokenizer), runs of
# spaces, newlines and tabs, multi-byte UTF-8 (none of the 21 bytes the vocabulary lacks), control
# tokens written in the text.
TOKENIZER_TEXTS = [
    "a  1 2  3   4",
    "In 2024, SmolLM2 scored 12.5% on 3 tests (1,000,000 tokens).",
    "   leading spaces, trailing spaces   ",
    "line one\n\nline two\tafter a tab\r\n",
    "\u00dcn\u00efc\u00f6d\u00e9 \u2014 na\u00efve caf\u00e9 \u6771\u4eac \U0001f642",
    "<|im_start|>assistant\nHi!<|im_end|><|endoftext|>",
    "don't you're I'll we've",
]
OUTPUTS = ("reference.json", "reference.safetensors")  # removed when the fixtures are skipped
NEED_GIB = 3.0  # HF peaks at about 1.5 GB; leave room for the rest of the test run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default=os.environ.get("SERVELAB_MODEL") or DEFAULT_MODEL)
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        skip(__file__, a.out, f"the built-in model is absent ({a.model}); scripts/bootstrap installs it", OUTPUTS)
    try:
        import torch
        from safetensors.torch import save_file
        from tokenizers import pre_tokenizers
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging
        key = stamp(__file__, a.model, ("torch", "transformers", "gguf", "tokenizers"))
    except ImportError as e:
        print(f"make_smollm2_fixtures: cannot import {e.name}; run scripts/bootstrap", file=sys.stderr)
        sys.exit(1)
    ref_json = os.path.join(a.out, "reference.json")
    if os.path.exists(ref_json) and os.path.exists(os.path.join(a.out, "reference.safetensors")):
        with open(ref_json) as f:
            if json.load(f).get("stamp") == key:
                print(f"make_smollm2_fixtures: {a.out} is up to date")
                return
    gib = available_gib()
    if gib is not None and gib < NEED_GIB:
        skip(__file__, a.out, f"only {gib:.1f} GiB of memory available; HF's fp32 load of the model needs about "
                    f"{NEED_GIB:.0f} (1.5 GB peak and headroom)", OUTPUTS)

    start = time.time()
    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)  # two threads spin against each other under ctest -j2 (3x slower)
    folder, name = os.path.split(os.path.realpath(a.model))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    # transformers does not know llama.cpp's `smollm` pre-tokenizer (docs/models.md): digits one by one.
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    assert tok("a  1", add_special_tokens=False).input_ids == [81, 256, 33], "pre-tokenizer fix failed"
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    assert model.config.num_key_value_heads == 3 and model.config.tie_word_embeddings
    loaded = time.time() - start

    chat = tok.apply_chat_template([{"role": "user", "content": CHAT_USER}], add_generation_prompt=True,
                                   tokenize=False)
    assert "You are a helpful AI assistant named SmolLM" in chat, chat  # the default system message
    prompts = [(p, 16, "course") for p in COURSE] + [(chat, 40, "chat")]
    tensors, ref = {}, {"prompts": [], "stop_prompts": [], "load_seconds": round(loaded, 1)}
    with torch.no_grad():
        for i, (text, new, kind) in enumerate(prompts):
            ids = tok(text, add_special_tokens=False).input_ids
            x = torch.tensor([ids])
            tensors[f"logits_{i}"] = model(input_ids=x).logits[0].float().contiguous()
            g = model.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=new, do_sample=False,
                               eos_token_id=None, pad_token_id=2, output_logits=True,
                               return_dict_in_generate=True)
            gaps = []
            for s in g.logits:
                top = s[0].float().topk(2).values
                gaps.append(float(top[0] - top[1]))
            ref["prompts"].append({"kind": kind, "text": text, "ids": ids, "new_tokens": new,
                                   "greedy": g.sequences[0, len(ids):].tolist(), "top2_gap": gaps,
                                   "greedy_text": tok.decode(g.sequences[0, len(ids):])})
        for text, expected in STOP_PROMPTS:
            ids = tok(text, add_special_tokens=False).input_ids
            last = model(input_ids=torch.tensor([ids])).logits[0, -1]
            top = last.topk(2)
            nxt = int(top.indices[0])
            assert nxt == expected, f"{text!r}: HF's next token is {nxt}, not {expected}"
            ref["stop_prompts"].append({"text": text, "ids": ids, "next": nxt,
                                        "top2_gap": float(top.values[0] - top.values[1])})
    ref["tokenizer_texts"] = [{"text": t, "ids": tok(t, add_special_tokens=False).input_ids}
                              for t in TOKENIZER_TEXTS]
    ref["seconds"] = round(time.time() - start, 1)
    ref["stamp"] = key
    os.makedirs(a.out, exist_ok=True)
    if os.path.exists(os.path.join(a.out, "skipped.txt")):
        os.remove(os.path.join(a.out, "skipped.txt"))
    save_file(tensors, os.path.join(a.out, "reference.safetensors"))
    with open(ref_json, "w") as f:
        json.dump(ref, f, indent=1)
    print(f"make_smollm2_fixtures: wrote {a.out} in {ref['seconds']} s (model load {loaded:.1f} s); "
          f"chat answer: {ref['prompts'][-1]['greedy_text']!r}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What Hugging Face transformers computes with Gemma 3 270M (the opt-in real checkpoint that
scripts/install_gemma3_270m installs: gemma-3-270m-q4_k_m.gguf, llama.cpp's Q4_K_M file), for
test_smollm2_oracle's gemma3_270m_matches_hf.

HF loads the very same file (AutoModelForCausalLM.from_pretrained(dir, gguf_file=name, dtype=float32):
every tensor dequantized to fp32 by gguf-py) and its tokenizer from the file's metadata. Written:

  OUT/reference.json  per prompt: text, HF's ids, HF's greedy tokens, and at the prompt's last
                      position and each greedy step HF's five most likely tokens with their
                      log-probabilities (teacher-forced along HF's greedy path); a stamp of the inputs
  OUT/skipped.txt     instead, when the model file is absent (it is opt-in) or memory is short: why

The second prompt is longer than the model's sliding window (512 positions), so its local layers
attend to a window and its global ones to everything. About a minute on one thread, 2.5 GB.

Run:  .venv/bin/python tests/oracle/make_gemma3_270m_fixtures.py --out build/oracle-gemma3-270m [--model PATH]
"""
import argparse
import json
import os

from fixture_common import available_gib, skip, stamp

os.environ.setdefault("TQDM_DISABLE", "1")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_MODEL = os.path.join(ROOT, ".venv", "share", "servelab", "models", "gemma-3-270m-q4_k_m.gguf")
# A paragraph repeated with numbered sentences, so that no two stretches of the long prompt are alike.
LONG = " ".join(f"Note {i}: the {w} crossed the river at dawn and reached the {v} market before noon."
                for i, (w, v) in enumerate(zip(["trader", "farmer", "child", "soldier", "poet", "baker"] * 12,
                                               ["old", "new", "north", "south", "fish", "spice"] * 12)))
PROMPTS = [("The capital of France is", 24), (LONG + " In summary,", 12)]
NEED_GIB = 3.5


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        skip(__file__, a.out, f"Gemma 3 270M is not installed ({a.model}); it is opt-in: scripts/install_gemma3_270m")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
    key = stamp(__file__, a.model)
    ref_json = os.path.join(a.out, "reference.json")
    if os.path.exists(ref_json):
        with open(ref_json) as f:
            if json.load(f).get("stamp") == key:
                print(f"make_gemma3_270m_fixtures: {a.out} is up to date")
                return
    gib = available_gib()
    if gib is not None and gib < NEED_GIB:
        skip(__file__, a.out, f"only {gib:.1f} GiB of memory available; HF's fp32 load of the model needs about {NEED_GIB}")
    hf_logging.set_verbosity_error()
    torch.set_num_threads(1)
    folder, name = os.path.split(os.path.realpath(a.model))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    assert model.config.sliding_window == 512, model.config.sliding_window
    ref = {"prompts": []}
    with torch.no_grad():
        for text, new in PROMPTS:
            ids = tok(text).input_ids
            out = model.generate(torch.tensor([ids]), max_new_tokens=new, do_sample=False)[0].tolist()
            greedy = out[len(ids):]
            # Teacher-forced along HF's own greedy path: one forward over prompt and tokens.
            logp = torch.log_softmax(model(torch.tensor([out])).logits[0].float(), -1)
            steps = []
            for k in range(new):
                top = torch.topk(logp[len(ids) - 1 + k], 5)
                steps.append({"ids": top.indices.tolist(), "logprobs": [float(v) for v in top.values]})
            ref["prompts"].append({"text": text, "ids": ids, "greedy": greedy, "steps": steps})
            print(f"make_gemma3_270m_fixtures: {len(ids)} prompt tokens -> {tok.decode(greedy)!r}")
    ref["stamp"] = key
    os.makedirs(a.out, exist_ok=True)
    if os.path.exists(os.path.join(a.out, "skipped.txt")):
        os.remove(os.path.join(a.out, "skipped.txt"))
    with open(ref_json, "w") as f:
        json.dump(ref, f)


if __name__ == "__main__":
    main()

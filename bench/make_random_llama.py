#!/usr/bin/env python3
"""A Llama-family Hugging Face folder with SmolLM2-135M's shape and seeded random weights.

For timing on machines that should not receive the built-in model's file (the GPU machine takes
64 MiB a call): the same layers, heads, widths and tied head as SmolLM2-135M-Instruct, with GPT-2's
tokenizer (vocab.json, merges.txt), so the vocabulary is GPT-2's 50257 instead of 49152. HF
transformers and servelab-cli both load the folder, so bench/compare_hf.py --model DIR times the
two on the same weights. Its text is noise.

  python3 bench/make_random_llama.py --out /tmp/smollm2-random --tokenizer .devcarry/gpt2
"""
import argparse
import json
import os
import shutil

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", required=True, help="a folder with GPT-2's vocab.json and merges.txt")
    ap.add_argument("--layers", type=int, default=30, help="SmolLM2-135M has 30")
    ap.add_argument("--seed", type=int, default=1234)
    a = ap.parse_args()
    cfg = LlamaConfig(vocab_size=50257, hidden_size=576, intermediate_size=1536, num_hidden_layers=a.layers,
                      num_attention_heads=9, num_key_value_heads=3, head_dim=64, max_position_embeddings=2048,
                      rms_norm_eps=1e-5, rope_theta=100000.0, bos_token_id=50256, eos_token_id=50256,
                      tie_word_embeddings=True, hidden_act="silu", initializer_range=0.04)
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(a.out, safe_serialization=True)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(a.tokenizer, name), os.path.join(a.out, name))
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GPT2Tokenizer", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                   "unk_token": "<|endoftext|>", "model_max_length": 2048}, f)
    print(a.out)


if __name__ == "__main__":
    main()

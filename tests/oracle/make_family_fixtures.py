#!/usr/bin/env python3
"""Reference outputs of Hugging Face transformers for the C++ oracle tests of the architectures
added to the registry after Qwen3: sliding-window attention, Gemma 2, Gemma 3 (text) and Phi-3.

Tiny random checkpoints with the logits and greedy tokens HF computes, alone and as a left-padded
batch (make_llama_fixtures.py's cases and files, whose helpers this script reuses). Every model has
a sliding window of 8 positions and the prompts run up to 20 tokens (+ 8 generated), so the window
cuts in prefill and decode:

  OUT/mistral_window/  Mistral, sliding_window 8 on every layer
  OUT/qwen2_window/    Qwen2, use_sliding_window with max_window_layers 1 (layers 1 and 2 slide)
  OUT/gemma2/          Gemma 2: (1 + w) norms before and after each block, GeGLU, sqrt(hidden)
                       embedding scale, query_pre_attn_scalar, attention and final logit
                       soft-capping, sliding and global layers alternating
  OUT/gemma3/          Gemma 3 text: QK-norm, layer_types sliding, sliding, global, two rope bases
  OUT/phi3/            Phi-3: fused qkv_proj and gate_up_proj, partial rotary (factor 0.5), window 8
  each with config.json, model.safetensors, reference.safetensors, reference.json

Run:  .venv/bin/python tests/oracle/make_family_fixtures.py --out build/oracle-families
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig,
                              MistralConfig, MistralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM)
    from make_llama_fixtures import EOS, make_model, write_case
except ImportError as e:  # the C++ tests skip with a message when the fixtures are absent
    print(f"make_family_fixtures: cannot import {e.name}; run scripts/bootstrap", file=sys.stderr)
    sys.exit(1)

WINDOW = 8
# Two prompts longer than the window (the batch pads the shorter ones), two within it.
PROMPTS = [[(37 * i + 11) % 500 + 3 for i in range(20)], [(53 * i + 7) % 500 + 3 for i in range(17)],
           [12, 480, 7, 99, 5], [250, 3, 260]]


def base(**kw):
    b = dict(vocab_size=503, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=8, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
             rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=EOS, pad_token_id=0, initializer_range=0.3,
             sliding_window=WINDOW)
    b.update(kw)
    return b


def eager(cfg):
    # Soft-capping needs the eager attention (transformers' SDPA path has no hook for it).
    cfg._attn_implementation = "eager"
    return cfg


CASES = [
    ("mistral_window", MistralForCausalLM, lambda: MistralConfig(**base(hidden_act="silu"))),
    ("qwen2_window", Qwen2ForCausalLM, lambda: Qwen2Config(**base(
        hidden_act="silu", use_sliding_window=True, max_window_layers=1, tie_word_embeddings=False))),
    ("gemma2", Gemma2ForCausalLM, lambda: eager(Gemma2Config(**base(
        hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=24, attn_logit_softcapping=2.0,
        final_logit_softcapping=5.0)))),
    ("gemma3", Gemma3ForCausalLM, lambda: eager(Gemma3TextConfig(**base(
        num_hidden_layers=4, layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                          "sliding_attention"],
        query_pre_attn_scalar=16, rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})))),
    ("phi3", Phi3ForCausalLM, lambda: Phi3Config(**base(
        hidden_act="silu", tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}))),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for seed, (name, cls, cfg) in enumerate(CASES, start=21):
        write_case(a.out, name, make_model(seed, cfg(), cls), prompts=PROMPTS)
    print(f"make_family_fixtures: wrote {a.out}/{{{','.join(n for n, _, _ in CASES)}}}")


if __name__ == "__main__":
    main()

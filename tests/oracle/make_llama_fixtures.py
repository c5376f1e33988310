#!/usr/bin/env python3
"""Reference outputs of Hugging Face transformers for the C++ Llama oracle tests.

Builds tiny random Llama-family checkpoints covering what the engine must get right, and writes for
each the logits and greedy tokens HF computes, alone and as a left-padded batch:

  OUT/tied_gqa/      9 query heads over 3 KV heads (SmolLM2's grouping), tied head
  OUT/untied_bias/   untied head, multi-head attention, attention and MLP biases
  OUT/llama3_rope/   rope_scaling llama3 (every wavelength band in use), sharded safetensors
  OUT/linear_rope/   rope_scaling linear
  each with config.json, model.safetensors (or shards + index), reference.safetensors, reference.json

Run:  .venv/bin/python tests/oracle/make_llama_fixtures.py --out build/oracle-llama
"""
import argparse
import json
import os
import sys

try:
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:  # the C++ tests skip with a message when the fixtures are absent
    print(f"make_llama_fixtures: cannot import {e.name}; run scripts/bootstrap", file=sys.stderr)
    sys.exit(1)

PROMPTS = [[464, 201, 77, 318, 45, 9, 300], [12, 480, 7, 99, 5], [250, 3, 260], [17]]
NEW_TOKENS = 8
EOS = 2


def config(**kw):
    base = dict(vocab_size=503, hidden_size=72, intermediate_size=120, num_hidden_layers=3,
                num_attention_heads=9, num_key_value_heads=3, head_dim=8, max_position_embeddings=64,
                rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1, eos_token_id=EOS,
                tie_word_embeddings=True, hidden_act="silu", initializer_range=0.3)
    base.update(kw)
    return LlamaConfig(**base)


def make_model(seed, cfg, cls=LlamaForCausalLM):
    """A random model of class cls (other fixture scripts reuse it for their architectures)."""
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    with torch.no_grad():  # norms away from 1 and non-zero biases, so that every tensor matters
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
            elif name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def greedy_batch(model, prompts, steps, pad):
    """The course's batch loop: left padding, mask, position_ids = cumsum - 1 (pad -> 1), KV cache."""
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    pos = mask.cumsum(-1) - 1
    pos.masked_fill_(mask == 0, 1)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    first_logits = out.logits[:, -1, :].float().clone()
    past, tokens = out.past_key_values, [[] for _ in prompts]
    nxt = out.logits[:, -1, :].argmax(-1)
    for step in range(steps):
        for r, t in enumerate(nxt.tolist()):
            tokens[r].append(t)
        if step == steps - 1:
            break
        pos = pos[:, -1:] + 1
        mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=mask.dtype)], 1)
        out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos,
                    past_key_values=past, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1, :].argmax(-1)
    return {"input_ids": ids.tolist(), "attention_mask": mask[:, :width].tolist()}, first_logits, tokens


def write_case(out, name, model, shard=False, prompts=PROMPTS):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    # save_pretrained writes config.json and the weights (shards + index when they exceed the size).
    model.save_pretrained(d, safe_serialization=True, max_shard_size="150KB" if shard else "1GB")
    ref_tensors, ref = {}, {"prompts": prompts, "new_tokens": NEW_TOKENS, "eos": EOS, "single": [],
                            "num_parameters": model.num_parameters()}
    with torch.no_grad():
        for i, p in enumerate(prompts):
            ids = torch.tensor([p])
            ref_tensors[f"logits_{i}"] = model(input_ids=ids).logits[0].contiguous()
            g = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                               do_sample=False, pad_token_id=EOS, eos_token_id=None)
            ref["single"].append(g[0, len(p):].tolist())
        padded, first_logits, tokens = greedy_batch(model, prompts, NEW_TOKENS, EOS)
        ref_tensors["batch_last_logits"] = first_logits.contiguous()
        ref["batch"] = {**padded, "tokens": tokens}
    save_file(ref_tensors, os.path.join(d, "reference.safetensors"))
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    write_case(a.out, "tied_gqa", make_model(1, config()))
    write_case(a.out, "untied_bias", make_model(2, config(
        tie_word_embeddings=False, num_key_value_heads=9, attention_bias=True, mlp_bias=True)))
    write_case(a.out, "llama3_rope", make_model(3, config(rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16})), shard=True)
    write_case(a.out, "linear_rope", make_model(4, config(
        rope_scaling={"rope_type": "linear", "factor": 2.0}, rope_theta=500.0)))
    print(f"make_llama_fixtures: wrote {a.out}/{{tied_gqa,untied_bias,llama3_rope,linear_rope}}")


if __name__ == "__main__":
    main()

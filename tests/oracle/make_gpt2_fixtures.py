#!/usr/bin/env python3
"""Reference outputs of Hugging Face transformers for the C++ GPT-2 oracle tests (llm.c style).

Builds small random GPT-2 checkpoints in the key layouts seen in the wild and writes, for each,
the logits and greedy tokens HF computes, single and as a left-padded batch:

  OUT/prefixed/    save_pretrained today: "transformer." keys, lm_head tied (absent)
  OUT/unprefixed/  the original gpt2 upload: no prefix, attn.bias / attn.masked_bias buffers
  OUT/untied/      "transformer." keys plus a separate lm_head.weight
  each with config.json, model.safetensors, reference.safetensors, reference.json

Where CUDA is available it also runs each checkpoint on the GPU in fp16 and bf16 and records HF's
greedy tokens there (reference.json "cuda"), which the C++ CUDA parity tests compare against, with
HF's five best tokens and their logits at every step, [[ids], [logits]] (at a near tie two correct
implementations in bf16 can pick different tokens; the tests check that they only part ways there,
on a token HF scored within that tie).

Run:  .venv/bin/python tests/oracle/make_gpt2_fixtures.py --out build/oracle
"""
import argparse
import json
import os
import sys

try:
    import torch
    from safetensors.torch import save_file
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as e:  # the C++ tests skip with a message when the fixtures are absent
    print(f"make_gpt2_fixtures: cannot import {e.name}; run scripts/bootstrap", file=sys.stderr)
    sys.exit(1)

PROMPTS = [[464, 201, 77, 318, 45, 9, 300], [12, 480, 7, 99, 5], [250, 3, 260], [17]]
NEW_TOKENS = 8


def tiny_config(tied=True):
    return GPT2Config(vocab_size=503, n_positions=48, n_embd=64, n_layer=3, n_head=4,
                      layer_norm_epsilon=1e-5, activation_function="gelu_new",
                      bos_token_id=502, eos_token_id=502, tie_word_embeddings=tied,
                      initializer_range=0.25)


def make_model(seed, tied):
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(tiny_config(tied)).eval()
    with torch.no_grad():  # non-trivial LayerNorms and biases so that every tensor matters
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def top5(logits):
    """Per row: [[the five best ids], [their logits]]."""
    t = logits.float().topk(5, dim=-1)
    return [[i, v] for i, v in zip(t.indices.tolist(), t.values.tolist())]


def greedy_course_loop(model, prompts, steps, pad, tops=None):
    """The course's batch loop: left padding, mask, position_ids = cumsum - 1 (pad -> 1), KV cache."""
    dev = model.device
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=dev)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=dev)
    pos = mask.cumsum(-1) - 1
    pos.masked_fill_(mask == 0, 1)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    first_logits = out.logits[:, -1, :].float().cpu().clone()
    past, tokens = out.past_key_values, [[] for _ in prompts]
    nxt = out.logits[:, -1, :].argmax(-1)
    step_tops = [top5(out.logits[:, -1, :])]
    for step in range(steps):
        for r, t in enumerate(nxt.tolist()):
            tokens[r].append(t)
        if step == steps - 1:
            break
        pos = pos[:, -1:] + 1
        mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=mask.dtype, device=dev)], 1)
        out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos,
                    past_key_values=past, use_cache=True)
        past, nxt = out.past_key_values, out.logits[:, -1, :].argmax(-1)
        step_tops.append(top5(out.logits[:, -1, :]))
    if tops is not None:  # per row, per step
        tops.extend([[t[r] for t in step_tops] for r in range(len(prompts))])
    return {"input_ids": ids.tolist(), "attention_mask": mask[:, :width].tolist()}, first_logits, tokens


def cuda_references(model):
    """HF's greedy tokens on the GPU in fp16 and bf16 (one by one and as the padded batch)."""
    import copy
    refs = {}
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        m = copy.deepcopy(model).to(device="cuda", dtype=dtype).eval()
        r = {"single": [], "single_top5": [], "batch": None, "batch_top5": []}
        for p in PROMPTS:
            ids = torch.tensor([p], device="cuda")
            g = m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                           do_sample=False, pad_token_id=m.config.eos_token_id, eos_token_id=None,
                           output_scores=True, return_dict_in_generate=True)
            r["single"].append(g.sequences[0, len(p):].tolist())
            r["single_top5"].append([top5(s)[0] for s in g.scores])
        _, _, r["batch"] = greedy_course_loop(m, PROMPTS, NEW_TOKENS, m.config.eos_token_id,
                                            r["batch_top5"])
        refs[name] = r
    return refs


def write_case(out, name, model, layout):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    cfg = model.config.to_dict()
    sd = {k: v.contiguous() for k, v in model.state_dict().items()}
    if layout == "unprefixed":
        n = model.config.n_positions
        sd = {k[len("transformer."):]: v for k, v in sd.items() if k.startswith("transformer.")}
        for i in range(model.config.n_layer):
            sd[f"h.{i}.attn.bias"] = torch.tril(torch.ones(n, n)).view(1, 1, n, n)
            sd[f"h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    elif layout == "prefixed":
        sd.pop("lm_head.weight", None)
    save_file(sd, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, default=str)

    ref_tensors, ref = {}, {"prompts": PROMPTS, "new_tokens": NEW_TOKENS, "single": []}
    with torch.no_grad():
        for i, p in enumerate(PROMPTS):
            ids = torch.tensor([p])
            ref_tensors[f"logits_{i}"] = model(input_ids=ids).logits[0].contiguous()
            g = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                               do_sample=False, pad_token_id=model.config.eos_token_id,
                               eos_token_id=None)
            ref["single"].append(g[0, len(p):].tolist())
        padded, first_logits, tokens = greedy_course_loop(model, PROMPTS, NEW_TOKENS, model.config.eos_token_id)
        ref_tensors["batch_last_logits"] = first_logits.contiguous()
        ref["batch"] = {**padded, "tokens": tokens}
        if torch.cuda.is_available():
            ref["cuda"] = cuda_references(model)
    save_file(ref_tensors, os.path.join(d, "reference.safetensors"))
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    write_case(a.out, "prefixed", make_model(1, True), "prefixed")
    write_case(a.out, "unprefixed", make_model(2, True), "unprefixed")
    write_case(a.out, "untied", make_model(3, False), "untied")
    print(f"make_gpt2_fixtures: wrote {a.out}/{{prefixed,unprefixed,untied}}")


if __name__ == "__main__":
    main()

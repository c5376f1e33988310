#!/usr/bin/env python3
"""Tiny Llama GGUF files written the way llama.cpp's convert_hf_to_gguf.py writes them, and what
Hugging Face transformers computes when it loads those very files, for test_gguf_oracle.

A random LlamaForCausalLM (hidden 256, intermediate 512, 4 query heads of 64 over 2 KV heads, 2
layers, a byte-level BPE vocabulary of 320 tokens; every matrix row a multiple of 256 values, as the
K-quants need) is converted to GGUF: llama.* metadata, llama.cpp's tensor names, the Q and K rows
permuted per head (w.reshape(n, 2, hd/2, in).swapaxes(1, 2)), the norms in F32 and the matrices
(token_embd and output included) in one ggml type per file:

  OUT/<case>/model.gguf              the file
  OUT/<case>/reference.safetensors   HF's logits for every prompt (all positions), the last logits of
                                     the left-padded batch, and some of the weights HF loaded (the
                                     dequantized, un-permuted blk.0 Q, K and ffn_down, the embedding
                                     and an untied head)
  OUT/<case>/reference.json          prompts, HF's greedy tokens alone and as a batch, the padded batch,
                                     the smallest top-2 logit gap along HF's greedy paths, which oracle
                                     produced them, the file's tensor types

Cases: f32, f16, q8_0, q4_0, q4_1, q5_0, q4_k, q6_k (every matrix of that type; tied and untied
heads alternate) and mixed_untied (the types of a llama.cpp Q4_K_M file: token_embd Q8_0, attention
Q4_K, ffn_down and the head Q6_K, gate and up Q5_0, which llama.cpp falls back to for rows that are
not whole super-blocks). F32 to Q5_0 are quantized by gguf.quants.quantize;
gguf 0.19 cannot quantize the K-quants, so this script packs Q4_K and Q6_K blocks itself (a plain
min/max quantizer over every sub-block, with 6-bit and 8-bit sub-block scales under fp16
super-scales) and checks that gguf's own dequantizer reads them back as what was meant.

The oracle is LlamaForCausalLM.from_pretrained(case_dir, gguf_file="model.gguf", dtype=float32):
transformers dequantizes every tensor with gguf-py and undoes the Q/K permutation itself. Were it
to refuse a file, the case falls back to an HF model built from the weights gguf-py dequantizes (the
permutation undone here) and reference.json says so ("oracle").

GPT-2 (llama.cpp's "gpt2" architecture) too: gpt2_q8_0 and gpt2_f32 hold a random GPT2LMHeadModel
(width 64, 4 heads, 2 layers, the same vocabulary) as convert_hf_to_gguf writes it: gpt2.* metadata,
Conv1D matrices transposed to [out, in] (attn_qkv, attn_output, ffn_up, ffn_down), biases and norms
in F32, and the tied head written again as output.weight. Same reference files (single prompts only).

Run:  .venv/bin/python tests/oracle/make_gguf_llama_fixtures.py --out build/oracle-gguf-llama
"""
import argparse
import json
import os
import re
import sys
import time
from collections import Counter

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loader draws progress bars

try:
    import numpy as np
    import torch
    import gguf
    from gguf import GGMLQuantizationType as Q
    from safetensors.torch import save_file
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    from transformers.utils import logging as hf_logging
except ImportError as e:  # the C++ tests skip with a message when the fixtures are absent
    print(f"make_gguf_llama_fixtures: cannot import {e.name}; run scripts/bootstrap", file=sys.stderr)
    sys.exit(1)

PROMPTS = [[300, 201, 77, 318, 45, 9, 260], [12, 280, 7, 99, 5], [250, 3, 260], [17]]
NEW_TOKENS = 8
EOS, BOS = 2, 1
N_HEAD, N_KV_HEAD, HEAD_DIM = 4, 2, 64
ROPE_THETA = 50000.0  # not transformers' default, so that a reader ignoring rope.freq_base fails

# (case, type of every matrix or a per-tensor rule, tied head)
CASES = [
    ("f32", Q.F32, True),
    ("f16", Q.F16, False),
    ("q8_0", Q.Q8_0, True),
    ("q4_0", Q.Q4_0, False),
    ("q4_1", Q.Q4_1, True),
    ("q4_k", Q.Q4_K, False),
    ("q6_k", Q.Q6_K, True),
    ("mixed_untied", None, False),
    ("q5_0", Q.Q5_0, False),  # last: each case's seed is its place in this list
]
MIXED = [("token_embd", Q.Q8_0), ("attn_", Q.Q4_K), ("ffn_down", Q.Q6_K), ("output.", Q.Q6_K),
         ("ffn_", Q.Q5_0)]

# ---- a small byte-level BPE vocabulary (GPT-2's byte map, merges learnt from a sentence) ----

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2: unk, bos, eos
TEXT = ("The quick brown fox jumped over the lazy dog. The rain in Spain falls mainly on the plain. "
        "What comes up must come down, and what goes round comes round again and again.")
N_MERGES = 61  # 3 + 256 + 61 = 320 tokens


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def vocabulary():
    byte_map = bytes_to_unicode()
    tokens = SPECIALS + [byte_map[b] for b in range(256)]
    words = [[byte_map[b] for b in w.encode()] for w in re.findall(r" ?\w+| ?[^\s\w]+", TEXT)]
    merges = []
    while len(merges) < N_MERGES:
        pairs = Counter((w[i], w[i + 1]) for w in words for i in range(len(w) - 1))
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        tokens.append(a + b)
        for w in words:
            i = 0
            while i < len(w) - 1:
                if w[i] == a and w[i + 1] == b:
                    w[i:i + 2] = [a + b]
                i += 1
    types = [3] * len(SPECIALS) + [1] * (len(tokens) - len(SPECIALS))
    return tokens, types, merges


# ---- K-quant blocks (ggml-common.h layouts), packed here ----

def fp16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16)


def quantize_q4_k(x):
    """[rows, n] -> [rows, n / 256 * 144] uint8: v = d * sc * q - dmin * m per 32-value sub-block."""
    rows, n = x.shape
    sub = x.reshape(-1, 8, 32).astype(np.float32)
    lo = np.minimum(sub.min(-1), 0.0)
    scale, mins = (sub.max(-1) - lo) / 15.0, -lo
    d, dmin = fp16(scale.max(-1) / 63.0), fp16(mins.max(-1) / 63.0)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.divide(scale, df, out=np.zeros_like(scale), where=df > 0)), 0, 63)
    m = np.clip(np.round(np.divide(mins, dminf, out=np.zeros_like(mins), where=dminf > 0)), 0, 63)
    eff, off = (df * sc)[..., None], (dminf * m)[..., None]
    q = np.clip(np.round(np.divide(sub + off, eff, out=np.zeros_like(sub), where=eff > 0)), 0, 15)
    sc, m, q = sc.astype(np.uint8), m.astype(np.uint8), q.astype(np.uint8)
    scales = np.zeros((sub.shape[0], 12), np.uint8)
    scales[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(-1, 128)  # sub-blocks 2g, 2g + 1 share bytes
    blocks = np.concatenate([d.reshape(-1, 1).view(np.uint8), dmin.reshape(-1, 1).view(np.uint8),
                             scales, qs], axis=1)
    meant = (eff * q - off).reshape(rows, n)
    return blocks.reshape(rows, -1), meant


def quantize_q6_k(x):
    """[rows, n] -> [rows, n / 256 * 210] uint8: v = d * sc * (q - 32) per 16-value sub-block."""
    rows, n = x.shape
    sub = x.reshape(-1, 16, 16).astype(np.float32)
    scale = np.abs(sub).max(-1) / 31.0
    d = fp16(scale.max(-1) / 127.0)
    df = d.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.divide(scale, df, out=np.zeros_like(scale), where=df > 0)), -128, 127)
    eff = (df * sc)[..., None]
    qv = np.clip(np.round(np.divide(sub, eff, out=np.zeros_like(sub), where=eff != 0)), -32, 31)
    q = (qv + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # [block, half, quarter, l]
    ql = np.concatenate([(q[:, :, 0] & 0x0F) | ((q[:, :, 2] & 0x0F) << 4),
                         (q[:, :, 1] & 0x0F) | ((q[:, :, 3] & 0x0F) << 4)], axis=2).reshape(-1, 128)
    qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) |
          ((q[:, :, 3] >> 4) << 6)).reshape(-1, 64)
    blocks = np.concatenate([ql, qh, sc.astype(np.int8).view(np.uint8), d.reshape(-1, 1).view(np.uint8)],
                            axis=1)
    meant = (eff * qv).reshape(rows, n)
    return blocks.reshape(rows, -1), meant


def quantize(w, qtype):
    """gguf-py's quantizer where it has one, else ours; checked against gguf-py's dequantizer."""
    if qtype in (Q.Q4_K, Q.Q6_K):
        blocks, meant = (quantize_q4_k if qtype == Q.Q4_K else quantize_q6_k)(w)
        back = gguf.quants.dequantize(blocks, qtype)
        err = np.abs(back - meant).max()
        assert err <= 1e-6 * max(1.0, np.abs(meant).max()), f"{qtype.name} blocks read back {err} off"
        # A plain quantizer: within half a step of the weights (a broken layout is far off).
        assert np.abs(back - w).max() < 0.25 * np.abs(w).max(), f"{qtype.name} quantizer is off"
        return blocks
    if qtype == Q.F32:
        return w.astype(np.float32)
    return gguf.quants.quantize(w.astype(np.float32), qtype)


# ---- the model and its conversion ----

def make_model(seed, tied, vocab):
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=N_HEAD, num_key_value_heads=N_KV_HEAD, head_dim=HEAD_DIM,
                      max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=ROPE_THETA,
                      bos_token_id=BOS, eos_token_id=EOS, tie_word_embeddings=tied, hidden_act="silu",
                      initializer_range=0.1)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1, so that every tensor matters
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    return model


def permute_rope_rows(w, n):
    """convert_hf_to_gguf's LlamaModel.permute: rows i and i + hd/2 of a head become 2i and 2i + 1."""
    return w.reshape(n, 2, w.shape[0] // n // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(model):
    """(gguf name, HF weight as numpy in GGUF's row order) in convert_hf_to_gguf's order."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    out = [("token_embd.weight", sd["model.embed_tokens.weight"])]
    for i in range(model.config.num_hidden_layers):
        p = f"model.layers.{i}."
        out += [(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"]),
                (f"blk.{i}.attn_q.weight", permute_rope_rows(sd[p + "self_attn.q_proj.weight"], N_HEAD)),
                (f"blk.{i}.attn_k.weight", permute_rope_rows(sd[p + "self_attn.k_proj.weight"], N_KV_HEAD)),
                (f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"]),
                (f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"]),
                (f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"]),
                (f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"]),
                (f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"]),
                (f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])]
    out.append(("output_norm.weight", sd["model.norm.weight"]))
    if not model.config.tie_word_embeddings:
        out.append(("output.weight", sd["lm_head.weight"]))
    return out


def type_of(name, qtype, ndim):
    if ndim == 1:
        return Q.F32  # llama.cpp keeps norms in F32
    if qtype is not None:
        return qtype
    return next(t for prefix, t in MIXED if prefix in name)


def write_gguf(path, model, qtype, vocab):
    tokens, types, merges = vocab
    c = model.config
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("servelab tiny llama")
    w.add_vocab_size(c.vocab_size)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV_HEAD)
    w.add_rope_freq_base(ROPE_THETA)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_K_M) if qtype is None else {
        Q.F32: 0, Q.F16: 1, Q.Q4_0: 2, Q.Q4_1: 3, Q.Q8_0: 7, Q.Q5_0: 8, Q.Q4_K: 15, Q.Q6_K: 18}[qtype])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    counts = Counter()
    for name, t in gguf_tensors(model):
        tt = type_of(name, qtype, t.ndim)
        counts[tt.name] += 1
        data = quantize(t, tt)
        w.add_tensor(name, data, raw_dtype=None if tt in (Q.F32, Q.F16) and data.dtype != np.uint8 else tt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dict(counts)


def dequantized_model(path, config):
    """The fallback oracle: an HF model over gguf-py's dequantization of the file."""
    reader = gguf.GGUFReader(path)
    deq = {}
    for t in reader.tensors:
        v = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = [int(x) for x in reversed(t.shape)]
        v = np.asarray(v, dtype=np.float32).reshape(shape)
        if ".attn_q." in t.name or ".attn_k." in t.name:
            n = N_HEAD if ".attn_q." in t.name else N_KV_HEAD
            v = v.reshape(n, v.shape[0] // n // 2, 2, *v.shape[1:]).swapaxes(1, 2).reshape(v.shape)
        deq[t.name] = torch.from_numpy(np.ascontiguousarray(v))
    hf = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
          "output.weight": "lm_head.weight"}
    blk = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
           "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
           "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
           "ffn_down": "mlp.down_proj"}
    sd = {}
    for name, v in deq.items():
        if name in hf:
            sd[hf[name]] = v
        else:
            _, i, part, _ = name.split(".")
            sd[f"model.layers.{i}.{blk[part]}.weight"] = v
    model = LlamaForCausalLM(config).eval()
    model.load_state_dict(sd, strict=False)
    model.tie_weights()
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


def top2_gap(logits):
    v = logits.float().topk(2, dim=-1).values
    return (v[..., 0] - v[..., 1]).min().item()


def single_prompt_references(model, ref, ref_tensors):
    """HF's logits at every position and its greedy tokens for each prompt alone, and the smallest
    top-2 logit gap along those greedy paths."""
    with torch.no_grad():
        for i, p in enumerate(PROMPTS):
            ids = torch.tensor([p])
            ref_tensors[f"logits_{i}"] = model(input_ids=ids).logits[0].contiguous()
            g = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                               do_sample=False, pad_token_id=EOS, eos_token_id=None,
                               output_logits=True, return_dict_in_generate=True)
            ref["single"].append(g.sequences[0, len(p):].tolist())
            ref["hf_greedy_min_top2_gap"] = min(ref["hf_greedy_min_top2_gap"],
                                                min(top2_gap(s) for s in g.logits))


def write_case(out, name, qtype, tied, seed, vocab):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    source = make_model(seed, tied, len(vocab[0]))
    path = os.path.join(d, "model.gguf")
    types = write_gguf(path, source, qtype, vocab)
    oracle = "transformers from_pretrained(gguf_file=model.gguf)"
    try:
        model = LlamaForCausalLM.from_pretrained(d, gguf_file="model.gguf", dtype=torch.float32).eval()
        assert model.config.tie_word_embeddings == tied and model.config.num_key_value_heads == N_KV_HEAD
    except Exception as e:  # say which file HF refuses, and compare against gguf-py's dequantization
        print(f"make_gguf_llama_fixtures: {name}: transformers refuses the file ({type(e).__name__}: {e}); "
              "falling back to an HF model over gguf-py's dequantized weights", file=sys.stderr)
        oracle = f"fallback: HF LlamaForCausalLM over gguf-py's dequantization (from_pretrained: {e})"
        model = dequantized_model(path, source.config)
    sd = model.state_dict()
    ref_tensors = {
        "weight.blk.0.attn_q": sd["model.layers.0.self_attn.q_proj.weight"],
        "weight.blk.0.attn_k": sd["model.layers.0.self_attn.k_proj.weight"],
        "weight.blk.0.ffn_down": sd["model.layers.0.mlp.down_proj.weight"],
        "weight.token_embd": sd["model.embed_tokens.weight"],
    }
    if not tied:
        ref_tensors["weight.output"] = sd["lm_head.weight"]
    if qtype == Q.F32:  # lossless: the un-permuted Q and K are the source model's
        for k in ("self_attn.q_proj", "self_attn.k_proj"):
            key = f"model.layers.0.{k}.weight"
            assert torch.equal(sd[key], source.state_dict()[key]), f"{key} does not round-trip"
    ref = {"prompts": PROMPTS, "new_tokens": NEW_TOKENS, "eos": EOS, "single": [], "oracle": oracle,
           "tied": tied, "tensor_types": types, "hf_greedy_min_top2_gap": float("inf")}
    single_prompt_references(model, ref, ref_tensors)
    with torch.no_grad():
        padded, first_logits, tokens = greedy_batch(model, PROMPTS, NEW_TOKENS, EOS)
        ref_tensors["batch_last_logits"] = first_logits.contiguous()
        ref["batch"] = {**padded, "tokens": tokens}
    # Greedy tokens are compared exactly: a near tie along HF's path would make that flaky.
    assert ref["hf_greedy_min_top2_gap"] > 1e-3, f"{name}: near tie on HF's greedy path; change the seed"
    save_file({k: v.detach().float().contiguous() for k, v in ref_tensors.items()},
              os.path.join(d, "reference.safetensors"))
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f)
    return oracle


# ---- GPT-2 files (llama.cpp's gpt2 architecture) ----

GPT2_CASES = [("gpt2_q8_0", Q.Q8_0, 31), ("gpt2_f32", Q.F32, 33)]


def gpt2_tensors(model):
    """(gguf name, weight in GGUF's [out, in] order) as convert_hf_to_gguf's GPT2Model writes them."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    out = [("token_embd.weight", sd["transformer.wte.weight"]),
           ("position_embd.weight", sd["transformer.wpe.weight"])]
    names = [("ln_1", "attn_norm"), ("attn.c_attn", "attn_qkv"), ("attn.c_proj", "attn_output"),
             ("ln_2", "ffn_norm"), ("mlp.c_fc", "ffn_up"), ("mlp.c_proj", "ffn_down")]
    for i in range(model.config.n_layer):
        for hf, gg in names:
            w = sd[f"transformer.h.{i}.{hf}.weight"]
            out.append((f"blk.{i}.{gg}.weight", w.T.copy() if w.ndim == 2 else w))  # Conv1D is [in, out]
            out.append((f"blk.{i}.{gg}.bias", sd[f"transformer.h.{i}.{hf}.bias"]))
    out += [("output_norm.weight", sd["transformer.ln_f.weight"]),
            ("output_norm.bias", sd["transformer.ln_f.bias"]),
            ("output.weight", sd["transformer.wte.weight"])]  # the converter writes the tied head again
    return out


def write_gpt2_case(out, name, qtype, seed, vocab):
    tokens, types, merges = vocab
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    cfg = GPT2Config(vocab_size=len(tokens), n_positions=1024, n_embd=64, n_layer=2, n_head=4,
                     activation_function="gelu_new", bos_token_id=BOS, eos_token_id=EOS,
                     initializer_range=0.1)
    torch.manual_seed(seed)
    source = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for pname, p in source.named_parameters():
            if "ln_" in pname:
                p.add_(torch.randn_like(p) * 0.2)
    path = os.path.join(d, "model.gguf")
    w = gguf.GGUFWriter(path, "gpt2")
    w.add_name("servelab tiny gpt2")
    w.add_context_length(cfg.n_positions)
    w.add_embedding_length(cfg.n_embd)
    w.add_feed_forward_length(4 * cfg.n_embd)
    w.add_block_count(cfg.n_layer)
    w.add_head_count(cfg.n_head)
    w.add_layer_norm_eps(cfg.layer_norm_epsilon)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0 if qtype == Q.Q8_0 else gguf.LlamaFileType.ALL_F32))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    counts = Counter()
    for tname, t in gpt2_tensors(source):
        tt = Q.F32 if t.ndim == 1 or tname.startswith("position_embd") else qtype
        counts[tt.name] += 1
        data = quantize(t, tt)
        w.add_tensor(tname, data, raw_dtype=None if tt in (Q.F32, Q.F16) and data.dtype != np.uint8 else tt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    # transformers reads GPT-2 GGUF files itself (its GPT-2 tensor processor undoes the transposes).
    oracle = "transformers from_pretrained(gguf_file=model.gguf)"
    model = GPT2LMHeadModel.from_pretrained(d, gguf_file="model.gguf", dtype=torch.float32).eval()
    assert model.config.n_positions == cfg.n_positions, model.config.n_positions
    ref_tensors = {"weight.blk.0.attn_qkv": model.state_dict()["transformer.h.0.attn.c_attn.weight"]}
    ref = {"prompts": PROMPTS, "new_tokens": NEW_TOKENS, "eos": EOS, "single": [], "oracle": oracle,
           "tied": True, "tensor_types": dict(counts), "hf_greedy_min_top2_gap": float("inf")}
    single_prompt_references(model, ref, ref_tensors)
    assert ref["hf_greedy_min_top2_gap"] > 1e-3, f"{name}: near tie on HF's greedy path; change the seed"
    save_file({k: v.detach().float().contiguous() for k, v in ref_tensors.items()},
              os.path.join(d, "reference.safetensors"))
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump(ref, f)
    return oracle


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    start = time.time()
    vocab = vocabulary()
    assert len(vocab[0]) == 320, len(vocab[0])
    fallbacks = []
    for seed, (name, qtype, tied) in enumerate(CASES, start=11):
        if not write_case(a.out, name, qtype, tied, seed, vocab).startswith("transformers"):
            fallbacks.append(name)
    for name, qtype, seed in GPT2_CASES:
        if not write_gpt2_case(a.out, name, qtype, seed, vocab).startswith("transformers"):
            fallbacks.append(name)
    print(f"make_gguf_llama_fixtures: wrote {len(CASES) + len(GPT2_CASES)} cases to {a.out} in {time.time() - start:.1f} s"
          + (f"; HF refused {fallbacks} (fallback oracle)" if fallbacks else ""))


if __name__ == "__main__":
    main()

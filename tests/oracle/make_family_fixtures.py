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
  OUT/phi3/            Phi-3: fused qkv_proj and gate_up_proj, partial rotary (factor 0.5), window 8;
                       and OUT/phi3/adapter/, a PEFT LoRA on the fused modules (qkv_proj,
                       gate_up_proj) and o_proj, with peft's logits in reference_lora.safetensors
  each with config.json, model.safetensors, reference.safetensors, reference.json

and the same architectures as GGUF files written the way llama.cpp's convert_hf_to_gguf.py writes
them (every tensor F32, so that the logits must match; make_gguf_llama_fixtures.py's byte-level
vocabulary of 320 tokens), beside the checkpoint they were written from and its references:

  OUT/gemma2_gguf/     gemma2.*: norms stored as 1 + w, soft-capping, window, Q/K not permuted;
                       query_pre_attn_scalar = head_dim, which is what llama.cpp assumes
  OUT/gemma3_gguf/     gemma3.*: six layers (llama.cpp's one global layer in six), QK-norm,
                       rope_freq_base for the global layer, 10000 for the sliding ones
  OUT/phi3_gguf/       phi3.*: attn_qkv and ffn_up fused, rope.dimension_count = the partial
                       rotary dimensions, head_dim = hidden / heads (llama.cpp's), window 8
  each also with model.gguf

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
    from gguf_writing import begin_gguf, finish_gguf
    from make_gguf_llama_fixtures import vocabulary
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


GGUF_VOCAB = 320
GGUF_PROMPTS = [[(37 * i + 11) % 310 + 3 for i in range(20)], [(53 * i + 7) % 310 + 3 for i in range(17)],
                [12, 280, 7, 99, 5], [250, 3, 260]]

GGUF_CASES = [
    ("gemma2_gguf", "gemma2", Gemma2ForCausalLM, lambda: eager(Gemma2Config(**base(
        vocab_size=GGUF_VOCAB, hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=16,
        attn_logit_softcapping=2.0, final_logit_softcapping=5.0)))),
    ("gemma3_gguf", "gemma3", Gemma3ForCausalLM, lambda: eager(Gemma3TextConfig(**base(
        vocab_size=GGUF_VOCAB, num_hidden_layers=6, query_pre_attn_scalar=16, rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})))),
    ("phi3_gguf", "phi3", Phi3ForCausalLM, lambda: Phi3Config(**{
        **{k: v for k, v in base(vocab_size=GGUF_VOCAB).items() if k != "head_dim"},
        "hidden_act": "silu", "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}})),
]

# Hugging Face's names inside a block -> llama.cpp's (gguf-py's tensor map for these architectures).
GGUF_BLOCK_NAMES = {
    "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "self_attn.qkv_proj": "attn_qkv",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.gate_up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def gguf_name(hf, arch):
    if hf == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf == "model.norm.weight":
        return "output_norm.weight"
    if hf == "lm_head.weight":
        return "output.weight"
    _, _, i, rest = hf.split(".", 3)
    part = rest.rsplit(".", 1)[0]
    if arch.startswith("gemma"):
        part = {"post_attention_layernorm": "post_attention_norm", "pre_feedforward_layernorm": "ffn_norm",
                "post_feedforward_layernorm": "post_ffw_norm"}.get(part, part)
    elif part == "post_attention_layernorm":
        part = "ffn_norm"
    return f"blk.{i}.{GGUF_BLOCK_NAMES.get(part, part)}.weight"


def write_family_gguf(path, model, arch):
    """The GGUF convert_hf_to_gguf.py writes for this checkpoint (F32 tensors), as far as these keys go."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    tokens, types, merges = vocabulary()
    assert len(tokens) == c.vocab_size
    w = begin_gguf(path, arch, c, head_dim=None if arch == "phi3" else head_dim)
    if arch == "phi3":
        rope = c.rope_parameters
        w.add_rope_dimension_count(int(rope["partial_rotary_factor"] * c.hidden_size) // c.num_attention_heads)
        w.add_rope_freq_base(rope["rope_theta"])
        w.add_sliding_window(c.sliding_window or 0)
    else:
        w.add_sliding_window(c.sliding_window)
        if arch == "gemma2":  # Gemma2Model writes no rope base: llama.cpp's default, transformers' too
            w.add_attn_logit_softcapping(c.attn_logit_softcapping)
            w.add_final_logit_softcapping(c.final_logit_softcapping)
        else:
            w.add_rope_freq_base(c.rope_parameters["full_attention"]["rope_theta"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(EOS)
    w.add_unk_token_id(0)
    w.add_add_bos_token(False)
    tensors = []
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        data = t.detach().float().numpy()
        if arch.startswith("gemma") and name.endswith("norm.weight"):
            data = data + 1  # llama.cpp's Gemma converters store 1 + w for its x * w norm
        tensors.append((gguf_name(name, arch), data))
    finish_gguf(w, tensors)


def write_phi3_adapter(d, model, prompts):
    """A PEFT LoRA on Phi-3's fused modules as peft saves it, and the logits of the adapted model as
    peft loads it back (init_lora_weights=False: B is not zero, so the adapter moves the logits)."""
    import copy
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import save_file
    torch.manual_seed(77)
    cfg = LoraConfig(target_modules=["qkv_proj", "gate_up_proj", "o_proj"], r=4, lora_alpha=8,
                     init_lora_weights=False)
    peft_model = get_peft_model(copy.deepcopy(model), cfg)
    with torch.no_grad():  # peft's random B is small: make the update matter
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.mul_(5.0)
    peft_model.save_pretrained(os.path.join(d, "adapter"), safe_serialization=True)
    loaded = PeftModel.from_pretrained(copy.deepcopy(model), os.path.join(d, "adapter")).eval()
    out = {}
    with torch.no_grad():
        for i, p in enumerate(prompts):
            ids = torch.tensor([p])
            out[f"logits_{i}"] = loaded(input_ids=ids).logits[0].contiguous()
            base = model(input_ids=ids).logits[0]
            assert (out[f"logits_{i}"] - base).abs().max() > 1e-2, "the adapter must move the logits"
    save_file(out, os.path.join(d, "reference_lora.safetensors"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for seed, (name, cls, cfg) in enumerate(CASES, start=21):
        model = make_model(seed, cfg(), cls)
        write_case(a.out, name, model, prompts=PROMPTS)
        if name == "phi3":
            write_phi3_adapter(os.path.join(a.out, name), model, PROMPTS)
    for seed, (name, arch, cls, cfg) in enumerate(GGUF_CASES, start=41):
        model = make_model(seed, cfg(), cls)
        write_case(a.out, name, model, prompts=GGUF_PROMPTS)
        write_family_gguf(os.path.join(a.out, name, "model.gguf"), model, arch)
    names = [n for n, _, _ in CASES] + [n for n, _, _, _ in GGUF_CASES]
    print(f"make_family_fixtures: wrote {a.out}/{{{','.join(names)}}}")


if __name__ == "__main__":
    main()

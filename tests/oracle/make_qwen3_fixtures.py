#!/usr/bin/env python3
"""Reference outputs of Hugging Face transformers for the C++ Qwen3 (and Qwen2) oracle tests.

Tiny random checkpoints of the architectures that run on our LlamaModel besides Llama itself, with
the logits and greedy tokens HF computes, alone and as a left-padded batch (the same cases and files
as make_llama_fixtures.py, whose helpers this script reuses):

  OUT/qwen3_gqa/     Qwen3: QK-norm, 8 query heads over 2 KV heads, head_dim 16 (not hidden / heads = 8),
                     tied head, no q/k/v biases
  OUT/qwen3_bias/    Qwen3 with attention_bias (q, k, v and o), untied head
  OUT/qwen2_bias/    Qwen2: q/k/v biases without an o bias, no QK-norm
  each with config.json, model.safetensors, reference.safetensors, reference.json; the Qwen3 cases
  also with model.gguf: the same weights in F32 as llama.cpp's convert_hf_to_gguf writes a qwen3
  (qwen3.* keys, attn_q_norm / attn_k_norm, Q and K rows not permuted), checked by loading it back
  into transformers (from_pretrained(gguf_file=...)) and comparing its logits with the source's

Run:  .venv/bin/python tests/oracle/make_qwen3_fixtures.py --out build/oracle-qwen3
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM
    from gguf_writing import begin_gguf, finish_gguf
    from make_llama_fixtures import EOS, PROMPTS, make_model, write_case
except ImportError as e:  # the C++ tests skip with a message when the fixtures are absent
    print(f"make_qwen3_fixtures: cannot import {e.name}; run scripts/bootstrap", file=sys.stderr)
    sys.exit(1)


def base(**kw):
    b = dict(vocab_size=503, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
             num_attention_heads=8, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
             rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=EOS, tie_word_embeddings=True,
             hidden_act="silu", initializer_range=0.3,
             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    b.update(kw)
    return b


def gguf_tensors(model):
    """llama.cpp's names for a Qwen3's tensors (its converter's tensor map), in [out, in] as HF has them."""
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    out = [("token_embd.weight", sd["model.embed_tokens.weight"])]
    names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
             "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
             "mlp.down_proj": "ffn_down"}
    for i in range(model.config.num_hidden_layers):
        for hf, gg in names.items():
            for kind in ("weight", "bias"):
                key = f"model.layers.{i}.{hf}.{kind}"
                if key in sd:
                    out.append((f"blk.{i}.{gg}.{kind}", sd[key]))
    out.append(("output_norm.weight", sd["model.norm.weight"]))
    if not model.config.tie_word_embeddings:
        out.append(("output.weight", sd["lm_head.weight"]))
    return out


def write_gguf(d, model):
    c = model.config
    path = os.path.join(d, "model.gguf")
    w = begin_gguf(path, "qwen3", c, head_dim=c.head_dim)
    w.add_rope_dimension_count(c.head_dim)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    # A byte-level vocabulary of placeholder tokens: transformers reads the model without a tokenizer.
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list([f"<t{i}>" for i in range(c.vocab_size)])
    w.add_token_types([1] * c.vocab_size)
    w.add_token_merges([])
    w.add_bos_token_id(c.bos_token_id)
    w.add_eos_token_id(EOS)
    finish_gguf(w, gguf_tensors(model))
    # What transformers makes of the file must be the source model: the layout is llama.cpp's. (The
    # config is passed: transformers 5 maps no GGUF key to head_dim, and takes 128.)
    back = Qwen3ForCausalLM.from_pretrained(d, gguf_file="model.gguf", config=c, dtype=torch.float32).eval()
    with torch.no_grad():
        for p in PROMPTS:
            ids = torch.tensor([p])
            diff = (back(input_ids=ids).logits - model(input_ids=ids).logits).abs().max().item()
            if diff > 1e-5:
                sys.exit(f"make_qwen3_fixtures: transformers reads {path} differently (max diff {diff})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    for name, model in [
            ("qwen3_gqa", make_model(11, Qwen3Config(**base()), Qwen3ForCausalLM)),
            ("qwen3_bias", make_model(12, Qwen3Config(**base(
                attention_bias=True, tie_word_embeddings=False, num_key_value_heads=4)), Qwen3ForCausalLM))]:
        write_case(a.out, name, model)
        write_gguf(os.path.join(a.out, name), model)
    q2 = base(tie_word_embeddings=False)
    del q2["head_dim"]  # Qwen2 derives it: hidden_size / num_attention_heads
    write_case(a.out, "qwen2_bias", make_model(13, Qwen2Config(**q2), Qwen2ForCausalLM))
    print(f"make_qwen3_fixtures: wrote {a.out}/{{qwen3_gqa,qwen3_bias,qwen2_bias}}")


if __name__ == "__main__":
    main()

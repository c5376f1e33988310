#!/usr/bin/env python3
"""Reference quantization of the course (lesson 4) by Hugging Face transformers, for test_quant.

Builds small random GPT-2 checkpoints with transformers, saves them with
save_pretrained(safe_serialization=True), then applies the course's zero-point quantization to every
model.named_parameters() exactly as the course does, and records what it gives:

  OUT/<case>/config.json, model.safetensors   the checkpoint (save_pretrained)
  OUT/<case>/vocab.json, merges.txt           the model's whole vocabulary (257) as a byte-level
                                              tokenizer: the 256 byte symbols and <|endoftext|>, no
                                              merges, so that Engine::load_folder loads the folder
  OUT/<case>/quant.safetensors                per parameter: "<name>.q" (uint8, the parameter's own
                                              layout: Conv1D weights [in, out]), "<name>.scale" and
                                              "<name>.zero_point" (0-dim fp32)
  OUT/<case>/footprint.json                   get_memory_footprint() before and after
  OUT/gpt2_small_footprint.json               the same figures for GPT-2 small's shape (meta tensors)

  cases: tied/ (lm_head tied to wte, absent from the file), untied/ (a separate lm_head.weight)

The course's 137,022,768 bytes are HF's get_memory_footprint() of GPT-2 small after quantization
under the transformers of the course, whose GPT2Attention registered two buffers per layer:
attn.bias (bool [1, 1, P, P], the causal mask) and attn.masked_bias (fp32 scalar). Recent
transformers no longer register them, so get_memory_footprint() there counts the parameters only.
The footprint JSON gives both: "params_*" (return_buffers=False, any version), "installed_*" (this
transformers as it is) and "course_*" (the course's buffers registered the way that transformers did,
then get_memory_footprint(): the course's measurement).

Run:  .venv/bin/python tests/oracle/make_quant_fixtures.py --out build/quant_oracle
"""
import argparse
import json
import os
import sys

try:
    import torch
    from safetensors.torch import save_file
    from transformers import GPT2Config, GPT2LMHeadModel
    import transformers
except ImportError as e:  # the C++ test skips with a message when the fixtures are absent
    print(f"make_quant_fixtures: cannot import {e.name}; run scripts/bootstrap", file=sys.stderr)
    sys.exit(1)


# The course's code (lesson 4, docs/course.md), verbatim.
def quantize(t):
    min_val, max_val = t.min(), t.max()
    scale = (max_val - min_val) / 255
    zero_point = min_val
    t_quant = (t - zero_point) / scale
    t_quant = torch.clamp(t_quant, min=0, max=255)
    state = (scale, zero_point)
    t_quant = t_quant.type(torch.uint8)
    return t_quant, state


def dequantize(t, state):
    scale, zero_point = state
    return t * scale + zero_point


def quantize_model(model):
    """The course's loop: every parameter replaced by its uint8 values, states kept aside."""
    states = {}
    for name, param in model.named_parameters():
        param.requires_grad = False
        q, state = quantize(param.data)
        states[name] = (q, state)
        param.data = q
    return states


def register_course_era_buffers(model):
    """GPT2Attention's buffers as the course's transformers registered them (persistent=False)."""
    n = model.config.n_positions
    for block in model.transformer.h:
        names = dict(block.attn.named_buffers(recurse=False))
        if "bias" not in names:
            block.attn.register_buffer(
                "bias", torch.tril(torch.ones((n, n), dtype=torch.bool)).view(1, 1, n, n), persistent=False)
        if "masked_bias" not in names:
            block.attn.register_buffer("masked_bias", torch.tensor(-1e4), persistent=False)


def buffer_bytes(model):
    return sum(b.nelement() * b.element_size() for b in model.buffers())


def footprints(model):
    """Quantizes model in place; returns the footprint figures before and after."""
    f = {"transformers": transformers.__version__,
         "params_before": model.get_memory_footprint(return_buffers=False),
         "installed_before": model.get_memory_footprint(),
         "installed_buffer_bytes": buffer_bytes(model)}
    register_course_era_buffers(model)
    f["course_buffer_bytes"] = buffer_bytes(model)
    f["course_before"] = model.get_memory_footprint()
    states = quantize_model(model)
    f["params_after"] = model.get_memory_footprint(return_buffers=False)
    f["course_after"] = model.get_memory_footprint()
    f["parameters"] = len(states)
    return f, states


def byte_level_vocab():
    """GPT-2's bytes_to_unicode: the 256 byte symbols, then <|endoftext|>."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    vocab = {chr(c): b for b, c in zip(bs, cs)}
    vocab["<|endoftext|>"] = 256
    return vocab


def make_model(seed, tied):
    cfg = GPT2Config(vocab_size=257, n_positions=40, n_embd=64, n_layer=2, n_head=4,
                     layer_norm_epsilon=1e-5, activation_function="gelu_new",
                     bos_token_id=256, eos_token_id=256, tie_word_embeddings=tied,
                     initializer_range=0.1)
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # non-constant LayerNorms and biases: every tensor has a real range
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def write_case(out, name, seed, tied):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model = make_model(seed, tied)
    model.save_pretrained(d, safe_serialization=True)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(byte_level_vocab(), f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")
    # Reload what was saved, so the reference starts from the very bytes the C++ side reads.
    model = GPT2LMHeadModel.from_pretrained(d).eval()
    with torch.no_grad():
        fp, states = footprints(model)
    tensors = {}
    for pname, (q, (scale, zero_point)) in states.items():
        tensors[pname + ".q"] = q.contiguous()
        tensors[pname + ".scale"] = scale.reshape(()).contiguous()
        tensors[pname + ".zero_point"] = zero_point.reshape(()).contiguous()
    save_file(tensors, os.path.join(d, "quant.safetensors"))
    fp["names"] = list(states.keys())
    with open(os.path.join(d, "footprint.json"), "w") as f:
        json.dump(fp, f, indent=2)
    return fp


def gpt2_small_footprint(out):
    """GPT-2 small's shape on the meta device: the byte counts without 500 MB of weights."""
    with torch.device("meta"):
        model = GPT2LMHeadModel(GPT2Config())
    with torch.no_grad():
        fp, _ = footprints(model)
    fp["num_parameters"] = sum(p.numel() for p in model.parameters())
    with open(os.path.join(out, "gpt2_small_footprint.json"), "w") as f:
        json.dump(fp, f, indent=2)
    return fp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    transformers.logging.disable_progress_bar()
    os.makedirs(a.out, exist_ok=True)
    tied = write_case(a.out, "tied", 11, True)
    untied = write_case(a.out, "untied", 12, False)
    small = gpt2_small_footprint(a.out)
    print(f"make_quant_fixtures: wrote {a.out}/{{tied,untied}} and gpt2_small_footprint.json "
          f"(transformers {transformers.__version__}); course footprint tied {tied['course_before']} -> "
          f"{tied['course_after']}, untied {untied['course_before']} -> {untied['course_after']}, "
          f"GPT-2 small {small['course_before']} -> {small['course_after']} bytes")


if __name__ == "__main__":
    main()

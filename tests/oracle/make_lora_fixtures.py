#!/usr/bin/env python3
r"""Reference LoRA adapters written by PEFT itself, and what they give, for the C++ LoRA tests.

Builds a tiny random GPT-2 with transformers, wraps fresh copies of it with peft's LoraConfig +
get_peft_model, saves each adapter with PeftModel.save_pretrained and records the logits and
greedy tokens of the adapters as peft loads them back from disk. init_lora_weights=False leaves
nn.Linear's default init in lora_A and lora_B (kaiming-uniform: B ~ U(+-1/sqrt(r)), not zeros),
which moves the logits by 0.8 to 3 (asserted > 1e-2), so the weights are kept as peft made them.

  OUT/base/config.json, model.safetensors    the base GPT2LMHeadModel (save_pretrained: also
                                             generation_config.json; lm_head tied, absent):
                                             n_layer 2, n_head 2, n_embd 32, n_positions 64
  OUT/base/vocab.json, merges.txt            byte-level vocabulary (257), no merges, for
                                             Engine::load_folder (as make_quant_fixtures.py)
  OUT/adapters/<name>/adapter_config.json    exactly as peft writes them (README.md too)
  OUT/adapters/<name>/adapter_model.safetensors
  OUT/reference.safetensors                  fp32: "<name>.<i>.logits" [T_i, 257] for name "base"
                                             and every adapter, prompt i (T 5, 3, 7) alone, no
                                             padding; "<adapter>.<i>.merged_logits" the same from
                                             merge_and_unload() of a fresh copy
  OUT/reference.json                         {"prompts": [[ids]...], "new_tokens": 8,
                                              "base": {"greedy": [[8 ids] per prompt]} (argmax
                                              with past_key_values, no EOS stop),
                                              "adapters": {<name>: {"greedy", "r", "lora_alpha",
                                              "use_rslora", "scale", "targets" (full module
                                              names, sorted), "target_modules" (as configured),
                                              "max_abs_delta" (vs base), "merged_max_abs_diff"}}}
  OUT/bad/<case>/                            a copy of adapters/all broken one way (BAD below);
                                             OUT/bad/cases.json maps case -> a substring the C++
                                             error must contain. Edited configs are rewritten as
                                             peft writes them (indent 2, sorted keys); edited
                                             weights with save_file(metadata={"format": "pt"})
    missing_config, missing_weights  that file removed; truncated_weights: cut to half its size
    wrong_shape    h.0.attn.c_attn lora_A [4, 31]; rank_mismatch: h.1.mlp.c_proj A [3, 128], B [32, 3]
    missing_b      h.1.attn.c_attn's lora_B removed; bad_json: the config cut off mid-object
    unknown_target ["q_proj"]; dora: use_dora true; bias: "all"; not_lora: peft_type PREFIX_TUNING

  adapters (all fan_in_fan_out=true, lora_dropout=0, bias "none"):
    all      ["c_attn", "c_proj", "c_fc"] r=4 alpha=8: 8 modules (c_proj: attn's and mlp's)
    attn_r2  ["c_attn"] r=2 alpha=16
    rslora   ["c_fc", "c_proj"] r=8 alpha=8 use_rslora: scale alpha/sqrt(r)
    regex    the STRING ".*\.h\.1\.mlp\.c_fc|c_proj" (REGEX) r=4 alpha=4: transformer.h.1.mlp.c_fc
    layers   ["c_attn"] layers_to_transform=[0] r=4 alpha=8: transformer.h.0.attn.c_attn only

Matching (peft 0.21 check_target_module_exists) is against names of GPT2LMHeadModel's
named_modules(), e.g. "transformer.h.0.attn.c_attn". A list entry matches a name equal to it or
ending in "." + entry; layers_to_transform (layers_pattern null) keeps names whose first numbered
segment ("h.<idx>.") is listed. A string is a regex that must re.fullmatch the whole name: REGEX's
"|c_proj" alternative matches every c_proj under re.search or a naive ^...$ anchoring, yet no name
is exactly "c_proj".

adapter_model.safetensors (metadata {"format": "pt"}): per wrapped module M, fp32
  base_model.model.<M>.lora_A.weight  [r, in]
  base_model.model.<M>.lora_B.weight  [out, r]
  (no adapter name such as ".default" in the key). in/out are the module's features even though
  GPT-2's Conv1D stores its weight [in, out] (fan_in_fan_out=true): the adapted module computes
  y = base(x) + scale * (x @ A^T) @ B^T, scale = lora_alpha / r (lora_alpha / sqrt(r) if
  use_rslora). c_attn 32 -> 96, attn.c_proj 32 -> 32, mlp.c_fc 32 -> 128, mlp.c_proj 128 -> 32.

The same for a tiny Llama (LlamaForCausalLM: hidden 72, 9 heads of 8, 3 KV heads, intermediate 120,
2 layers, vocab 503, tied embeddings, norms moved away from 1), under OUT/llama/:

  OUT/llama/base/config.json, model.safetensors  the base (save_pretrained), plus the GPT-2 base's
                                                 byte-level vocab.json (padded to 503 ids with
                                                 "<xN>") / merges.txt for the CLI
  OUT/llama/adapters/<name>/                     as peft writes them
  OUT/llama/reference.safetensors, reference.json  as above ("base.<i>.logits", "<name>.<i>.logits",
                                                 "<name>.<i>.merged_logits"; prompts LLAMA_PROMPTS)

  adapters (lora_dropout=0, bias "none", nn.Linear: no fan_in_fan_out):
    all      the seven projections (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)
             r=8 alpha=16: 14 modules
    subset   ["q_proj", "v_proj", "down_proj"] r=4 alpha=8
    rslora   ["o_proj", "gate_proj", "up_proj"] r=8 alpha=8 use_rslora

  keys: base_model.model.model.layers.<N>.<self_attn|mlp>.<proj>.lora_A.weight [r, in], lora_B [out, r].

adapter_config.json stores target_modules as a list built from a Python set, so its order follows
string hashing: this script re-executes itself with PYTHONHASHSEED=0 (unless already set so) so
that every run writes the same bytes whatever OUT is. The C++ side must not depend on that order.

Run:  .venv/bin/python tests/oracle/make_lora_fixtures.py --out build/lora_oracle
"""
import argparse
import json
import math
import os
import re
import shutil
import sys
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"  # everything is local: never ask the Hub
if os.environ.get("PYTHONHASHSEED") != "0":  # see the docstring: target_modules' order
    os.environ["PYTHONHASHSEED"] = "0"
    os.execv(sys.executable, [sys.executable] + sys.argv)

try:
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from safetensors.torch import load_file, save_file
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
    import peft
    import transformers
except ImportError as e:  # the C++ test skips with a message when the fixtures are absent
    print(f"make_lora_fixtures: cannot import {e.name}; run scripts/bootstrap", file=sys.stderr)
    sys.exit(1)

PROMPTS = [[72, 101, 108, 108, 111], [7, 200, 33], [0, 255, 128, 64, 32, 16, 8]]
NEW_TOKENS = 8
PREFIX = "base_model.model."
REGEX = r".*\.h\.1\.mlp\.c_fc|c_proj"
ALL = [f"transformer.h.{i}.{m}" for i in (0, 1) for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")]
ADAPTERS = {  # name: (seed, LoraConfig arguments, the modules peft must wrap)
    "all": (31, dict(target_modules=["c_attn", "c_proj", "c_fc"], r=4, lora_alpha=8), ALL),
    "attn_r2": (32, dict(target_modules=["c_attn"], r=2, lora_alpha=16), [m for m in ALL if "c_attn" in m]),
    "rslora": (33, dict(target_modules=["c_fc", "c_proj"], r=8, lora_alpha=8, use_rslora=True),
               [m for m in ALL if "c_attn" not in m]),
    "regex": (34, dict(target_modules=REGEX, r=4, lora_alpha=4), ["transformer.h.1.mlp.c_fc"]),
    "layers": (35, dict(target_modules=["c_attn"], layers_to_transform=[0], r=4, lora_alpha=8),
               ["transformer.h.0.attn.c_attn"]),
}
KEY_RE = re.compile(r"base_model\.model\.(transformer\.h\.\d+\.(?:attn|mlp)\.c_\w+)\.lora_([AB])\.weight")


LLAMA_PROMPTS = [[1, 72, 101, 108, 108, 111], [1, 7, 200, 33], [1, 0, 502, 128, 64, 32, 16, 8]]
LLAMA_PROJ = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
              "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
LLAMA_ALL = [f"model.layers.{i}.{m}" for i in (0, 1) for m in LLAMA_PROJ]
LLAMA_ADAPTERS = {  # name: (seed, LoraConfig arguments, the modules peft must wrap)
    "all": (41, dict(target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                     "down_proj"], r=8, lora_alpha=16), LLAMA_ALL),
    "subset": (42, dict(target_modules=["q_proj", "v_proj", "down_proj"], r=4, lora_alpha=8),
               [m for m in LLAMA_ALL if m.rsplit(".", 1)[1] in ("q_proj", "v_proj", "down_proj")]),
    "rslora": (43, dict(target_modules=["o_proj", "gate_proj", "up_proj"], r=8, lora_alpha=8, use_rslora=True),
               [m for m in LLAMA_ALL if m.rsplit(".", 1)[1] in ("o_proj", "gate_proj", "up_proj")]),
}
LLAMA_KEY_RE = re.compile(r"base_model\.model\.(model\.layers\.\d+\.(?:self_attn|mlp)\.\w+_proj)\.lora_([AB])\.weight")


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


def write_base(d):
    cfg = GPT2Config(vocab_size=257, n_positions=64, n_embd=32, n_layer=2, n_head=2,
                     layer_norm_epsilon=1e-5, activation_function="gelu_new",
                     bos_token_id=256, eos_token_id=256, tie_word_embeddings=True,
                     initializer_range=0.1)
    torch.manual_seed(21)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # non-constant LayerNorms and biases
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(d, safe_serialization=True)
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(byte_level_vocab(), f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")


def load_base(d):
    """A fresh copy of the base from the very bytes the C++ side reads."""
    model = GPT2LMHeadModel.from_pretrained(d).eval()
    # No base_model_name_or_path (null; README.md's base_model '') rather than OUT's path, as for a
    # model made in memory: the adapter files must not depend on OUT.
    model.name_or_path, model.config._name_or_path = None, ""
    return model


def greedy(model, prompt):
    """NEW_TOKENS argmax steps with past_key_values; no EOS stop."""
    ids, past, new = torch.tensor([prompt]), None, []
    for _ in range(NEW_TOKENS):
        out = model(input_ids=ids, past_key_values=past, use_cache=True)
        past = out.past_key_values
        ids = out.logits[:, -1].argmax(-1, keepdim=True)
        new.append(int(ids))
    return new


def run(model):
    with torch.no_grad():
        logits = [model(input_ids=torch.tensor([p])).logits[0].float().contiguous() for p in PROMPTS]
        return logits, [greedy(model, p) for p in PROMPTS]


def check_file(d, base, r, targets):
    """The keys and shapes peft wrote: A [r, in] and B [out, r] for exactly the expected modules."""
    tensors = load_file(os.path.join(d, "adapter_model.safetensors"))
    seen = set()
    for key, t in tensors.items():
        m = KEY_RE.fullmatch(key)
        assert m, f"unexpected key {key}"
        w = base.get_submodule(m.group(1)).weight  # Conv1D: [in, out]
        want = (r, w.shape[0]) if m.group(2) == "A" else (w.shape[1], r)
        assert tuple(t.shape) == want and t.dtype == torch.float32, f"{key}: {tuple(t.shape)}, want {want}"
        seen.add(m.group(1))
    assert sorted(seen) == sorted(targets) and len(tensors) == 2 * len(targets), sorted(seen)
    return sorted(tensors)


def write_adapter(out, name, tensors, info):
    seed, kwargs, targets = ADAPTERS[name]
    d = os.path.join(out, "adapters", name)
    shutil.rmtree(d, ignore_errors=True)
    base_dir = os.path.join(out, "base")
    torch.manual_seed(seed)
    config = LoraConfig(fan_in_fan_out=True, lora_dropout=0.0, init_lora_weights=False, **kwargs)
    model = get_peft_model(load_base(base_dir), config).eval()
    wrapped = sorted(n[len(PREFIX):] for n, mod in model.named_modules() if hasattr(mod, "lora_A"))
    assert wrapped == sorted(targets), f"{name}: peft wrapped {wrapped}"
    model.save_pretrained(d)
    keys = check_file(d, load_base(base_dir), config.r, targets)
    print(f"  {name}: {len(keys)} tensors, e.g. {keys[0]}")

    # The reference: peft loading the files back, unmerged and (a fresh copy) merged.
    loaded = PeftModel.from_pretrained(load_base(base_dir), d).eval()
    logits, tokens = run(loaded)
    mine = run(model)[0]
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(logits, mine)), f"{name}: reload differs"
    merged, _ = run(PeftModel.from_pretrained(load_base(base_dir), d).merge_and_unload().eval())
    base_logits = [tensors[f"base.{i}.logits"] for i in range(len(PROMPTS))]
    delta = max((a - b).abs().max().item() for a, b in zip(logits, base_logits))
    diff = max((a - b).abs().max().item() for a, b in zip(logits, merged))
    assert delta > 1e-2, f"{name}: the adapter moves the logits by {delta} only"
    assert diff < 1e-4, f"{name}: merged logits differ by {diff}"
    for i in range(len(PROMPTS)):
        tensors[f"{name}.{i}.logits"] = logits[i]
        tensors[f"{name}.{i}.merged_logits"] = merged[i]
    scale = config.lora_alpha / (math.sqrt(config.r) if config.use_rslora else config.r)
    info["adapters"][name] = {
        "greedy": tokens, "r": config.r, "lora_alpha": config.lora_alpha, "use_rslora": config.use_rslora,
        "scale": scale, "targets": wrapped, "target_modules": kwargs["target_modules"],
        "max_abs_delta": delta, "merged_max_abs_diff": diff}


def write_llama_base(d):
    cfg = LlamaConfig(vocab_size=503, hidden_size=72, intermediate_size=120, num_hidden_layers=2,
                      num_attention_heads=9, num_key_value_heads=3, head_dim=8, max_position_embeddings=64,
                      rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=1, eos_token_id=2,
                      tie_word_embeddings=True, hidden_act="silu", initializer_range=0.3)
    torch.manual_seed(22)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1, so that every tensor matters
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    model.save_pretrained(d, safe_serialization=True)
    # The GPT-2 base's byte-level vocabulary, padded with "<xN>" tokens to the model's 503 ids:
    # Engine::load_folder and the CLI need a tokenizer that can show every id the model may pick;
    # the oracle itself feeds ids.
    vocab = byte_level_vocab()
    vocab.update({f"<x{i}>": i for i in range(len(vocab), cfg.vocab_size)})
    with open(os.path.join(d, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(d, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n")


def load_llama_base(d):
    model = LlamaForCausalLM.from_pretrained(d).eval()
    model.name_or_path, model.config._name_or_path = None, ""  # as load_base: no OUT in the files
    return model


def run_llama(model):
    with torch.no_grad():
        logits = [model(input_ids=torch.tensor([p])).logits[0].float().contiguous() for p in LLAMA_PROMPTS]
        return logits, [greedy(model, p) for p in LLAMA_PROMPTS]


def write_llama_adapter(out, name, tensors, info):
    seed, kwargs, targets = LLAMA_ADAPTERS[name]
    d = os.path.join(out, "adapters", name)
    shutil.rmtree(d, ignore_errors=True)
    base_dir = os.path.join(out, "base")
    torch.manual_seed(seed)
    config = LoraConfig(lora_dropout=0.0, init_lora_weights=False, **kwargs)
    model = get_peft_model(load_llama_base(base_dir), config).eval()
    wrapped = sorted(n[len(PREFIX):] for n, mod in model.named_modules() if hasattr(mod, "lora_A"))
    assert wrapped == sorted(targets), f"llama {name}: peft wrapped {wrapped}"
    model.save_pretrained(d)
    base = load_llama_base(base_dir)
    saved = load_file(os.path.join(d, "adapter_model.safetensors"))
    seen = set()
    for key, t in saved.items():
        m = LLAMA_KEY_RE.fullmatch(key)
        assert m, f"llama {name}: unexpected key {key}"
        w = base.get_submodule(m.group(1)).weight  # nn.Linear: [out, in]
        want = (config.r, w.shape[1]) if m.group(2) == "A" else (w.shape[0], config.r)
        assert tuple(t.shape) == want, f"{key}: {tuple(t.shape)}, want {want}"
        seen.add(m.group(1))
    assert sorted(seen) == sorted(targets) and len(saved) == 2 * len(targets), sorted(seen)
    print(f"  llama {name}: {len(saved)} tensors, e.g. {sorted(saved)[0]}")

    loaded = PeftModel.from_pretrained(load_llama_base(base_dir), d).eval()
    logits, tokens = run_llama(loaded)
    merged, _ = run_llama(PeftModel.from_pretrained(load_llama_base(base_dir), d).merge_and_unload().eval())
    base_logits = [tensors[f"base.{i}.logits"] for i in range(len(LLAMA_PROMPTS))]
    delta = max((a - b).abs().max().item() for a, b in zip(logits, base_logits))
    diff = max((a - b).abs().max().item() for a, b in zip(logits, merged))
    assert delta > 1e-2, f"llama {name}: the adapter moves the logits by {delta} only"
    assert diff < 1e-4, f"llama {name}: merged logits differ by {diff}"
    for i in range(len(LLAMA_PROMPTS)):
        tensors[f"{name}.{i}.logits"] = logits[i]
        tensors[f"{name}.{i}.merged_logits"] = merged[i]
    scale = config.lora_alpha / (math.sqrt(config.r) if config.use_rslora else config.r)
    info["adapters"][name] = {
        "greedy": tokens, "r": config.r, "lora_alpha": config.lora_alpha, "use_rslora": config.use_rslora,
        "scale": scale, "targets": wrapped, "target_modules": kwargs["target_modules"],
        "max_abs_delta": delta, "merged_max_abs_diff": diff}


def write_llama(out):
    base_dir = os.path.join(out, "base")
    shutil.rmtree(base_dir, ignore_errors=True)
    os.makedirs(base_dir)
    write_llama_base(base_dir)
    logits, tokens = run_llama(load_llama_base(base_dir))
    tensors = {f"base.{i}.logits": t for i, t in enumerate(logits)}
    info = {"prompts": LLAMA_PROMPTS, "new_tokens": NEW_TOKENS, "base": {"greedy": tokens}, "adapters": {}}
    for name in LLAMA_ADAPTERS:
        write_llama_adapter(out, name, tensors, info)
    save_file(tensors, os.path.join(out, "reference.safetensors"))
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(info, f, indent=2)
    return info


BAD = {  # case: substring the C++ error must contain
    "missing_config": "adapter_config.json",
    "missing_weights": "adapter_model.safetensors",
    "truncated_weights": "adapter_model.safetensors",
    "wrong_shape": "transformer.h.0.attn.c_attn.lora_A.weight",
    "rank_mismatch": "transformer.h.1.mlp.c_proj",
    "unknown_target": "q_proj",
    "dora": "use_dora",
    "bias": "bias",
    "not_lora": "PREFIX_TUNING",
    "missing_b": "transformer.h.1.attn.c_attn.lora_B.weight",
    "bad_json": "adapter_config.json",
}


def write_bad(out):
    good = os.path.join(out, "adapters", "all")
    for case in BAD:
        d = os.path.join(out, "bad", case)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(good, d)
        cfg_path, st_path = os.path.join(d, "adapter_config.json"), os.path.join(d, "adapter_model.safetensors")
        with open(cfg_path) as f:
            cfg = json.load(f)
        t = load_file(st_path)
        a, b = PREFIX + "transformer.h.{}.{}.lora_A.weight", PREFIX + "transformer.h.{}.{}.lora_B.weight"
        if case == "missing_config":
            os.remove(cfg_path)
        elif case == "missing_weights":
            os.remove(st_path)
        elif case == "truncated_weights":
            with open(st_path, "r+b") as f:
                f.truncate(os.path.getsize(st_path) // 2)
        elif case == "wrong_shape":
            t[a.format(0, "attn.c_attn")] = t[a.format(0, "attn.c_attn")][:, :31].contiguous()
        elif case == "rank_mismatch":
            t[a.format(1, "mlp.c_proj")] = t[a.format(1, "mlp.c_proj")][:3].contiguous()
            t[b.format(1, "mlp.c_proj")] = t[b.format(1, "mlp.c_proj")][:, :3].contiguous()
        elif case == "missing_b":
            del t[b.format(1, "attn.c_attn")]
        elif case == "bad_json":
            with open(cfg_path, "w") as f:
                f.write(json.dumps(cfg, indent=2)[:-40])  # cut inside the object
        else:
            key, value = {"unknown_target": ("target_modules", ["q_proj"]), "dora": ("use_dora", True),
                          "bias": ("bias", "all"), "not_lora": ("peft_type", "PREFIX_TUNING")}[case]
            cfg[key] = value
            with open(cfg_path, "w") as f:
                json.dump(cfg, f, indent=2, sort_keys=True)
        if case in ("wrong_shape", "rank_mismatch", "missing_b"):
            save_file(t, st_path, metadata={"format": "pt"})
    with open(os.path.join(out, "bad", "cases.json"), "w") as f:
        json.dump(BAD, f, indent=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    transformers.logging.disable_progress_bar()
    transformers.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    base_dir = os.path.join(a.out, "base")
    shutil.rmtree(base_dir, ignore_errors=True)
    os.makedirs(base_dir)
    write_base(base_dir)
    logits, tokens = run(load_base(base_dir))
    tensors = {f"base.{i}.logits": t for i, t in enumerate(logits)}
    info = {"prompts": PROMPTS, "new_tokens": NEW_TOKENS, "base": {"greedy": tokens}, "adapters": {}}
    for name in ADAPTERS:
        write_adapter(a.out, name, tensors, info)
    save_file(tensors, os.path.join(a.out, "reference.safetensors"))
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(info, f, indent=2)
    write_bad(a.out)
    llama = write_llama(os.path.join(a.out, "llama"))
    print(f"make_lora_fixtures: wrote {a.out}/{{base,adapters,bad}} and reference.* (peft {peft.__version__}, "
          f"transformers {transformers.__version__}); max |adapter - base| logits: " +
          ", ".join(f"{n} {v['max_abs_delta']:.3g}" for n, v in info["adapters"].items()) + "; llama: " +
          ", ".join(f"{n} {v['max_abs_delta']:.3g}" for n, v in llama["adapters"].items()))


if __name__ == "__main__":
    main()

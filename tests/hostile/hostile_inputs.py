#!/usr/bin/env python3
"""Hostile inputs: ServeLab as a hostile user drives it (issue 20).

Every case runs servelab-cli (or the app's scripted mode) on one bad input and asserts
  * the exit code: 1 for bad input (a file, a value), 2 for a bad command line,
  * that stderr is exactly one line, starting "servelab-cli: " (or "servelab: "), naming the
    option, file, key or tensor at fault (a substring the case gives),
  * that the run stayed under a memory bound (ulimit -v, RLIMIT_AS) and a time bound (a timeout):
    a regression that allocates gigabytes or waits forever fails its case, not the machine.

Fixtures are made here, in a temporary folder: the tiny GPT-2 folder `servelab-cli export-demo
--tiny` writes (2 layers, 32 wide: it loads in a blink) and corrupted copies of it, tokenizer files,
PEFT folders, GGUF headers and settings files. Most model cases run the tiny model or --demo.

Usage: hostile_inputs.py --cli build/release/app/servelab-cli [--app build/release/app/servelab]
       [--builtin PATH.gguf] [--jobs 2] [-k SUBSTRING]
"""
import argparse
import concurrent.futures as futures
import json
import math
import os
import random
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import time

MEMORY_LIMIT = 4 << 30  # bytes of address space per case (a --demo run needs about 2.5 GiB)
TIMEOUT = 90  # seconds per case (a case takes 0.1-5 s)


class Case:
    def __init__(self, category, name, args, code, expect, program="cli", env=None):
        self.category, self.name, self.args, self.code = category, name, args, code
        self.expect = [expect] if isinstance(expect, str) else list(expect)
        self.program, self.env = program, env or {}


def limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    os.setsid()


def run_case(case, programs):
    env = dict(os.environ)
    env.update(case.env)
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    if case.program == "app":
        # Qt's own chatter on a headless machine (no XDG_RUNTIME_DIR; the offscreen plugin's
        # "does not support propagateSizeHints()") is not the app's to print or to avoid.
        env["XDG_RUNTIME_DIR"] = programs["runtime_dir"]
        # The app remembers the last model in the user's settings: a case run with --demo must not
        # make the user's next `scripts/run` open the random model.
        env["XDG_CONFIG_HOME"] = programs["config_dir"]
        env["QT_LOGGING_RULES"] = "default.warning=false;qt.qpa.*=false"
    cmd = [programs[case.program]] + case.args
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=TIMEOUT,
                           preexec_fn=limit_memory)
    except subprocess.TimeoutExpired:
        return f"timed out after {TIMEOUT} s (a hang)"
    seconds = time.monotonic() - start
    err = p.stderr.decode("utf-8", "replace")
    lines = [l for l in err.split("\n") if l.strip()]
    prefix = "servelab-cli: " if case.program == "cli" else "servelab: "
    problems = []
    if p.returncode != case.code:
        problems.append(f"exit code {p.returncode}, expected {case.code}")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr, expected 1")
    elif not lines[0].startswith(prefix):
        problems.append(f"stderr does not start with {prefix!r}")
    for e in case.expect:
        if e not in err:
            problems.append(f"stderr lacks {e!r}")
    if problems:
        return "; ".join(problems) + f" ({seconds:.1f} s)\n      stderr: {err.strip()[:600]}"
    return None


# ---- fixtures -------------------------------------------------------------------------------


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, shape, bytes)."""
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], body[a:b])
    return out


def floats(n, value=0.01):
    return struct.pack(f"<{n}f", *([value] * n))


def poison(data, value):
    """The first float of a tensor's bytes replaced by `value` (NaN or inf)."""
    return struct.pack("<f", value) + data[4:]


def copy_model(src, dst, edit=None):
    shutil.copytree(src, dst)
    if edit:
        edit(dst)
    return dst


FLT_MAX = 3.4028234663852886e38
OVERFLOW_TOKEN = 1000  # the token whose embedding overflows the logits once it is fed back


def late_overflow_edit(cfg, weights):
    """A tiny GPT-2 whose weights are all finite and whose first logits are too, but whose logits
    overflow fp32 one step after it generates OVERFLOW_TOKEN (which greedy decoding picks first).

    The blocks write nothing to the residual stream (their output projections are zero), so the
    final hidden state is wte[token] + wpe[position] and the logits are ln_f(that) @ wte.T, which
    is worked out here exactly. Every token embedding is one vector v except OVERFLOW_TOKEN's,
    v + e0; every position adds 0.05 e0. ln_f scales dimension 0 by G, chosen between what the
    prompt's last position needs (the logit of OVERFLOW_TOKEN finite, and the largest) and what
    OVERFLOW_TOKEN fed back makes (beyond FLT_MAX).
    """
    n = cfg["n_embd"]
    vocab = cfg["vocab_size"]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    v = [0.0] + [0.02 * ((-1) ** d) * (1 + (d % 5) / 4) for d in range(1, n)]
    prompt_x = [v[0] + 0.05] + v[1:]
    token_x = [v[0] + 1.05] + v[1:]

    def normed0(x):  # layer norm's dimension 0 before its scale
        mean = sum(x) / n
        var = sum((a - mean) ** 2 for a in x) / n
        return (x[0] - mean) / math.sqrt(var + eps)

    h_prompt, h_token = normed0(prompt_x), normed0(token_x)
    if not (0 < h_prompt and h_token > 1.5 * h_prompt):
        raise RuntimeError(f"late_overflow: no room between {h_prompt} and {h_token}")
    # The geometric mean of the two bounds: a factor sqrt(h_token / h_prompt) from each.
    gain = FLT_MAX / math.sqrt(h_prompt * h_token)
    assert gain * h_prompt < FLT_MAX / 1.2 and gain * h_token > FLT_MAX * 1.2

    def edit(d):
        w = dict(weights)
        for name, (dtype, shape, data) in weights.items():
            if name.endswith("c_proj.weight") or name.endswith("c_proj.bias"):
                w[name] = (dtype, shape, bytes(len(data)))
        row = struct.pack(f"<{n}f", *v)
        special = struct.pack(f"<{n}f", *([1.0] + v[1:]))
        w["transformer.wte.weight"] = ("F32", [vocab, n],
                                       row * OVERFLOW_TOKEN + special + row * (vocab - OVERFLOW_TOKEN - 1))
        positions = cfg["n_positions"]
        w["transformer.wpe.weight"] = ("F32", [positions, n], struct.pack(f"<{n}f", 0.05, *([0.0] * (n - 1))) * positions)
        w["transformer.ln_f.weight"] = ("F32", [n], struct.pack(f"<{n}f", gain, *([1.0] * (n - 1))))
        w["transformer.ln_f.bias"] = ("F32", [n], floats(n, 0.0))
        write_safetensors(os.path.join(d, "model.safetensors"), w)
    return edit


def tiny_llama(d, poisoned):
    """A Llama folder (config.json and model.safetensors, 2 layers, 16 wide) with one NaN in the
    tensor `poisoned`. No tokenizer: the weights are checked before it is read."""
    os.mkdir(d)
    vocab, hidden, inter, layers = 64, 16, 32, 2
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": vocab,
           "hidden_size": hidden, "intermediate_size": inter, "num_hidden_layers": layers,
           "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 64,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": True,
           "bos_token_id": 1, "eos_token_id": 2}
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    shapes = {"model.embed_tokens.weight": [vocab, hidden], "model.norm.weight": [hidden]}
    for i in range(layers):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": [hidden], p + "post_attention_layernorm.weight": [hidden],
                       p + "self_attn.q_proj.weight": [hidden, hidden], p + "self_attn.k_proj.weight": [hidden, hidden],
                       p + "self_attn.v_proj.weight": [hidden, hidden], p + "self_attn.o_proj.weight": [hidden, hidden],
                       p + "mlp.gate_proj.weight": [inter, hidden], p + "mlp.up_proj.weight": [inter, hidden],
                       p + "mlp.down_proj.weight": [hidden, inter]})
    tensors = {}
    for name, shape in shapes.items():
        data = floats(math.prod(shape), 1.0 if len(shape) == 1 else 0.01)
        # A NaN in the middle: the check must look at every element, not the first.
        if name == poisoned:
            data = data[:40] + struct.pack("<f", float("nan")) + data[44:]
        tensors[name] = ("F32", shape, data)
    write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    return d


def make_fixtures(cli, root):
    fx = {}
    tiny = os.path.join(root, "tiny")
    subprocess.run([cli, "export-demo", "--tiny", "--out", tiny], check=True, stdout=subprocess.DEVNULL)
    fx["tiny"] = tiny
    cfg = json.load(open(os.path.join(tiny, "config.json")))
    weights = read_safetensors(os.path.join(tiny, "model.safetensors"))

    def with_config(**changes):
        def edit(d):
            c = dict(cfg)
            c.update(changes)
            json.dump(c, open(os.path.join(d, "config.json"), "w"))
        return edit

    def with_weights(name, value):
        def edit(d):
            w = dict(weights)
            dtype, shape, data = w[name]
            w[name] = (dtype, shape, poison(data, value))
            write_safetensors(os.path.join(d, "model.safetensors"), w)
        return edit

    def replace_with_dir(fname):
        def edit(d):
            os.remove(os.path.join(d, fname))
            os.mkdir(os.path.join(d, fname))
        return edit

    def write_file(fname, text):
        def edit(d):
            with open(os.path.join(d, fname), "wb") as f:
                f.write(text if isinstance(text, bytes) else text.encode())
        return edit

    def truncate(fname, size):
        def edit(d):
            with open(os.path.join(d, fname), "r+b") as f:
                f.truncate(size)
        return edit

    def remove(fname):
        return lambda d: os.remove(os.path.join(d, fname))

    def duplicate_first_tensor(d):
        # The header names its first tensor a second time (JSON parsers keep the last copy).
        p = os.path.join(d, "model.safetensors")
        with open(p, "rb") as f:
            b = f.read()
        n = struct.unpack("<Q", b[:8])[0]
        header = json.loads(b[8:8 + n])
        first = next(k for k in header if k != "__metadata__")
        text = json.dumps(header)[:-1] + ", " + json.dumps({first: header[first]})[1:-1] + "}"
        raw = text.encode() + b" " * ((8 - len(text.encode()) % 8) % 8)
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw + b[8 + n:])

    m = lambda name, edit: copy_model(tiny, os.path.join(root, name), edit)
    fx["nan_weights"] = m("nan_weights", with_weights("transformer.h.1.mlp.c_fc.weight", float("nan")))
    fx["inf_weights"] = m("inf_weights", with_weights("transformer.wte.weight", float("inf")))
    fx["late_overflow"] = m("late_overflow", late_overflow_edit(cfg, weights))
    fx["config_dir"] = m("config_dir", replace_with_dir("config.json"))
    fx["weights_dir"] = m("weights_dir", replace_with_dir("model.safetensors"))
    fx["config_bad_json"] = m("config_bad_json", write_file("config.json", "{ not json"))
    fx["config_array"] = m("config_array", write_file("config.json", "[1, 2]"))
    fx["tensor_twice"] = m("tensor_twice", duplicate_first_tensor)
    fx["no_config"] = m("no_config", remove("config.json"))
    fx["no_weights"] = m("no_weights", remove("model.safetensors"))
    fx["huge_embd"] = m("huge_embd", with_config(n_embd=10**9))
    fx["negative_layers"] = m("negative_layers", with_config(n_layer=-3))
    fx["truncated_weights"] = m("truncated_weights", truncate("model.safetensors", 5000))
    fx["header_huge"] = m("header_huge", write_file("model.safetensors", struct.pack("<Q", 2**62) + b"{}"))
    fx["vocab_dir"] = m("vocab_dir", replace_with_dir("vocab.json"))
    fx["merges_dir"] = m("merges_dir", replace_with_dir("merges.txt"))
    fx["no_merges"] = m("no_merges", remove("merges.txt"))

    # Tokenizer folders (for `tokenize --tokenizer DIR`).
    def tok(name, vocab, merges="#version: 0.2\n"):
        d = os.path.join(root, name)
        os.mkdir(d)
        with open(os.path.join(d, "vocab.json"), "w") as f:
            f.write(vocab if isinstance(vocab, str) else json.dumps(vocab))
        if merges is not None:
            with open(os.path.join(d, "merges.txt"), "w") as f:
                f.write(merges)
        return d

    base_vocab = {chr(c): i for i, c in enumerate(range(ord("a"), ord("z") + 1))}
    fx["tok_huge_id"] = tok("tok_huge_id", {**base_vocab, "zz": 10**8})
    fx["tok_negative_id"] = tok("tok_negative_id", {**base_vocab, "zz": -5})
    fx["tok_bad_json"] = tok("tok_bad_json", "{\"a\": 0,")
    fx["tok_not_object"] = tok("tok_not_object", "[1, 2, 3]")
    fx["tok_bad_merge"] = tok("tok_bad_merge", base_vocab, "#version: 0.2\nq\n")
    fx["tok_unknown_merge"] = tok("tok_unknown_merge", base_vocab, "#version: 0.2\nx QQ\n")
    fx["tok_empty"] = tok("tok_empty", {})
    d = os.path.join(root, "tok_json_bad")
    os.mkdir(d)
    open(os.path.join(d, "tokenizer.json"), "w").write("{\"model\": 3}")
    fx["tok_json_bad"] = d
    fx["llama_nan"] = tiny_llama(os.path.join(root, "llama_nan"), poisoned="model.layers.1.mlp.up_proj.weight")
    fx["a_file"] = os.path.join(root, "plain.txt")
    open(fx["a_file"], "w").write("hello")

    # GGUF files.
    def gguf(name, data):
        p = os.path.join(root, name)
        with open(p, "wb") as f:
            f.write(data)
        return p

    fx["gguf_empty"] = gguf("empty.gguf", b"")
    fx["gguf_bad_magic"] = gguf("magic.gguf", b"GGML" + struct.pack("<IQQ", 3, 0, 0))
    fx["gguf_huge_tensors"] = gguf("tensors.gguf", b"GGUF" + struct.pack("<IQQ", 3, 2**62, 0))
    fx["gguf_huge_kv"] = gguf("kv.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 2**62))
    fx["gguf_version"] = gguf("version.gguf", b"GGUF" + struct.pack("<IQQ", 99, 0, 0))
    fx["gguf_huge_string"] = gguf("string.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 2**60))
    fx["gguf_no_arch"] = gguf("noarch.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 0))
    fx["gguf_dir"] = os.path.join(root, "folder.gguf")
    os.mkdir(fx["gguf_dir"])

    # PEFT folders for the tiny model (n_embd 32: c_attn takes 32 and gives 96).
    def peft(name, config=None, tensors=None, skip_weights=False, config_raw=None):
        d = os.path.join(root, name)
        os.mkdir(d)
        c = {"peft_type": "LORA", "r": 2, "lora_alpha": 4, "target_modules": ["c_attn"],
             "fan_in_fan_out": True, "bias": "none"}
        c.update(config or {})
        with open(os.path.join(d, "adapter_config.json"), "w") as f:
            f.write(config_raw if config_raw is not None else json.dumps(c))
        if not skip_weights:
            t = {}
            for layer in range(cfg["n_layer"]):
                key = f"base_model.model.transformer.h.{layer}.attn.c_attn"
                t[f"{key}.lora_A.weight"] = ("F32", [2, 32], floats(64))
                t[f"{key}.lora_B.weight"] = ("F32", [96, 2], floats(192))
            t.update(tensors or {})
            write_safetensors(os.path.join(d, "adapter_model.safetensors"), t)
        return d

    key0 = "base_model.model.transformer.h.0.attn.c_attn"
    fx["peft_ok"] = peft("peft_ok")
    fx["peft_negative_alpha"] = peft("peft_negative_alpha", {"lora_alpha": -8})
    fx["peft_huge_alpha"] = peft("peft_huge_alpha", {"lora_alpha": 1e308})
    fx["peft_zero_rank"] = peft("peft_zero_rank", {"r": 0})
    fx["peft_nan"] = peft("peft_nan", tensors={f"{key0}.lora_B.weight": ("F32", [96, 2], poison(floats(192), float("nan")))})
    fx["peft_inf"] = peft("peft_inf", tensors={f"{key0}.lora_A.weight": ("F32", [2, 32], poison(floats(64), float("inf")))})
    fx["peft_bad_json"] = peft("peft_bad_json", config_raw="{\"r\": ")
    fx["peft_no_weights"] = peft("peft_no_weights", skip_weights=True)
    fx["peft_wrong_shape"] = peft("peft_wrong_shape", tensors={f"{key0}.lora_A.weight": ("F32", [2, 31], floats(62))})
    fx["peft_huge_layer"] = peft("peft_huge_layer", tensors={
        "base_model.model.transformer.h.99999999999999999999.attn.c_attn.lora_A.weight": ("F32", [2, 32], floats(64))})
    fx["peft_config_dir"] = peft("peft_config_dir", skip_weights=True)
    os.remove(os.path.join(fx["peft_config_dir"], "adapter_config.json"))
    os.mkdir(os.path.join(fx["peft_config_dir"], "adapter_config.json"))
    fx["peft_dora"] = peft("peft_dora", {"use_dora": True})

    # Valid tiny Llama GGUFs (test_gguf_oracle's fixture), with a NaN written into one tensor.
    fx["gguf_nan"] = []
    src_dir = os.environ.get("SERVELAB_GGUF_LLAMA_ORACLE_DIR", "")
    src = os.path.join(src_dir, "q4_1", "model.gguf")
    if src_dir and os.path.exists(src):
        try:
            import gguf  # PyPI gguf, in .venv for the oracle fixtures
            tensors = {t.name: t for t in gguf.GGUFReader(src).tensors}
            for name, gguf_name, kind in [("f32_nan.gguf", "blk.0.attn_norm.weight", "F32"),
                                          ("q4_1_nan.gguf", "blk.1.attn_q.weight", "Q4_1")]:
                t = tensors[gguf_name]
                assert t.tensor_type.name == kind, (gguf_name, t.tensor_type.name)
                data = bytearray(open(src, "rb").read())
                # F32: the first value; Q4_1: the first block's fp16 scale d (NaN = 0x7e00).
                data[t.data_offset:t.data_offset + 4] = struct.pack("<f", float("nan")) if kind == "F32" \
                    else struct.pack("<H", 0x7E00) + bytes(data[t.data_offset + 2:t.data_offset + 4])
                p = os.path.join(root, name)
                open(p, "wb").write(bytes(data))
                fx["gguf_nan"].append((p, kind))
        except ImportError:
            pass

    # Settings files for the app's scripted mode.
    def settings(name, text):
        p = os.path.join(root, name + ".ini")
        with open(p, "w") as f:
            f.write(text)
        return p

    fx["settings_requests"] = settings("requests", "[continuous]\nrequests=1000000000\n")
    fx["settings_binary"] = os.path.join(root, "settings-binary.ini")
    with open(fx["settings_binary"], "wb") as f:
        f.write(bytes(random.Random(7).randrange(256) for _ in range(300)))
    fx["settings_garbage"] = settings("garbage", "[kv-cache]\nnewTokens=banana\n")
    fx["settings_negative"] = settings("negative", "[batching]\nnewTokens=-5\n")
    fx["settings_temperature"] = settings("temperature", "[generate]\ntemperature=-1\n")
    fx["settings_scenario"] = settings("scenario", "[serving]\nscenario=soak\n")
    fx["settings_port"] = settings("port", "[serving]\nport=70000\n")
    # Enumerated, bool and text keys: each holds what QVariant would have turned into the default
    # (or into true: toBool() reads any word but "false" and "0" as true).
    fx["settings_kinds"] = {
        "exec": settings("exec", "[quantization]\nexec=turbo\n"),
        "int4Group": settings("int4group", "[quantization]\nint4Group=48\n"),
        "modes": settings("modes", "[quantization]\nmodes=fp16, int3\n"),
        "strategies": settings("strategies", "[multi-lora]\nstrategies=loop, bogus\n"),
        "assignment": settings("assignment", "[multi-lora]\nassignment=everyone\n"),
        "serveStrategy": settings("serve_strategy", "[multi-lora]\nserveStrategy=fastest\n"),
        "view": settings("view", "[multi-lora]\nview=cinema\n"),
        "theme": settings("theme", "[ui]\ntheme=purple\n"),
        "tab": settings("tab", "[window]\ntab=frobnicate\n"),
        "chat": settings("chat", "[generate]\nchat=banana\n"),
        "sampling": settings("sampling", "[generate]\nsampling=yes please\n"),
        "paged": settings("paged", "[continuous]\npaged=maybe\n"),
        "measureSpeed": settings("measure_speed", "[quantization]\nmeasureSpeed=2\n"),
        "demo": settings("demo", "[model]\ndemo=sometimes\n"),
        "prompt": settings("prompt", "[generate]\nprompt=@Size(3 4)\n"),
        "kvPrompt": settings("kv_prompt", "[kv-cache]\nprompt=@Rect(0 0 3 4)\n"),
        "batchSizes": settings("batch_sizes", "[batching]\nbatchSizes=1, banana, 4\n"),
        "levels": settings("levels", "[serving]\nlevels=1, -2\n"),
        "promptTokens": settings("prompt_tokens", "[kv-cache]\npromptTokens=lots\n"),
        "decodeTokens": settings("decode_tokens", "[quantization]\ndecodeTokens=1000000000\n"),
        "adapterRank": settings("adapter_rank", "[multi-lora]\nadapters\\1\\rank=banana\nadapters\\size=1\n"),
        "geometry": settings("geometry", "[window]\ngeometry=@ByteArray(garbage)\n"),
        "lesson": settings("lesson", "[lessons]\nlesson=frobnicate\n"),
        "lessonStep": settings("lesson_step", "[lessons]\nlesson=batching\nstep=99\n"),
        "lessonsDone": settings("lessons_done", "[lessons]\ndone=kv-cache:1, kv-cache:banana\n"),
    }
    return fx


# ---- the cases ------------------------------------------------------------------------------


def cases(fx, builtin):
    C = []
    add = lambda *a, **k: C.append(Case(*a, **k))
    T = ["--model", fx["tiny"]]
    G = ["generate", *T, "--prompt", "hi", "--max-new-tokens", "2"]
    add("generate", "--seed -1", [*G, "--temperature", "1", "--seed", "-1"], 2, ["--seed", "-1"])
    add("generate", "--seed 2^64", [*G, "--temperature", "1", "--seed", "18446744073709551616"], 2,
        ["--seed", "18446744073709551616"])
    add("generate", "--temperature 1e-45", [*G, "--temperature", "1e-45"], 1, ["temperature", "1e-45"])

    # Model folders.
    add("model folder", "missing folder", ["info", "--model", "/nonexistent/model"], 1, "/nonexistent/model")
    add("model folder", "a plain file", ["info", "--model", fx["a_file"]], 1, [fx["a_file"], "not a .gguf"])
    add("model folder", "config.json is a folder", ["info", "--model", fx["config_dir"]], 1,
        [fx["config_dir"] + "/config.json: is a directory"])
    add("model folder", "model.safetensors is a folder", ["info", "--model", fx["weights_dir"]], 1,
        ["model.safetensors: is a directory"])
    add("model folder", "config.json not JSON", ["info", "--model", fx["config_bad_json"]], 1, "config.json")
    add("model folder", "a tensor named twice in the header", ["info", "--model", fx["tensor_twice"]], 1,
        ["model.safetensors", "twice"])
    add("model folder", "config.json a JSON array", ["info", "--model", fx["config_array"]], 1,
        ["config.json", "must be a JSON object, got an array"])
    add("model folder", "no config.json", ["info", "--model", fx["no_config"]], 1, "config.json")
    add("model folder", "no model.safetensors", ["info", "--model", fx["no_weights"]], 1, "model.safetensors")
    add("model folder", "n_embd 1e9", ["info", "--model", fx["huge_embd"]], 1, ["transformer.wte.weight", "1000000000"])
    add("model folder", "negative n_layer", ["info", "--model", fx["negative_layers"]], 1, "n_layer")
    add("model folder", "NaN weight", ["info", "--model", fx["nan_weights"]], 1, ["transformer.h.1.mlp.c_fc.weight", "NaN"])
    add("model folder", "Inf weight", ["info", "--model", fx["inf_weights"]], 1, ["transformer.wte.weight", "infinite"])
    add("model folder", "NaN weight in a Llama safetensors folder", ["info", "--model", fx["llama_nan"]], 1,
        ["model.layers.1.mlp.up_proj.weight", "1 NaN", "flat index 10"])
    # Finite weights, finite logits at the prompt: the overflow shows only in step 2's logits.
    add("model folder", "logits that overflow mid-generation",
        ["generate", "--model", fx["late_overflow"], "--prompt", "hi", "--max-new-tokens", "5"], 1,
        ["generation step 2", "batch row 1", "NaN or infinite"])
    # The continuous-batching scheduler's own check: a step prefills the prompts, then decodes the
    # token they made, whose embedding overflows.
    add("model folder", "logits that overflow mid-generation in the scheduler",
        ["bench", "sync-vs-continuous", "--model", fx["late_overflow"], "--prompt", "hi", "--requests", "2",
         "--max-batch", "2", "--long-tokens", "2", "--short-tokens", "2"], 1,
        ["scheduler step 1", "request 1", "batch row 1", "NaN or infinite"])
    add("model folder", "/dev/null as model", ["info", "--model", "/dev/null"], 1, ["/dev/null", "not a folder"])
    add("model folder", "vocab.json is a folder", ["info", "--model", fx["vocab_dir"]], 1, ["vocab.json", "directory"])
    add("model folder", "merges.txt is a folder", ["info", "--model", fx["merges_dir"]], 1, ["merges.txt", "directory"])
    add("model folder", "no merges.txt", ["info", "--model", fx["no_merges"]], 1, "merges.txt")

    # safetensors.
    add("safetensors", "truncated", ["info", "--model", fx["truncated_weights"]], 1, ["model.safetensors", "truncated"])
    add("safetensors", "header length 2^62", ["info", "--model", fx["header_huge"]], 1, "model.safetensors")

    # GGUF.
    add("gguf", "a missing .gguf", ["info", "--model", "/nonexistent/model.gguf"], 1,
        "/nonexistent/model.gguf: not found")
    add("gguf", "empty file", ["info", "--model", fx["gguf_empty"]], 1, "empty.gguf")
    add("gguf", "bad magic", ["info", "--model", fx["gguf_bad_magic"]], 1, "magic.gguf")
    add("gguf", "2^62 tensors", ["info", "--model", fx["gguf_huge_tensors"]], 1, "tensors.gguf")
    add("gguf", "2^62 keys", ["info", "--model", fx["gguf_huge_kv"]], 1, "kv.gguf")
    add("gguf", "version 99", ["info", "--model", fx["gguf_version"]], 1, ["version.gguf", "version"])
    add("gguf", "key name 2^60 bytes", ["info", "--model", fx["gguf_huge_string"]], 1, "string.gguf")
    add("gguf", "no architecture", ["info", "--model", fx["gguf_no_arch"]], 1, "noarch.gguf")
    add("gguf", "a folder named .gguf", ["info", "--model", fx["gguf_dir"]], 1, "folder.gguf")
    for path, kind in fx["gguf_nan"]:
        layer = "model.layers.0.input_layernorm.weight" if kind == "F32" else "model.layers.1.self_attn.q_proj.weight"
        add("gguf", f"NaN in a {kind} tensor", ["info", "--model", path], 1, [os.path.basename(path), layer, "NaN"])
    add("gguf", "tokenize a bad .gguf", ["tokenize", "--model", fx["gguf_bad_magic"], "x"], 1, "magic.gguf")

    # The models on this computer: a --dir that is not a folder (a bad model inside one is listed, not an error).
    add("models", "a missing --dir", ["models", "--dir", "/nonexistent/models"], 1, "/nonexistent/models")
    add("models", "a file as --dir", ["models", "--dir", fx["a_file"]], 1, [fx["a_file"], "is not a folder"])
    add("models", "an empty --dir", ["models", "--dir", ""], 1, "is empty")

    # Tokenizer files.
    add("tokenizer", "missing folder", ["tokenize", "--tokenizer", "/nonexistent/tok", "x"], 1, "/nonexistent/tok")
    add("tokenizer", "vocab.json id 1e8", ["tokenize", "--tokenizer", fx["tok_huge_id"], "x"], 1,
        ["vocab.json", "100000000"])
    add("tokenizer", "negative id", ["tokenize", "--tokenizer", fx["tok_negative_id"], "x"], 1, "vocab.json")
    add("tokenizer", "vocab.json not JSON", ["tokenize", "--tokenizer", fx["tok_bad_json"], "x"], 1, "vocab.json")
    add("tokenizer", "vocab.json an array", ["tokenize", "--tokenizer", fx["tok_not_object"], "x"], 1, "vocab.json")
    add("tokenizer", "merge line without a pair", ["tokenize", "--tokenizer", fx["tok_bad_merge"], "x"], 1, "merges.txt")
    add("tokenizer", "merge of unknown tokens", ["tokenize", "--tokenizer", fx["tok_unknown_merge"], "x"], 1, "vocab.json")
    add("tokenizer", "empty vocabulary", ["tokenize", "--tokenizer", fx["tok_empty"], "x"], 1, "vocab.json")
    add("tokenizer", "tokenizer.json malformed", ["tokenize", "--tokenizer", fx["tok_json_bad"], "x"], 1, "tokenizer.json")
    add("tokenizer", "a plain file", ["tokenize", "--tokenizer", fx["a_file"], "x"], 1,
        [fx["a_file"], "is a file, not a folder"])
    add("tokenizer", "--model a plain file", ["tokenize", "--model", fx["a_file"], "x"], 1,
        [fx["a_file"], "is a file, not a folder"])

    # PEFT folders.
    add("peft", "missing folder", ["lora", "describe", *T, "/nonexistent/peft"], 1, "/nonexistent/peft")
    add("peft", "negative lora_alpha", ["lora", "describe", *T, fx["peft_negative_alpha"]], 1, ["lora_alpha", "-8"])
    add("peft", "lora_alpha 1e308", ["lora", "describe", *T, fx["peft_huge_alpha"]], 1, ["lora_alpha", "1e+308"])
    add("peft", "r = 0", ["lora", "describe", *T, fx["peft_zero_rank"]], 1, ["adapter_config.json", "\"r\""])
    add("peft", "NaN in lora_B", ["lora", "describe", *T, fx["peft_nan"]], 1,
        ["h.0.attn.c_attn.lora_B.weight", "NaN"])
    add("peft", "Inf in lora_A", ["generate", *T, "--prompt", "hi", "--adapter", fx["peft_inf"]], 1,
        ["h.0.attn.c_attn.lora_A.weight", "infinite"])
    add("peft", "config not JSON", ["lora", "describe", *T, fx["peft_bad_json"]], 1, "adapter_config.json")
    add("peft", "no adapter_model.safetensors", ["lora", "describe", *T, fx["peft_no_weights"]], 1,
        "adapter_model.safetensors")
    add("peft", "wrong shape", ["lora", "describe", *T, fx["peft_wrong_shape"]], 1, "lora_A.weight")
    add("peft", "layer 1e20", ["lora", "describe", *T, fx["peft_huge_layer"]], 1, "layer")
    add("peft", "adapter_config.json a folder", ["lora", "describe", *T, fx["peft_config_dir"]], 1,
        ["adapter_config.json", "directory"])
    add("peft", "DoRA", ["lora", "describe", *T, fx["peft_dora"]], 1, "use_dora")

    # Command lines: structure (exit 2).
    add("command line", "unknown subcommand", ["frobnicate"], 2, ["unknown subcommand", "frobnicate"])
    add("command line", "unknown bench", ["bench", "frob"], 2, ["unknown subcommand", "frob", "kv-cache"])
    add("command line", "unknown lora", ["lora", "frob"], 2, ["unknown subcommand", "frob", "describe"])
    add("command line", "bench alone", ["bench"], 2, "needs a subcommand")
    add("command line", "unknown option", [*G, "--frobnicate"], 2, "frobnicate")
    add("command line", "not a number", [*G[:-1], "many"], 2, "--max-new-tokens")
    add("command line", "--greedy with --temperature", [*G, "--greedy", "--temperature", "0.7"], 2,
        ["--greedy", "--temperature"])
    add("command line", "--top-k without --temperature", [*G, "--top-k", "5"], 2, ["--top-k", "--temperature"])
    add("command line", "--top-p without --temperature", [*G, "--top-p", "0.5"], 2, ["--top-p", "--temperature"])
    add("command line", "--seed without --temperature", [*G, "--seed", "3"], 2, ["--seed", "--temperature"])
    add("command line", "empty --batch-sizes", ["bench", "batch-sweep", *T, "--batch-sizes", ""], 2, "--batch-sizes")
    add("command line", "empty --mode", ["quantize", *T, "--mode", ""], 2, "--mode")
    add("command line", "empty --device", [*G, "--device", ""], 2, "--device")
    add("command line", "empty --strategies", ["lora", "bench", *T, "--strategies", ""], 2, "--strategies")
    add("command line", "empty --out", ["export-demo", "--out", ""], 2, "--out")
    add("command line", "empty --stop", [*G, "--stop", ""], 2, "--stop")

    # generate.
    add("generate", "--temperature -1", [*G, "--temperature", "-1"], 1, ["--temperature", "-1"])
    add("generate", "--temperature 0", [*G, "--temperature", "0"], 1, "--temperature")
    add("generate", "--temperature nan", [*G, "--temperature", "nan"], 1, "--temperature")
    add("generate", "--temperature inf", [*G, "--temperature", "inf"], 1, "--temperature")
    add("generate", "--top-p 2", [*G, "--temperature", "1", "--top-p", "2"], 1, "top-p")
    add("generate", "--top-k -1", [*G, "--temperature", "1", "--top-k", "-1"], 1, "top-k")
    add("generate", "--max-new-tokens 0", [*G[:-1], "0"], 1, "--max-new-tokens")
    add("generate", "--max-new-tokens 1e12", [*G[:-1], "1000000000000"], 1, ["--max-new-tokens", "1000000"])
    add("generate", "--max-new-tokens beyond context", [*G[:-1], "5000"], 1, "context")
    add("generate", "--threads 10000", [*G, "--threads", "10000"], 1, ["--threads", "10000"])
    add("generate", "--threads -1", [*G, "--threads", "-1"], 1, "threads")
    add("generate", "--device tpu", [*G, "--device", "tpu"], 1, "tpu")
    add("generate", "--dtype int3", [*G, "--dtype", "int3"], 1, "int3")
    add("generate", "--quant bogus", [*G, "--quant", "bogus"], 1, "bogus")
    add("generate", "--gemm bogus", [*G, "--gemm", "bogus"], 1, "bogus")
    add("generate", "--lora-strategy bogus", [*G, "--adapter", fx["peft_ok"], "--lora-strategy", "bogus"], 1, "bogus")
    add("generate", "3 adapters for 1 prompt",
        [*G, "--adapter", fx["peft_ok"], "--adapter", "none", "--adapter", "none"], 1, "--adapter")
    add("generate", "--system without --chat", [*G, "--system", "be brief"], 1, "--system")
    add("generate", "--chat without a template", [*G, "--chat"], 1, "chat template")
    add("generate", "--quant-exec bogus", [*G, "--quant-exec", "bogus"], 1, "bogus")
    add("generate", "--model with --demo", [*G, "--demo"], 1, ["--model", "--demo"])

    # tokenize / demo / info.
    add("tokenize", "--demo with --tokenizer", ["tokenize", "--demo", "--tokenizer", fx["tiny"], "x"], 1,
        ["--tokenizer", "--demo"])
    add("demo", "--threads 100000", ["demo", *T, "--threads", "100000"], 1, ["--threads", "100000"])
    add("info", "--dtype int3", ["info", *T, "--dtype", "int3"], 1, "int3")

    # bench kv-cache / batch-sweep.
    K = ["bench", "kv-cache", *T, "--new-tokens", "2"]
    add("bench kv-cache", "--repeats 0", [*K, "--repeats", "0"], 1, "repeats")
    add("bench kv-cache", "--repeats 1e9", [*K, "--repeats", "1000000000"], 1, ["--repeats", "1000"])
    add("bench kv-cache", "--prompt-tokens 1e9", [*K, "--prompt-tokens", "1000000000"], 1, "--prompt-tokens")
    add("bench kv-cache", "--prompt-tokens -1", [*K, "--prompt-tokens", "-1"], 1, "prompt length")
    add("bench kv-cache", "--new-tokens 0", [*K[:-1], "0"], 1, "new tokens")
    S = ["bench", "batch-sweep", *T, "--new-tokens", "2", "--repeats", "1"]
    add("bench batch-sweep", "batch size 0", [*S, "--batch-sizes", "1,0"], 1, "batch size")
    add("bench batch-sweep", "empty item", [*S, "--batch-sizes", "1,,2"], 1, "--batch-sizes")
    add("bench batch-sweep", "batch size 1e12", [*S, "--batch-sizes", "1000000000000"], 1, "--batch-sizes")
    add("bench batch-sweep", "batch size overflowing", [*S, "--batch-sizes", "99999999999999999999"], 1,
        "--batch-sizes")
    add("bench batch-sweep", "--repeats 0", [*S[:-1], "0"], 1, "repeats")

    # bench sync-vs-continuous / course-benchmark (the issue's examples).
    V = ["bench", "sync-vs-continuous", *T, "--short-tokens", "2", "--long-tokens", "2"]
    add("bench sync-vs-continuous", "--requests 1e9", [*V, "--requests", "1000000000"], 1, ["--requests", "100000"])
    add("bench sync-vs-continuous", "--requests 0", [*V, "--requests", "0"], 1, "requests")
    add("bench sync-vs-continuous", "--max-batch 1e9", [*V, "--max-batch", "1000000000"], 1, "--max-batch")
    add("bench sync-vs-continuous", "--max-batch 0", [*V, "--max-batch", "0"], 1, "max batch")
    add("bench sync-vs-continuous", "--arrival-rate 1e-300 (a hang)", [*V, "--arrival-rate", "1e-300"], 1,
        ["arrival rate", "600 s"])
    add("bench sync-vs-continuous", "--arrival-rate -1", [*V, "--arrival-rate", "-1"], 1, "arrival rate")
    add("bench sync-vs-continuous", "--arrival-rate nan", [*V, "--arrival-rate", "nan"], 1, "arrival rate")
    add("bench sync-vs-continuous", "--long-every 0", [*V, "--long-every", "0"], 1, "long-every")
    add("bench sync-vs-continuous", "--prompt-tokens-max 1e9", [*V, "--prompt-tokens-max", "1000000000"], 1,
        "--prompt-tokens-max")
    add("bench sync-vs-continuous", "min above max", [*V, "--prompt-tokens-min", "5", "--prompt-tokens-max", "2"],
        1, "prompt token range")
    add("bench sync-vs-continuous", "--short-tokens 0", [*V[:-4], "--short-tokens", "0"], 1, "short tokens")
    B = ["bench", "course-benchmark", *T, "--new-tokens", "2"]
    add("bench course-benchmark", "--queries 1e9", [*B, "--queries", "1000000000"], 1, ["--queries", "100000"])
    add("bench course-benchmark", "seed-benchmark --queries 1e9", ["bench", "seed-benchmark", *B[2:], "--queries",
                                                                   "1000000000"], 1, "queries")
    add("bench course-benchmark", "--queries 0", [*B, "--queries", "0"], 1, "queries")
    add("bench course-benchmark", "--max-batch 0", [*B, "--max-batch", "0"], 1, "max batch")
    add("bench course-benchmark", "--new-tokens 1e12", [*B[:-1], "1000000000000"], 1, "--new-tokens")

    # quantize.
    Q = ["quantize", *T, "--no-speed", "--new-tokens", "2"]
    add("quantize", "--new-tokens -3", [*Q[:-1], "-3"], 1, "--new-tokens")
    add("quantize", "--repeats -1", [*Q, "--repeats", "-1"], 1, "--repeats")
    add("quantize", "--batch 0", [*Q, "--batch", "0"], 1, "--batch")
    add("quantize", "--mode bogus", [*Q, "--mode", "bogus"], 1, "bogus")
    add("quantize", "--mode with an empty item", [*Q, "--mode", "zp-uint8,,fp16"], 1, "--mode")
    add("quantize", "--exec bogus", [*Q, "--exec", "bogus"], 1, "bogus")
    add("quantize", "--repeats 0", [*Q, "--repeats", "0"], 1, "repeats")
    add("quantize", "--batch 1e9", [*Q, "--batch", "1000000000"], 1, "--batch")

    # lora bench / serve.
    L = ["lora", "bench", *T, "--batch-sizes", "1", "--repeats", "1", "--decode-steps", "1", "--context", "2"]
    add("lora bench", "--adapters 1e8", [*L, "--adapters", "100000000"], 1, ["--adapters", "4096"])
    add("lora bench", "--adapters 1e8, mixed ranks", [*L, "--adapters", "100000000", "--rank", "2,4"], 1,
        ["--adapters", "4096"])
    add("lora bench", "--adapters 0", [*L, "--adapters", "0"], 1, "adapters")
    add("lora bench", "--rank 0", [*L, "--rank", "0"], 1, "--rank")
    add("lora bench", "--rank 1e6", [*L, "--rank", "1000000"], 1, "--rank")
    add("lora bench", "--strategies bogus", [*L, "--strategies", "bogus"], 1, "bogus")
    add("lora bench", "--assignment bogus", [*L, "--assignment", "bogus"], 1, "bogus")
    add("lora bench", "--workload bogus", [*L, "--workload", "bogus"], 1, "bogus")
    add("lora bench", "--decode-steps 1e9", [*L[:-4], "--context", "2", "--decode-steps", "1000000000"], 1,
        "--decode-steps")
    add("lora bench", "--samples 0 (toy)", ["lora", "bench", *T, "--workload", "toy", "--samples", "0"], 1, "toy")
    add("lora bench", "--batch-sizes 1e6", [*L[:4], "--batch-sizes", "1000000"], 1, "--batch-sizes")
    # serve: the exposure flags, refused before the port is bound or a model loads.
    S = ["serve", *T, "--port", "0"]
    add("serve", "--ssl-certfile alone", [*S, "--ssl-certfile", "cert.pem"], 2, ["--ssl-certfile", "--ssl-keyfile"])
    add("serve", "--ssl files missing", [*S, "--ssl-certfile", "/nonexistent/c.pem", "--ssl-keyfile",
                                         "/nonexistent/k.pem"], 1, "/nonexistent/c.pem")
    add("serve", "--metrics-need-key without a key", [*S, "--metrics-need-key"], 2, "--api-key")
    add("serve", "--allowed-origins without a scheme", [*S, "--allowed-origins", "lab.example"], 2, "lab.example")
    add("serve", "--request-timeout -1", [*S, "--request-timeout", "-1"], 1, "--request-timeout")
    add("serve", "--read-timeout 0", [*S, "--read-timeout", "0"], 1, "--read-timeout")
    add("serve", "--write-timeout nan", [*S, "--write-timeout", "nan"], 1, "--write-timeout")
    R = ["lora", "serve", *T, "--requests", "2", "--new-tokens", "2"]
    add("lora serve", "--adapters 1e8", [*R, "--adapters", "100000000"], 1, ["--adapters", "4096"])
    add("lora serve", "--requests 1e9", [*R[:-4], "--requests", "1000000000"], 1, ["--requests", "100000"])
    add("lora serve", "--cache-capacity -1", [*R, "--cache-capacity", "-1"], 1, "cache capacity")
    add("lora serve", "--strategy bogus", [*R, "--strategy", "bogus"], 1, "bogus")
    add("lora serve", "--base-every -1", [*R, "--base-every", "-1"], 1, "base-every")
    add("lora serve", "--max-batch 0", [*R, "--max-batch", "0"], 1, "max batch")
    add("lora serve", "--rank 1e6", [*R, "--rank", "1000000"], 1, "--rank")

    # loadgen: refused before a request is sent, one line naming the flag (nothing listens on port 9).
    U = ["loadgen", "--url", "http://127.0.0.1:9"]
    S = [*U, "--scenario", "sweep"]
    add("loadgen", "no --url", ["loadgen", "--scenario", "single"], 2, "--url")
    add("loadgen", "--url without a scheme", ["loadgen", "--url", "localhost:8000"], 1, "--url")
    add("loadgen", "--url without a host", ["loadgen", "--url", "http://:8000"], 1, "--url")
    add("loadgen", "--ca-file for http://", ["loadgen", "--url", "http://127.0.0.1:9", "--ca-file", "c.pem"], 1,
        ["--ca-file", "https://"])
    add("loadgen", "--ca-file unreadable", ["loadgen", "--url", "https://127.0.0.1:9", "--ca-file",
                                            "/nonexistent/ca.pem"], 1, "/nonexistent/ca.pem")
    add("loadgen", "--ca-file and --insecure", ["loadgen", "--url", "https://127.0.0.1:9", "--ca-file", "c.pem",
                                                "--insecure"], 1, ["--ca-file", "--insecure"])
    add("loadgen", "--requests 1e9", [*S, "--requests", "1000000000"], 1, ["--requests", "1000000"])
    add("loadgen", "--requests 0", [*S, "--requests", "0"], 1, "--requests")
    add("loadgen", "a Poisson rate of 1e-300/s", [*S, "--arrival", "poisson", "--clients", "1e-300"], 1,
        ["--clients", "time bound"])
    add("loadgen", "a Poisson rate of 1e12/s", [*S, "--arrival", "poisson", "--clients", "1e12"], 1, "--clients")
    add("loadgen", "--clients 0", [*S, "--clients", "0"], 1, "--clients")
    add("loadgen", "--clients 1e6", [*S, "--clients", "1000000"], 1, "--clients")
    add("loadgen", "--arrival bogus", [*S, "--arrival", "bogus"], 1, "--arrival")
    add("loadgen", "--max-seconds nan", [*U, "--max-seconds", "nan"], 1, "--max-seconds")
    add("loadgen", "--max-seconds 1e300", [*U, "--max-seconds", "1e300"], 1, "--max-seconds")
    add("loadgen", "--duration -1", [*S, "--duration", "-1"], 1, "--duration")
    add("loadgen", "--timeout 0", [*U, "--timeout", "0"], 1, "--timeout")
    add("loadgen", "--max-new-tokens 1e12", [*U, "--max-new-tokens", "1000000000000"], 1, "--max-new-tokens")
    add("loadgen", "--input-len 1e9", [*S, "--input-len", "1000000000"], 1, "--input-len")
    add("loadgen", "--dataset bogus", [*S, "--dataset", "bogus"], 1, ["--dataset", "bogus"])
    add("loadgen", "--dataset-path missing", [*S, "--dataset", "file", "--dataset-path", "/nonexistent/d.jsonl"], 1,
        ["--dataset-path", "/nonexistent/d.jsonl"])
    add("loadgen", "--dataset-path not JSONL", [*S, "--dataset", "file", "--dataset-path", fx["a_file"]], 1,
        fx["a_file"])
    add("loadgen", "--goodput without a value", [*S, "--goodput", "ttft"], 1, "--goodput")
    add("loadgen", "--goodput unknown objective", [*S, "--goodput", "latency:5"], 1, ["--goodput", "latency"])
    add("loadgen", "--percentiles 0", [*S, "--percentiles", "0,50"], 1, "--percentiles")
    add("loadgen", "--warmup outside a sweep", [*U, "--warmup", "2"], 2, "--warmup")
    add("loadgen", "--burstiness without gamma", [*S, "--burstiness", "0.5"], 2, "--burstiness")
    add("loadgen", "--tokenizer missing", [*U, "--tokenizer", "/nonexistent/tok"], 1, "/nonexistent/tok")
    add("loadgen", "--save-requests into no folder", [*U, "--save-requests", "/nonexistent/r.jsonl"], 1,
        "--save-requests")

    # export-demo.
    add("export-demo", "unwritable folder", ["export-demo", "--tiny", "--out", "/proc/servelab-out"], 1,
        "/proc/servelab-out")
    return C


def app_cases(fx):
    C = []
    add = lambda *a, **k: C.append(Case(*a, program="app", **k))
    run = ["--demo", "--run"]
    add("app scripted mode", "requests 1e9 in the settings file",
        [*run, "--tab", "continuous", "--settings", fx["settings_requests"]], 1, ["continuous/requests", "1000000000"])
    add("app scripted mode", "a word where a number belongs",
        [*run, "--tab", "kv-cache", "--settings", fx["settings_garbage"]], 1, ["kv-cache/newTokens", "banana"])
    add("app scripted mode", "negative new tokens",
        [*run, "--tab", "batching", "--settings", fx["settings_negative"]], 1, ["batching/newTokens", "-5"])
    add("app scripted mode", "negative temperature",
        [*run, "--tab", "generate", "--settings", fx["settings_temperature"]], 1, ["generate/temperature", "-1"])
    add("app scripted mode", "--export-chart with an unknown suffix",
        [*run, "--tab", "kv-cache", "--export-chart", "/tmp/chart.bmp"], 1, ["--export-chart", ".bmp"])
    add("app scripted mode", "an unknown tab", ["--demo", "--run", "--tab", "frobnicate"], 1, "frobnicate")
    add("app scripted mode", "an unknown lesson", ["--demo", "--run", "--lesson", "frobnicate"], 1,
        ["unknown lesson", "frobnicate"])
    add("app scripted mode", "a lesson step past the end", ["--demo", "--run", "--lesson", "kv-cache", "--step", "99"],
        1, ["kv-cache", "99"])
    add("app command line", "a lesson step that is not a number",
        ["--demo", "--run", "--lesson", "kv-cache", "--step", "-1"], 2, ["--step", "-1"])
    add("app scripted mode", "a settings file of random bytes",
        [*run, "--tab", "generate", "--settings", fx["settings_binary"]], 1, ["--settings", "not UTF-8 text"])
    add("app scripted mode", "a folder as the settings file",
        [*run, "--tab", "generate", "--settings", os.path.dirname(fx["settings_binary"])], 2,
        ["--settings", "is a folder"])
    # The file argument a desktop passes (servelab.desktop's Exec=servelab %f) is loaded as --model.
    add("app scripted mode", "a file argument that does not exist",
        ["--run", "--tab", "generate", "/nonexistent/model.gguf"], 1, "/nonexistent/model.gguf")
    add("app command line", "two file arguments", ["--run", "--tab", "generate", "a.gguf", "b.gguf"], 2,
        "one file argument")
    add("app scripted mode", "an unknown load scenario",
        [*run, "--tab", "serving", "--settings", fx["settings_scenario"]], 1, ["serving/scenario", "soak"])
    add("app scripted mode", "a port beyond 65535",
        [*run, "--tab", "serving", "--settings", fx["settings_port"]], 1, ["serving/port", "70000"])
    # key: (tab to run, what stderr must name).
    kinds = {
        "exec": ("quantization", ["quantization/exec", "turbo", "dequant-once"]),
        "int4Group": ("quantization", ["quantization/int4Group", "48"]),
        "modes": ("quantization", ["quantization/modes", "int3"]),
        "strategies": ("multi-lora", ["multi-lora/strategies", "bogus"]),
        "assignment": ("multi-lora", ["multi-lora/assignment", "everyone"]),
        "serveStrategy": ("multi-lora", ["multi-lora/serveStrategy", "fastest"]),
        "view": ("multi-lora", ["multi-lora/view", "cinema"]),
        "theme": ("kv-cache", ["ui/theme", "purple"]),
        "tab": ("kv-cache", ["window/tab", "frobnicate"]),
        "chat": ("generate", ["generate/chat", "banana", "not true or false"]),
        "sampling": ("generate", ["generate/sampling", "yes please"]),
        "paged": ("continuous", ["continuous/paged", "maybe"]),
        "measureSpeed": ("quantization", ["quantization/measureSpeed", "\"2\""]),
        "demo": ("kv-cache", ["model/demo", "sometimes"]),
        "prompt": ("generate", ["generate/prompt", "QSize", "not text"]),
        "kvPrompt": ("kv-cache", ["kv-cache/prompt", "QRect", "not text"]),
        "batchSizes": ("batching", ["batching/batchSizes", "banana"]),
        "levels": ("serving", ["serving/levels", "-2"]),
        "promptTokens": ("kv-cache", ["kv-cache/promptTokens", "lots"]),
        "decodeTokens": ("quantization", ["quantization/decodeTokens", "1000000000"]),
        "adapterRank": ("multi-lora", ["multi-lora/adapters/1/rank", "banana"]),
        "geometry": ("kv-cache", ["window/geometry"]),
        "lesson": ("kv-cache", ["lessons/lesson", "frobnicate"]),
        "lessonStep": ("kv-cache", ["lessons/step", "99"]),
        "lessonsDone": ("kv-cache", ["lessons/done", "kv-cache:banana"]),
    }
    for key, (tab, expect) in kinds.items():
        # --demo would overwrite model/demo: that case runs on the built-in model, which the
        # refusal comes before.
        args = ["--run"] if key == "demo" else run
        add("app settings kinds", f"{key} holds garbage",
            [*args, "--tab", tab, "--settings", fx["settings_kinds"][key]], 1, expect)
    return C


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", required=True)
    ap.add_argument("--app", help="the desktop app, for its scripted mode (skipped when absent)")
    ap.add_argument("--builtin", help="the built-in GGUF (unused unless present)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-k", dest="only", help="run only cases whose category or name contains this")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="servelab-hostile-")
    try:
        fx = make_fixtures(a.cli, root)
        runtime_dir = os.path.join(root, "xdg-runtime")
        os.mkdir(runtime_dir, 0o700)
        config_dir = os.path.join(root, "xdg-config")
        os.mkdir(config_dir, 0o700)
        programs = {"cli": a.cli, "app": a.app, "runtime_dir": runtime_dir, "config_dir": config_dir}
        all_cases = cases(fx, a.builtin)
        if not fx["gguf_nan"]:
            print("hostile: no tiny Llama GGUF (SERVELAB_GGUF_LLAMA_ORACLE_DIR, the gguf_llama_oracle "
                  "fixture): the NaN-in-GGUF cases are skipped")
        if a.app and os.path.exists(a.app):
            all_cases += app_cases(fx)
        else:
            print("hostile: the app is not built here: its scripted-mode cases are skipped")
        if a.only:
            all_cases = [c for c in all_cases if a.only in c.category or a.only in c.name]
        failures = []
        with futures.ThreadPoolExecutor(max_workers=a.jobs) as pool:
            results = list(pool.map(lambda c: (c, run_case(c, programs)), all_cases))
        counts = {}
        for c, problem in results:
            counts[c.category] = counts.get(c.category, 0) + 1
            if problem:
                failures.append(f"FAIL [{c.category}] {c.name}: {problem}")
        for cat, n in counts.items():
            print(f"  {cat}: {n} cases")
        for f in failures:
            print(f)
        print(f"hostile: {len(results) - len(failures)} of {len(results)} cases passed")
        return 1 if failures else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

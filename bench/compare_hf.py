#!/usr/bin/env python3
"""ServeLab vs Hugging Face transformers on the same weights, same threads, one run. Prints JSON.

  .venv/bin/python bench/compare_hf.py [--threads 2] [--tokens 10] [--repeats 5]
                                       [--batch-sizes 1,2,4,8,16,32,64]
                                       [--device cpu|cuda] [--dtype fp32|fp16|bf16]
                                       [--model demo|builtin|PATH]

--model picks the weights both engines run: "demo" (default) the GPT-2 small shape with random
weights, exported once with `servelab-cli export-demo`; "builtin" the SmolLM2-135M-Instruct GGUF
that scripts/bootstrap installs; or a Hugging Face folder or .gguf file. HF loads a GGUF
dequantized to the dtype (from_pretrained(gguf_file=...)), as our engine does today, and its GGUF
tokenizer gets the digit-splitting pre-tokenizer SmolLM2 declares (docs/models.md).

What it measures (all medians over --repeats, our engine and HF interleaved so that both see the
same machine state):
  * decode: per-token latency at batch 1 with the KV cache (steps after the first), and without it
    - ours: `servelab-cli bench kv-cache`; HF: the course's loop with past_key_values (lesson 1)
  * batch sweep: whole-batch time for --tokens new tokens per row, throughput = rows*tokens/time
    - ours: `servelab-cli bench batch-sweep`; HF: the course's generate_batch (lesson 2)
  * the memory floor of a batch-1 decode step: weight bytes / copy bandwidth, where the copy
    bandwidth is bytes read + bytes written per second by torch's copy_ of a 512 MiB buffer on
    the same threads, or on the GPU with --device cuda (a decode step must stream every weight once).
  * greedy parity: our greedy tokens for the course prompts against HF's greedy generate() on the
    same weights, device and dtype (the first step where they part, if they do, and HF's margin
    between its best and second-best logit there).
On CUDA every clock is read after torch.cuda.synchronize() (ours: the engine synchronises itself).
The built-in demo model is exported once with `servelab-cli export-demo` so HF loads the very
same weights.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from bench_machine import machine as machine_info

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.environ.get("SERVELAB_CLI", os.path.join(ROOT, "build", "release", "app", "servelab-cli"))
PROMPTS = ["The quick brown fox jumped over the", "The rain in Spain falls", "What comes up must"]


TARGET = {"device": "cpu", "dtype": "fp32", "model_args": ["--demo"]}  # set from the command line in main()
BUILTIN = os.path.join(ROOT, ".venv", "share", "servelab", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")


def load_hf(a, dtype):
    """The model and tokenizer HF runs for --model, and the arguments that make our CLI load the same."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    path = BUILTIN if a.model == "builtin" else a.model
    if a.model == "demo":
        if not os.path.exists(os.path.join(a.model_dir, "model.safetensors")):
            subprocess.run([CLI, "export-demo", "--out", a.model_dir], check=True, capture_output=True)
        TARGET["model_args"] = ["--demo"]
        folder, gguf = a.model_dir, None
    elif path.endswith(".gguf"):
        TARGET["model_args"] = ["--model", path]
        folder, gguf = os.path.dirname(os.path.realpath(path)), os.path.basename(os.path.realpath(path))
    else:
        TARGET["model_args"] = ["--model", path]
        folder, gguf = path, None
    extra = {"gguf_file": gguf} if gguf else {}
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **extra).to(TARGET["device"]).eval()
    tok = AutoTokenizer.from_pretrained(folder, **extra)
    if gguf:
        from tokenizers import pre_tokenizers
        tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.pad_token, tok.padding_side = tok.eos_token, "left"
    return model, tok, path if a.model != "demo" else a.model_dir


def sync(torch):
    if TARGET["device"].startswith("cuda"):
        torch.cuda.synchronize()


def ours(args, threads, extra=()):
    out = subprocess.run([CLI, "bench", *args, *TARGET["model_args"], "--threads", str(threads), "--device", TARGET["device"],
                          "--dtype", TARGET["dtype"], "--json", *extra], check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def copy_bandwidth(torch, threads, repeats):
    n = 512 * 1024 * 1024 // 4
    src = torch.ones(n, device=TARGET["device"])
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(max(repeats, 5)):
        sync(torch)
        t0 = time.perf_counter()
        dst.copy_(src)
        sync(torch)
        times.append(time.perf_counter() - t0)
    return 2 * n * 4 / statistics.median(times)  # bytes read + written per second


def greedy_parity(torch, model, tok, tokens):
    """Our greedy tokens (servelab-cli generate) against HF's generate() for each course prompt."""
    rows = []
    for prompt in PROMPTS:
        out = subprocess.run([CLI, "generate", *TARGET["model_args"], "--prompt", prompt, "--max-new-tokens", str(tokens), "--greedy",
                              "--device", TARGET["device"], "--dtype", TARGET["dtype"], "--json"],
                             check=True, capture_output=True, text=True).stdout
        mine = json.loads(out.splitlines()[0])["generated_ids"]
        ids = tok(prompt, return_tensors="pt")["input_ids"].to(model.device)
        with torch.no_grad():
            g = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, do_sample=False,
                               pad_token_id=tok.eos_token_id, eos_token_id=None, output_scores=True,
                               return_dict_in_generate=True)
        theirs = g.sequences[0, ids.shape[1]:].tolist()
        first = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), None)
        row = {"prompt": prompt, "equal": mine == theirs, "ours": mine, "hf": theirs}
        if first is not None:
            top = g.scores[first][0].float().topk(2).values
            row.update({"first_difference": first, "hf_top2_margin_there": float(top[0] - top[1])})
        rows.append(row)
    return rows


def hf_token_loop(torch, model, tok, prompt, tokens, use_cache):
    """Lesson 1's loops: per-token seconds, with or without past_key_values."""
    inputs = tok(prompt, return_tensors="pt").to(model.device)
    nxt = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
    durations = []
    with torch.no_grad():
        for _ in range(tokens):
            sync(torch)
            t0 = time.perf_counter()
            out = model(**nxt, use_cache=use_cache)
            token = out.logits[0, -1, :].argmax()
            sync(torch)
            durations.append(time.perf_counter() - t0)
            mask = torch.cat([nxt["attention_mask"], torch.ones((1, 1), dtype=nxt["attention_mask"].dtype,
                                                                device=model.device)], dim=1)
            if use_cache:
                nxt = {"input_ids": token.reshape(1, 1), "attention_mask": mask, "past_key_values": out.past_key_values}
            else:
                nxt = {"input_ids": torch.cat([nxt["input_ids"], token.reshape(1, 1)], dim=1), "attention_mask": mask}
    return durations


def hf_generate_batch(torch, model, tok, batch_size, tokens):
    """Lesson 2's generate_batch, timed as the course times it (tokenization included)."""
    sync(torch)
    t0 = time.perf_counter()
    inputs = tok([PROMPTS[i % len(PROMPTS)] for i in range(batch_size)], padding=True,
                 return_tensors="pt").to(model.device)
    mask = inputs["attention_mask"]
    pos = mask.long().cumsum(-1) - 1
    pos.masked_fill_(mask == 0, 1)
    nxt = {"position_ids": pos, **inputs}
    with torch.no_grad():
        for _ in range(tokens):
            out = model(**nxt)
            ids = out.logits[:, -1, :].argmax(dim=1)
            nxt = {"input_ids": ids.reshape((-1, 1)), "position_ids": nxt["position_ids"][:, -1].unsqueeze(-1) + 1,
                   "attention_mask": torch.cat([nxt["attention_mask"],
                                                torch.ones((ids.shape[0], 1), device=model.device)], dim=1),
                   "past_key_values": out.past_key_values}
            tok.batch_decode(ids)
    sync(torch)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--tokens", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch-sizes", default="1,2,4,8,16,32,64")
    ap.add_argument("--model-dir", default=os.path.join(ROOT, "build", "bench", "demo-model"))
    ap.add_argument("--device", default="cpu", help="cpu or cuda (both engines on it)")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--parity-tokens", type=int, default=16, help="greedy tokens per course prompt (0: skip)")
    ap.add_argument("--graphs-ab", action="store_true",
                    help="also run ours with --cuda-graphs off, interleaved (ours_eager_ms, graphs_speedup)")
    ap.add_argument("--model", default="demo", help="demo (GPT-2 shape, random weights), builtin (SmolLM2) or a path")
    a = ap.parse_args()
    sizes = [int(s) for s in a.batch_sizes.split(",")]
    TARGET.update(device=a.device, dtype=a.dtype)

    import torch
    torch.set_num_threads(a.threads)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[a.dtype]
    model, tok, model_path = load_hf(a, dtype)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    bw = copy_bandwidth(torch, a.threads, a.repeats)
    floor_ms = weight_bytes / bw * 1e3

    # Decode latency, batch 1: interleave ours and HF, repeat, take medians of per-step medians.
    hf_hot(torch, model, tok)
    ours_cache, ours_nocache, hf_cache, hf_nocache, ours_eager = [], [], [], [], []
    graphs = None
    for _ in range(a.repeats):
        r = ours(["kv-cache", "--new-tokens", str(a.tokens), "--repeats", "1"], a.threads)
        ours_cache.append(statistics.median(r["cache_ms"][1:]))
        ours_nocache.append(statistics.median(r["no_cache_ms"][1:]))
        graphs = r.get("cuda_graphs")
        if a.graphs_ab:  # the same run with every kernel launched eagerly, interleaved
            e = ours(["kv-cache", "--new-tokens", str(a.tokens), "--repeats", "1"], a.threads, ["--cuda-graphs", "off"])
            ours_eager.append(statistics.median(e["cache_ms"][1:]))
        hf_cache.append(statistics.median(hf_token_loop(torch, model, tok, PROMPTS[0], a.tokens, True)[1:]) * 1e3)
        hf_nocache.append(statistics.median(hf_token_loop(torch, model, tok, PROMPTS[0], a.tokens, False)[1:]) * 1e3)
    decode = {
        "ours_ms": statistics.median(ours_cache), "hf_ms": statistics.median(hf_cache),
        "ours_no_cache_ms": statistics.median(ours_nocache), "hf_no_cache_ms": statistics.median(hf_nocache),
    }
    decode["speedup_vs_hf"] = decode["hf_ms"] / decode["ours_ms"]
    decode["ratio_to_floor"] = decode["ours_ms"] / floor_ms
    decode["cuda_graphs"] = graphs  # what the last run's graphs did (replays, captures), or why none ran
    if ours_eager:
        decode["ours_eager_ms"] = statistics.median(ours_eager)
        decode["graphs_speedup"] = decode["ours_eager_ms"] / decode["ours_ms"]

    # Batch sweep: ours (median over its own repeats) and HF's course loop, batch size by batch size.
    sweep = []
    for bs in sizes:
        sweep_args = ["batch-sweep", "--batch-sizes", str(bs), "--new-tokens", str(a.tokens), "--repeats", str(a.repeats)]
        o = ours(sweep_args, a.threads)["points"][0]
        hf_generate_batch(torch, model, tok, bs, 2)  # warm-up at this shape
        h = statistics.median([hf_generate_batch(torch, model, tok, bs, a.tokens) for _ in range(a.repeats)]) * 1e3
        hf_tpms = bs * a.tokens / h
        point = {"batch_size": bs, "ours_ms": o["total_ms"], "hf_ms": h, "ours_tokens_per_ms": o["tokens_per_ms"],
                 "hf_tokens_per_ms": hf_tpms, "throughput_ratio": o["tokens_per_ms"] / hf_tpms}
        if a.graphs_ab:
            e = ours(sweep_args, a.threads, ["--cuda-graphs", "off"])["points"][0]
            point.update({"ours_eager_ms": e["total_ms"], "graphs_speedup": e["total_ms"] / o["total_ms"]})
        sweep.append(point)

    parity = greedy_parity(torch, model, tok, a.parity_tokens) if a.parity_tokens > 0 else []

    gpu = torch.cuda.get_device_name() if a.device.startswith("cuda") else None
    print(json.dumps({
        "machine": {"threads": a.threads, "torch": torch.__version__, "cpu_count": os.cpu_count(), "gpu": gpu,
                    **machine_info()},
        "device": a.device, "dtype": a.dtype,
        "greedy_parity": parity,
        "model": {"name": a.model, "path": model_path, "weight_bytes": weight_bytes},
        "memory_floor": {"copy_bandwidth_gb_s": bw / 1e9, "decode_floor_ms": floor_ms},
        "decode_bs1": decode,
        "batch_sweep": sweep,
        "tokens": a.tokens, "repeats": a.repeats, "statistic": "median",
    }, indent=2))


def hf_hot(torch, model, tok):
    hf_token_loop(torch, model, tok, PROMPTS[0], 3, True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Batch-1 decode of our CPU kernels under each ISA they have (issue 21), interleaved in one run:
`servelab-cli bench kv-cache --isa X` for every ISA this CPU can run, round after round, on the
built-in SmolLM2 GGUF (Q4_1/Q8_0 as stored: the JIT dequantizing GEMV) and on the GPT-2-small
shape with random weights in fp32 (the blocked fp32 GEMV); and, where the `ctranslate2` package is
installed, CTranslate2 on the same exported GPT-2 weights in the same rounds, forced to the same
ISA (CT2_FORCE_CPU_ISA). Prints JSON (medians, ratios to the best ISA, every run); names the CPU.

  .venv/bin/python bench/isa_decode.py [--models builtin,demo] [--isas avx512,avx2,generic]
                                       [--threads 2] [--new-tokens 32] [--rounds 5] [--no-ct2]
                                       [--batch 32] [--out bench/results/FILE.json]

With --batch N the GPT-2 shape also decodes N copies of the prompt at once under each ISA, ours
(`servelab-cli bench batch-sweep --demo`) and CTranslate2's (`generate_batch`, a step's time taken
from its per-step callback), in the same rounds: keys demo/ours-bN/ISA and demo/ct2-bN/ISA.

A decode step is the median of a run's per-token times after the first (the prefill); a run's
figure is that median; the reported figure the median over rounds, and max/min over the rounds
shows how stable a path is run to run.

The read floor: every round also measures what this machine reads per second with the same
threads (libtorch's sum over 512 MiB of fp32, and its copy for reference; this VM's bandwidth moves
by 1.5x between sessions, so the probe runs beside the decodes it is compared with) and divides
each GPT-2 decode by the time its weights take to read at that rate (`read_floor`: the bytes a step
reads, the probe's runs and each ISA's step over the floor per round, with their medians).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from bench_machine import machine, read_bandwidth
from results_meta import run_metadata, write_result

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.environ.get("SERVELAB_CLI", os.path.join(ROOT, "build", "release", "app", "servelab-cli"))
MODEL_ARGS = {"builtin": [], "demo": ["--demo"]}
PROMPT = "The quick brown fox jumped over the"


def ours(model, isa, a):
    out = subprocess.run([CLI, "bench", "kv-cache", *MODEL_ARGS[model], "--isa", isa, "--threads", str(a.threads),
                          "--new-tokens", str(a.new_tokens), "--repeats", "1", "--prompt", PROMPT, "--json"],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    e = r["engine"]
    cpu = e["cpu"]
    assert cpu["isa"] == isa, (cpu["isa"], isa)
    info = {"gemm": e["gemm"], "kernels": cpu["kernels"], "quantization": e.get("quantization")}
    if e.get("architecture") == "gpt2" and e.get("dtype") == "fp32":
        # A decode step reads every parameter once but the position table (one row of it): the
        # blocked GEMV's copy of the tied head is resident beside the embedding, but a step reads
        # one of the two whole and one row of the other.
        c = e["config"]
        info["weight_bytes_read_per_step"] = 4 * (e["parameters"] - c["n_positions"] * c["n_embd"])
    return statistics.median(r["cache_ms"][1:]), info


def bandwidth(a):
    """The read floor's probe (bench_machine.read_bandwidth: libtorch's sum and copy over 512 MiB)."""
    return read_bandwidth(a.threads, mib=512, repeats=5)


# CTranslate2 in a child process (its ISA is read once, from the environment, at import).
CT2_CHILD = r"""
import json, os, sys, time, ctranslate2
path, threads, n, ids = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
vocab = json.load(open(path + "/vocabulary.json"))
gen = ctranslate2.Generator(path, device="cpu", compute_type="float32", intra_threads=threads, inter_threads=1)
prompt = [vocab[i] for i in ids]
list(gen.generate_tokens(prompt, max_length=2, min_length=2))  # warm
t, steps = time.perf_counter(), []
for _ in gen.generate_tokens(prompt, max_length=n, min_length=n, end_token=[]):
    now = time.perf_counter()
    steps.append((now - t) * 1e3)
    t = now
print(json.dumps({"step_ms": steps}), flush=True)
os._exit(0)  # the generator's worker threads abort the interpreter's own teardown
"""

def ours_batch(isa, a):
    out = subprocess.run([CLI, "bench", "batch-sweep", "--demo", "--isa", isa, "--threads", str(a.threads),
                          "--batch-sizes", str(a.batch), "--new-tokens", str(a.new_tokens), "--repeats", "1",
                          "--prompt", PROMPT, "--json"], check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    assert r["engine"]["cpu"]["isa"] == isa, (r["engine"]["cpu"]["isa"], isa)
    (point,) = r["points"]
    return point["decode_step_ms"], {"gemm": r["engine"]["gemm"], "kernels": r["engine"]["cpu"]["kernels"]}


# A batch of the same prompt; the callback fires once per step and batch row, so row 0's times
# mark the steps (the first includes the prompt).
CT2_BATCH_CHILD = r"""
import json, os, statistics, sys, time, ctranslate2
path, threads, n, ids, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]), int(sys.argv[5])
vocab = json.load(open(path + "/vocabulary.json"))
gen = ctranslate2.Generator(path, device="cpu", compute_type="float32", intra_threads=threads, inter_threads=1)
prompts = [[vocab[i] for i in ids]] * batch
gen.generate_batch(prompts, max_length=2, min_length=2, beam_size=1, include_prompt_in_result=False)  # warm
stamps = []
def step(s):
    if s.batch_id == 0:
        stamps.append(time.perf_counter())
    return False
gen.generate_batch(prompts, max_length=n, min_length=n, end_token=[], beam_size=1, include_prompt_in_result=False,
                   callback=step)
steps = [(b - a) * 1e3 for a, b in zip(stamps, stamps[1:])]
print(json.dumps({"step_ms": steps}), flush=True)
os._exit(0)
"""


def ct2_batch(model_dir, isa, ids, a):
    env = dict(os.environ, CT2_FORCE_CPU_ISA=CT2_ISA[isa])
    p = subprocess.run([sys.executable, "-c", CT2_BATCH_CHILD, model_dir, str(a.threads), str(a.new_tokens),
                        json.dumps(ids), str(a.batch)], capture_output=True, text=True, env=env)
    if p.returncode:
        raise RuntimeError(f"CTranslate2 batch ({isa}) failed: {p.stderr.strip()[-2000:]}")
    return statistics.median(json.loads(p.stdout)["step_ms"])


CT2_ISA = {"avx512": "AVX512", "avx2": "AVX2", "generic": "GENERIC"}


def ct2(model_dir, isa, ids, a):
    env = dict(os.environ, CT2_FORCE_CPU_ISA=CT2_ISA[isa])
    p = subprocess.run([sys.executable, "-c", CT2_CHILD, model_dir, str(a.threads), str(a.new_tokens),
                        json.dumps(ids)], capture_output=True, text=True, env=env)
    if p.returncode:
        raise RuntimeError(f"CTranslate2 ({isa}) failed: {p.stderr.strip()[-2000:]}")
    out = p.stdout
    steps = json.loads(out)["step_ms"]
    return statistics.median(steps[1:])


def prepare_ct2(work):
    """GPT-2 small with our demo weights as a HF folder, converted by ct2-transformers-converter."""
    hf, ct = os.path.join(work, "demo-hf"), os.path.join(work, "demo-ct2")
    subprocess.run([CLI, "export-demo", "--out", hf], check=True, capture_output=True)
    conv = os.path.join(os.path.dirname(sys.executable), "ct2-transformers-converter")
    subprocess.run([conv, "--model", hf, "--output_dir", ct, "--quantization", "float32", "--force"], check=True,
                   capture_output=True)
    toks = subprocess.run([CLI, "tokenize", "--demo", "--json", PROMPT], check=True, capture_output=True,
                          text=True).stdout
    return ct, json.loads(toks.splitlines()[0])["ids"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="builtin,demo")
    ap.add_argument("--isas", default="avx512,avx2,generic")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-ct2", action="store_true", help="skip CTranslate2 even where it is installed")
    ap.add_argument("--batch", type=int, default=0, help="also decode this many rows at once (GPT-2 shape)")
    ap.add_argument("--out", help="also write the result in the results schema to this file (bench/results/...)")
    a = ap.parse_args()
    meta = run_metadata(sys.argv, threads=a.threads) if a.out else None
    m = machine()
    order = ["avx512", "avx2", "generic"]
    isas = [i for i in a.isas.split(",") if order.index(i) >= order.index(m["isa"])]
    models = a.models.split(",")
    try:
        import ctranslate2  # noqa: F401
        have_ct2 = not a.no_ct2
    except ImportError:
        have_ct2 = False
    with tempfile.TemporaryDirectory() as work:
        ct_dir, ids = prepare_ct2(work) if have_ct2 and "demo" in models else (None, None)
        runs, kernels = {}, {}
        for model in models:  # warm the file cache and each path once
            for isa in isas:
                ours(model, isa, a)
        probes = []
        for _ in range(a.rounds):
            probes.append(bandwidth(a))
            for model in models:
                for isa in isas:
                    ms, k = ours(model, isa, a)
                    runs.setdefault(f"{model}/ours/{isa}", []).append(ms)
                    kernels[f"{model}/ours/{isa}"] = k
                    if ct_dir and model == "demo" and isa != "generic":
                        runs.setdefault(f"demo/ct2/{isa}", []).append(ct2(ct_dir, isa, ids, a))
                    if a.batch and model == "demo" and isa != "generic":
                        key = f"demo/ours-b{a.batch}/{isa}"
                        ms, k = ours_batch(isa, a)
                        runs.setdefault(key, []).append(ms)
                        kernels[key] = k
                        if ct_dir:
                            runs.setdefault(f"demo/ct2-b{a.batch}/{isa}", []).append(ct2_batch(ct_dir, isa, ids, a))
    result = {}
    for key, v in runs.items():
        med = statistics.median(v)
        result[key] = {"decode_ms_median": med, "max_over_min": max(v) / min(v), "runs": v,
                       **({"engine": kernels[key]} if key in kernels else {})}
    for key, r in result.items():
        model, engine, isa = key.split("/")
        best = result.get(f"{model}/ours/{isas[0]}")
        if best and engine == "ours":  # batch-1 paths against the best ISA's
            r["over_" + isas[0]] = r["decode_ms_median"] / best["decode_ms_median"]
        peer = f"{model}/{engine.replace('ours', 'ct2')}/{isa}"
        if engine.startswith("ours") and peer in result:
            r["over_ct2_same_isa"] = r["decode_ms_median"] / result[peer]["decode_ms_median"]
    floor = {"probe": "libtorch sum over 512 MiB fp32 (read) and copy_ (read + write), median of 5, per round",
             "read_gb_s_runs": [p["read_gb_s"] for p in probes], "copy_gb_s_runs": [p["copy_gb_s"] for p in probes]}
    for isa in isas:
        key = f"demo/ours/{isa}"
        if key in result and "weight_bytes_read_per_step" in kernels[key]:
            nbytes = kernels[key]["weight_bytes_read_per_step"]
            floor["bytes_read_per_step"] = nbytes
            ratios = [ms / (nbytes / (p["read_gb_s"] * 1e9) * 1e3) for ms, p in zip(result[key]["runs"], probes)]
            floor[f"{key}/over_read_floor_runs"] = ratios
            floor[f"{key}/over_read_floor_median"] = statistics.median(ratios)
    doc = {"machine": {**m, "threads": a.threads, "load_average_end": os.getloadavg()[0]}, "new_tokens": a.new_tokens,
           "rounds": a.rounds, "batch": a.batch, "isas": isas,
           "ct2": "ctranslate2 (CT2_FORCE_CPU_ISA per ISA)" if ct_dir else "not run",
           "statistic": "median over rounds of each run's median decode step (prefill excluded)",
           "results": result, "read_floor": floor}
    print(json.dumps(doc, indent=2))
    if a.out:  # the results schema (docs/benchmarks-schema.md): the same figures under "results"
        summary = [{"label": f"{key} decode step, median of {a.rounds} rounds", "value": round(r["decode_ms_median"], 2),
                    "unit": "ms", "verdict": "info"} for key, r in result.items()]
        # A verdict needs rounds to take a median over and a machine that was not busy at the start.
        judged = a.rounds >= 3 and meta["load_average_start"] < (meta["cpu_count"] or 1)
        summary += [{"label": f"{k.rsplit('/', 1)[0]} over the read floor, median of rounds", "value": round(v, 3),
                     "unit": "x", "target": "<= 1.2",
                     "verdict": ("met" if v <= 1.2 else "missed") if judged else "not a verdict"}
                    for k, v in floor.items() if k.endswith("/over_read_floor_median")]
        write_result(a.out, meta, {"benchmark": "isa-decode", "results": doc, "summary": summary})


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Quantization (issue 5's targets): every mode under every execution, each timed side by side
with fp32 in the same process. Prints JSON.

  [SERVELAB_CLI=build/release/app/servelab-cli] .venv/bin/python bench/quantization.py [--threads 2]
      [--repeats 3] [--plot docs/figures/quantization.png] [--quick]

For each execution (jit, native, dequant-once) one `servelab-cli quantize` run measures its modes:
for every mode, fp32 and the mode alternate --repeats times (batch-1 decode steps and a batch of 32
rows), so each ratio comes from one process on one machine state. Memory is exact (bytes held);
the batch-1 floor is the bytes of weights one decode step reads over the copy bandwidth measured
in the same run. The built-in model has random weights: timings and memory are real, text is noise.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.environ.get("SERVELAB_CLI", os.path.join(ROOT, "build", "release", "app", "servelab-cli"))

MODES = {
    "jit": "zp-uint8,int8-channel,int4-g32,int4-g64,int4-g128,fp16,bf16",
    "native": "int8-channel,int4-g64,fp16,bf16",
    "dequant-once": "zp-uint8,int8-channel,int4-g64",
}


def run(execution, modes, a):
    args = [CLI, "quantize", "--threads", str(a.threads), "--mode", modes, "--exec", execution,
            "--repeats", str(a.repeats), "--json"]
    if a.quick:
        args += ["--new-tokens", "4", "--batch", "8"]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def row(m):
    s = m.get("speed", {})
    mem = m["memory"]
    return {
        "mode": m["mode"], "exec": m["exec"], "kernel": m["kernel"],
        "weights_fraction_of_fp32": mem["fraction_of_fp32"],
        "resident_bytes": mem["resident_bytes"],
        "resident_fraction_of_fp32": mem["resident_fraction_of_fp32"],
        "max_abs_error": m["error"]["max_abs"], "kl_mean": m["logits"]["kl_mean"],
        "top1_agreement": m["logits"]["top1_agreement"],
        "decode_ms": s.get("decode_ms"), "fp32_decode_ms": s.get("fp32_decode_ms"),
        "decode_speedup": s.get("decode_speedup"), "floor_ms": s.get("floor_ms"),
        "fp32_floor_ms": s.get("fp32_floor_ms"),
        "batch_tokens_per_s": s.get("batch_tokens_per_s"),
        "fp32_batch_tokens_per_s": s.get("fp32_batch_tokens_per_s"), "batch_ratio": s.get("batch_ratio"),
    }


def targets(rows):
    by = {}
    for r in rows:
        by.setdefault(r["mode"], []).append(r)
    int8 = by.get("int8-channel", [])
    out = {
        "int8_channel_weights_fraction (<= 0.27)": int8[0]["weights_fraction_of_fp32"] if int8 else None,
        "int4_g64_weights_fraction (<= 0.16)": by["int4-g64"][0]["weights_fraction_of_fp32"] if "int4-g64" in by else None,
        "int8_best_batch1_decode_speedup (>= 1.3)": max((r["decode_speedup"] for r in int8
                                                         if r["exec"] in ("jit", "native")), default=None),
        "slowest_mode_at_batch32 (each mode's best execution; ratio >= 0.667 means at most 1.5x slower)": None,
    }
    worst = None
    for mode, rs in by.items():
        if mode == "none":
            continue
        best = max(r["batch_ratio"] for r in rs if r["batch_ratio"] is not None)
        if worst is None or best < worst[1]:
            worst = (mode, best)
    out["slowest_mode_at_batch32 (each mode's best execution; ratio >= 0.667 means at most 1.5x slower)"] = worst
    return out


def plot(rows, path, footnote):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    best = {}
    for r in rows:
        if r["mode"] == "none" or r["decode_speedup"] is None:
            continue
        b = best.get(r["mode"])
        if b is None or r["decode_speedup"] > b["decode_speedup"]:
            best[r["mode"]] = r
    modes = list(best)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), dpi=150)
    xs = range(len(modes))
    ax1.bar([x - 0.2 for x in xs], [best[m]["fp32_decode_ms"] for m in modes], 0.4, color="#999", label="fp32")
    ax1.bar([x + 0.2 for x in xs], [best[m]["decode_ms"] for m in modes], 0.4, color="#1f77b4", label="mode")
    ax1.scatter([x + 0.2 for x in xs], [best[m]["floor_ms"] for m in modes], marker="_", s=400, color="#d62728",
                zorder=3, label="memory floor")
    ax1.set_xticks(list(xs), [f"{m}\n{best[m]['exec']}" for m in modes], fontsize=7)
    ax1.set_ylabel("batch-1 decode step (ms)")
    ax1.legend(fontsize=7)
    ax1.set_title("Decode at batch 1 (lower is better)", fontsize=9)
    ax2.bar([x - 0.2 for x in xs], [best[m]["fp32_batch_tokens_per_s"] for m in modes], 0.4, color="#999",
            label="fp32")
    ax2.bar([x + 0.2 for x in xs], [best[m]["batch_tokens_per_s"] for m in modes], 0.4, color="#2ca02c",
            label="mode")
    ax2.set_xticks(list(xs), [f"{m}\n{best[m]['exec']}" for m in modes], fontsize=7)
    ax2.set_ylabel("tokens/s, batch of 32")
    ax2.legend(fontsize=7)
    ax2.set_title("Batched throughput (higher is better)", fontsize=9)
    fig.text(0.01, 0.005, footnote, fontsize=6, color="#555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="jit,native,dequant-once", help="executions to run")
    ap.add_argument("--plot", help="PNG: batch-1 decode and batched throughput per mode (best execution)")
    ap.add_argument("--quick", action="store_true", help="fewer tokens and a smaller batch (smoke run)")
    a = ap.parse_args()
    if not os.path.exists(CLI):
        sys.exit(f"bench/quantization.py: {CLI} not found; build first (scripts/build release)")
    out = {"machine": {"threads": a.threads, "cpu_count": os.cpu_count()}, "repeats": a.repeats, "runs": {}}
    rows = []
    for execution in a.only.split(","):
        r = run(execution, MODES[execution], a)
        out["runs"][execution] = {"copy_bandwidth_gbs": r["copy_bandwidth_gbs"], "engine_gemm": r["engine"]["gemm"]}
        rows += [row(m) for m in r["modes"] if m["mode"] != "none" or execution == a.only.split(",")[0]]
    out["rows"] = rows
    out["targets"] = targets(rows)
    if a.plot:
        plot(rows, a.plot, "bench/quantization.py --threads %d --repeats %d (built-in model, CPU)" % (a.threads, a.repeats))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

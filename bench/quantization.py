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
    args = [CLI, "quantize", "--demo", "--threads", str(a.threads), "--mode", modes, "--exec", execution,
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
    """The issue's targets. Speed counts only executions that keep the weights quantized (jit,
    native): dequantize-once runs the fp32 model again."""
    by = {}
    for r in rows:
        by.setdefault(r["mode"], []).append(r)
    live = {m: [r for r in rs if r["exec"] in ("jit", "native") and r["batch_ratio"] is not None]
            for m, rs in by.items() if m != "none"}
    best_batch = {m: max(rs, key=lambda r: r["batch_ratio"]) for m, rs in live.items() if rs}
    return {
        "int8_channel_weights_fraction (<= 0.27)": by["int8-channel"][0]["weights_fraction_of_fp32"],
        "int4_g64_weights_fraction (<= 0.16)": by["int4-g64"][0]["weights_fraction_of_fp32"],
        "int8_best_batch1_decode_speedup (>= 1.3)": max(r["decode_speedup"] for r in live["int8-channel"]),
        "batch32_ratio_per_mode (best of jit/native; >= 0.667 means at most 1.5x slower)":
            {m: [r["exec"], r["batch_ratio"]] for m, r in best_batch.items()},
    }


def plot(rows, path, footnote):
    """Per mode: fp32 beside each execution that keeps the weights quantized (jit, native).
    Dequantize-once is left out: at run time it is the fp32 model again."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    execs = [("jit", "#1f77b4"), ("native", "#ff7f0e")]
    cell = {(r["mode"], r["exec"]): r for r in rows if r["decode_ms"] is not None}
    modes = [m for m in dict.fromkeys(r["mode"] for r in rows) if m != "none"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.2), dpi=150)
    w = 0.27
    # A very slow cell (torch's int4 CPU kernel) would flatten the others: the decode axis stops
    # at twice the slowest fp32 step, and taller bars are clipped there with their value on them.
    cap = 2 * max(r["fp32_decode_ms"] for r in cell.values())
    for ax, key, fkey, label in ((ax1, "decode_ms", "fp32_decode_ms", "batch-1 decode step (ms)"),
                                 (ax2, "batch_tokens_per_s", "fp32_batch_tokens_per_s", "tokens/s, batch of 32")):
        for i, m in enumerate(modes):
            ref = [cell[(m, e)][fkey] for e, _ in execs if (m, e) in cell]
            ax.bar(i - w, sorted(ref)[len(ref) // 2], w, color="#999", label="fp32 (same run)" if i == 0 else None)
            for k, (e, color) in enumerate(execs):
                r = cell.get((m, e))
                if r is None:
                    continue
                ax.bar(i + k * w, r[key], w, color=color, label=e)
                if key == "decode_ms" and r[key] > cap:  # clipped: its value printed on the bar
                    ax.text(i + k * w, cap * 0.97, "%.0f ms" % r[key], ha="center", va="top", fontsize=6,
                            rotation=90, color="white")
                if key == "decode_ms":
                    ax.plot([i + k * w - w / 2, i + k * w + w / 2], [r["floor_ms"]] * 2, color="#d62728", lw=2,
                            label="memory floor" if (i, k) == (0, 0) else None)
        ax.set_xticks(range(len(modes)), modes, fontsize=7)
        if key == "decode_ms":
            ax.set_ylim(0, cap)
        ax.set_ylabel(label)
        handles, labels = ax.get_legend_handles_labels()
        seen = {}
        for h, l in zip(handles, labels):
            seen.setdefault(l, h)
        ax.legend(seen.values(), seen.keys(), fontsize=7)
    ax1.set_title("Decode at batch 1 (lower is better; red: weight bytes / copy bandwidth)", fontsize=8)
    ax2.set_title("Batched throughput (higher is better)", fontsize=8)
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
    ap.add_argument("--from", dest="from_json", help="redraw --plot from a saved output instead of measuring")
    a = ap.parse_args()
    if a.from_json:
        saved = json.load(open(a.from_json))
        plot(saved["rows"], a.plot, saved.get("command", "bench/quantization.py"))
        return
    if not os.path.exists(CLI):
        sys.exit(f"bench/quantization.py: {CLI} not found; build first (scripts/build release)")
    command = "bench/quantization.py --threads %d --repeats %d (built-in model, CPU)" % (a.threads, a.repeats)
    out = {"command": command, "machine": {"threads": a.threads, "cpu_count": os.cpu_count()},
           "repeats": a.repeats, "runs": {}}
    rows = []
    for execution in a.only.split(","):
        r = run(execution, MODES[execution], a)
        out["runs"][execution] = {"copy_bandwidth_gbs": r["copy_bandwidth_gbs"], "engine_gemm": r["engine"]["gemm"]}
        rows += [row(m) for m in r["modes"] if m["mode"] != "none" or execution == a.only.split(",")[0]]
    out["rows"] = rows
    out["targets"] = targets(rows)
    if a.plot:
        plot(rows, a.plot, command)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()

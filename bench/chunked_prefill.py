#!/usr/bin/env python3
"""Chunked prefill, measured: `servelab-cli bench chunked-prefill` (streams decoding when a long
prompt arrives, served without and with a token budget, rounds interleaved in one process) with the
machine it ran on, the command, and the verdict against the targets: the decoding streams' max and
p99 inter-token latency at least 3x lower with the budget, total throughput within 10%.

  .venv/bin/python bench/chunked_prefill.py --out bench/results/chunked-prefill-....json -- \
      --streams 4 --stream-tokens 128 --long-prompt-tokens 1500 --max-num-batched-tokens 128 --rounds 3
"""
import argparse
import json
import subprocess
import sys

from bench_machine import machine


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/release/app/servelab-cli")
    ap.add_argument("--out", help="also write the JSON here (bench/results/...)")
    ap.add_argument("--brief", action="store_true", help="drop the runs' per-request detail")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    extra = a.args[1:] if a.args[:1] == ["--"] else a.args
    cmd = [a.cli, "bench", "chunked-prefill", *extra, "--json"]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    r["machine"] = {**machine(), "threads": r.get("engine", {}).get("threads")}
    r["command"] = " ".join(["servelab-cli", "bench", "chunked-prefill", *extra, "--json"])
    r["targets"] = {
        "itl_max_cut_at_least_3x": r["itl_max_cut"] >= 3,
        "itl_p99_cut_at_least_3x": r["itl_p99_cut"] >= 3,
        "throughput_within_10pct": abs(r["throughput_ratio"] - 1) <= 0.10,
        "same_tokens": r["same_tokens"],
    }
    text = json.dumps(r, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    u, c = r["unchunked"], r["chunked"]
    print(f"ITL max {u['itl_max_ms']:.1f} -> {c['itl_max_ms']:.1f} ms ({r['itl_max_cut']:.2f}x), "
          f"p99 {u['itl_p99_ms']:.1f} -> {c['itl_p99_ms']:.1f} ms ({r['itl_p99_cut']:.2f}x), "
          f"long TTFT {u['long_ttft_ms']:.0f} -> {c['long_ttft_ms']:.0f} ms, "
          f"throughput {r['throughput_ratio']:.3f}x, targets {r['targets']}", file=sys.stderr)
    print(text)


if __name__ == "__main__":
    main()

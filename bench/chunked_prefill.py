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

from results_meta import run_metadata, write_result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/release/app/servelab-cli")
    ap.add_argument("--out", help="also write the result file here (bench/results/..., the results schema)")
    ap.add_argument("--brief", action="store_true", help="drop the runs' per-request detail")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    extra = a.args[1:] if a.args[:1] == ["--"] else a.args
    cmd = [a.cli, "bench", "chunked-prefill", *extra, "--json"]
    r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    threads = r.get("engine", {}).get("threads")
    # The machine's read bandwidth, measured after the run (the probe would disturb it before).
    meta = run_metadata(["servelab-cli", "bench", "chunked-prefill", *extra, "--json"], threads=threads)
    if a.brief:
        r.pop("runs", None)
    targets = [
        ("decoding streams' max ITL cut", r["itl_max_cut"], "x", ">= 3x", r["itl_max_cut"] >= 3),
        ("decoding streams' p99 ITL cut", r["itl_p99_cut"], "x", ">= 3x", r["itl_p99_cut"] >= 3),
        ("total throughput, budget / none", r["throughput_ratio"], "x", "within 10%",
         abs(r["throughput_ratio"] - 1) <= 0.10),
        ("long request's TTFT, budget / none", r["long_ttft_cost"], "x", None, None),
    ]
    summary = [{"label": label, "value": round(value, 3), "unit": unit, "target": target,
                "verdict": "info" if ok is None else "met" if ok else "missed"}
               for label, value, unit, target, ok in targets]
    summary.append({"label": "greedy tokens equal both ways", "value": r["same_tokens"], "unit": "",
                    "target": "true", "verdict": "met" if r["same_tokens"] else "missed"})
    text = json.dumps(r, indent=1)
    if a.out:
        write_result(a.out, meta, {"benchmark": "chunked-prefill", "results": r, "summary": summary})
    u, c = r["unchunked"], r["chunked"]
    print(f"ITL max {u['itl_max_ms']:.1f} -> {c['itl_max_ms']:.1f} ms ({r['itl_max_cut']:.2f}x), "
          f"p99 {u['itl_p99_ms']:.1f} -> {c['itl_p99_ms']:.1f} ms ({r['itl_p99_cut']:.2f}x), "
          f"long TTFT {u['long_ttft_ms']:.0f} -> {c['long_ttft_ms']:.0f} ms, "
          f"throughput {r['throughput_ratio']:.3f}x", file=sys.stderr)
    print(text)


if __name__ == "__main__":
    main()

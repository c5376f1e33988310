#!/usr/bin/env python3
"""Speculative decoding, measured: `servelab-cli bench speculative` (plain decoding and each
drafter at each k on the same requests, rounds interleaved in one process) for both workloads
(input-grounded: the answers copy their prompts; open-ended) at batch 1 and at several concurrent
requests, with the machine it ran on and the verdict against the target: n-gram speculation on the
grounded workload at batch 1 at least 1.5x plain decoding's tokens/s with identical greedy tokens.
The draft model and the open-ended workload are reported as they come out: a slowdown is a finding.

Each drafter runs in its own call against plain decoding of the model it drafts for: prompt lookup
against the model as loaded, the draft model against its pairing's target (for the built-in GGUF,
the file dequantized to fp32: see `generate --help`, --draft-model).

  .venv/bin/python bench/speculative.py --out bench/results/speculative-cpu2-2026-11-27.json -- \\
      --k 2,4,8 --new-tokens 64 --rounds 2 --requests 8
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
    ap.add_argument("--workloads", default="grounded,open")
    ap.add_argument("--concurrency", default="1,8", help="requests at once, comma-separated")
    ap.add_argument("--methods", default="ngram,draft", help="drafters, comma-separated, one call each")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then options of `bench speculative`")
    a = ap.parse_args()
    extra = a.args[1:] if a.args[:1] == ["--"] else a.args
    results, summary, threads = [], [], None
    for workload, conc, method in [(w, c, m) for w in a.workloads.split(",") for c in a.concurrency.split(",")
                                   for m in a.methods.split(",")]:
        cmd = [a.cli, "bench", "speculative", "--workload", workload, "--concurrency", conc, "--methods", method,
               *extra, "--json"]
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        threads = r.get("engine", {}).get("threads", threads)
        results.append(r)
        plain = r["runs"][0]
        for run in r["runs"][1:]:
            label = f"{workload}, {conc} at once, {run['method']} k {run['k']}: speed-up"
            target = ok = None
            if workload == "grounded" and conc == "1" and run["method"] == "ngram":
                target, ok = ">= 1.5x, same greedy tokens", run["speedup"] >= 1.5 and run["identical_greedy_tokens"]
            summary.append({"label": label, "value": round(run["speedup"], 3), "unit": "x", "target": target,
                            "verdict": "info" if ok is None else "met" if ok else "missed"})
            print(f"{workload:8s} x{conc:>2s} {run['method']:5s} k {run['k']}: {run['tokens_per_s']:7.1f} tok/s "
                  f"(plain {plain['tokens_per_s']:.1f}) {run['speedup']:.2f}x, acceptance "
                  f"{100 * run['acceptance_rate']:.0f}%, {run['mean_accepted_length']:.2f} tokens/verify, "
                  f"greedy {'same' if run['identical_greedy_tokens'] else 'DIFFERENT'}", file=sys.stderr)
        same = all(run["identical_greedy_tokens"] for run in r["runs"])
        summary.append({"label": f"{workload}, {conc} at once, {method}: greedy tokens equal plain decoding's",
                        "value": same, "unit": "", "target": "true", "verdict": "met" if same else "missed"})
    # The machine's read bandwidth, measured after the runs (the probe would disturb them before).
    meta = run_metadata(sys.argv, threads=threads)
    if a.out:
        write_result(a.out, meta, {"benchmark": "speculative", "results": results, "summary": summary})
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""How OpenMP's wait policy shapes a 2-thread decode step, on a quiet CPU and on one shared with
busy processes (issue 21's "bimodal JIT timing": the same command ran at about 20 ms per step in
some runs and 75-84 ms in others).

libgomp reads OMP_WAIT_POLICY / GOMP_SPINCOUNT once, when it is loaded. Each variant below is one
setting of them for a whole `servelab-cli generate --json` run; the variants alternate run by run,
and the contended rounds start --busy processes that spin on the CPU (as a compiler or a browser
tab would) for the duration of the run. Per variant and condition: the median decode step of each
run, the median over runs, and max/min over runs (the issue's stability target: under 1.3).

  .venv/bin/python bench/omp_wait.py [--cli build/release/app/servelab-cli] [--model-args ""]
                                     [--threads 2] [--busy 2] [--new-tokens 48] [--rounds 5]
"""
import argparse
import json
import multiprocessing
import os
import shlex
import statistics
import subprocess

from bench_machine import machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS = {
    "unset": {},
    "passive": {"OMP_WAIT_POLICY": "passive"},
    "active": {"OMP_WAIT_POLICY": "active"},
    "spin-10k": {"GOMP_SPINCOUNT": "10000"},
}


def spin():
    while True:
        pass


def run_once(a, env_extra):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(env_extra)
    out = subprocess.run([a.cli, "generate", *shlex.split(a.model_args), "--threads", str(a.threads), "--prompt",
                          "What is deep learning?", "--max-new-tokens", str(a.new_tokens), "--greedy", "--json"],
                         check=True, capture_output=True, text=True, env=env).stdout
    steps = json.loads(out)["step_ms"][1:]  # decode steps (the first is the prefill)
    return statistics.median(steps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/release/app/servelab-cli"))
    ap.add_argument("--model-args", default="")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--busy", type=int, default=2, help="spinning processes in the contended rounds")
    ap.add_argument("--new-tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    a = ap.parse_args()
    names = a.variants.split(",")
    runs = {c: {n: [] for n in names} for c in ("quiet", "contended")}
    start = machine()
    run_once(a, {})  # warm the file cache
    for _ in range(a.rounds):
        for condition in ("quiet", "contended"):
            busy = []
            if condition == "contended":
                busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(a.busy)]
                for p in busy:
                    p.start()
            try:
                for n in names:
                    runs[condition][n].append(run_once(a, VARIANTS[n]))
            finally:
                for p in busy:
                    p.terminate()
                    p.join()
    summary = {}
    for condition, by in runs.items():
        summary[condition] = {n: {"median_step_ms": statistics.median(v), "max_over_min": max(v) / min(v)}
                              for n, v in by.items()}
        base = summary[condition]["unset"]["median_step_ms"] if "unset" in by else None
        if base:
            for n in by:
                summary[condition][n]["ratio_to_unset"] = summary[condition][n]["median_step_ms"] / base
    print(json.dumps({"machine": start, "load_average_end": os.getloadavg()[0], "threads": a.threads,
                      "busy_processes": a.busy, "new_tokens": a.new_tokens, "rounds": a.rounds,
                      "cli": a.cli, "model_args": a.model_args, "summary": summary, "runs_step_ms": runs},
                     indent=1))


if __name__ == "__main__":
    main()

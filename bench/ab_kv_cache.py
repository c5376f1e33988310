#!/usr/bin/env python3
"""Two builds of servelab-cli side by side: per-token decode latency of `bench kv-cache`, the two
binaries alternating run by run on the same machine, medians over --rounds. Prints JSON. For
checking that a change to the model, a kernel, the KV cache or the scheduler did not slow decode.

  .venv/bin/python bench/ab_kv_cache.py --a OLD_CLI --b NEW_CLI [--a-args ""] [--b-args "--demo"]
                                        [--device cpu|cuda] [--dtype fp32] [--threads 2]
                                        [--new-tokens 32] [--rounds 7] [--batch N]

With --batch N the figure is the decode step of N rows at once (`bench batch-sweep --batch-sizes N`,
N copies of one prompt) instead of batch-1 `bench kv-cache`: for changes to the batched kernels.
With --prefill-tokens N it is the prefill of an N-token prompt (`bench kv-cache --prompt-tokens N`,
the median of 3 repeats per run): for changes to the products of a few dozen to a few hundred rows.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
from bench_machine import machine


BATCH_PROMPT = "The quick brown fox jumps over the lazy dog while the cat sleeps on a warm windowsill."


def step_ms(cli, extra, a):
    if a.batch:
        out = subprocess.run([cli, "bench", "batch-sweep", *extra, "--device", a.device, "--dtype", a.dtype,
                              "--threads", str(a.threads), "--batch-sizes", str(a.batch), "--new-tokens",
                              str(a.new_tokens), "--repeats", "1", "--prompt", BATCH_PROMPT, "--json"],
                             check=True, capture_output=True, text=True).stdout
        (point,) = json.loads(out)["points"]
        return point["decode_step_ms"]
    if a.prefill_tokens:
        out = subprocess.run([cli, "bench", "kv-cache", *extra, "--device", a.device, "--dtype", a.dtype,
                              "--threads", str(a.threads), "--prompt-tokens", str(a.prefill_tokens), "--new-tokens",
                              "2", "--repeats", "3", "--json"], check=True, capture_output=True, text=True).stdout
        return json.loads(out)["cache_ms"][0]  # the prefill step
    out = subprocess.run([cli, "bench", "kv-cache", *extra, "--device", a.device, "--dtype", a.dtype, "--threads",
                          str(a.threads), "--new-tokens", str(a.new_tokens), "--repeats", "1", "--json"],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return statistics.median(r["cache_ms"][1:])  # decode steps (the first is the prefill)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--a-args", default="")
    ap.add_argument("--b-args", default="")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batch", type=int, default=0, help="decode N rows at once (bench batch-sweep)")
    ap.add_argument("--prefill-tokens", type=int, default=0, help="time the prefill of an N-token prompt instead")
    a = ap.parse_args()
    if a.batch and a.prefill_tokens:
        ap.error("--batch and --prefill-tokens measure different steps: give one")
    runs = {"a": [], "b": []}
    step_ms(a.a, shlex.split(a.a_args), a)  # warm both (file cache, CUDA context)
    step_ms(a.b, shlex.split(a.b_args), a)
    for _ in range(a.rounds):
        runs["a"].append(step_ms(a.a, shlex.split(a.a_args), a))
        runs["b"].append(step_ms(a.b, shlex.split(a.b_args), a))
    ma, mb = statistics.median(runs["a"]), statistics.median(runs["b"])
    key = "prefill_ms_median" if a.prefill_tokens else "decode_ms_median"
    print(json.dumps({"machine": {**machine(), "threads": a.threads, "cpu_count": os.cpu_count()},
                      "device": a.device, "dtype": a.dtype, "new_tokens": a.new_tokens, "rounds": a.rounds,
                      "batch": a.batch or 1, "prefill_tokens": a.prefill_tokens or None,
                      "a": {"cli": a.a, "args": a.a_args, key: ma, "runs": runs["a"]},
                      "b": {"cli": a.b, "args": a.b_args, key: mb, "runs": runs["b"]},
                      "b_over_a": mb / ma,
                      "statistic": "median of per-run prefill (median of 3)" if a.prefill_tokens
                      else "median of per-run median decode step"}, indent=2))


if __name__ == "__main__":
    main()

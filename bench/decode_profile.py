#!/usr/bin/env python3
"""Where a CPU decode step's time goes, by kind of work, with the fused decode program and without.

For each mode (`--fused-decode on` and `off`, interleaved over rounds) this samples
`servelab-cli generate` with Linux perf (`perf record -e cpu-clock`, every thread) twice: once
generating N tokens and once generating 1, from the same prompt. The difference is N - 1 decode
steps and nothing else (loading, the prompt's prefill and the process's start cancel out), so each
category's CPU milliseconds per decode step are (samples(N) - samples(1)) / frequency / (N - 1).
Categories come from each sample's symbol and library:

  weight products    our GEMV/GEMM kernels (gemv_*, tile_kernel*, channels_*, the head included)
  attention          our decode attention (simd_item, portable_item*)
  norms, rotary, operands   fused_cpu's rows, the products' operand preparation, ours otherwise
  OpenMP             libgomp: threads spinning or sleeping at barriers, waking for regions
  libtorch           libtorch and c10: operator dispatch, element-wise kernels, tensor bookkeeping
  allocator          malloc / free
  system             the kernel: page faults, scheduling
  other              the rest

CPU time counts both threads: a step of 3 ms on 2 threads is up to 6 CPU ms. Needs `perf`
(Debian's linux-perf) with the cpu-clock software event; prints one JSON document, and writes the
results schema with --out.

  .venv/bin/python bench/decode_profile.py --rounds 3 --out bench/results/decode-profile-....json
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CATEGORIES = [
    ("weight products", lambda dso, sym: dso.startswith("servelab") and re.search(r"gemv_|tile_kernel|channels_(vnni|avx2)|int4_step|int8_step", sym)),
    ("attention", lambda dso, sym: dso.startswith("servelab") and re.search(r"simd_item|portable_item", sym)),
    ("norms, rotary, operands", lambda dso, sym: dso.startswith("servelab")),
    ("OpenMP", lambda dso, sym: "libgomp" in dso),
    ("libtorch", lambda dso, sym: "libtorch" in dso or "libc10" in dso),
    ("allocator", lambda dso, sym: "libc" in dso and re.search(r"malloc|free|_int_|unlink_chunk", sym)),
    ("system", lambda dso, sym: "kernel" in dso),
]


def categorize(dso, sym):
    for name, test in CATEGORIES:
        if test(dso, sym):
            return name
    return "other"


def profile(cli, args, tokens, freq, workdir):
    data = os.path.join(workdir, "perf.data")
    cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(freq), "-o", data, "--", cli, "generate",
           "--max-new-tokens", str(tokens), "--greedy", *args]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {p.stderr[-2000:]}")
    rep = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,symbol", "-g", "none",
                          "--stdio", "-F", "sample,dso,symbol"], capture_output=True, text=True)
    out = {}
    for line in rep.stdout.splitlines():
        m = re.match(r"\s*(\d+)\s+(\S+)\s+\[[.k]\]\s+(.*)$", line)
        if not m:
            continue
        samples, dso, sym = int(m.group(1)), m.group(2), m.group(3).strip()
        c = categorize(dso, sym)
        out[c] = out.get(c, 0) + samples
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/release/app/servelab-cli"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=300, help="decode steps sampled per run (N)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--freq", type=int, default=4000, help="perf samples per second per thread")
    ap.add_argument("--prompt", default="Once upon a time there was a")
    ap.add_argument("--args", default="", help="more servelab-cli arguments for both modes (--isa avx2, ...)")
    ap.add_argument("--out", default=None, help="also write the results schema to this path")
    a = ap.parse_args()
    if not shutil.which("perf"):
        sys.exit("decode_profile: needs Linux perf (Debian: linux-perf) on PATH")
    meta = None
    if a.out:
        from results_meta import run_metadata
        meta = run_metadata(sys.argv, threads=a.threads, probe_bandwidth=False)
    base = ["--threads", str(a.threads), "--prompt", a.prompt, *a.args.split()]
    modes = {"fused": ["--fused-decode", "on"], "op_by_op": ["--fused-decode", "off"]}
    per_round = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(a.rounds):
            for mode, extra in modes.items():
                long = profile(a.cli, base + extra, a.tokens, a.freq, tmp)
                short = profile(a.cli, base + extra, 1, a.freq, tmp)
                ms = {c: (long.get(c, 0) - short.get(c, 0)) * 1000.0 / a.freq / (a.tokens - 1)
                      for c in set(long) | set(short)}
                per_round[mode].append(ms)
                print(f"round {r + 1} {mode}: " + ", ".join(f"{c} {v:.3f}" for c, v in sorted(ms.items())),
                      file=sys.stderr, flush=True)
    names = [c for c, _ in CATEGORIES] + ["other"]
    table = {mode: {c: round(statistics.median(rd.get(c, 0.0) for rd in rounds), 4) for c in names}
             for mode, rounds in per_round.items()}
    for mode in table:
        table[mode]["total"] = round(sum(table[mode][c] for c in names), 4)
    doc = {"unit": "CPU ms per decode step (all threads), median over rounds",
           "how": __doc__.split("\n\n")[1], "tokens": a.tokens, "rounds": a.rounds, "freq": a.freq,
           "command": ["servelab-cli", "generate", *base, "--fused-decode", "on|off"],
           "per_step_cpu_ms": table, "raw": per_round}
    print(json.dumps(doc, indent=1))
    if a.out:
        from results_meta import write_result
        rows = []
        for c in names + ["total"]:
            rows.append({"label": f"{c}: CPU ms per decode step, op by op -> fused",
                         "value": f"{table['op_by_op'][c]:.3f} -> {table['fused'][c]:.3f}", "unit": "ms",
                         "target": "", "verdict": "info"})
        write_result(a.out, meta, {"benchmark": "decode-profile", "results": doc, "summary": rows})


if __name__ == "__main__":
    main()

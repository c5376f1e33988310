#!/usr/bin/env python3
"""The decode step's weight products kernel by kernel, two builds side by side.

Runs `bench_decode_gemv` (bench/cpp/decode_gemv.cpp: every matrix of the built-in GGUF through the
JIT decode GEMVs, fp32 activations and int8 ones) from build A and build B in turn, A B B A over
rounds, under each ISA asked for (SERVELAB_ISA), and reports each kernel's median milliseconds per
pass over the model's matrices, and B / A measured round by round. One thread by default: the
kernels' own speed, without the second core's share of the memory bus.

  .venv/bin/python bench/decode_gemv.py --a /tmp/old/bench_decode_gemv \\
      --b build/release/bench/cpp/bench_decode_gemv --rounds 3 --out bench/results/decode-gemv-....json
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from results_meta import run_metadata, write_result


def run(binary, isa, rows, threads, repeats):
    env = dict(os.environ, SERVELAB_ISA=isa)
    out = subprocess.run([binary, "--rows", rows, "--threads", str(threads), "--repeats", str(repeats)],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="bench_decode_gemv of the build to compare against")
    ap.add_argument("--b", default="build/release/bench/cpp/bench_decode_gemv")
    ap.add_argument("--isa", default="avx512,avx2")
    ap.add_argument("--rows", default="1,2,4,8,32")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    meta = run_metadata(sys.argv, threads=a.threads)
    per_isa, summary = {}, []
    for isa in a.isa.split(","):
        runs = {"a": [], "b": []}
        for r in range(a.rounds):
            for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
                runs[side].append(run(getattr(a, side), isa, a.rows, a.threads, a.repeats))
        table = {}
        for row_index, rows in enumerate(int(x) for x in a.rows.split(",")):
            entry = {}
            for kernel in runs["b"][0]["rows"][row_index]["median_ms"]:
                ms = {side: [run_["rows"][row_index]["median_ms"][kernel] for run_ in runs[side]] for side in runs}
                ratio = statistics.median(b / a_ for a_, b in zip(ms["a"], ms["b"]))
                entry[kernel] = {"a_ms": statistics.median(ms["a"]), "b_ms": statistics.median(ms["b"]),
                                 "b_over_a": round(ratio, 3)}
            table[str(rows)] = entry
            if rows in (1, 4):
                summary.append({"label": f"{isa}: the model's products at {rows} row(s), fp32 activations (jit), B / A",
                                "value": entry["jit"]["b_over_a"], "unit": "x", "target": "", "verdict": "info"})
        first = runs["b"][0]
        per_isa[isa] = {"file_bytes": first["file_bytes"], "matrices": first["matrices"],
                        "floor_ms": statistics.median(x["floor_ms"] for x in runs["b"]),
                        "read_bandwidth_gbs": statistics.median(x["read_bandwidth_gbs"] for x in runs["b"]),
                        "by_rows": table, "raw": runs}
    doc = {"benchmark": "decode-gemv",
           "results": {"a": a.a, "b": a.b, "threads": a.threads, "rounds": a.rounds, "order": "A B, then B A, alternating",
                       "unit": "ms per pass over every matrix of the built-in model, median", "isa": per_isa},
           "summary": summary}
    if a.out:
        write_result(a.out, meta, doc)
    print(json.dumps({"isa": {k: v["by_rows"] for k, v in per_isa.items()}, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()

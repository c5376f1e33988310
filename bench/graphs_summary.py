#!/usr/bin/env python3
"""One line per figure of a bench/compare_hf.py --graphs-ab result: decode with CUDA graphs, without
them (every kernel launched eagerly) and HF transformers, measured interleaved in one run.

  python3 bench/graphs_summary.py RESULT.json
"""
import json
import sys


def main():
    d = json.load(open(sys.argv[1]))
    dec = d["decode_bs1"]
    print("%s on %s %s: bs1 graphs %.3f ms, eager %.3f ms (graphs x%.2f), HF %.3f ms (ours x%.2f), floor %.3f ms" % (
        d["model"]["name"], d["machine"].get("gpu"), d["dtype"], dec["ours_ms"], dec.get("ours_eager_ms", 0),
        dec.get("graphs_speedup", 0), dec["hf_ms"], dec["speedup_vs_hf"], d["memory_floor"]["decode_floor_ms"]))
    print("  graphs:", dec.get("cuda_graphs"))
    print("  greedy parity with HF:", [p["equal"] for p in d["greedy_parity"]])
    for p in d["batch_sweep"]:
        print("  bs %3d: graphs %.1f ms, eager %.1f ms (x%.2f), HF %.1f ms; throughput vs HF x%.2f" % (
            p["batch_size"], p["ours_ms"], p.get("ours_eager_ms", 0), p.get("graphs_speedup", 0), p["hf_ms"],
            p["throughput_ratio"]))


if __name__ == "__main__":
    sys.exit(main())

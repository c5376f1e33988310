#!/usr/bin/env python3
"""One screen of `bench/paged_kv.py` results: per file the run's ratios (sooner, requests held, median
TTFT cut by prefix caching) and per method its counts and times, for reading a device run's output.

  python3 bench/paged_kv_summary.py bench/results/paged-kv-*.json
"""
import json
import sys


def main():
    for path in sys.argv[1:]:
        d = json.load(open(path))
        print("%s: paged sooner x%.2f, held x%.2f, TTFT p50 cut by caching x%.2f" % (
            path.rsplit("/", 1)[-1], d["speedup"], d["concurrency_ratio"], d["ttft_p50_cut"]))
        for m in d["methods"]:
            print("  %-24s held %2d  batch %5.2f  preemptions %2d  total %7.1f ms  TTFT p50/p99 %6.1f/%6.1f ms"
                  "  solo tokens %s" % (m["method"], m["max_running"], m["average_batch"], m["preemptions"],
                                        m["total_ms"], m["ttft_ms"]["p50"], m["ttft_ms"]["p99"],
                                        "equal" if m["same_as_solo"] else "DIFFER"))
        step = d.get("decode_step")
        if step:
            print("  decode step %d x %d: slot %.2f ms, paged in place %s, gather %.2f ms (x%.2f)" % (
                step["batch"], step["context"], step["slot_ms"],
                "%.2f ms" % step["paged_in_place_ms"] if step.get("paged_in_place_ms") else "-",
                step["paged_gather_ms"], step["gather_vs_slot"]))


if __name__ == "__main__":
    main()

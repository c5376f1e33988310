#!/usr/bin/env python3
"""Two builds of servelab-cli side by side on the course's continuous-batching mix (32 requests,
every 8th long): `bench sync-vs-continuous` (synchronous and continuous on slot KV, max batch 8)
and `bench paged-kv --budget-mb 24` (slot KV and paged KV in one budget), the two binaries
alternating run by run, medians of each method's total time and their ratio B/A over --rounds.
For checking that a change to the scheduler did not slow serving. Prints JSON.

  .venv/bin/python bench/ab_course_mix.py --a OLD_CLI --b NEW_CLI [--rounds 5] [--threads 2]
"""
import argparse
import json
import statistics
import subprocess

from bench_machine import machine


def run(cli, a):
    t = {}
    cmd = [cli, "bench", "sync-vs-continuous", "--threads", str(a.threads), "--no-naive", "--json"]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    t.update({"sync-vs-continuous: " + m["method"]: m["total_ms"] for m in out["methods"]})
    same = out.get("same_tokens")
    cmd = [cli, "bench", "paged-kv", "--threads", str(a.threads), "--requests", "32", "--budget-mb", "24",
           "--rounds", "1", "--json"]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    t.update({"paged-kv: " + m["method"]: m["total_ms"] for m in out["methods"]})
    t["paged-kv: decode step, slot KV"] = out["decode_step"]["slot_ms"]
    t["paged-kv: decode step, paged in place"] = out["decode_step"]["paged_in_place_ms"]
    return t, same and all(m.get("same_as_solo", True) for m in out["methods"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True)
    ap.add_argument("--b", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    times = {"a": {}, "b": {}}
    same = []
    for r in range(a.rounds):
        # ABBA: neither binary always runs second (a machine that slows as it warms favours the first).
        for side in (("a", "b") if r % 2 == 0 else ("b", "a")):
            t, s = run(getattr(a, side), a)
            same.append(s)
            for method, ms in t.items():
                times[side].setdefault(method, []).append(ms)
    res = {"command": "bench/ab_course_mix.py --rounds %d --threads %d" % (a.rounds, a.threads),
           "machine": machine(), "a": a.a, "b": a.b, "methods": {}, "same_tokens_every_run": all(same)}
    for method in times["a"]:
        ma, mb = statistics.median(times["a"][method]), statistics.median(times["b"][method])
        ratios = [y / x for x, y in zip(times["a"][method], times["b"][method])]
        res["methods"][method] = {"a_ms": ma, "b_ms": mb, "b_over_a": mb / ma,
                                  "b_over_a_rounds": ratios, "a_rounds": times["a"][method],
                                  "b_rounds": times["b"][method]}
    text = json.dumps(res, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()

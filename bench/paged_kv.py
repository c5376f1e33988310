#!/usr/bin/env python3
"""`servelab-cli bench paged-kv` with the machine it ran on: runs the CLI with the given arguments
(the workload, the budget, --rounds), adds the CPU model, ISA and thread count, prints the JSON
and the per-step detail left out with --brief. The CLI itself interleaves the methods' rounds and
reports medians and ratios measured in one run.

  .venv/bin/python bench/paged_kv.py --cli build/release/app/servelab-cli [--brief] -- \
      --requests 32 --budget-mb 48 --block-size 16 --rounds 3
"""
import argparse
import json
import os
import subprocess


def machine():
    cpu, flags = "unknown", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and cpu == "unknown":
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    return {"cpu": cpu, "isa": "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else "baseline",
            "cpu_count": os.cpu_count()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default="build/release/app/servelab-cli")
    ap.add_argument("--brief", action="store_true", help="drop the per-request and per-step detail")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    extra = a.args[1:] if a.args[:1] == ["--"] else a.args
    out = subprocess.run([a.cli, "bench", "paged-kv", *extra, "--json"], check=True, capture_output=True,
                         text=True).stdout
    r = json.loads(out)
    if a.brief:
        r.pop("runs", None)
    r["machine"] = {**machine(), "threads": r.get("engine", {}).get("threads")}
    r["command"] = " ".join(["servelab-cli", "bench", "paged-kv", *extra, "--json"])
    print(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()

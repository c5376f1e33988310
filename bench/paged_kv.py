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
import subprocess
from bench_machine import machine


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

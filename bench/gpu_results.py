#!/usr/bin/env python3
"""Results measured on the lent GPU machine, written here in the results schema.

The GPU machine has no git checkout of ours and cannot run bench/results_meta.py's probes the way
this machine does, so the common block is built from what its run printed (scripts/gpu-verify's
env.txt: the OS, compilers, GPU and torch) and what the caller says (the command, the commit the
tree was at). `results` holds the files it produced, as they came back.

  python3 bench/gpu_results.py --env OUT/env.txt --commit C --dirty --command "scripts/gpu-verify graphs" \\
      --benchmark cuda-graphs-decode --out bench/results/NAME.json OUT/a.json OUT/b.json [--summary ROWS.json]
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_meta import write_result  # noqa: E402


def machine_from_env(path):
    lines = open(path).read().splitlines()
    gpus = [l.split(" (UUID")[0] for l in lines if l.startswith("GPU ")]
    torch = next((l for l in lines if l.startswith("torch ")), "")
    os_name = next((l.split("=", 1)[1].strip('"') for l in lines if l.startswith("PRETTY_NAME=")), "")
    cores = next((l for l in lines if l.strip().isdigit()), None)
    return gpus, torch, os_name, int(cores) if cores else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--env", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--dirty", action="store_true", help="the tree carried had changes beyond the commit")
    ap.add_argument("--command", required=True)
    ap.add_argument("--benchmark", required=True)
    ap.add_argument("--date", required=True, help="when the run started, UTC ISO 8601")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--summary", help="a JSON list of summary rows")
    ap.add_argument("--out", required=True)
    ap.add_argument("inputs", nargs="+")
    a = ap.parse_args()
    gpus, torch, os_name, cores = machine_from_env(a.env)
    meta = {
        "command": a.command.split(),
        "commit": a.commit,
        "dirty": a.dirty,
        "machine": f"the lent GPU machine: {', '.join(gpus)}, {cores} CPU cores, {os_name}, {torch}",
        "cpu": None,
        "isa": None,
        "isa_source": "not recorded on the GPU machine",
        "cpu_count": cores,
        "threads": a.threads,
        "load_average_start": None,
        "read_bandwidth": {"read_gb_s": None, "why": "a GPU run: each result holds the GPU's own copy bandwidth"},
        "gpus": gpus,
        "date": a.date,
    }
    results = {}
    for path in a.inputs:
        with open(path) as f:
            results[os.path.basename(path)] = json.load(f) if path.endswith(".json") else f.read()
    payload = {"benchmark": a.benchmark, "results": results}
    if a.summary:
        payload["summary"] = json.load(open(a.summary))
    write_result(a.out, meta, payload)
    print(a.out)


if __name__ == "__main__":
    sys.exit(main())

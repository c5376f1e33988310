"""One results schema for every benchmark (docs/benchmarks-schema.md).

A benchmark driver builds its common block once, when it starts, and writes its file at the end:

    from results_meta import run_metadata, write_result
    meta = run_metadata(sys.argv, threads=a.threads)
    ...
    write_result("bench/results/NAME-cpu2-quiet-2026-11-27.json", meta, {
        "benchmark": "isa-decode",
        "results": {...},                       # free-form, the driver's own
        "summary": [{"label": "SmolLM2 batch-1 decode, avx512", "value": 5.9, "unit": "ms",
                     "target": "<= llama.cpp", "verdict": "met"}],
    })

`bench/make_benchmarks_md.py` indexes every such file in docs/benchmarks.md (and `--check`s it).
Nothing here needs torch, except the bandwidth probe, which runs in a child process and is
recorded as absent (with the reason) where torch is missing.
"""
import datetime
import json
import os
import subprocess
import sys

from bench_machine import cpu_info, description, engine_isa, gpu_names, read_bandwidth

SCHEMA = "servelab-bench/1"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

META_KEYS = ("command", "commit", "dirty", "machine", "cpu", "isa", "isa_source", "cpu_count", "threads",
             "load_average_start", "read_bandwidth", "gpus", "date")
SUMMARY_KEYS = ("label", "value", "unit", "target", "verdict")
VERDICTS = ("met", "missed", "not a verdict", "info")


def _git(*args):
    try:
        p = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def run_metadata(command, threads=None, probe_bandwidth=True, probe_mib=256, probe_repeats=3, python=None):
    """The common block of a result file: how it was run, on what, from which commit, when.

    command: the command line as run (sys.argv, or the list a driver runs); a string list.
    threads: the threads the benchmark uses (also the bandwidth probe's), None if it does not say.
    probe_bandwidth: measure the read bandwidth now (a second or two; needs torch in `python`).
    """
    cpu, flags = cpu_info()
    isa, isa_source = engine_isa(flags)
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    if probe_bandwidth:
        try:
            bw = read_bandwidth(threads or os.cpu_count() or 1, mib=probe_mib, repeats=probe_repeats, python=python)
            bw = {"read_gb_s": round(bw["read_gb_s"], 2), "copy_gb_s": round(bw["copy_gb_s"], 2),
                  "how": f"libtorch sum (read) and copy_ (read + write) over {probe_mib} MiB of fp32, "
                         f"{threads or os.cpu_count()} threads, median of {probe_repeats}; 1 GB = 1e9 bytes"}
        except (OSError, subprocess.CalledProcessError, ValueError, KeyError) as e:
            bw = {"read_gb_s": None, "why": f"probe failed: {type(e).__name__}"}
    else:
        bw = {"read_gb_s": None, "why": "not probed"}
    return {
        "command": [str(c) for c in command],
        "commit": commit,
        "dirty": None if status is None else bool(status),
        "machine": description(cpu, flags),
        "cpu": cpu,
        "isa": isa,
        "isa_source": isa_source,
        "cpu_count": os.cpu_count(),
        "threads": threads,
        "load_average_start": round(os.getloadavg()[0], 2),
        "read_bandwidth": bw,
        "gpus": gpu_names(),
        "date": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
    }


def validate(doc):
    """The problems of a result document against the schema (an empty list when it conforms)."""
    problems = []
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    if doc.get("schema") != SCHEMA:
        problems.append(f'"schema" is {doc.get("schema")!r}, expected {SCHEMA!r}')
    meta = doc.get("meta")
    if not isinstance(meta, dict):
        problems.append('"meta" is missing or not an object')
    else:
        for k in META_KEYS:
            if k not in meta:
                problems.append(f'"meta" lacks "{k}"')
    if not isinstance(doc.get("benchmark"), str) or not doc.get("benchmark"):
        problems.append('"benchmark" is missing or not a non-empty string')
    if "results" not in doc:
        problems.append('"results" is missing')
    summary = doc.get("summary", [])
    if not isinstance(summary, list):
        problems.append('"summary" is not a list')
    else:
        for i, row in enumerate(summary):
            if not isinstance(row, dict) or "label" not in row or "value" not in row:
                problems.append(f'"summary"[{i}] needs at least "label" and "value"')
                continue
            extra = set(row) - set(SUMMARY_KEYS)
            if extra:
                problems.append(f'"summary"[{i}] has unknown keys {sorted(extra)}')
            if row.get("verdict") not in (None, *VERDICTS):
                problems.append(f'"summary"[{i}]["verdict"] is {row["verdict"]!r}, one of {VERDICTS} expected')
    return problems


def write_result(path, metadata, payload):
    """Writes {"schema", "meta", "benchmark", "results", "summary"?} to `path` (indented, sorted as
    given), after checking it against the schema. payload: {"benchmark", "results", "summary"?}."""
    doc = {"schema": SCHEMA, "meta": metadata, **payload}
    problems = validate(doc)
    if problems:
        raise ValueError(f"{path}: " + "; ".join(problems))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    return doc


if __name__ == "__main__":
    # `python bench/results_meta.py [--no-probe]`: print this machine's common block.
    print(json.dumps(run_metadata(sys.argv, probe_bandwidth="--no-probe" not in sys.argv), indent=2))

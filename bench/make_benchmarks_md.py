#!/usr/bin/env python3
"""Writes docs/benchmarks.md from docs/benchmarks.intro.md (hand-written) and bench/results/.

    python3 bench/make_benchmarks_md.py           # rewrite docs/benchmarks.md
    python3 bench/make_benchmarks_md.py --check   # exit 1, one line, if it is out of date

The generated part indexes every file in bench/results: files of the results schema
(docs/benchmarks-schema.md, `"schema": "servelab-bench/1"`) with their summary rows and common
block; the older files (JSON of each driver's own shape, test logs, notes) grouped by benchmark,
newest first, with what each holds and which of the schema's fields it lacks. Nothing is
inferred: a field is "present" only where the file itself holds it. Standard library only.
"""
import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_meta import SCHEMA, validate  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
INTRO = os.path.join(ROOT, "docs", "benchmarks.intro.md")
OUT = os.path.join(ROOT, "docs", "benchmarks.md")

# Older files: their group by file-name prefix, with the driver that wrote them.
GROUPS = [
    (r"^serve-vs-llama-server", "Our server against llama.cpp's server", "bench/serve.py"),
    (r"^serve-one-stream", "One server stream against `generate`", "bench/serve_one_stream.py"),
    (r"^serve-structured", "Structured output's cost per token", "bench/serve_structured.py"),
    (r"^serve-lost-connection", "Server: lost connections under load (notes)", "hand-written notes"),
    (r"^serving-tab-stream", "Serving tab: one stream, two builds", "bench/serving_tab_stream.py"),
    (r"^paged-kv", "Paged KV against slot KV", "bench/paged_kv.py"),
    (r"^isa-decode", "Decode per ISA, the read floor", "bench/isa_decode.py"),
    (r"^avx2-tile-shapes", "AVX2 tile shapes", "hand-run microbenchmark"),
    (r"^jit-int8-bimodal", "jit-int8 timing under AVX2 (notes)", "hand-written notes"),
    (r"^omp_wait", "OpenMP wait policy", "bench/omp_wait.py"),
    (r"^llama_cpp", "Ours against llama.cpp on the same GGUF", "bench/llama_cpp.py"),
    (r"^ab-", "A/B of two builds", "bench/ab_kv_cache.py (or bench/serving_tab_stream.py)"),
    (r"^(kv-cache|kv_cache)", "KV-cache timing runs", "servelab-cli bench kv-cache"),
    (r"^linear_kernels", "Linear kernels against the copy floor", "bench/cpp (bench_linear_kernels)"),
    (r"^gui_vs_cli", "The app against the CLI", "bench/gui_vs_cli.py"),
    (r"^compare_hf", "Ours against Hugging Face transformers", "bench/compare_hf.py"),
    (r"^course-benchmark", "The course's 100 x 64 benchmark", "servelab-cli bench course-benchmark"),
    (r"^batching", "The batching lesson's workloads", "bench/batching.py"),
    (r"^quantization", "Quantization modes", "bench/quantization.py"),
    (r"^lora", "Multi-LoRA strategies", "bench/lora.py"),
    (r"^(cuda-parity|gpu-ctest|llama-oracle-cuda)", "GPU test runs (logs)", "scripts/gpu-verify"),
]

# The schema's common fields, and the keys under which older files hold them.
FIELDS = [
    ("command", ("command", "commands")),
    ("commit", ("commit",)),
    ("CPU", ("cpu",)),
    ("ISA", ("isa", "best_isa")),
    ("bandwidth", ("read_gb_s", "read_gb_s_runs", "copy_bandwidth_gb_s", "copy_bandwidth_gbs", "copy_gb_s_runs",
                   "memory_floor")),
    ("GPU", ("gpus", "gpu")),
    ("date", ("date",)),
]

DATE = re.compile(r"(\d{4}-\d{2}-\d{2})([a-z]?)")


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def keys_within(obj, depth=3):
    """Every key of non-empty value in the dicts of obj, to `depth` levels (lists looked through)."""
    found = set()
    if depth < 0:
        return found
    if isinstance(obj, dict):
        for k, v in obj.items():
            if v not in (None, "", [], {}):
                found.add(k)
            found |= keys_within(v, depth - 1)
    elif isinstance(obj, list):
        for v in obj[:4]:
            found |= keys_within(v, depth - 1)
    return found


def file_date(name):
    m = DATE.search(name)
    return (m.group(1), m.group(2)) if m else ("", "")


def describe_legacy(path, name):
    """(what it holds, fields lacking) of an older result file, from its content alone."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        doc = json.loads(raw)
    except ValueError:
        lines = [ln.strip() for ln in raw.decode("utf-8", "replace").splitlines() if ln.strip()]
        first = lines[0] if lines else "(empty)"
        if len(first) > 110:
            first = first[:107] + "..."
        return f"text, {len(lines)} lines; begins: `{cell(first)}`", "all (not JSON)"
    keys = keys_within(doc)
    lacking = [field for field, aliases in FIELDS if not keys & set(aliases)]
    what = ""
    if isinstance(doc, dict):
        for k in ("what", "benchmark", "experiment", "note", "bench"):
            v = doc.get(k)
            if isinstance(v, str) and v:
                what = v if len(v) <= 110 else v[:107] + "..."
                break
        top = ", ".join(f"`{k}`" for k in list(doc)[:8]) + (", ..." if len(doc) > 8 else "")
    else:
        top = f"a JSON {type(doc).__name__}"
    desc = (f"{cell(what)}; keys {top}" if what else f"keys {top}")
    return desc, ", ".join(lacking) if lacking else "none"


def render_schema_rows(docs):
    out = []
    for name, doc in docs:
        m = doc["meta"]
        bw = (m.get("read_bandwidth") or {}).get("read_gb_s")
        common = (f"{cell(m.get('date', ''))[:10]} | `{cell(doc['benchmark'])}` | {cell(m.get('machine', ''))} | "
                  f"{cell(m.get('isa', ''))} | {'—' if bw is None else f'{bw} GB/s'} | "
                  f"`{(m.get('commit') or '?')[:7]}`{' (dirty)' if m.get('dirty') else ''}")
        rows = doc.get("summary") or [{"label": "(no summary rows)", "value": ""}]
        for r in rows:
            value = f"{r.get('value', '')} {r.get('unit', '')}".strip()
            out.append(f"| {common} | {cell(r['label'])} | {cell(value)} | {cell(r.get('target', ''))} | "
                       f"{cell(r.get('verdict', ''))} | [{name}](../bench/results/{name}) |")
    return out


def generate():
    with open(INTRO) as f:
        intro = f.read().rstrip("\n")
    names = sorted(n for n in os.listdir(RESULTS) if not n.startswith("."))
    schema_docs, legacy, errors = [], {}, []
    for name in names:
        path = os.path.join(RESULTS, name)
        doc = None
        if name.endswith(".json"):
            try:
                with open(path) as f:
                    doc = json.load(f)
            except ValueError:
                doc = None
        if isinstance(doc, dict) and "schema" in doc:
            problems = validate(doc)
            if problems:
                errors.append(f"bench/results/{name}: " + "; ".join(problems))
                continue
            schema_docs.append((name, doc))
            continue
        group = next((g for g in GROUPS if re.search(g[0], name)), (None, "Other files", "unknown"))
        legacy.setdefault(group[1], (group[2], []))[1].append(name)
    if errors:
        raise SystemExit("make_benchmarks_md: " + errors[0] + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""))

    def newest_first(name):
        d, suffix = file_date(name)
        return (d, suffix, name)

    schema_docs.sort(key=lambda nd: (nd[1]["meta"].get("date", ""), nd[0]), reverse=True)
    lines = [
        "<!-- Generated by bench/make_benchmarks_md.py from docs/benchmarks.intro.md and bench/results/.",
        "     Edit those, then run the script; `--check` (a CTest) fails while this file is out of date. -->",
        "",
        intro,
        "",
        "## Index of bench/results (generated)",
        "",
        f"Every file in `bench/results/`, {len(names)} in all. Files of the results schema "
        f"([benchmarks-schema.md](benchmarks-schema.md), `\"schema\": \"{SCHEMA}\"`) come first, one line per "
        "summary row; then the older files, written before the schema, grouped by benchmark and newest first. "
        "For each older file the table says what it holds and which of the schema's common fields it lacks "
        "(command, commit, CPU, ISA, read bandwidth, GPU, date), judged from its content alone: the date in "
        "its file name and the commits some names carry are not counted as recorded, and nothing missing is "
        "filled in.",
        "",
        "### Results in the schema",
        "",
    ]
    if schema_docs:
        lines += ["| date (UTC) | benchmark | machine | ISA | read bandwidth | commit | label | value | target | "
                  "verdict | file |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        lines += render_schema_rows(schema_docs)
    else:
        lines.append("None yet: benchmarks write them through `bench/results_meta.py`.")
    lines += ["", "### Older result files", ""]
    order = {g[1]: i for i, g in enumerate(GROUPS)}
    for title in sorted(legacy, key=lambda t: order.get(t, len(order))):
        driver, files = legacy[title]
        files.sort(key=newest_first, reverse=True)
        lines += [f"#### {title}", "", f"Source: {driver}; {len(files)} file{'s' if len(files) != 1 else ''}.",
                  "", "| date in name | file | what it holds | lacks |", "|---|---|---|---|"]
        for name in files:
            what, lacking = describe_legacy(os.path.join(RESULTS, name), name)
            d, suffix = file_date(name)
            lines.append(f"| {d}{suffix} | [{name}](../bench/results/{name}) | {what} | {lacking} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/benchmarks.md is not what this writes")
    a = ap.parse_args()
    text = generate()
    if a.check:
        try:
            with open(OUT) as f:
                current = f.read()
        except OSError:
            current = None
        if current != text:
            print("docs/benchmarks.md is out of date with bench/results/ or docs/benchmarks.intro.md: "
                  "run `python3 bench/make_benchmarks_md.py` and commit the result")
            return 1
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

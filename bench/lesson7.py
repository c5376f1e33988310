#!/usr/bin/env python3
"""The course's lesson-7 ("LoRAX") code, unchanged, against `servelab-cli serve` on the built-in
model with its built-in adapters (docs/adapters.md), and what it returned.

The code is tests/serve/lesson7_lorax.py (the course's text, its notebook sections marked), run one
section after another in one namespace as the notebook runs its cells, through PyPI's lorax-client:
the three `run_with_adapter` calls, the three adapters streaming at once, the structured-output
bonus, and the NER bonus, whose cells run one top-level statement at a time as notebook cells (a
cell's last expression is shown; an exception is recorded and the next cell still runs). The
Hugging Face cache is an empty folder: `adapter_source="hub"` finds the adapters because the server
registered them.

  .venv/bin/python bench/lesson7.py [--cli build/release/app/servelab-cli] [--threads 2]
      [--out bench/results/lesson7-builtin-adapters-cpu2-DATE.json]
"""
import argparse
import ast
import asyncio
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from results_meta import run_metadata, write_result  # noqa: E402
LESSON = os.path.join(ROOT, "tests", "serve", "lesson7_lorax.py")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def sections():
    out, name, lines = {}, None, []
    for line in open(LESSON):
        if line.startswith("# %% "):
            if name:
                out[name] = "".join(lines)
            name, lines = line[5:].strip(), []
        elif name:
            lines.append(line)
    out[name] = "".join(lines)
    return out


def run_code(code, ns, name):
    """Runs code as one notebook cell: stdout captured, the last expression's value returned (the
    notebook shows it), an exception recorded instead of raised."""
    tree = ast.parse(code)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    out = io.StringIO()
    record = {"cell": name}
    try:
        with contextlib.redirect_stdout(out):
            r = eval(compile(tree, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT), ns)
            if asyncio.iscoroutine(r):
                asyncio.run(r)
            if last is not None:
                value = eval(compile(last, name, "eval"), ns)
                record["value"] = repr(value)
    except Exception as e:  # noqa: BLE001 - the notebook shows the error and goes on
        record["error"] = f"{type(e).__name__}: {e}"
    raw = out.getvalue()
    # The concurrent cells print each stream's tokens in its own colour (format_text): split them.
    streams = {}
    for code, text in re.findall(r"\x1b\[(3[0-9])m(.*?)\x1b\[0m", raw, re.S):
        streams[code] = streams.get(code, "") + text
    if streams:
        record["streams_by_colour"] = streams
    record["stdout"] = ANSI.sub("", raw)
    if name.startswith("NER") and "resp" in ns:
        record["resp.generated_text"] = ns["resp"].generated_text
        record["resp.finish_reason"] = ns["resp"].details.finish_reason
        record["resp.generated_tokens"] = ns["resp"].details.generated_tokens
    return record



def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "release", "app", "servelab-cli"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    meta = run_metadata([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:], threads=a.threads,
                        probe_bandwidth=False)
    tmp = tempfile.mkdtemp(prefix="lesson7-")
    hub = os.path.join(tmp, "empty-hf-hub")
    os.makedirs(hub)
    env = {**os.environ, "HF_HUB_CACHE": hub, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([a.cli, "serve", "--port", "0", "--threads", str(a.threads)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    line = [None]
    t = threading.Thread(target=lambda: line.__setitem__(0, proc.stdout.readline()), daemon=True)
    t.start()
    t.join(300)
    m = re.search(r"(http://\S+:\d+)", line[0] or "")
    if not m:
        proc.kill()
        sys.exit(f"lesson7.py: the server did not start: {line[0]!r} {proc.stderr.read()}")
    with open(os.path.join(tmp, "utils.py"), "w") as f:
        f.write(f"endpoint_url = {m.group(1)!r}\nheaders = {{}}\n")
    sys.path.insert(0, tmp)
    os.environ.setdefault("MPLBACKEND", "Agg")
    cells = sections()
    ns = {"__name__": "lesson7"}
    records = []
    started = time.time()
    try:
        for name in ["Setup", "Continuous Batching", "Multi-LoRA", "Bonus: Structured Generation"]:
            records.append(run_code(cells[name], ns, name))
        # The NER bonus cell by cell: each top-level statement that calls the server or shows a value
        # ends a notebook cell in the course.
        tree = ast.parse(cells["Bonus: Structured Generation (NER)"])
        src = cells["Bonus: Structured Generation (NER)"].splitlines(keepends=True)
        chunk = []
        for node in tree.body:
            chunk.append("".join(src[node.lineno - 1:node.end_lineno]))
            if isinstance(node, ast.Expr):
                records.append(run_code("".join(chunk), ns, f"NER cell {len(records) - 3}"))
                chunk = []
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    stderr = proc.stderr.read()
    result = {"server": f"servelab-cli serve --port 0 --threads {a.threads} (HF_HUB_CACHE empty)",
              "server_ready": line[0].strip(),
              "server_adapters_line": next((ln for ln in stderr.splitlines() if "built-in adapters" in ln), ""),
              "seconds": round(time.time() - started, 1), "cells": records}
    last = records[-1]
    ok = "error" not in last and last["cell"].startswith("NER")
    summary = [{"label": "last cell: predibase/conllpp without a schema, json.loads of its answer",
                "value": "succeeds" if ok else last.get("error", "did not run"), "verdict": "met" if ok else "missed"},
               {"label": "cells that raised", "value": sum("error" in r for r in records), "verdict": "info"}]
    if a.out:
        write_result(a.out, meta, {"benchmark": "lesson7", "results": result, "summary": summary})
    for r in records:
        print(f"---- {r['cell']}")
        if r["stdout"].strip():
            print(r["stdout"].rstrip())
        for k, v in r.get("streams_by_colour", {}).items():
            print(f"[stream {k}] {v!r}")
        if "value" in r and r["value"] != "None":
            print(f"=> {r['value']}")
        if "resp.generated_text" in r:
            print(f"resp.generated_text ({r['resp.finish_reason']}, {r['resp.generated_tokens']} tokens): "
                  f"{r['resp.generated_text']!r}")
        if "error" in r:
            print(f"!! {r['error']}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What structured output costs per token in servelab-cli serve: for each workload a fresh server
(the built-in SmolLM2-135M-Instruct, 49,152 tokens, unless --model/--demo), a few requests one at a
time, then the server's own counters (/info structured_output: xgrammar's bitmask fill and our
word-by-word masking, timed around each token) and the decode time per token with and without the
constraint (same prompts, greedy, wall clock of whole requests divided by their tokens).

  .venv/bin/python bench/serve_structured.py --cli build/release/app/servelab-cli [--out FILE.json]
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import requests

PERSON = {"properties": {"name": {"maxLength": 10, "title": "Name", "type": "string"},
                         "age": {"title": "Age", "type": "integer"}},
          "required": ["name", "age"], "title": "Person", "type": "object"}
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                         "population": {"type": "integer", "minimum": 0},
                                         "tags": {"type": "array", "maxItems": 3,
                                                  "items": {"type": "string", "maxLength": 12}}},
        "required": ["city", "population", "tags"]}
PROMPTS = ["Create a person description for me", "Describe Paris as JSON.", "A city and its tags:",
           "Give me a JSON record.", "Write JSON about a famous scientist."]
WORKLOADS = {  # name: response_format or None, max_new_tokens
    "person (course schema)": ({"type": "json_object", "schema": PERSON}, 48),
    "person without maxLength": ({"type": "json_object", "schema": {
        **PERSON, "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}}, 48),
    "city (nested, bounded)": ({"type": "json_object", "schema": CITY}, 96),
    "any JSON (json_object)": ({"type": "json_object"}, 64),
    "unconstrained": (None, 64),
}


def start(cli, model_args):
    p = subprocess.Popen([cli, "serve", "--port", "0", "--threads", "2", "--max-total-tokens", "1024", *model_args],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = [None]
    t = threading.Thread(target=lambda: line.__setitem__(0, p.stdout.readline()), daemon=True)
    t.start()
    t.join(180)
    m = re.search(r"http://\S+", line[0] or "")
    if not m:
        p.kill()
        sys.exit(f"server did not start: {line[0]!r}")
    return p, m.group(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", default=None)
    ap.add_argument("--demo", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    model_args = ["--demo"] if args.demo else (["--model", args.model] if args.model else [])
    results = {}
    for name, (fmt, max_new) in WORKLOADS.items():
        proc, url = start(args.cli, model_args)
        try:
            tokens, seconds, finished = 0, 0.0, 0
            for prompt in PROMPTS:
                params = {"max_new_tokens": max_new, "details": True}
                if fmt:
                    params["response_format"] = fmt
                t0 = time.perf_counter()
                r = requests.post(url + "/generate", json={"inputs": prompt, "parameters": params}, timeout=300)
                seconds += time.perf_counter() - t0
                r.raise_for_status()
                d = r.json()["details"]
                tokens += d["generated_tokens"]
                finished += d["finish_reason"] == "eos_token"
            so = requests.get(url + "/info", timeout=30).json()["structured_output"]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        results[name] = {"requests": len(PROMPTS), "tokens": tokens, "ended_on_eos": finished,
                         "ms_per_token_wall": 1000 * seconds / tokens, **{k: so.get(k) for k in (
                             "masked_tokens", "mask_us_p50", "mask_us_p99", "mask_us_max", "fill_us_p50", "fill_us_p99",
                             "mask_us_mean", "fill_us_mean", "compile_ms",
                             "grammars_compiled")}}
        print(f"{name:26s} {json.dumps(results[name])}", flush=True)
    out = {"machine": f"{os.cpu_count()} CPUs", "model": model_args or ["built-in SmolLM2-135M-Instruct Q4_1"],
           "date": time.strftime("%Y-%m-%d"), "results": results}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()

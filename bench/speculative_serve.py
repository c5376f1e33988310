#!/usr/bin/env python3
"""Speculative decoding through the server: our `servelab-cli serve` plainly and with prompt lookup
(`--speculative ngram`) at each k, driven by our load generator over OpenAI completions, 1 and 8
clients in a closed loop, servers taking turns within each round; medians over rounds.

The prompts are the speculative bench's (`servelab-cli bench speculative --workload W`, which lists
them in its JSON, already in the model's chat template), written as a JSONL dataset with a fixed
output length and sent as they are to /v1/completions; requests are greedy
(temperature 0), so every configuration must return the same texts. The server's /metrics give the
acceptance (vllm:spec_decode_*). Prints JSON; --out writes the results schema.

  .venv/bin/python bench/speculative_serve.py --k 2,4 --rounds 3 --out bench/results/speculative-serve-....json
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_meta import run_metadata, write_result  # noqa: E402
from serve import free_port, start  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def prompts_of(cli, workload, count):
    out = subprocess.run([cli, "bench", "speculative", "--workload", workload, "--requests", str(count), "--k", "2",
                          "--methods", "ngram", "--new-tokens", "1", "--rounds", "1", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["prompts"]


def spec_metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    got = {}
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        m = re.search(rf"^vllm:spec_decode_{name}(?:_total)?(?:{{[^}}]*}})? ([0-9.e+]+)$", text, re.M)
        got[name] = float(m.group(1)) if m else None
    return got


def loadgen(cli, url, dataset, clients, requests, saved):
    p = subprocess.run([cli, "loadgen", "--url", url, "--api", "openai", "--scenario", "sweep", "--dataset",
                        "file", "--dataset-path", dataset, "--clients", str(clients), "--requests", str(requests),
                        "--save-requests", saved, "--json"],
                       capture_output=True, text=True, timeout=1800)
    if not p.stdout.strip().startswith("{"):
        raise RuntimeError(f"loadgen against {url} failed: {p.stderr.strip()}")
    level = json.loads(p.stdout)["levels"][0]
    with open(saved) as f:
        texts = {r["index"]: r["text"] for r in map(json.loads, f) if r.get("ok")}
    return level, texts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/release/app/servelab-cli"))
    ap.add_argument("--workload", default="grounded", choices=("grounded", "open"))
    ap.add_argument("--k", default="2,4")
    ap.add_argument("--clients", default="1,8")
    ap.add_argument("--requests", type=int, default=8, help="per level")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    a = ap.parse_args()
    meta = run_metadata(sys.argv, threads=a.threads)
    work = tempfile.mkdtemp(prefix="servelab-spec-serve-")
    dataset = os.path.join(work, "prompts.jsonl")
    with open(dataset, "w") as f:
        for p in prompts_of(a.cli, a.workload, a.requests):
            f.write(json.dumps({"prompt": p, "output_tokens": a.new_tokens}) + "\n")
    configs = [("plain", [])] + [(f"ngram k={k}", ["--speculative", "ngram", "--num-speculative-tokens", k])
                                 for k in a.k.split(",")]
    levels = [int(c) for c in a.clients.split(",")]
    runs = {name: {c: [] for c in levels} for name, _ in configs}
    texts = {name: {c: None for c in levels} for name, _ in configs}
    accepted = {name: [] for name, _ in configs}
    for r in range(a.rounds):
        order = configs if r % 2 == 0 else configs[::-1]
        for name, flags in order:
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            with open(os.path.join(work, "server.log"), "a") as log:
                proc = start([a.cli, "serve", "--threads", str(a.threads), "--port", str(port), "--max-batch", "8",
                              *flags], url, log)
                try:
                    for c in levels:
                        level, got = loadgen(a.cli, url, dataset, c, a.requests, os.path.join(work, "requests.jsonl"))
                        runs[name][c].append(level)
                        if texts[name][c] is None:
                            texts[name][c] = got
                    accepted[name].append(spec_metrics(url))
                finally:
                    proc.terminate()
                    proc.wait(timeout=120)
    table, summary = {}, []
    for name, _ in configs:
        table[name] = {}
        for c in levels:
            ls = runs[name][c]
            tps = [x["output_throughput"] for x in ls]
            plain = [x["output_throughput"] for x in runs["plain"][c]]
            same = sum(1 for i, t in texts[name][c].items() if texts["plain"][c].get(i) == t)
            table[name][c] = {
                "output_tokens_per_s": statistics.median(tps),
                "speedup": statistics.median(t / p for t, p in zip(tps, plain)),
                "median_ttft_ms": statistics.median(x["median_ttft_ms"] for x in ls),
                "median_tpot_ms": statistics.median(x["median_tpot_ms"] for x in ls),
                "levels_with_failed_requests": sum(x["completed"] < a.requests for x in ls),
                "texts_equal_to_plain": f"{same}/{len(texts['plain'][c])}",
            }
            if name != "plain":
                summary.append({"label": f"{a.workload}, {name}, {c} client(s) through the server: tokens/s over plain",
                                "value": round(table[name][c]["speedup"], 3), "unit": "x", "target": "",
                                "verdict": "info"})
        last = accepted[name][-1]
        if last.get("num_draft_tokens"):
            table[name]["acceptance"] = last["num_accepted_tokens"] / last["num_draft_tokens"]
    doc = {"benchmark": "speculative-serve",
           "results": {"workload": a.workload, "requests_per_level": a.requests, "new_tokens": a.new_tokens,
                       "api": "openai (/v1/completions), greedy, up to new_tokens (EOS may end a request sooner)", "rounds": a.rounds, "table": table,
                       "raw": runs},
           "summary": summary}
    if a.out:
        write_result(a.out, meta, doc)
    print(json.dumps({"table": table, "summary": summary}, indent=1))


if __name__ == "__main__":
    main()

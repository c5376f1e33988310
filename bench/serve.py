#!/usr/bin/env python3
"""Our server against llama.cpp's server on the same GGUF, under the same load generator.

Both servers run on 127.0.0.1 with the same thread count for the whole run: `servelab-cli serve`
(continuous batching, --max-batch slots) and llama.cpp's `llama-server` (its continuous batching
over --parallel slots). The load is `servelab-cli loadgen --api openai` (POST /v1/completions with
stream, temperature 0 and vLLM's ignore_eos, which both servers take, so every request gets its
whole token budget) at each concurrency level, closed loop, on a `random` dataset: prompts of
--input-len tokens of the model's own vocabulary (lengths uniform within +-25%), no two sharing a
prefix, the same prompts for both servers in a round (one seed per round), a warm-up left out of
the figures, and goodput against a stated SLO (--goodput, vLLM's/DistServe's definition: requests
a second that meet every bound). Plus the course's three streams of 100/10/10 tokens. Rounds
interleave the two servers (the order alternates per round) and every figure is the median over
rounds; the ours/theirs throughput ratio is taken per round (adjacent runs share the machine's
load at that moment) and its median reported.

Peer build: bench/build_peers (llama.cpp from llama-cpp-python's sdist, target llama-server).

Run:  .venv/bin/python bench/serve.py --rounds 2 --out bench/results/serve-vs-llama-server-<machine>-<date>.json
"""
import argparse
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results_meta import run_metadata, write_result  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEF_CLI = os.path.join(ROOT, "build/release/app/servelab-cli")
DEF_GGUF = os.path.join(ROOT, ".venv/share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf")
DEF_LLAMA = "/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-server"


def cpu_info():
    model, flags = platform.processor(), set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and model in ("", platform.processor()):
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if f in flags]
    return {"cpu": model, "isa": isa, "cores": os.cpu_count()}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=300):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url}: not ready after {timeout} s")


def start(cmd, url, log, env=None):
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    wait_ready(url, proc)
    return proc


def loadgen(cli, url, args):
    p = subprocess.run([cli, "loadgen", "--url", url, "--api", "openai", "--json", *args],
                       capture_output=True, text=True, timeout=1800)
    if not p.stdout.strip().startswith("{"):
        raise RuntimeError(f"loadgen against {url} failed: {p.stderr.strip()}")
    return json.loads(p.stdout)


LEVEL_KEYS = ("output_throughput", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms", "p50_itl_ms",
              "p99_itl_ms", "request_goodput", "total_input_tokens", "total_output_tokens", "requests", "failed")


def load_args(a, clients, requests, seed):
    """One sweep level's loadgen flags (both servers get the same, the seed included)."""
    return ["--scenario", "sweep", "--clients", str(clients), "--requests", str(requests),
            "--dataset", "random", "--input-len", str(a.input_len), "--range-ratio", "0.25",
            "--tokenizer", a.gguf, "--seed", str(seed), "--warmup", str(a.warmup),
            "--max-new-tokens", str(a.new_tokens), "--ignore-eos", "--goodput", *a.goodput.split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=DEF_CLI)
    ap.add_argument("--llama-server", default=DEF_LLAMA)
    ap.add_argument("--gguf", default=DEF_GGUF)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clients", default="1,4,16,64")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--requests-per-client", type=int, default=2, help="per level, at least 8 requests")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--slots", type=int, default=64, help="our --max-batch and llama-server's --parallel")
    ap.add_argument("--positions", type=int, default=256, help="positions per request/slot")
    ap.add_argument("--omp-wait-policy", choices=("default", "passive", "active"), default="default",
                    help="OMP_WAIT_POLICY for our server (libgomp's; llama-server has its own thread pool)")
    ap.add_argument("--quant-exec", default=None,
                    help="our server's --quant-exec (jit-int8: int8 activations, as llama-server computes)")
    ap.add_argument("--input-len", type=int, default=64, help="random dataset: prompt tokens (+-25%%)")
    ap.add_argument("--warmup", type=int, default=4, help="requests per level sent first and left out")
    ap.add_argument("--goodput", default="ttft:2000 tpot:200",
                    help="the SLO goodput counts against, loadgen's --goodput (ms)")
    ap.add_argument("--out", help="also write the results schema (docs/benchmarks-schema.md) here")
    a = ap.parse_args()
    meta = run_metadata(sys.argv, threads=a.threads)
    levels = [int(x) for x in a.clients.split(",")]

    logs = {n: open(f"/tmp/bench-serve-{n}.log", "w") for n in ("ours", "theirs")}
    ours_port, theirs_port = free_port(), free_port()
    ours_url, theirs_url = f"http://127.0.0.1:{ours_port}", f"http://127.0.0.1:{theirs_port}"
    ours_cmd = [a.cli, "serve", "--model", a.gguf, "--threads", str(a.threads), "--port", str(ours_port),
                "--max-batch", str(a.slots), "--max-queue", str(4 * a.slots),
                "--max-total-tokens", str(a.positions)] + (["--quant-exec", a.quant_exec] if a.quant_exec else [])
    theirs_cmd = [a.llama_server, "-m", a.gguf, "--threads", str(a.threads), "--threads-batch", str(a.threads),
                  "--host", "127.0.0.1", "--port", str(theirs_port), "--parallel", str(a.slots),
                  "--ctx-size", str(a.slots * a.positions), "--cont-batching"]
    servers = {}
    try:
        ours_env = {} if a.omp_wait_policy == "default" else {"OMP_WAIT_POLICY": a.omp_wait_policy}
        servers["ours"] = start(ours_cmd, ours_url, logs["ours"], ours_env)
        servers["theirs"] = start(theirs_cmd, theirs_url, logs["theirs"])
        urls = {"ours": ours_url, "theirs": theirs_url}
        raw = {"ours": [], "theirs": []}
        for r in range(a.rounds):
            order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
            for level in levels:
                n = max(8, a.requests_per_client * level)
                for who in order:
                    rep = loadgen(a.cli, urls[who], load_args(a, level, n, seed=r + 1))
                    (lv,) = rep["levels"]
                    raw[who].append({"round": r, "clients": level, **{k: v for k, v in lv.items() if k != "errors"},
                                     "errors": lv["errors"]})
                    print(f"round {r} {who} c={level}: {lv['output_throughput']:.1f} tokens/s, TTFT p50 "
                          f"{lv['p50_ttft_ms']:.0f} p99 {lv['p99_ttft_ms']:.0f} ms, TPOT p50 {lv['p50_tpot_ms']:.1f} "
                          f"p99 {lv['p99_tpot_ms']:.1f} ms, goodput {lv['request_goodput']:.2f} req/s, "
                          f"{lv['failed']} failed", file=sys.stderr, flush=True)
            for who in order:
                rep = loadgen(a.cli, urls[who], ["--scenario", "three_streams", "--ignore-eos"])
                raw[who].append({"round": r, "scenario": "three_streams", "streams": [
                    {k: s[k] for k in ("ok", "tokens", "ttft_ms", "tokens_per_s", "start_ms")} |
                    {"last_token_ms": s["start_ms"] + (s["token_ms"][-1] if s["token_ms"] else 0)}
                    for s in rep["streams"]]})
    finally:
        for p in servers.values():
            p.send_signal(signal.SIGTERM)
        for p in servers.values():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()

    def med(who, level, key):
        return statistics.median(x[key] for x in raw[who] if x.get("clients") == level)

    table = []
    for level in levels:
        row = {"clients": level}
        for who in ("ours", "theirs"):
            row[who] = {k: med(who, level, k) for k in LEVEL_KEYS}
        ratios = [o["output_throughput"] / t["output_throughput"]
                  for o in raw["ours"] if o.get("clients") == level
                  for t in raw["theirs"] if t.get("clients") == level and t["round"] == o["round"]
                  and t["output_throughput"] > 0]
        row["throughput_ratio_ours_over_theirs"] = statistics.median(ratios) if ratios else None
        table.append(row)
    three = {}
    for who in ("ours", "theirs"):
        runs = [x["streams"] for x in raw[who] if x.get("scenario") == "three_streams"]
        three[who] = [{"tokens": statistics.median(run[i]["tokens"] for run in runs),
                       "ttft_ms": statistics.median(run[i]["ttft_ms"] for run in runs),
                       "last_token_ms": statistics.median(run[i]["last_token_ms"] for run in runs)}
                      for i in range(3)]
    out = {"what": "servelab-cli serve vs llama.cpp llama-server, same GGUF and threads, servelab-cli loadgen "
                   "--api openai (closed loop), medians over interleaved rounds",
           "machine": cpu_info(), "threads": a.threads, "gguf": os.path.basename(a.gguf),
           "new_tokens": a.new_tokens, "omp_wait_policy_ours": a.omp_wait_policy,
           "slots": a.slots, "positions": a.positions, "rounds": a.rounds,
           "commands": {"ours": " ".join(ours_cmd), "theirs": " ".join(theirs_cmd),
                        "load": "servelab-cli loadgen --url URL --api openai --json "
                                + " ".join(load_args(a, "C", "max(8, %d*C)" % a.requests_per_client, "ROUND"))},
           "levels": table, "three_streams": three, "raw": raw}
    if a.out:
        summary = []
        for row in table:
            c, o, t = row["clients"], row["ours"], row["theirs"]
            ratio = row["throughput_ratio_ours_over_theirs"]
            big = c >= 16
            summary.append({"label": f"{c} clients: output tokens/s, ours / llama-server", "value": ratio,
                            "unit": "x", "target": ">= 1.5x at 16+ clients" if big else None,
                            "verdict": ("met" if ratio and ratio >= 1.5 else "missed") if big else "info"})
            summary.append({"label": f"{c} clients: TTFT p99 ms, ours (llama-server {t['p99_ttft_ms']:.0f})",
                            "value": round(o["p99_ttft_ms"], 1), "unit": "ms",
                            "target": "no worse at 16+ clients" if big else None,
                            "verdict": ("met" if o["p99_ttft_ms"] <= t["p99_ttft_ms"] else "missed") if big
                            else "info"})
            summary.append({"label": f"{c} clients: goodput req/s under {a.goodput}, ours (llama-server "
                                     f"{t['request_goodput']:.2f})", "value": round(o["request_goodput"], 3),
                            "unit": "req/s", "target": None, "verdict": "info"})
        write_result(a.out, meta, {"benchmark": "serve-vs-llama-server", "results": out, "summary": summary})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

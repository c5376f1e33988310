#!/usr/bin/env python3
"""Our server against llama.cpp's server on the same GGUF, under the same load generator.

Both servers run on 127.0.0.1 with the same thread count for the whole run: `servelab-cli serve`
(continuous batching, --max-batch slots) and llama.cpp's `llama-server` (its continuous batching
over --parallel slots). The load is `servelab-cli loadgen --api openai` (POST /v1/completions with
stream, temperature 0 and vLLM's ignore_eos, which both servers take, so every request gets its
whole token budget) at each concurrency level, closed loop, plus the course's three streams of
100/10/10 tokens. Rounds interleave the two servers (the order alternates per round) and every
figure is the median over rounds; the ours/theirs throughput ratio is taken per round (adjacent
runs share the machine's load at that moment) and its median reported.

Peer build: docs/models.md "Peers we measure against" (llama.cpp from llama-cpp-python's
sdist, target llama-server), e.g. under /work/peers.

Run:  .venv/bin/python bench/serve.py --rounds 2 > bench/results/serve-vs-llama-server-<machine>.json
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
    a = ap.parse_args()
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
                    rep = loadgen(a.cli, urls[who], ["--scenario", "sweep", "--clients", str(level), "--requests",
                                                     str(n), "--max-new-tokens", str(a.new_tokens), "--ignore-eos"])
                    (lv,) = rep["levels"]
                    raw[who].append({"round": r, "clients": level, **{k: v for k, v in lv.items() if k != "errors"},
                                     "errors": lv["errors"]})
                    print(f"round {r} {who} c={level}: {lv['tokens_per_s']:.1f} tokens/s, TTFT p50 "
                          f"{lv['ttft_p50_ms']:.0f} p99 {lv['ttft_p99_ms']:.0f} ms, ITL p50 {lv['itl_p50_ms']:.1f} "
                          f"p99 {lv['itl_p99_ms']:.1f} ms, {lv['failed']} failed", file=sys.stderr, flush=True)
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
            row[who] = {k: med(who, level, k) for k in ("tokens_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms",
                                                       "itl_p99_ms", "requests", "failed")}
        ratios = [o["tokens_per_s"] / t["tokens_per_s"]
                  for o in raw["ours"] if o.get("clients") == level
                  for t in raw["theirs"] if t.get("clients") == level and t["round"] == o["round"]
                  and t["tokens_per_s"] > 0]
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
                        "load": "servelab-cli loadgen --url URL --api openai --scenario sweep --clients C "
                                "--requests max(8, %d*C) --max-new-tokens %d --ignore-eos --json"
                                % (a.requests_per_client, a.new_tokens)},
           "levels": table, "three_streams": three, "raw": raw}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

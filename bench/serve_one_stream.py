#!/usr/bin/env python3
"""One stream through the server against `servelab-cli generate` on the same model, prompt and
threads: the server's inter-token time beside generate's decode step, and where the server's
engine thread spends a step (its /metrics servelab:engine_phase_seconds_total, per step).

Each round runs, in alternating order, one `servelab-cli loadgen --scenario single` stream
(--ignore-eos, so every run has the same length) against a server started once for the whole run,
and one `servelab-cli generate --json`. Per run: the median of the stream's gaps between
consecutive tokens (first token excluded) and the median of generate's step_ms (first step, the
prefill, excluded). The report gives medians over rounds and the ratio server / generate per round
(adjacent runs share the machine's load) with its median.

Run:  .venv/bin/python bench/serve_one_stream.py --rounds 5 > bench/results/serve-one-stream-<machine>.json
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading

from bench_machine import machine

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEF_CLI = os.path.join(ROOT, "build/release/app/servelab-cli")
DEF_GGUF = os.path.join(ROOT, ".venv/share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = "What is deep learning?"


def start_server(cli, args, env=None):
    proc = subprocess.Popen([cli, "serve", "--port", "0", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, **(env or {})})
    line = [""]
    reader = threading.Thread(target=lambda: line.__setitem__(0, proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(300)
    m = re.search(r"(http://\S+:\d+)", line[0])
    if not m:
        proc.kill()
        raise RuntimeError(f"the server did not start: {line[0]!r}")
    return proc, m.group(1)


def phases(cli_url):
    """servelab:engine_phase_seconds_total by phase, and engine steps, from /metrics."""
    import urllib.request
    text = urllib.request.urlopen(cli_url + "/metrics", timeout=30).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'servelab:engine_phase_seconds_total\{.*phase="(\w+)"\} (\S+)', line)
        if m:
            out[m.group(1)] = float(m.group(2))
        m = re.match(r"servelab:engine_steps_total\{.*\} (\S+)", line)
        if m:
            out["steps"] = float(m.group(1))
    return out


def serve_run(cli, url, new_tokens):
    before = phases(url)
    p = subprocess.run([cli, "loadgen", "--url", url, "--api", "lorax", "--scenario", "single", "--prompt", PROMPT,
                        "--max-new-tokens", str(new_tokens), "--ignore-eos", "--json"],
                       capture_output=True, text=True, timeout=600)
    after = phases(url)
    (s,) = json.loads(p.stdout)["streams"]
    if not s["ok"]:
        raise RuntimeError(f"the stream failed: {s['error']}")
    t = s["token_ms"]
    steps = after["steps"] - before["steps"]
    per_step = {k: (after[k] - before[k]) * 1000 / steps for k in after if k != "steps"}
    return statistics.median(b - a for a, b in zip(t, t[1:])), per_step


def generate_run(cli, model_args, new_tokens, env=None):
    p = subprocess.run([cli, "generate", *model_args, "--prompt", PROMPT, "--max-new-tokens", str(new_tokens),
                        "--json"], capture_output=True, text=True, timeout=600, env={**os.environ, **(env or {})})
    j = json.loads(p.stdout.splitlines()[0])
    return statistics.median(j["step_ms"][1:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=DEF_CLI)
    ap.add_argument("--model", default=DEF_GGUF)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--serve-args", default="--max-batch 64 --max-queue 256 --max-total-tokens 256",
                    help="the server's options beyond model and threads (bench/serve.py's by default)")
    ap.add_argument("--omp-wait-policy", choices=("default", "passive", "active"), default="default",
                    help="OMP_WAIT_POLICY for both the server and generate")
    a = ap.parse_args()
    env = {} if a.omp_wait_policy == "default" else {"OMP_WAIT_POLICY": a.omp_wait_policy}
    model_args = ["--model", a.model, "--threads", str(a.threads)]
    serve_args = model_args + a.serve_args.split()
    proc, url = start_server(a.cli, serve_args, env)
    raw = []
    try:
        serve_run(a.cli, url, 8)  # warm-up: first allocations, page faults
        for r in range(a.rounds):
            order = ("serve", "generate") if r % 2 == 0 else ("generate", "serve")
            row = {"round": r}
            for who in order:
                if who == "serve":
                    row["serve_itl_ms"], row["serve_phase_ms_per_step"] = serve_run(a.cli, url, a.new_tokens)
                else:
                    row["generate_step_ms"] = generate_run(a.cli, model_args, a.new_tokens, env)
            row["ratio"] = row["serve_itl_ms"] / row["generate_step_ms"]
            print(f"round {r}: serve {row['serve_itl_ms']:.2f} ms, generate {row['generate_step_ms']:.2f} ms, "
                  f"ratio {row['ratio']:.2f}; per step "
                  + ", ".join(f"{k} {v:.2f}" for k, v in row["serve_phase_ms_per_step"].items()),
                  file=sys.stderr, flush=True)
            raw.append(row)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    med = lambda k: statistics.median(x[k] for x in raw)  # noqa: E731
    phase_names = raw[0]["serve_phase_ms_per_step"].keys()
    out = {"what": "one stream: servelab-cli serve's inter-token time (loadgen single, lorax API) against "
                   "servelab-cli generate's decode step, same model/prompt/threads; medians over interleaved rounds",
           "machine": machine(), "model": os.path.basename(a.model), "threads": a.threads,
           "new_tokens": a.new_tokens, "rounds": a.rounds, "prompt": PROMPT, "omp_wait_policy": a.omp_wait_policy,
           "commands": {"serve": "servelab-cli serve " + " ".join(serve_args),
                        "stream": f"servelab-cli loadgen --url URL --api lorax --scenario single --prompt '{PROMPT}' "
                                  f"--max-new-tokens {a.new_tokens} --ignore-eos --json",
                        "generate": "servelab-cli generate " + " ".join(model_args) +
                                    f" --prompt '{PROMPT}' --max-new-tokens {a.new_tokens} --json"},
           "serve_itl_ms": med("serve_itl_ms"), "generate_step_ms": med("generate_step_ms"),
           "ratio_serve_over_generate": med("ratio"),
           "serve_phase_ms_per_step": {k: statistics.median(x["serve_phase_ms_per_step"][k] for x in raw)
                                       for k in phase_names},
           "raw": raw}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

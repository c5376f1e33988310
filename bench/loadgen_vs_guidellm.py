#!/usr/bin/env python3
"""servelab-cli loadgen checked against an independent client, GuideLLM (PyPI `guidellm`, a client
only, installed in a venv of its own: python3 -m venv /work/guidellm-venv &&
/work/guidellm-venv/bin/pip install guidellm), on the same server: our own `servelab-cli serve` on
127.0.0.1 (prefix caching off, so that neither client's prompts are favoured), each client alone on
the machine in turn, at 1 to 4 concurrent requests (closed loop), a fixed-length workload (random
prompts of --prompt-tokens tokens, --output-tokens tokens out with ignore_eos), chat completions
streamed with usage, as GuideLLM sends them.

Compared per level: output tokens/s (output tokens / the level's wall time), median TTFT, median
inter-token latency (GuideLLM's per-request ITL is (latency - TTFT) / (tokens - 1), which is vLLM's
TPOT: it is compared with our median TPOT; our per-token median ITL is reported beside it), and the
output token counts, which must agree exactly. Within 10% is the target for the timings.

  .venv/bin/python bench/loadgen_vs_guidellm.py [--levels 1,2,4] [--requests 16] [--rounds 1]
      > bench/results/loadgen-vs-guidellm-<machine>-<date>.json

--server llama-server runs it against llama.cpp's llama-server (built by bench/build_peers) on the same
GGUF: a peer whose streaming and usage reporting are not ours.

--pin 1:0 (with --threads 1) runs the server on CPU 1 and each client on CPU 0, so that a Python
client's work does not come out of the server's CPU time.

--server stream-interval runs the same comparison against tests/serve/loadgen_test_server.py
instead: a server that streams as vLLM does with a stream interval of 3 (the first token alone, then
3 tokens a chunk every 20 ms, usage at the end), timed by sleeps rather than by computation, so the
machine's load matters little: token counts must agree exactly, and both clients should see ITL
20/3 ms and TTFT about 20 ms.

The tokenizer folder GuideLLM needs (tokenizer.json) is written from the GGUF with the project
venv's transformers (the `smollm` pre-tokenizer set as ../shared/MODELS.md says) unless
--tokenizer-dir names one. Loopback only; every run is bounded by its request count and a timeout.
"""
import argparse
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_GGUF = os.path.join(ROOT, ".venv/share/servelab/models/SmolLM2-135M-Instruct.Q4_1.gguf")


# --pin: the server on one CPU, each client on another ("taskset -c N" prefixes), so that a
# Python client's parsing does not take the server's CPU (a 2-core machine has no third core).
PIN_SERVER, PIN_CLIENT = [], []


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def make_tokenizer_dir(gguf, out):
    """An HF tokenizer folder for the GGUF's vocabulary, with the project venv's transformers."""
    code = (
        "import os, sys\n"
        "from transformers import AutoTokenizer\n"
        "from tokenizers import pre_tokenizers\n"
        "g, out = sys.argv[1], sys.argv[2]\n"
        "t = AutoTokenizer.from_pretrained(os.path.dirname(g), gguf_file=os.path.basename(g))\n"
        "t.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence([\n"
        "    pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])\n"
        "t.save_pretrained(out)\n")
    subprocess.run([os.path.join(ROOT, ".venv/bin/python"), "-c", code, gguf, out], check=True,
                   env=dict(os.environ, HF_HUB_OFFLINE="1"), timeout=600)


def start_server(cli, gguf, threads, max_batch):
    cmd = [cli, "serve", "--model", gguf, "--host", "127.0.0.1", "--port", "0", "--max-batch", str(max_batch),
           "--no-prefix-cache"]
    if threads:
        cmd += ["--threads", str(threads)]
    cmd = PIN_SERVER + cmd
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            raise RuntimeError("servelab-cli serve ended: " + p.stderr.read())
        m = re.search(r"at (http://127\.0\.0\.1:\d+)", line)
        if m:
            return p, m.group(1), cmd
    p.kill()
    raise RuntimeError("servelab-cli serve did not start within 300 s")


def start_llama_server(binary, gguf, threads, parallel, positions):
    """llama.cpp's llama-server (bench/build_peers) on a free loopback port, its own continuous
    batching over `parallel` slots of `positions` each; waits for /health to answer 200."""
    import socket
    import urllib.request
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Prompt caching off (as our server's prefix caching is here): GuideLLM's synthetic prompts
    # share long prefixes, ours share none, and a cache would favour one client's TTFT.
    cmd = [binary, "-m", gguf, "--host", "127.0.0.1", "--port", str(port), "--parallel", str(parallel),
           "--ctx-size", str(parallel * positions), "--cont-batching", "--no-cache-prompt", "--cache-ram", "0"]
    if threads:
        cmd += ["--threads", str(threads), "--threads-batch", str(threads)]
    cmd = PIN_SERVER + cmd
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 300
    while time.time() < deadline:
        if p.poll() is not None:
            raise RuntimeError("llama-server ended: " + p.stderr.read()[-2000:])
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as r:
                if r.status == 200:
                    return p, url, cmd
        except OSError:
            pass
        time.sleep(0.5)
    p.kill()
    raise RuntimeError("llama-server did not start within 300 s")


def stop(server):
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()


def run_ours(cli, url, gguf, level, requests, prompt_tokens, output_tokens, seed):
    cmd = [cli, "loadgen", "--url", url, "--api", "openai-chat", "--scenario", "sweep", "--clients", str(level),
           "--requests", str(requests), "--input-len", str(prompt_tokens), "--max-new-tokens", str(output_tokens),
           "--ignore-eos", "--tokenizer", gguf, "--seed", str(seed), "--timeout", "300", "--max-seconds", "1800",
           "--json"]
    cmd = PIN_CLIENT + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=2000)
    if p.returncode != 0:
        raise RuntimeError(f"loadgen failed: {p.stderr.strip()}")
    (lv,) = json.loads(p.stdout)["levels"]
    return {"completed": lv["completed"], "failed": lv["failed"], "duration_s": lv["duration"],
            "output_tokens": lv["total_output_tokens"], "output_throughput": lv["output_throughput"],
            "median_ttft_ms": lv["median_ttft_ms"], "median_tpot_ms": lv["median_tpot_ms"],
            "median_itl_ms": lv["median_itl_ms"], "prompt_tokens": lv["total_input_tokens"]}, " ".join(cmd)


def run_guidellm(guidellm, url, model, tokdir, level, requests, prompt_tokens, output_tokens, seed, workdir):
    out = os.path.join(workdir, f"guidellm-{level}-{seed}.json")
    cmd = [guidellm, "run", "--backend", f"kind=openai_http,target={url},model={model}",
           "--tokenizer", f"kind=hf_auto,model={tokdir}",
           "--profile", f"kind=concurrent,streams={level}",
           "--constraint", f"kind=max_requests,count={requests}",
           "--data", f"kind=synthetic_text,prompt_tokens={prompt_tokens},output_tokens={output_tokens}",
           "--output", f"kind=json,path={out}", "--disable-console"]
    cmd = PIN_CLIENT + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=2000, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    if p.returncode != 0:
        raise RuntimeError(f"guidellm failed: {p.stderr.strip()[-2000:]}")
    (b,) = json.load(open(out))["benchmarks"]
    ok = b["requests"]["successful"]
    failed = len(b["requests"].get("errored", [])) + len(b["requests"].get("incomplete", []))
    tokens = sum(r["output_tokens"] for r in ok)
    return {"completed": len(ok), "failed": failed, "duration_s": b["duration"], "output_tokens": tokens,
            "output_throughput": tokens / b["duration"] if b["duration"] > 0 else 0.0,
            "median_ttft_ms": statistics.median(r["time_to_first_token_ms"] for r in ok),
            "median_itl_ms": statistics.median(r["inter_token_latency_ms"] for r in ok),
            "prompt_tokens": sum(r["prompt_tokens"] for r in ok)}, " ".join(cmd)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=os.path.join(ROOT, "build/release/app/servelab-cli"))
    ap.add_argument("--gguf", default=DEFAULT_GGUF)
    ap.add_argument("--guidellm", default="/work/guidellm-venv/bin/guidellm")
    ap.add_argument("--tokenizer-dir", help="an HF tokenizer folder for the GGUF (default: written from it)")
    ap.add_argument("--levels", default="1,2,4", help="concurrent requests, at most 4 (2 cores)")
    ap.add_argument("--requests", type=int, default=16, help="requests per level and client")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="the server's libtorch threads (0: its default)")
    ap.add_argument("--server", choices=("ours", "llama-server", "stream-interval"), default="ours",
                    help="ours: servelab-cli serve; llama-server: llama.cpp's (bench/build_peers); "
                         "stream-interval: tests/serve/loadgen_test_server.py")
    ap.add_argument("--llama-server", default="/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/"
                                              "llama-server", help="with --server llama-server")
    ap.add_argument("--pin", metavar="SERVER_CPU:CLIENT_CPU",
                    help="run the server on one CPU and each client on another (taskset), e.g. 1:0; give "
                         "--threads 1 with it")
    a = ap.parse_args()
    if a.pin:
        server_cpu, _, client_cpu = a.pin.partition(":")
        if not (server_cpu.isdigit() and client_cpu.isdigit()) or server_cpu == client_cpu:
            ap.error("--pin takes two different CPU numbers, SERVER:CLIENT")
        PIN_SERVER[:] = ["taskset", "-c", server_cpu]
        PIN_CLIENT[:] = ["taskset", "-c", client_cpu]
    levels = [int(x) for x in a.levels.split(",")]
    if any(l < 1 or l > 4 for l in levels) or not 1 <= a.requests <= 256 or not 1 <= a.rounds <= 5:
        ap.error("levels in [1, 4], --requests in [1, 256], --rounds in [1, 5]")
    if not os.access(a.guidellm, os.X_OK):
        ap.error(f"no GuideLLM at {a.guidellm} (python3 -m venv /work/guidellm-venv && "
                 "/work/guidellm-venv/bin/pip install guidellm)")
    work = tempfile.mkdtemp(prefix="loadgen-vs-guidellm-")
    tokdir = a.tokenizer_dir
    if not tokdir:
        tokdir = os.path.join(work, "tokenizer")
        log("writing an HF tokenizer folder from", a.gguf)
        make_tokenizer_dir(a.gguf, tokdir)
    version = subprocess.run([a.guidellm, "--version"], capture_output=True, text=True).stdout.strip()
    if a.server == "ours":
        server, url, server_cmd = start_server(a.cli, a.gguf, a.threads, max(levels))
    elif a.server == "llama-server":
        server, url, server_cmd = start_llama_server(a.llama_server, a.gguf, a.threads, max(levels),
                                                     a.prompt_tokens + a.output_tokens + 64)
    else:
        server_cmd = [sys.executable, os.path.join(ROOT, "tests/serve/loadgen_test_server.py")]
        server = subprocess.Popen(server_cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        url = "http://127.0.0.1:%d/s3-d20" % int(server.stdout.readline())
    raw = []
    commands = {}
    try:
        model = json.loads(subprocess.run(["curl", "-s", url + "/v1/models"], capture_output=True, text=True,
                                          timeout=60).stdout)["data"][0]["id"]
        # Warm the server up (first-request costs) with both clients before anything is measured.
        run_ours(a.cli, url, a.gguf, 1, 2, a.prompt_tokens, 4, 99)
        run_guidellm(a.guidellm, url, model, tokdir, 1, 2, a.prompt_tokens, 4, 99, work)
        for r in range(a.rounds):
            for level in levels:
                order = ("ours", "guidellm") if (r + level) % 2 == 0 else ("guidellm", "ours")
                for who in order:
                    if a.server == "llama-server":
                        # A fresh llama-server for every run: after GuideLLM's connections close,
                        # this build kept them in CLOSE-WAIT and stopped answering new requests
                        # (seen once, a 12-minute stall), which would be measured as the next
                        # client's latency.
                        stop(server)
                        server, url, server_cmd = start_llama_server(a.llama_server, a.gguf, a.threads, max(levels),
                                                                     a.prompt_tokens + a.output_tokens + 64)
                    if who == "ours":
                        res, cmd = run_ours(a.cli, url, a.gguf, level, a.requests, a.prompt_tokens, a.output_tokens,
                                            r + 1)
                    else:
                        res, cmd = run_guidellm(a.guidellm, url, model, tokdir, level, a.requests, a.prompt_tokens,
                                                a.output_tokens, r + 1, work)
                    commands[who] = cmd
                    raw.append({"round": r, "level": level, "client": who, **res})
                    log(f"round {r} c={level} {who}: {res['output_throughput']:.1f} tok/s, TTFT median "
                        f"{res['median_ttft_ms']:.1f} ms, ITL median {res['median_itl_ms']:.2f} ms, "
                        f"{res['output_tokens']} tokens, {res['failed']} failed")
    finally:
        stop(server)

    def med(level, who, key):
        return statistics.median(x[key] for x in raw if x["level"] == level and x["client"] == who)

    table, all_ok = [], True
    for level in levels:
        ours = {k: med(level, "ours", k) for k in ("output_throughput", "median_ttft_ms", "median_tpot_ms",
                                                   "median_itl_ms", "output_tokens", "completed", "failed")}
        theirs = {k: med(level, "guidellm", k) for k in ("output_throughput", "median_ttft_ms", "median_itl_ms",
                                                         "output_tokens", "completed", "failed")}
        ratio = {"output_throughput": ours["output_throughput"] / theirs["output_throughput"],
                 "median_ttft": ours["median_ttft_ms"] / theirs["median_ttft_ms"],
                 "median_itl (our TPOT / their ITL)": ours["median_tpot_ms"] / theirs["median_itl_ms"]}
        within = {k: abs(v - 1) <= 0.10 for k, v in ratio.items()}
        tokens_equal = all(x["output_tokens"] == a.requests * a.output_tokens
                           for x in raw if x["level"] == level)
        all_ok = all_ok and all(within.values()) and tokens_equal
        table.append({"level": level, "ours": ours, "guidellm": theirs, "ratio_ours_over_guidellm": ratio,
                      "within_10_percent": within, "output_tokens_exact": tokens_equal})
    what = {"ours": "servelab-cli serve (127.0.0.1, prefix caching off)",
            "llama-server": "llama.cpp's llama-server (127.0.0.1, prompt caching off, one slot per concurrent request)",
            "stream-interval": "tests/serve/loadgen_test_server.py (127.0.0.1; 3 tokens a chunk every 20 ms after "
                               "the first, usage at the end)"}[a.server]
    out = {"what": "servelab-cli loadgen against GuideLLM on the same server, " + what + ", each client alone in "
                   "turn, closed loop, chat completions, fixed-length workload",
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "machine": platform.processor() or
           platform.machine(), "cpus": os.cpu_count(), "load_average_at_end": os.getloadavg(),
           "guidellm_version": version, "gguf": os.path.basename(a.gguf), "requests_per_level": a.requests,
           "prompt_tokens": a.prompt_tokens, "output_tokens": a.output_tokens, "rounds": a.rounds,
           "server": a.server, "pin": a.pin, "commands": {"server": " ".join(server_cmd), **commands},
           "levels": table, "all_within_target": all_ok, "raw": raw}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

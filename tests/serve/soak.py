#!/usr/bin/env python3
"""The server under sustained concurrent load: 160 requests from 32 connections, then 480 from
64, against `servelab-cli serve --demo` with PEFT adapters (made by peft, as test_serve makes them).
Every answer must be exactly the greedy tokens its request gets alone (mixed prompts, budgets,
adapters, streamed and not; requests keep arriving while others decode), none lost or duplicated,
/metrics must count every one, and the server's resident memory after the load must be back near
its level after the warm-up (the same requests once each, alone).

Run:  .venv/bin/python tests/serve/soak.py --cli build/release/app/servelab-cli [--phases 160:32,480:64]
"""
import argparse
import concurrent.futures
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import serve_harness as ts  # noqa: E402  (test_serve's servers, adapters and HTTP helpers)


def rss_bytes(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    # Sized to finish well inside ctest's limit on a loaded 2-core machine: every connection count
    # the server must hold is there; more requests add time, not coverage.
    ap.add_argument("--phases", default="160:32,480:64", help="requests:connections, comma-separated")
    ap.add_argument("--kinds", type=int, default=32, help="distinct (prompt, budget, adapter) requests")
    args = ap.parse_args()
    ts.CLI = os.path.abspath(args.cli)
    ts.TMP = tempfile.mkdtemp(prefix="servelab-soak-")
    failures = []
    srv = None
    try:
        ts.make_adapters()
        srv = ts.Server("soak", ["--demo", "--max-batch", "16", "--max-queue", "2048", "--threads", "2",
                                 "--http-threads", "160", "--adapter", f"mine={ts.ADAPTERS['mine']}"],
                        env={"HF_HUB_CACHE": os.path.join(ts.TMP, "hf", "hub")})
        rng = random.Random(2026)
        adapters = [None, "mine", "predibase/cnn", "predibase/conllpp"]
        kinds = [(" ".join(rng.choice(ts.WORDS) for _ in range(rng.randint(1, 40))), rng.randint(1, 16),
                  adapters[i % len(adapters)]) for i in range(args.kinds)]
        t0 = time.time()
        alone = [ts.generate_ids(srv, p, n, a) for p, n, a in kinds]  # the warm-up: each kind alone
        idle = rss_bytes(srv.proc.pid)
        print(f"soak: {len(kinds)} requests alone in {time.time() - t0:.1f} s; resident {idle / 2**20:.0f} MiB",
              flush=True)
        before = ts.metrics(srv)
        total = 0
        for phase in args.phases.split(","):
            n, conns = (int(x) for x in phase.split(":"))
            picks = [(rng.randrange(len(kinds)), rng.random() < 0.5) for _ in range(n)]
            t0 = time.time()
            with concurrent.futures.ThreadPoolExecutor(conns) as pool:
                got = list(pool.map(lambda k: ts.generate_ids(srv, *kinds[k[0]], stream=k[1]), picks))
            total += n
            wrong = [i for i, (g, (k, _)) in enumerate(zip(got, picks)) if g != alone[k]]
            print(f"soak: {n} requests over {conns} connections in {time.time() - t0:.1f} s, "
                  f"{sum(len(g) for g in got)} tokens, {len(wrong)} differing from alone", flush=True)
            for i in wrong[:5]:
                k, stream = picks[i]
                failures.append(f"phase {phase}: request {i} ({kinds[k][1]} tokens, adapter {kinds[k][2]}, "
                                f"stream {stream}) got {got[i]} alone {alone[k]}")
        after = ts.metrics(srv)
        m = lambda name, **kw: ts.metric(after, name, **kw) - ts.metric(before, name, **kw)  # noqa: E731
        ended = m("vllm:request_success_total", finished_reason="length") + \
            m("vllm:request_success_total", finished_reason="stop")
        if ended != total or m("vllm:request_success_total", finished_reason="abort") != 0:
            failures.append(f"/metrics counted {ended} ended and "
                            f"{m('vllm:request_success_total', finished_reason='abort')} aborted of {total}")
        if (ts.metric(after, "vllm:num_requests_running"), ts.metric(after, "vllm:num_requests_waiting")) != (0, 0):
            failures.append("requests still running or waiting after the load")
        time.sleep(1)
        end = rss_bytes(srv.proc.pid)
        print(f"soak: resident {idle / 2**20:.0f} MiB after the warm-up, {end / 2**20:.0f} MiB after "
              f"{total} requests", flush=True)
        # Slot KV and the adapters are allocated up front; what a request allocates must be freed.
        # The margin is the allocator's: freed pages it keeps for the next request.
        if end > idle * 1.15 + 64 * 2**20:
            failures.append(f"resident memory grew from {idle} to {end} bytes over the load")
    finally:
        if srv:
            rc, err = srv.stop()
            if rc != 0:
                failures.append(f"server exit {rc} after SIGTERM:\n{err[-2000:]}")
        shutil.rmtree(ts.TMP, ignore_errors=True)
    for f in failures:
        print("soak: FAIL:", f, file=sys.stderr)
    print(f"{1 if not failures else 0} passed, {len(failures) and 1} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

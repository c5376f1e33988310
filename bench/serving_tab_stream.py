#!/usr/bin/env python3
"""The app's in-process server (the Serving tab) streaming one request, two app builds interleaved:
`servelab --tab serving --run --report` with the tab's `single` scenario (64 new tokens on the
built-in model, offscreen), each run's median inter-token time from the report's token times.
Prints JSON (medians over rounds, their ratio, every run); names the CPU.

  .venv/bin/python bench/serving_tab_stream.py --a OLD/servelab --b build/release/app/servelab [--rounds 5]

What it is for: the tab's server used to run its engine on a thread of its own beside the app's
engine thread, two OpenMP teams on two CPUs; this compares builds on that path alone.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

from bench_machine import machine

SETTINGS = """[serving]
port={port}
maxBatch=8
scenario=single
requests=1
newTokens={tokens}
"""


def one(app, port, tokens, work):
    ini = os.path.join(work, f"settings-{port}.ini")
    report = os.path.join(work, f"report-{port}.json")
    with open(ini, "w") as f:
        f.write(SETTINGS.format(port=port, tokens=tokens))
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    subprocess.run([app, "--tab", "serving", "--run", "--settings", ini, "--report", report], check=True,
                   capture_output=True, env=env, timeout=600)
    r = json.load(open(report))
    assert r["ok"] and r["failed"] == 0, r
    t = r["streams"][0]["token_ms"]
    return statistics.median(b - a for a, b in zip(t, t[1:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--a", required=True, help="the app build to compare against")
    ap.add_argument("--b", required=True, help="the app build under test")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--port", type=int, default=47811)
    a = ap.parse_args()
    runs = {"a": [], "b": []}
    with tempfile.TemporaryDirectory() as work:
        one(a.b, a.port, 8, work)  # warm the model file
        for i in range(a.rounds):
            for key, app in (("a", a.a), ("b", a.b)):
                runs[key].append(one(app, a.port + 1 + i, a.new_tokens, work))
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(json.dumps({"machine": {**machine(), "load_average_end": os.getloadavg()[0]},
                      "what": "Serving tab's in-process server, one stream, median inter-token ms per run",
                      "new_tokens": a.new_tokens, "rounds": a.rounds,
                      "a": {"app": a.a, "itl_ms_median": med["a"], "runs": runs["a"]},
                      "b": {"app": a.b, "itl_ms_median": med["b"], "runs": runs["b"]},
                      "b_over_a": med["b"] / med["a"],
                      "statistic": "median over rounds of each run's median inter-token time"}, indent=2))


if __name__ == "__main__":
    main()

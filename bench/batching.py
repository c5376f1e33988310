#!/usr/bin/env python3
"""Batching and continuous batching (issue 4's targets), side by side in one run. Prints JSON.

  [SERVELAB_CLI=build/release/app/servelab-cli] .venv/bin/python bench/batching.py [--threads 2] [--repeats 3] [--only w2,w3,hf,steps]
                                     [--plot docs/figures/step-times.png] [--quick]

Every figure is measured in this one invocation; ratios are taken between methods run in the same
process (ours) or interleaved with each other (ours vs Hugging Face), and medians over --repeats.

  w2     workload 2 (lesson 3): `servelab-cli bench sync-vs-continuous` (32 requests, batch 8, every
         8th wants 100 tokens, the others 10): synchronous vs continuous total time, per repeat.
  w3     workload 3 (the course benchmark): `servelab-cli bench course-benchmark` (100 queries x 64
         greedy tokens): one at a time with the KV cache vs continuous batching with max batch 32.
  hf     our batched run of workload 3 (`course-benchmark --no-baseline`) against Hugging Face
         transformers' left-padded `generate` on the same 100 queries in batches of 32 (greedy,
         exactly 64 new tokens, same weights, same threads), interleaved, --repeats times; also
         how many queries got identical tokens.
  steps  step time as requests come and go: a queue of long prompts (100-300 tokens) served by
         continuous batching with slot KV and with the course's merge/filter, same requests; per
         step: time, KV bytes moved between caches and the time that took. --plot draws both.
The built-in demo model is exported once with `servelab-cli export-demo` so HF loads the same
weights. Wall-clock numbers are from whatever machine runs this; only the ratios travel.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.environ.get("SERVELAB_CLI", os.path.join(ROOT, "build", "release", "app", "servelab-cli"))
PROMPTS = ["The quick brown fox jumped over the", "The rain in Spain falls", "What comes up must"]


def ours(args, threads):
    # --demo: the GPT-2 random shape, which HF loads from the export below.
    out = subprocess.run([CLI, "bench", *args, "--demo", "--threads", str(threads), "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def workload2(a):
    runs = []
    for _ in range(a.repeats):
        args = ["sync-vs-continuous"]
        if a.quick:
            args += ["--requests", "16", "--long-tokens", "40"]
        r = ours(args, a.threads)
        m = {x["method"]: x for x in r["methods"]}
        runs.append({
            "synchronous_ms": m["synchronous"]["total_ms"],
            "continuous_slot_ms": m["continuous (slot KV)"]["total_ms"],
            "continuous_merge_filter_ms": m["continuous (merge/filter)"]["total_ms"],
            "speedup": r["speedup"],
            "same_tokens": r["same_tokens"],
            "latency_p50_ms": {k: v["latency_ms"]["p50"] for k, v in m.items()},
            "latency_p99_ms": {k: v["latency_ms"]["p99"] for k, v in m.items()},
            "ttft_p50_ms": {k: v["ttft_ms"]["p50"] for k, v in m.items()},
            "inference_calls": {k: v["inference_calls"] for k, v in m.items()},
        })
    return {"runs": runs, "speedup_median": statistics.median(r["speedup"] for r in runs),
            "merge_filter_over_slot_median": statistics.median(
                r["continuous_merge_filter_ms"] / r["continuous_slot_ms"] for r in runs)}


def course_args(a):
    return ["--queries", str(a.queries), "--new-tokens", str(a.new_tokens), "--max-batch", str(a.max_batch)]


def workload3(a):
    r = ours(["course-benchmark", *course_args(a)], a.threads)
    return {"table": r["rows"], "same_tokens": r["same_tokens"],
            "batched_vs_baseline": r["rows"][1]["throughput_vs_baseline"]}


def hf_generate_queries(torch, model, tok, a):
    """HF's left-padded generate over the queries in batches of max_batch: seconds, token lists."""
    queries = [PROMPTS[i % len(PROMPTS)] for i in range(a.queries)]
    batches = [tok(queries[i:i + a.max_batch], padding=True, return_tensors="pt")
               for i in range(0, len(queries), a.max_batch)]
    tokens = []
    t0 = time.perf_counter()
    with torch.inference_mode():
        for inputs in batches:
            out = model.generate(**inputs, max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens,
                                 do_sample=False, num_beams=1, pad_token_id=tok.eos_token_id)
            tokens += out[:, inputs["input_ids"].shape[1]:].tolist()
    return time.perf_counter() - t0, tokens


def versus_hf(a):
    import torch
    from transformers import GPT2LMHeadModel, GPT2TokenizerFast
    torch.set_num_threads(a.threads)
    if not os.path.exists(os.path.join(a.model_dir, "model.safetensors")):
        subprocess.run([CLI, "export-demo", "--out", a.model_dir], check=True, capture_output=True)
    model = GPT2LMHeadModel.from_pretrained(a.model_dir, dtype=torch.float32).eval()
    tok = GPT2TokenizerFast.from_pretrained(a.model_dir)
    tok.pad_token, tok.padding_side = tok.eos_token, "left"
    # Warm both up at the real shape once.
    small = argparse.Namespace(**{**vars(a), "queries": min(a.queries, a.max_batch), "new_tokens": 4})
    hf_generate_queries(torch, model, tok, small)
    ours_s, hf_s, same = [], [], None
    for _ in range(a.repeats):
        r = ours(["course-benchmark", "--no-baseline", *course_args(a)], a.threads)
        ours_s.append(r["rows"][0]["time_s"])
        h, hf_tokens = hf_generate_queries(torch, model, tok, a)
        hf_s.append(h)
        same = sum(x == y for x, y in zip(r["batched_tokens"], hf_tokens))
    tokens = a.queries * a.new_tokens
    o, h = statistics.median(ours_s), statistics.median(hf_s)
    return {"ours_s": ours_s, "hf_s": hf_s, "ours_tokens_per_s": tokens / o, "hf_tokens_per_s": tokens / h,
            "throughput_ratio": h / o, "queries_with_identical_tokens": same, "queries": a.queries,
            "hf_method": f"transformers {__import__('transformers').__version__} generate, left-padded "
                         f"batches of {a.max_batch}, greedy, min_new_tokens=max_new_tokens={a.new_tokens}"}


def step_times(a):
    args = ["sync-vs-continuous", "--requests", str(a.churn_requests), "--max-batch", str(a.churn_batch),
            "--prompt-tokens-min", "100", "--prompt-tokens-max", "300", "--long-every", "3",
            "--long-tokens", "48", "--short-tokens", "12"]
    r = ours(args, a.threads)
    out = {"workload": " ".join(args)}
    for run in r["runs"]:
        if not run["method"].startswith("continuous"):
            continue
        steps = run["steps"]
        churn = [s for s in steps if s["admitted"] or s["retired"]]
        calm = [s for s in steps if not s["admitted"] and not s["retired"]]
        # Decode-only comparison: steps that retired someone but admitted nobody (no prefill in them).
        retire_only = [s for s in steps if s["retired"] and not s["admitted"]]
        out[run["method"]] = {
            "total_ms": run["total_ms"],
            "kv_copy_mb": run["kv_copy_bytes"] / 1e6,
            "step_ms_median_no_churn": statistics.median(s["ms"] for s in calm) if calm else None,
            "step_ms_median_retire_only": statistics.median(s["ms"] for s in retire_only) if retire_only else None,
            "kv_copy_ms_median_on_churn_steps": statistics.median(s["kv_copy_ms"] for s in churn) if churn else None,
            "kv_copy_ms_total": sum(s["kv_copy_ms"] for s in steps),
            "wait_ms_median_churn_steps": statistics.median(s["ms"] - s["prefill_ms"] for s in churn) if churn else None,
            "wait_ms_median_calm_steps": statistics.median(s["ms"] - s["prefill_ms"] for s in calm) if calm else None,
            "steps": [{k: s[k] for k in ("step", "ms", "running", "prefill_tokens", "prefill_ms", "kv_copy_bytes",
                                         "kv_copy_ms")} | {"admitted": len(s["admitted"]),
                                                           "retired": len(s["retired"])} for s in steps],
        }
    return out


def plot(steps, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, dpi=150)
    colors = {"continuous (slot KV)": "#1f77b4", "continuous (merge/filter)": "#d62728"}
    for method, color in colors.items():
        s = steps.get(method)
        if not s:
            continue
        xs = [p["step"] for p in s["steps"]]
        ax1.plot(xs, [p["ms"] - p["prefill_ms"] for p in s["steps"]], color=color, lw=1.2, label=method)
        churn = [p for p in s["steps"] if p["admitted"] or p["retired"]]
        ax1.scatter([p["step"] for p in churn], [p["ms"] - p["prefill_ms"] for p in churn], color=color, s=10,
                    zorder=3)
        ax2.plot(xs, [p["kv_copy_bytes"] / 1e6 for p in s["steps"]], color=color, lw=1.2, label=method)
    ax1.set_ylabel("step time without\nnewcomers' prefill (ms)")
    ax1.set_ylim(bottom=0)
    ax1.legend(fontsize=7, loc="upper right")
    ax1.set_title("Continuous batching: what running requests wait for each step "
                  "(dots: a request joined or left)", fontsize=9)
    ax2.set_ylabel("KV moved between\ncaches (MB)")
    ax2.set_xlabel("scheduler step")
    ax2.legend(fontsize=7, loc="upper right")
    fig.text(0.01, 0.005, "servelab-cli bench " + steps["workload"], fontsize=6, color="#555")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="w2,w3,hf,steps")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--max-batch", type=int, default=32)
    ap.add_argument("--churn-requests", type=int, default=24)
    ap.add_argument("--churn-batch", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="smaller workloads (a smoke run, not the targets)")
    ap.add_argument("--plot", help="PNG of the step-time comparison")
    ap.add_argument("--model-dir", default=os.path.join(ROOT, "build", "bench", "demo-model"))
    a = ap.parse_args()
    if a.quick:
        a.queries, a.new_tokens, a.churn_requests = 12, 8, 9
    parts = a.only.split(",")
    out = {"machine": {"threads": a.threads, "cpu_count": os.cpu_count()}, "repeats": a.repeats,
           "statistic": "median"}
    if "w2" in parts:
        out["workload2_sync_vs_continuous"] = workload2(a)
    if "w3" in parts:
        out["workload3_course_benchmark"] = workload3(a)
    if "hf" in parts:
        out["workload3_vs_hf_generate"] = versus_hf(a)
    if "steps" in parts:
        out["step_times"] = step_times(a)
        if a.plot:
            plot(out["step_times"], a.plot)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    sys.exit(main())

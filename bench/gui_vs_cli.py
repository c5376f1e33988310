#!/usr/bin/env python3
"""Tokens per second of generation through the desktop app against servelab-cli, side by side.

Both run the same greedy generation on the same model with the same threads, alternating, each
in a fresh process: the CLI with `generate --json`, the app scripted with
`--tab generate --run --report` on the offscreen platform (the engine thread streams every token,
its top-10 probabilities and step time to the GUI thread, which draws them live). Each side's
figure comes from the engine's own device-synchronised timers: decode tokens/s over the steps
after the first, and end-to-end tokens/s over the whole generate() call. Prints JSON with the
medians and the GUI/CLI ratios (the app must cost at most 10%).

  .venv/bin/python bench/gui_vs_cli.py --tokens 64 --rounds 5
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

root = pathlib.Path(__file__).resolve().parent.parent


def rates(step_ms, total_ms):
    n = len(step_ms)
    decode = (n - 1) / sum(step_ms[1:]) * 1000.0 if n > 1 else 0.0
    return {"tokens": n, "decode_tokens_per_s": decode, "end_to_end_tokens_per_s": n / total_ms * 1000.0}


def run_cli(cli, args):
    cmd = [cli, "generate", "--prompt", args.prompt, "--max-new-tokens", str(args.tokens), "--greedy",
           "--threads", str(args.threads), "--json"] + (["--model", args.model] if args.model else ["--demo"])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    line = json.loads(out.strip().splitlines()[-1])
    return rates(line["step_ms"], line["total_ms"]), line["generated_ids"]


def run_gui(gui, args, work):
    ini = work / "settings.ini"
    ini.write_text(
        "[generate]\n"
        f"prompt={args.prompt}\nmaxNewTokens={args.tokens}\nsampling=false\nstopAtEos=true\nchat=false\n"
        "[model]\n"
        f"threads={args.threads}\n")
    report = work / "report.json"
    cmd = [gui, "--settings", str(ini), "--tab", "generate", "--run", "--report", str(report)]
    cmd += ["--model", args.model] if args.model else ["--demo"]
    env = dict(os.environ, QT_QPA_PLATFORM=os.environ.get("QT_QPA_PLATFORM", "offscreen"))
    subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
    r = json.loads(report.read_text())
    if not r.get("ok"):
        sys.exit(f"gui_vs_cli: the app's run failed: {r.get('error')}")
    return rates(r["step_ms"], r["total_ms"]), r["generated_ids"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=str(root / "build" / "release"))
    p.add_argument("--model", default="",
                   help="model folder or .gguf (default: the GPT-2 shape with random weights, --demo)")
    p.add_argument("--prompt", default="The quick brown fox jumped over the")
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=0, help="0: libtorch's default")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    cli = str(pathlib.Path(args.build) / "app" / "servelab-cli")
    gui = str(pathlib.Path(args.build) / "app" / "servelab")
    samples = {"cli": [], "gui": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        for i in range(args.rounds):
            # Alternate which side goes first so that drift in the machine hits both alike.
            order = ["cli", "gui"] if i % 2 == 0 else ["gui", "cli"]
            ids = {}
            for side in order:
                r, ids[side] = run_cli(cli, args) if side == "cli" else run_gui(gui, args, work)
                samples[side].append(r)
            if ids["cli"] != ids["gui"]:
                sys.exit("gui_vs_cli: the app and the CLI generated different tokens")
    med = {side: {k: statistics.median(s[k] for s in runs) for k in runs[0]} for side, runs in samples.items()}
    result = {
        "benchmark": "gui_vs_cli",
        "prompt": args.prompt,
        "new_tokens": args.tokens,
        "threads": args.threads,
        "model": args.model or "built-in",
        "rounds": args.rounds,
        "statistic": "median over rounds; each round runs both, alternating order",
        "cli": med["cli"],
        "gui": med["gui"],
        "gui_over_cli_decode": med["gui"]["decode_tokens_per_s"] / med["cli"]["decode_tokens_per_s"],
        "gui_over_cli_end_to_end": med["gui"]["end_to_end_tokens_per_s"] / med["cli"]["end_to_end_tokens_per_s"],
        "samples": samples,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Trains one built-in adapter (docs/adapters.md) with PEFT on the CPU: LoRA on the built-in model
(SmolLM2-135M-Instruct, the very Q4_1 GGUF the engine runs, dequantized to fp32 by transformers),
on examples from scripts/adapters/make_data.py, loss on the target tokens only. Never run by CI or
the tests; scripts/train_adapters runs it for the three adapters.

  .venv/bin/python scripts/adapters/train.py --job conllpp --out resources/adapters/conllpp \
      [--steps 300] [--batch 8] [--rank 16] [--lr 1e-3] [--seed 1] [--max-minutes 30] [--work DIR]

The prompt is the course's template filled in, as plain text (no chat template: the course's client
sends it so); prompt and target are tokenised apart, as the engine sees a prompt and then generates,
and the target ends with the model's end-of-text token. A checkpoint (adapter, optimizer, step, the
random state) is written to --work every 25 steps and a run resumes from it; --measure N times N
steps and exits (to size --steps). Output: OUT/adapter_config.json, OUT/adapter_model.safetensors
(fp16) and OUT/training.json (seed, steps, time, losses).
"""
import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("TQDM_DISABLE", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import make_data  # noqa: E402

DEFAULT_MODEL = os.path.join(ROOT, ".venv", "share", "servelab", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_model(path):
    import torch
    from tokenizers import pre_tokenizers
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    folder, name = os.path.split(os.path.realpath(path))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    # As tests/oracle/make_smollm2_fixtures.py: llama.cpp's `smollm` pre-tokenizer splits digits.
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    assert tok("a  1", add_special_tokens=False).input_ids == [81, 256, 33], "pre-tokenizer fix failed"
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    return tok, model


def encode(tok, rows):
    out = []
    for r in rows:
        p = tok(r["prompt"], add_special_tokens=False).input_ids
        t = tok(r["target"], add_special_tokens=False).input_ids + [tok.eos_token_id]
        out.append((p, t))
    return out


def batch_tensors(torch, items, pad_id):
    n = max(len(p) + len(t) for p, t in items)
    ids = torch.full((len(items), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(items), n), dtype=torch.long)
    labels = torch.full((len(items), n), -100, dtype=torch.long)
    for i, (p, t) in enumerate(items):
        seq = p + t
        ids[i, :len(seq)] = torch.tensor(seq)
        mask[i, :len(seq)] = 1
        labels[i, len(p):len(seq)] = torch.tensor(t)
    return ids, mask, labels


def target_loss(torch, model, ids, mask, labels):
    """Cross-entropy over the target tokens only, the vocabulary projection applied to those
    positions alone (most of a sequence is prompt: this saves most of lm_head's cost)."""
    inner = model.get_base_model()
    hidden = inner.model(input_ids=ids, attention_mask=mask).last_hidden_state
    shifted = labels[:, 1:]
    keep = shifted != -100
    h = hidden[:, :-1][keep]
    logits = inner.lm_head(h).float()
    return torch.nn.functional.cross_entropy(logits, shifted[keep])


def save_fp16(model, out, job):
    import torch
    from safetensors.torch import load_file, save_file
    model.save_pretrained(out)
    st = os.path.join(out, "adapter_model.safetensors")
    tensors = {k: v.to(torch.float16).contiguous() for k, v in load_file(st).items()}
    save_file(tensors, st, metadata={"format": "pt"})
    os.chmod(st, 0o644)  # installed with the app: readable by all
    cfg_path = os.path.join(out, "adapter_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg["base_model_name_or_path"] = "HuggingFaceTB/SmolLM2-135M-Instruct"
    if isinstance(cfg.get("target_modules"), list):
        cfg["target_modules"] = sorted(cfg["target_modules"])
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    readme = os.path.join(out, "README.md")
    if os.path.exists(readme):
        os.remove(readme)  # PEFT's model-card stub; docs/adapters.md describes the adapters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", required=True, choices=list(make_data.MAKERS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default=os.environ.get("SERVELAB_MODEL") or DEFAULT_MODEL)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1, help="the data generator's seed (and torch's)")
    ap.add_argument("--max-minutes", type=float, default=30.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work", help="checkpoint folder (default: OUT.work)")
    ap.add_argument("--measure", type=int, default=0, help="time this many steps, print steps/s, exit")
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        sys.exit(f"train.py: the built-in model is absent ({a.model}); scripts/bootstrap installs it")

    import torch
    from peft import LoraConfig, get_peft_model, set_peft_model_state_dict, get_peft_model_state_dict
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t_load = time.time()
    tok, base = load_model(a.model)
    cfg = LoraConfig(r=a.rank, lora_alpha=2 * a.rank, lora_dropout=0.0, bias="none", target_modules=TARGETS,
                     task_type="CAUSAL_LM")
    model = get_peft_model(base, cfg)
    model.train()
    n_examples = a.steps * a.batch
    data = encode(tok, make_data.make(a.job, a.seed, n_examples))
    lens = [len(p) + len(t) for p, t in data]
    print(f"train.py {a.job}: {n_examples} examples, tokens per example mean {sum(lens) / len(lens):.0f} "
          f"max {max(lens)}; model loaded in {time.time() - t_load:.1f} s", flush=True)

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    warm = max(1, a.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * max(0.05, 1.0 - s / a.steps))
    work = a.work or a.out.rstrip("/") + ".work"
    ckpt = os.path.join(work, "checkpoint.pt")
    step, losses, elapsed_before = 0, [], 0.0
    if os.path.exists(ckpt) and not a.measure:
        state = torch.load(ckpt, weights_only=False)
        set_peft_model_state_dict(model, state["adapter"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        torch.set_rng_state(state["rng"])
        step, losses, elapsed_before = state["step"], state["losses"], state["elapsed"]
        print(f"train.py {a.job}: resumed at step {step}", flush=True)

    t0 = time.time()
    stop_reason = "steps"
    while step < a.steps:
        items = data[step * a.batch:(step + 1) * a.batch]
        ids, mask, labels = batch_tensors(torch, items, tok.pad_token_id or 0)
        loss = target_loss(torch, model, ids, mask, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(round(float(loss.detach()), 4))
        step += 1
        spent = elapsed_before + time.time() - t0
        if a.measure and step >= a.measure:
            print(json.dumps({"job": a.job, "steps": step, "seconds": round(time.time() - t0, 1),
                              "steps_per_s": round(step / (time.time() - t0), 3), "loss": losses}))
            return
        if step % 10 == 0 or step == a.steps:
            print(f"train.py {a.job}: step {step}/{a.steps} loss {sum(losses[-10:]) / len(losses[-10:]):.4f} "
                  f"{spent / 60:.1f} min", flush=True)
        if step % 25 == 0 or step == a.steps:
            os.makedirs(work, exist_ok=True)
            torch.save({"adapter": get_peft_model_state_dict(model), "opt": opt.state_dict(),
                        "sched": sched.state_dict(), "rng": torch.get_rng_state(), "step": step,
                        "losses": losses, "elapsed": spent}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        if spent > a.max_minutes * 60 and step < a.steps:
            stop_reason = f"time cap ({a.max_minutes} min)"
            break

    save_fp16(model, a.out, a.job)
    info = {"job": a.job, "base_model": "SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized to fp32)",
            "data": f"scripts/adapters/make_data.py --job {a.job} --seed {a.seed} --count {n_examples}",
            "seed": a.seed, "steps": step, "planned_steps": a.steps, "stopped_by": stop_reason,
            "batch": a.batch, "rank": a.rank, "alpha": 2 * a.rank, "lr": a.lr, "target_modules": TARGETS,
            "examples_seen": step * a.batch, "tokens_per_example_mean": round(sum(lens) / len(lens), 1),
            "minutes": round((elapsed_before + time.time() - t0) / 60, 1), "threads": a.threads,
            "cpu": cpu_name(),
            "loss_first_10": round(sum(losses[:10]) / len(losses[:10]), 4),
            "loss_last_10": round(sum(losses[-10:]) / len(losses[-10:]), 4),
            "torch": torch.__version__}
    with open(os.path.join(a.out, "training.json"), "w") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    print(f"train.py {a.job}: wrote {a.out} ({step} steps, {info['minutes']} min, loss "
          f"{info['loss_first_10']} -> {info['loss_last_10']})", flush=True)


if __name__ == "__main__":
    main()

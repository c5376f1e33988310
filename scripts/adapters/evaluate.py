#!/usr/bin/env python3
"""The built-in adapters' quality measured with OUR engine (docs/adapters.md): starts
`servelab-cli serve` on the built-in model (which registers the three adapters under the course's
ids), sends held-out examples from scripts/adapters/make_data.py (another seed than training's)
greedily through each adapter and through the base model, and scores the answers:

  conllpp              share of answers that are JSON valid against the course's `Output` schema
                       (four lists of strings) as the course reads them (json.loads of the whole
                       text), the same for the first JSON value in the text (json's raw_decode:
                       kinder to a model that goes on after its JSON), entity micro-F1 over that
                       first value (category and text must match), exact answers
  cnn                  ROUGE-L F1 of the answer's first non-empty line against the generator's
                       highlight (word LCS, written out below)
  hellaswag_processed  exact endings (the first non-empty line; case and surrounding space aside),
                       ROUGE-L F1

  .venv/bin/python scripts/adapters/evaluate.py [--count 200] [--seed 7] [--threads 1]
      [--out bench/results/adapters-quality-DATE.json] [--cli build/release/app/servelab-cli]

Every request: POST /generate, greedy, until end of text or max_new_tokens (64; 24 for endings).
No stop sequence: the base model often opens with a newline, and a stop at newlines would score it
as empty. Standard library and jsonschema only.
"""
import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bench"))
import make_data  # noqa: E402
from results_meta import run_metadata, write_result  # noqa: E402

# NER beyond the generator: sentences written by hand in CoNLL style, with sentence shapes none of
# make_data.py's templates has and names none of its lists holds (checked in main), gold entities
# by hand. A check of what the adapter learnt beyond its templates; small, so read it as such.
UNSEEN_NER = [
    ("Only France and Britain backed Fischler 's proposal .", [["Fischler"], [], ["France", "Britain"], []]),
    ("Havel flew from Prague to Oslo for the ceremony .", [["Havel"], [], ["Prague", "Oslo"], []]),
    ("Gazprom raised gas prices for Ukrainian buyers .", [[], ["Gazprom"], [], ["Ukrainian"]]),
    ("Honda and Yamaha dominated the race in Thailand .", [[], ["Honda", "Yamaha"], ["Thailand"], []]),
    ("Heineken profits fell in Denmark , chairman Van Dijk said .", [["Van Dijk"], ["Heineken"], ["Denmark"], []]),
    ("Czech police detained a Norwegian tourist in Brno .", [[], [], ["Brno"], ["Czech", "Norwegian"]]),
    ("Peru 's president Fujimori visited Lima on Sunday .", [["Fujimori"], [], ["Peru", "Lima"], []]),
    ("Sabena cancelled flights to Kuwait after the strike .", [[], ["Sabena"], ["Kuwait"], []]),
    ("Ferrari driver Berger finished third behind Hill .", [["Berger", "Hill"], ["Ferrari"], [], []]),
    ("The Danish central bank left rates unchanged .", [[], [], [], ["Danish"]]),
    ("Kiev and Minsk signed a border treaty on Friday .", [[], [], ["Kiev", "Minsk"], []]),
    ("Shareholders of Olivetti met in Milan .", [[], ["Olivetti"], ["Milan"], []]),
    ("Tudjman accused Belgrade of delaying the talks .", [["Tudjman"], [], ["Belgrade"], []]),
    ("Norwegian skier Dahlie won gold in Lillehammer .", [["Dahlie"], [], ["Lillehammer"], ["Norwegian"]]),
    ("Greenpeace protested outside the Shell office in Hamburg .", [[], ["Greenpeace", "Shell"], ["Hamburg"], []]),
    ("Portuguese fans cheered Figo in Porto .", [["Figo"], [], ["Porto"], ["Portuguese"]]),
    ("Nissan will build a plant near Sunderland .", [[], ["Nissan"], ["Sunderland"], []]),
    ("Vranitzky and Klestil discussed the budget in Salzburg .", [["Vranitzky", "Klestil"], [], ["Salzburg"], []]),
    ("Ericsson shares jumped after a deal with Telia .", [[], ["Ericsson", "Telia"], [], []]),
    ("Hungarian and Slovak leaders met in Budapest .", [[], [], ["Budapest"], ["Hungarian", "Slovak"]]),
]
IDS = {"conllpp": "predibase/conllpp", "cnn": "predibase/cnn", "hellaswag_processed": "predibase/hellaswag_processed"}
NEW_TOKENS = {"conllpp": 64, "cnn": 64, "hellaswag_processed": 24}
# The course's `Output` model (lesson 7) as pydantic writes its schema.
OUTPUT_SCHEMA = {
    "properties": {k: {"items": {"type": "string"}, "title": k.capitalize(), "type": "array"}
                   for k in make_data.NER_KEYS},
    "required": make_data.NER_KEYS, "title": "Output", "type": "object"}


class Server:
    def __init__(self, cli, threads, max_batch):
        self.proc = subprocess.Popen([cli, "serve", "--port", "0", "--threads", str(threads), "--max-batch",
                                      str(max_batch)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = [None]
        t = threading.Thread(target=lambda: line.__setitem__(0, self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(300)
        m = re.search(r"(http://\S+:\d+)", line[0] or "")
        if not m:
            self.proc.kill()
            sys.exit(f"evaluate.py: the server did not start: {line[0]!r} {self.proc.stderr.read()}")
        self.url = m.group(1)
        self.ready_line = line[0].strip()

    def generate(self, prompt, adapter, max_new):
        body = {"inputs": prompt, "parameters": {"max_new_tokens": max_new, "do_sample": False,
                                                 "adapter_id": adapter, "adapter_source": "hub" if adapter else None,
                                                 "details": True}}
        req = urllib.request.Request(self.url + "/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            out = json.loads(r.read())
        out = out[0] if isinstance(out, list) else out
        return out["generated_text"], out["details"]["finish_reason"], out["details"]["generated_tokens"]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def words(text):
    return re.findall(r"\w+|[^\w\s]", text.lower())


def lcs(a, b):
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge_l(pred, ref):
    p, r = words(pred), words(ref)
    if not p or not r:
        return 0.0
    n = lcs(p, r)
    if n == 0:
        return 0.0
    prec, rec = n / len(p), n / len(r)
    return 2 * prec * rec / (prec + rec)


def parse_ner(text, first_value=False):
    """The answer as the course's client reads it (json.loads of the text), or its first JSON value
    (first_value), checked against the schema; None when either fails."""
    import jsonschema
    try:
        obj = json.JSONDecoder().raw_decode(text.lstrip())[0] if first_value else json.loads(text)
        jsonschema.validate(obj, OUTPUT_SCHEMA)
        return obj
    except (ValueError, jsonschema.ValidationError):
        return None


def first_line(text):
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def score(job, rows, answers):
    out = {"examples": len(rows)}
    finish = {}
    for _, reason, _ in answers:
        finish[reason] = finish.get(reason, 0) + 1
    out["finish_reasons"] = finish
    out["mean_generated_tokens"] = round(sum(a[2] for a in answers) / len(answers), 1)
    if job == "conllpp":
        valid = first = tp = fp = fn = exact = 0
        for r, (text, _, _) in zip(rows, answers):
            gold = json.loads(r["target"])
            valid += parse_ner(text) is not None
            pred = parse_ner(text, first_value=True)
            first += pred is not None
            exact += pred == gold
            pred = pred or {k: [] for k in make_data.NER_KEYS}
            for k in make_data.NER_KEYS:
                g, p = list(gold[k]), list(pred[k])
                hit = 0
                for e in p:
                    if e in g:
                        g.remove(e)
                        hit += 1
                tp += hit
                fp += len(p) - hit
                fn += len(g)
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        out.update({"json_valid": round(valid / len(rows), 4), "first_json_value_valid": round(first / len(rows), 4),
                    "entity_precision": round(prec, 4),
                    "entity_recall": round(rec, 4),
                    "entity_f1": round(2 * prec * rec / (prec + rec), 4) if prec + rec else 0.0,
                    "exact": round(exact / len(rows), 4)})
    else:
        rl = [rouge_l(first_line(text), r["target"]) for r, (text, _, _) in zip(rows, answers)]
        out["rouge_l_f1"] = round(sum(rl) / len(rl), 4)
        if job == "hellaswag_processed":
            exact = sum(first_line(text).lower() == r["target"].strip().lower() for r, (text, _, _) in zip(rows, answers))
            out["exact"] = round(exact / len(rows), 4)
    return out


def unseen_ner(srv, pool):
    """The hand-written NER sentences through the adapter and the base model."""
    vocab = set(make_data.PERSONS + make_data.ORGS + make_data.LOCATIONS + make_data.MISC)
    rows = []
    for text, gold in UNSEEN_NER:
        names = [n for group in gold for n in group]
        assert not vocab & set(names), f"{text}: {vocab & set(names)} is in make_data.py's lists"
        target = " " + json.dumps(dict(zip(make_data.NER_KEYS, gold)))
        rows.append({"input": text, "prompt": make_data.PT_CONLLPP.format(inpt=text), "target": target})
    out = {}
    for who, adapter in (("adapter", IDS["conllpp"]), ("base", None)):
        answers = list(pool.map(lambda r: srv.generate(r["prompt"], adapter, NEW_TOKENS["conllpp"]), rows))
        out[who] = score("conllpp", rows, answers)
        out[who]["answers"] = [{"input": r["input"], "answer": ans[0]} for r, ans in zip(rows, answers)]
        print(f"evaluate.py conllpp unseen {who}: " + json.dumps({k: v for k, v in out[who].items()
                                                                  if k != "answers"}), flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", default=os.path.join(ROOT, "build", "release", "app", "servelab-cli"))
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--jobs", default=",".join(IDS))
    ap.add_argument("--out")
    a = ap.parse_args()
    meta = run_metadata([os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:], threads=a.threads,
                        probe_bandwidth=False)
    started = time.time()
    srv = Server(a.cli, a.threads, a.max_batch)
    result = {"server": f"servelab-cli serve --port 0 --threads {a.threads} --max-batch {a.max_batch}",
              "server_ready": srv.ready_line,
              "data": f"scripts/adapters/make_data.py --seed {a.seed} --count {a.count} (training used seed 1)",
              "decoding": "greedy, until end of text or max_new_tokens; no stop sequence", "jobs": {}}
    try:
        with concurrent.futures.ThreadPoolExecutor(a.max_batch) as pool:
            for job in a.jobs.split(","):
                rows = make_data.make(job, a.seed, a.count)
                entry = {"adapter": IDS[job], "max_new_tokens": NEW_TOKENS[job]}
                for who, adapter in (("adapter", IDS[job]), ("base", None)):
                    t0 = time.time()
                    answers = list(pool.map(lambda r: srv.generate(r["prompt"], adapter, NEW_TOKENS[job]), rows))
                    entry[who] = score(job, rows, answers)
                    entry[who]["seconds"] = round(time.time() - t0, 1)
                    entry[who]["samples"] = [{"input": r["input"], "reference": r["target"], "answer": ans[0]}
                                             for r, ans in list(zip(rows, answers))[:3]]
                    print(f"evaluate.py {job} {who}: " + json.dumps({k: v for k, v in entry[who].items()
                                                                      if k != "samples"}), flush=True)
                if job == "conllpp":
                    entry["unseen"] = unseen_ner(srv, pool)
                result["jobs"][job] = entry
    finally:
        srv.stop()
    result["seconds"] = round(time.time() - started, 1)
    summary = []
    jobs = result["jobs"]
    if "conllpp" in jobs:
        ad, base = jobs["conllpp"]["adapter"], jobs["conllpp"]["base"]
        summary += [
            {"label": "predibase/conllpp: JSON valid against the Output schema (json.loads of the answer)",
             "value": ad["json_valid"], "target": ">= 0.95", "verdict": "met" if ad["json_valid"] >= 0.95 else "missed"},
            {"label": "predibase/conllpp: entity micro-F1", "value": ad["entity_f1"], "target": ">= 0.8",
             "verdict": "met" if ad["entity_f1"] >= 0.8 else "missed"},
            {"label": "base model, same prompts: JSON valid / entity F1",
             "value": f"{base['json_valid']} / {base['entity_f1']}", "verdict": "info"},
            {"label": "hand-written sentences beyond the templates: JSON valid / entity F1 (base model)",
             "value": f"{jobs['conllpp']['unseen']['adapter']['json_valid']} / "
                      f"{jobs['conllpp']['unseen']['adapter']['entity_f1']} "
                      f"({jobs['conllpp']['unseen']['base']['json_valid']} / "
                      f"{jobs['conllpp']['unseen']['base']['entity_f1']})", "verdict": "info"}]
    if "cnn" in jobs:
        summary.append({"label": "predibase/cnn: ROUGE-L F1 (base model)",
                        "value": f"{jobs['cnn']['adapter']['rouge_l_f1']} ({jobs['cnn']['base']['rouge_l_f1']})",
                        "verdict": "info"})
    if "hellaswag_processed" in jobs:
        h = jobs["hellaswag_processed"]
        summary.append({"label": "predibase/hellaswag_processed: exact endings (base model)",
                        "value": f"{h['adapter']['exact']} ({h['base']['exact']})", "verdict": "info"})
    payload = {"benchmark": "adapters-quality", "results": result, "summary": summary}
    if a.out:
        write_result(a.out, meta, payload)
    else:
        print(json.dumps({"schema": "servelab-bench/1", "meta": meta, **payload}, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()

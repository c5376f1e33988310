#!/usr/bin/env python3
"""servelab-cli serve against the clients people use: the course's lesson-7 code on PyPI's
lorax-client, the openai client, and plain HTTP for what the clients cannot send. Structured output
(xgrammar) is checked with jsonschema.

Servers (all on 127.0.0.1, port 0, started here, stopped with SIGTERM and required to exit 0):
  demo   --demo (GPT-2 small shape, random weights, real tokenizer) with LoRA adapters made by peft
         for that shape: three as Hugging Face Hub repositories in a private HF cache
         (HF_HUB_CACHE, models--predibase--<name>/snapshots/<rev>, as the lesson names them) and one
         registered with --adapter. Volume: the lesson, greedy parity, bad input.
  small  --demo --max-batch 1 --max-queue 1 --shutdown-grace 1: queue full, disconnects, SIGTERM.
  smol   the built-in SmolLM2-135M-Instruct: real text through the OpenAI client and LoRAX, its
         built-in adapters (docs/adapters.md) under the course's ids with an empty HF cache; the
         lesson's NER cell through predibase/conllpp. smol_bare: the same with --no-builtin-adapters.
  guarded  --demo with --api-key, --allowed-origins and --access-log; timeout --request-timeout 0.5;
         tls  --ssl-certfile/--ssl-keyfile with a self-signed certificate made by openssl here.

Run:  .venv/bin/python tests/serve/test_serve.py --cli build/release/app/servelab-cli [-v]
"""
import argparse
import ast
import asyncio
import concurrent.futures
import contextlib
import io
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("MPLBACKEND", "Agg")
HERE = os.path.dirname(os.path.abspath(__file__))
CLI = None
TMP = None
SERVERS = {}

# ---- servers -------------------------------------------------------------------------------------


class Server:
    def __init__(self, name, args, env=None, ready_s=180):
        self.name = name
        self.err_path = os.path.join(TMP, f"{name}.stderr")
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen([CLI, "serve", "--port", "0", *args], stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, env={**os.environ, **(env or {})})
        line = [None]
        reader = threading.Thread(target=lambda: line.__setitem__(0, self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(ready_s)
        m = re.search(r"(https?)://(\S+):(\d+)", line[0] or "")
        if not m:
            self.proc.kill()
            raise RuntimeError(f"{name} server did not start: {line[0]!r}\n{open(self.err_path).read()}")
        self.host, self.port = m.group(2), int(m.group(3))
        self.url = f"{m.group(1)}://{self.host}:{self.port}"

    def stop(self, timeout=60):
        """SIGTERM; returns (exit code, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = "killed after %ss" % timeout
        self.err.close()
        return rc, open(self.err_path).read()


API_KEY = "test-key-1234"


def server(name):
    if name not in SERVERS:
        if name == "demo":
            # A long grace: test_3 needs its running requests to end whole however busy the machine is.
            SERVERS[name] = Server("demo", ["--demo", "--max-batch", "8", "--threads", "2", "--shutdown-grace", "300",
                                            "--adapter", f"mine={ADAPTERS['mine']}"],
                                   env={"HF_HUB_CACHE": os.path.join(TMP, "hf", "hub")})
        elif name == "small":
            SERVERS[name] = Server("small", ["--demo", "--max-batch", "1", "--max-queue", "1", "--threads", "2",
                                             "--shutdown-grace", "1"])
        elif name == "paged_tight":  # 8 blocks of 16 positions for 8 batch places: preemption
            SERVERS[name] = Server("paged_tight", ["--demo", "--max-batch", "8", "--threads", "2",
                                                   "--kv-budget-blocks", "8", "--block-size", "16"])
        elif name == "slot":
            SERVERS[name] = Server("slot", ["--demo", "--max-batch", "4", "--threads", "2", "--kv", "slot"])
        elif name == "guarded":  # what exposing a server takes: a key, CORS, an access log
            SERVERS[name] = Server("guarded", ["--demo", "--max-batch", "2", "--threads", "2", "--api-key", API_KEY,
                                               "--allowed-origins", "http://lab.example", "--access-log"])
        elif name == "timeout":  # no request of 1000 tokens ends within half a second, however fast the CPU
            SERVERS[name] = Server("timeout", ["--demo", "--max-batch", "1", "--threads", "2",
                                               "--request-timeout", "0.5", "--read-timeout", "5", "--access-log"])
        elif name == "smol":
            # The built-in model: its built-in adapters registered by default (docs/adapters.md), an
            # empty Hugging Face cache (the course's adapter_source="hub" must find them anyway).
            empty = os.path.join(TMP, "empty-hf-hub")
            os.makedirs(empty, exist_ok=True)
            SERVERS[name] = Server("smol", ["--threads", "2", "--max-batch", "4", "--max-total-tokens", "1024"],
                                   env={"HF_HUB_CACHE": empty})
        elif name == "smol_bare":  # the built-in model without its adapters
            empty = os.path.join(TMP, "empty-hf-hub")
            os.makedirs(empty, exist_ok=True)
            SERVERS[name] = Server("smol_bare", ["--threads", "1", "--max-batch", "1", "--no-builtin-adapters"],
                                   env={"HF_HUB_CACHE": empty})
    return SERVERS[name]


# ---- adapters ------------------------------------------------------------------------------------

ADAPTERS = {}
HUB = {"predibase/hellaswag_processed": (["c_attn"], 4), "predibase/cnn": (["c_attn", "c_proj"], 8),
       "predibase/conllpp": (["c_fc"], 4)}


def make_adapters():
    """PEFT LoRA adapters for the demo's GPT-2 small shape (random base: only the shapes matter;
    init_lora_weights=False keeps peft's non-zero B so that each adapter changes the output)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import GPT2Config, GPT2LMHeadModel
    warnings.filterwarnings("ignore")
    torch.manual_seed(7)
    model = GPT2LMHeadModel(GPT2Config())
    specs = dict(HUB)
    specs["mine"] = (["c_attn", "c_fc"], 4)
    hub = os.path.join(TMP, "hf", "hub")
    for i, (name, (targets, r)) in enumerate(specs.items()):
        torch.manual_seed(100 + i)
        peft_model = get_peft_model(model, LoraConfig(target_modules=targets, r=r, lora_alpha=2 * r,
                                                      init_lora_weights=False, fan_in_fan_out=True))
        if "/" in name:
            repo = os.path.join(hub, "models--" + name.replace("/", "--"))
            rev = "%040x" % (i + 1)
            out = os.path.join(repo, "snapshots", rev)
            os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
            with open(os.path.join(repo, "refs", "main"), "w") as f:
                f.write(rev)
        else:
            out = os.path.join(TMP, "adapters", name)
        peft_model.save_pretrained(out)
        ADAPTERS[name] = out
        model = peft_model.unload()
    # A Hub repository whose adapter cannot load (its config cut off): found, registered, then 424.
    broken = os.path.join(hub, "models--broken--adapter", "snapshots", "0" * 40)
    os.makedirs(broken)
    with open(os.path.join(broken, "adapter_config.json"), "w") as f:
        f.write('{"peft_type": "LORA", "r": ')


# ---- HTTP helpers --------------------------------------------------------------------------------

def post(srv, path, body, timeout=120, raw=None):
    import requests
    if raw is not None:
        return requests.post(srv.url + path, data=raw, timeout=timeout, headers={"Content-Type": "application/json"})
    return requests.post(srv.url + path, json=body, timeout=timeout)


def post_get(srv, path):
    import requests
    return requests.get(srv.url + path, timeout=30).json()


def info(srv):
    import requests
    return requests.get(srv.url + "/info", timeout=30).json()


def generate_ids(srv, prompt, max_new, adapter=None, stream=False):
    """Greedy token ids of one request, through /generate (details) or /generate_stream."""
    params = {"max_new_tokens": max_new, "details": True, "adapter_id": adapter,
              "adapter_source": "hub" if adapter else None}
    if not stream:
        r = post(srv, "/generate", {"inputs": prompt, "parameters": params})
        assert r.status_code == 200, r.text
        return [t["id"] for t in r.json()["details"]["tokens"]]
    import requests
    ids = []
    with requests.post(srv.url + "/generate_stream", json={"inputs": prompt, "parameters": params},
                       stream=True, timeout=120) as r:
        assert r.status_code == 200, r.text
        for line in r.iter_lines():
            if line.startswith(b"data:"):
                ev = json.loads(line[5:])
                assert "error" not in ev, ev
                ids.append(ev["token"]["id"])
                if ev["details"]:
                    assert ev["details"]["generated_tokens"] == len(ids)
    return ids


def require_structured_output():
    if not info(server("smol"))["structured_output"]["available"]:
        raise unittest.SkipTest("this servelab-cli has no structured output: scripts/build_xgrammar, then "
                                "configure again")


# ---- the lesson ------------------------------------------------------------------------------------

def lesson_sections():
    sections, name, lines = {}, None, []
    for line in open(os.path.join(HERE, "lesson7_lorax.py")):
        if line.startswith("# %% "):
            if name:
                sections[name] = "".join(lines)
            name, lines = line[5:].strip(), []
        elif name:
            lines.append(line)
    sections[name] = "".join(lines)
    return sections


class Lesson7(unittest.TestCase):
    """The course's lesson-7 client code, unchanged, against the demo server."""
    ns = None

    @classmethod
    def setUpClass(cls):
        srv = server("demo")
        utils_dir = os.path.join(TMP, "lesson")
        os.makedirs(utils_dir, exist_ok=True)
        with open(os.path.join(utils_dir, "utils.py"), "w") as f:
            f.write(f"endpoint_url = {srv.url!r}\nheaders = {{}}\n")
        sys.path.insert(0, utils_dir)
        cls.sections = lesson_sections()
        cls.ns = {"__name__": "lesson7"}
        cls.run_section("Setup")

    @classmethod
    def run_section(cls, name):
        code = compile(cls.sections[name], f"lesson7:{name}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            result = eval(code, cls.ns)
            if asyncio.iscoroutine(result):
                asyncio.run(result)
        return out.getvalue()

    def test_1_prefill_vs_decode(self):
        out = self.run_section("Prefill vs Decode (KV Cache)")
        resp, durations = self.ns["resp"], self.ns["durations_s"]
        print(f"\n    request {self.ns['duration_s']:.3f} s; stream TTFT {durations[0]:.3f} s, "
              f"{(len(durations) - 1) / sum(durations[1:]):.1f} tok/s", file=sys.stderr)
        self.assertIn("Time to first token (TTFT) (s):", out)
        self.assertLessEqual(len(durations), 32)
        self.assertEqual(resp.details.generated_tokens, len(durations))
        self.assertGreater(len(durations), 1)

    def test_2_continuous_batching(self):
        self.run_section("Continuous Batching")
        d = self.ns["durations_s"]
        self.assertEqual([len(s) for s in d], [100, 10, 10], "a stream ended early (EOS on the random model?)")
        # The short streams joined the long one's batch and ended long before it.
        self.assertLess(sum(d[1]), sum(d[0]))
        self.assertLess(sum(d[2]), sum(d[0]))
        print(f"\n    TTFT (s): {[round(s[0], 3) for s in d]}, tok/s: "
              f"{[round((len(s) - 1) / sum(s[1:]), 1) for s in d]}", file=sys.stderr)

    def test_3_multi_lora(self):
        out = self.run_section("Multi-LoRA")
        self.assertEqual(out.count("Time to first token (TTFT) (s):"), 4)  # three alone, then together
        self.assertTrue(all(0 < len(s) <= 64 for s in self.ns["durations_s"]))
        self.assertTrue(set(HUB) <= set(info(server("demo"))["adapters"]))

    def test_4_structured_output(self):
        """The lesson's bonus: a pydantic schema through response_format, on SmolLM2 (the random demo
        model would fill a JSON string with noise until max_new_tokens, as any model may)."""
        import jsonschema
        import types
        require_structured_output()
        smol = types.ModuleType("utils")
        smol.endpoint_url, smol.headers = server("smol").url, {}
        saved = sys.modules.get("utils")
        sys.modules["utils"] = smol
        try:
            ns = {"__name__": "lesson7_smol"}
            exec(compile(self.sections["Setup"], "lesson7:Setup", "exec"), ns)
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(self.sections["Bonus: Structured Generation"], "lesson7:Bonus", "exec"), ns)
                person = json.loads(ns["resp"].generated_text)
                jsonschema.validate(person, ns["schema"])
        finally:
            sys.modules["utils"] = saved
        print(f"\n    Person: {person}", file=sys.stderr)
        so = info(server("smol"))["structured_output"]
        print(f"    structured output on SmolLM2 (49,152 tokens): {so}", file=sys.stderr)
        self.assertGreater(so["masked_tokens"], 10)

    def test_5_ner(self):
        """The NER bonus's last cell, unchanged, on the built-in model: predibase/conllpp is the
        built-in adapter (no Hugging Face cache), and json.loads of its answer succeeds. (The cells
        before it need the course's Mistral-7B: SmolLM2-135M alone, held to the Output schema,
        repeats inside a string until max_new_tokens; bench/lesson7.py records what it does.)"""
        import jsonschema
        import types
        smol = types.ModuleType("utils")
        smol.endpoint_url, smol.headers = server("smol").url, {}
        saved = sys.modules.get("utils")
        sys.modules["utils"] = smol
        try:
            ns = {"__name__": "lesson7_smol"}
            exec(compile(self.sections["Setup"], "lesson7:Setup", "exec"), ns)
            cell = self.sections["Bonus: Structured Generation (NER)"]
            # The template, the Output model, then the last cell (the adapter's answer).
            template = cell[:cell.index("# Base Mistral-7B")]
            model = cell[cell.index("from typing import List"):cell.index("schema = Output.schema()")]
            last = cell[cell.rindex("resp = client.generate("):]
            self.assertIn('adapter_id="predibase/conllpp"', last)
            exec(compile(template + model + "schema = Output.schema()\n" + last, "lesson7:NER", "exec"), ns)
            answer = json.loads(ns["resp"].generated_text)
            jsonschema.validate(answer, ns["schema"])
        finally:
            sys.modules["utils"] = saved
        print(f"\n    predibase/conllpp: {answer}", file=sys.stderr)
        self.assertEqual(answer, {"person": ["Fischler"], "organization": [], "location": ["France", "Britain"],
                                  "miscellaneous": []})
        self.assertEqual(ns["resp"].details.finish_reason, "eos_token")


class BuiltinAdapters(unittest.TestCase):
    """The built-in model's adapters: registered by default under the course's ids, found with
    adapter_source "hub" and an empty Hugging Face cache; left out with --no-builtin-adapters and on
    any other model."""
    IDS = ["predibase/hellaswag_processed", "predibase/cnn", "predibase/conllpp"]

    def test_registered_on_the_builtin_model(self):
        srv = server("smol")
        self.assertEqual(sorted(info(srv)["adapters"]), sorted(self.IDS))
        for adapter in self.IDS:
            r = post(srv, "/generate", {"inputs": "The rain in Spain", "parameters": {
                "max_new_tokens": 2, "adapter_id": adapter, "adapter_source": "hub"}})
            self.assertEqual(r.status_code, 200, r.text)
        rc = srv.proc.poll()
        self.assertIsNone(rc)
        self.assertIn("built-in adapters predibase/hellaswag_processed, predibase/cnn, predibase/conllpp",
                      open(srv.err_path).read())

    def test_left_out_with_the_flag(self):
        srv = server("smol_bare")
        self.assertEqual(info(srv)["adapters"], [])
        r = post(srv, "/", {"inputs": "x", "parameters": {"max_new_tokens": 1,
                                                                  "adapter_id": "predibase/conllpp",
                                                                  "adapter_source": "hub"}})
        self.assertEqual(r.status_code, 422, r.text)
        self.assertIn("unknown adapter 'predibase/conllpp'", r.text)
        self.assertNotIn("built-in adapters", open(srv.err_path).read())

    def test_not_on_another_model(self):
        # The demo server (GPT-2 shape) finds these ids only in its own test Hub cache, and says
        # nothing about built-in adapters.
        srv = server("demo")
        self.assertNotIn("built-in adapters", open(srv.err_path).read())
        adapters = info(srv)["adapters"]
        self.assertIn("mine", adapters)
        for adapter in adapters:
            self.assertNotIn("resources/adapters", adapter)


# ---- OpenAI --------------------------------------------------------------------------------------

class OpenAIClient(unittest.TestCase):
    def client(self, name):
        import openai
        return openai.OpenAI(base_url=server(name).url + "/v1", api_key="none", max_retries=0, timeout=120)

    def test_models(self):
        ids = [m.id for m in self.client("demo").models.list().data]
        self.assertEqual(ids[0], "servelab-demo-gpt2")
        self.assertIn("mine", ids)

    def test_completions(self):
        c = self.client("demo")
        r = c.completions.create(model="servelab-demo-gpt2", prompt="The quick brown fox", max_tokens=12,
                                 temperature=0)
        self.assertEqual(r.usage.completion_tokens, 12)
        self.assertEqual(r.usage.prompt_tokens, 4)
        self.assertEqual(r.choices[0].finish_reason, "length")
        chunks = list(c.completions.create(model="servelab-demo-gpt2", prompt="The quick brown fox", max_tokens=12,
                                           temperature=0, stream=True, stream_options={"include_usage": True}))
        self.assertEqual("".join(ch.choices[0].text for ch in chunks if ch.choices), r.choices[0].text)
        self.assertEqual(chunks[-1].usage.completion_tokens, 12)
        # An adapter by model name changes the text.
        a = c.completions.create(model="mine", prompt="The quick brown fox", max_tokens=12, temperature=0)
        self.assertNotEqual(a.choices[0].text, r.choices[0].text)

    def test_chat_real_text(self):
        c = self.client("smol")
        msgs = [{"role": "user", "content": "What is the capital of France?"}]
        r = c.chat.completions.create(model="tgi", messages=msgs, max_tokens=24, temperature=0)
        text = r.choices[0].message.content
        self.assertIn("Paris", text)
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        chunks = list(c.chat.completions.create(model="tgi", messages=msgs, max_tokens=24, temperature=0,
                                                stream=True))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        self.assertEqual("".join(ch.choices[0].delta.content or "" for ch in chunks), text)
        self.assertIn(chunks[-1].choices[0].finish_reason, ("stop", "length"))

    def test_structured_output(self):
        import jsonschema
        require_structured_output()
        schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                   "population": {"type": "integer", "minimum": 0},
                                                   "tags": {"type": "array", "maxItems": 3,
                                                            "items": {"type": "string", "maxLength": 12}}},
                  "required": ["city", "population", "tags"]}
        c = self.client("smol")
        msgs = [{"role": "user", "content": "Describe Paris as JSON."}]
        fmt = {"type": "json_schema", "json_schema": {"name": "city", "schema": schema, "strict": True}}
        r = c.chat.completions.create(model="tgi", messages=msgs, max_tokens=96, temperature=0, response_format=fmt)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)
        chunks = list(c.chat.completions.create(model="tgi", messages=msgs, max_tokens=96, temperature=0,
                                                response_format=fmt, stream=True))
        self.assertEqual("".join(ch.choices[0].delta.content or "" for ch in chunks), r.choices[0].message.content)
        # Any JSON, sampled: it may run out of tokens inside a string, but it is JSON from the first byte.
        r = c.chat.completions.create(model="tgi", messages=msgs, max_tokens=64, temperature=0.8, seed=3,
                                      response_format={"type": "json_object"})
        text = r.choices[0].message.content
        self.assertIn(text[:1], "{[\"-0123456789tfn")
        if r.choices[0].finish_reason == "stop":
            json.loads(text)
        # TGI's grammar form, sampled, on the LoRAX route.
        r = post(server("smol"), "/generate", {"inputs": "A city:", "parameters": {
            "max_new_tokens": 96, "do_sample": True, "seed": 5, "grammar": {"type": "json", "value": schema}}})
        self.assertEqual(r.status_code, 200, r.text)
        jsonschema.validate(json.loads(r.json()["generated_text"]), schema)
        print(f"\n    structured output on SmolLM2 so far: {info(server('smol'))['structured_output']}",
              file=sys.stderr)

    def test_lorax_real_text(self):
        from lorax import Client
        r = Client(server("smol").url).generate("The capital of France is", max_new_tokens=8)
        self.assertIn("Paris", r.generated_text)


# ---- continuous batching: every stream equals its request served alone -----------------------------

WORDS = "the quick brown fox jumped over lazy dog rain in Spain falls what comes up must serve tokens".split()


class GreedyParity(unittest.TestCase):
    def test_40_requests_over_8_connections(self):
        srv = server("demo")
        rng = random.Random(16)
        adapters = [None, "mine", "predibase/cnn", "predibase/conllpp"]
        reqs = [(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))), rng.randint(2, 24),
                 adapters[i % 4], i % 2 == 0) for i in range(40)]
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda r: generate_ids(srv, r[0], r[1], r[2], r[3]), reqs))
        alone = [generate_ids(srv, p, n, a) for p, n, a, _ in reqs]
        for i, (t, a) in enumerate(zip(together, alone)):
            self.assertEqual(t, a, f"request {i} {reqs[i][1:3]}: batched tokens differ from the request alone")
        # The adapters are really applied: the same prompt gives other tokens under each.
        outs = {ad: generate_ids(srv, "The rain in Spain", 8, ad) for ad in adapters}
        self.assertEqual(len({tuple(v) for v in outs.values()}), 4, outs)


# ---- paged KV ------------------------------------------------------------------------------------

class PagedKv(unittest.TestCase):
    """Paged KV is the default (demo above runs on it); a pool too small for the load preempts,
    prefix caching hits on shared prompts, slot KV stays selectable."""

    def test_info_names_the_kv_memory(self):
        kv = info(server("demo"))["kv_memory"]
        self.assertEqual((kv["kind"], kv["block_size"], kv["prefix_caching"]), ("paged", 16, True))
        self.assertEqual(kv["blocks"], 8 * 1024 // 16)  # slot KV's memory: max batch x max total tokens
        self.assertEqual(info(server("slot"))["kv_memory"]["kind"], "slot")

    def test_preemption_keeps_every_stream_its_solo_tokens(self):
        srv = server("paged_tight")
        rng = random.Random(17)
        reqs = [(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 30))), rng.randint(20, 60), i % 2 == 0)
                for i in range(16)]
        before = metrics(srv)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            together = list(pool.map(lambda r: generate_ids(srv, r[0], r[1], None, r[2]), reqs))
        after = metrics(srv)
        preempted = metric(after, "vllm:num_preemptions_total") - metric(before, "vllm:num_preemptions_total")
        self.assertGreater(preempted, 0, "8 requests of up to 90 positions in 128 must preempt")
        alone = [generate_ids(srv, p, n) for p, n, _ in reqs]
        for i, (t, a) in enumerate(zip(together, alone)):
            self.assertEqual(t, a, f"request {i} {reqs[i][1:]}: tokens under preemption differ from its solo run")
        m = metrics(srv)
        self.assertEqual(metric(m, "servelab:kv_blocks_total"), 8)
        self.assertEqual(metric(m, "servelab:kv_blocks_used"), 0)  # all returned when idle
        self.assertEqual(metric(m, "vllm:kv_cache_usage_perc"), 0)
        self.assertLessEqual(metric(m, "servelab:kv_blocks_cached"), 8)

    def test_request_larger_than_the_pool_is_refused_alone(self):
        srv = server("paged_tight")
        r = post(srv, "/generate", {"inputs": "hello", "parameters": {"max_new_tokens": 200}})
        self.assertEqual(r.status_code, 422, r.text)
        self.assertIn("needs 13 KV blocks of 16 positions", r.json()["error"])
        self.assertIn("holds 8", r.json()["error"])
        self.assertEqual(len(generate_ids(srv, "hello", 5)), 5)  # the next one is served

    def test_shared_system_prompt_hits_the_prefix_cache(self):
        srv = server("demo")
        system = " ".join(WORDS[i % len(WORDS)] for i in range(60))  # several full blocks
        first = post(srv, "/generate", {"inputs": system + " first question", "parameters": {
            "max_new_tokens": 3, "details": True}})
        self.assertEqual(first.status_code, 200, first.text)
        before = metrics(srv)
        second = post(srv, "/generate", {"inputs": system + " another question", "parameters": {
            "max_new_tokens": 3, "details": True}})
        self.assertEqual(second.status_code, 200, second.text)
        after = metrics(srv)
        prompt = second.json()["details"]["prompt_tokens"]
        hits = metric(after, "vllm:prefix_cache_hits_total") - metric(before, "vllm:prefix_cache_hits_total")
        queries = metric(after, "vllm:prefix_cache_queries_total") - metric(before, "vllm:prefix_cache_queries_total")
        self.assertEqual(queries, prompt)
        self.assertGreaterEqual(hits, 32)  # at least two full blocks of the shared prefix
        self.assertEqual(hits % 16, 0)  # only full blocks are shared
        self.assertLess(hits, prompt)

    def test_slot_kv_parity(self):
        srv = server("slot")
        rng = random.Random(18)
        reqs = [(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 20))), rng.randint(2, 16), i % 2 == 1)
                for i in range(10)]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            together = list(pool.map(lambda r: generate_ids(srv, r[0], r[1], None, r[2]), reqs))
        self.assertEqual(together, [generate_ids(srv, p, n) for p, n, _ in reqs])
        m = metrics(srv)
        self.assertEqual(metric(m, "servelab:kv_blocks_total"), 0)
        self.assertEqual(metric(m, "vllm:num_preemptions_total"), 0)
        self.assertEqual(metric(m, "vllm:prefix_cache_queries_total"), 0)  # no prefix cache to ask

    def test_bad_kv_options(self):
        for args, word in ((["--kv", "ring"], "--kv must be paged or slot"),
                           (["--kv", "slot", "--kv-budget-blocks", "4"], "paged KV's"),
                           (["--kv-budget-mb", "5", "--kv-budget-blocks", "4"], "excludes")):
            p = subprocess.run([CLI, "serve", "--demo", "--port", "0", *args], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(word, p.stderr)
        p = subprocess.run([CLI, "serve", "--demo", "--port", "0", "--kv-budget-mb", "0.01"], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("holds no block of 16 positions", p.stderr)


# ---- bad input -----------------------------------------------------------------------------------

class BadInput(unittest.TestCase):
    def check(self, srv, path, body, status, *words, raw=None):
        r = post(srv, path, body, raw=raw)
        self.assertEqual(r.status_code, status, r.text)
        j = r.json()
        message = j["error"]["message"] if isinstance(j["error"], dict) else j["error"]
        for w in words:
            self.assertIn(w, message)
        return r

    def test_lorax_errors(self):
        srv = server("demo")
        v = "validation"
        r = self.check(srv, "/", None, 422, "not valid JSON", raw=b'{"inputs": "x",')
        self.assertEqual(r.json()["error_type"], v)
        self.check(srv, "/", None, 422, "JSON object", raw=b"[1, 2]")
        self.check(srv, "/", {"parameters": {}}, 422, "inputs is required")
        self.check(srv, "/", {"inputs": 5}, 422, "inputs must be a string")
        self.check(srv, "/", {"inputs": "x", "parameters": []}, 422, "parameters must be an object")
        self.check(srv, "/", {"inputs": "x", "parameters": {"max_new_tokens": "ten"}}, 422,
                   "max_new_tokens must be an integer")
        self.check(srv, "/", {"inputs": "x", "parameters": {"max_new_tokens": 0}}, 422, "at least 1")
        self.check(srv, "/", {"inputs": "x", "parameters": {"temperature": -1}}, 422, "temperature")
        self.check(srv, "/", {"inputs": "x", "parameters": {"stop": [1]}}, 422, "stop")
        self.check(srv, "/", {"inputs": "", "parameters": {}}, 422, "empty")
        self.check(srv, "/", {"inputs": "hi " * 1100, "parameters": {"max_new_tokens": 5}}, 422,
                   "the prompt has 1101 tokens and 5 new tokens", "1106 exceeds the 1024 positions")
        self.check(srv, "/", {"inputs": "hello", "parameters": {"max_new_tokens": 2000}}, 422,
                   "2000 new tokens", "1024")
        self.check(srv, "/", {"inputs": "x", "parameters": {"adapter_id": "nobody/nothing"}}, 422,
                   "unknown adapter 'nobody/nothing'", "models--nobody--nothing")
        self.check(srv, "/", {"inputs": "x", "parameters": {"adapter_id": "a", "adapter_source": "s3"}}, 422,
                   "adapter_source 's3'")
        self.check(srv, "/", {"inputs": "x", "parameters": {"adapter_id": "/nonexistent", "adapter_source": "local"}},
                   422, "PEFT folder")
        for path in ("/generate", "/generate_stream"):
            r = self.check(srv, path, {"inputs": "x", "parameters": {"adapter_id": "broken/adapter"}}, 424,
                           "adapter 'broken/adapter' could not be loaded")
            self.assertEqual(r.json()["error_type"], "generation")
        self.check(srv, "/generate", None, 413, "larger than", raw=b'{"inputs": "' + b"x" * (3 << 20) + b'"}')
        r = self.check(srv, "/nothing", {}, 404, "no such endpoint")
        # Found by fuzz_serve_request: numbers past double's range were a 500; nesting is bounded
        # before anything recurses over it; integers past int64 are named, not wrapped.
        self.check(srv, "/", None, 422, "not valid JSON", raw=b'{"inputs": "x", "parameters": {"seed": 1e309}}')
        self.check(srv, "/", None, 422, "nests deeper than 64", raw=b'{"inputs": "x", "p": ' + b"[" * 100000 + b"]" * 100000 + b"}")
        self.check(srv, "/", {"inputs": "x", "parameters": {"max_new_tokens": 18446744073709551615}}, 422,
                   "max_new_tokens is too large")
        # A non-string "type" was a json type_error (500); the fuzz harness confirms the fix.
        self.check(srv, "/", {"inputs": "x", "parameters": {"response_format": {"type": 1}}}, 422, "response_format")
        self.check(srv, "/", {"inputs": "x", "parameters": {"grammar": {"type": None, "value": {}}}}, 422, "grammar")
        # The client's own nulls are fine, and the server still answers.
        r = post(srv, "/", {"inputs": "x", "parameters": {"adapter_id": None, "response_format": None,
                                                          "max_new_tokens": 2, "stop": []}, "stream": False})
        self.assertEqual(r.status_code, 200, r.text)
        self.assertIsInstance(r.json(), list)

    def test_every_numeric_and_enumerated_field(self):
        # Each field at a value out of its domain, refused naming it (422 on LoRAX/TGI, 400 on OpenAI's
        # routes, as each API answers) before anything is allocated or queued; raw bodies carry what json.dumps cannot (1e400 parses as infinity).
        srv = server("demo")
        L = lambda **p: {"inputs": "x", "parameters": p}
        lorax = [
            (L(max_new_tokens=10**18), [str(10**18), "new tokens"]),
            (L(max_new_tokens=-1), ["max_new_tokens", "at least 1"]),
            (L(max_new_tokens=2.5), ["max_new_tokens", "integer"]),
            (L(temperature=-0.5), ["temperature"]),
            (L(temperature="hot"), ["temperature", "number"]),
            (L(top_k=0), ["top_k"]),
            (L(top_k=-3), ["top_k"]),
            (L(top_p=0), ["top_p"]),
            (L(top_p=1.5), ["top_p"]),
            (L(seed=-1), ["seed"]),
            (L(seed=2**64 - 1), ["seed", "at most 9223372036854775807"]),
            (L(seed=1e300), ["seed", "integer"]),
            (L(typical_p=5), ["typical_p"]),
            (L(repetition_penalty=0), ["parameters.repetition_penalty", "(0, 100]"]),
            (L(frequency_penalty=3), ["parameters.frequency_penalty", "[-2, 2]"]),
            (L(best_of=4), ["best_of"]),
            (L(stop=["a", "b", "c", "d", "e"]), ["parameters.stop", "at most 4"]),
            (L(stop=["x" * 1000]), ["parameters.stop", "256 bytes"]),
            (L(stop=[""]), ["parameters.stop", "empty"]),
            (L(stop={"a": 1}), ["stop", "list of strings"]),
            (L(top_n_tokens=21), ["top_n_tokens", "[0, 20]"]),
            (L(return_k_alternatives=3), ["return_k_alternatives"]),
            (L(decoder_input_details=True), ["decoder_input_details"]),
            (L(details="yes"), ["details", "true or false"]),
            (L(truncate=0), ["truncate"]),
            (L(adapter_id=5), ["adapter_id", "string"]),
            (L(adapter_id="a", adapter_source="ftp"), ["adapter_source 'ftp'"]),
            (L(response_format={"type": "xml"}), ["response_format"]),
            (L(response_format="json"), ["response_format"]),
            (L(grammar={"type": "ebnf", "value": "x"}), ["grammar"]),
            ({"inputs": "x", "stream": "yes"}, ["stream", "true or false"]),
        ]
        for body, words in lorax:
            r = self.check(srv, "/generate", body, 422, *words)
            self.assertEqual(r.json()["error_type"], "validation", body)
        self.check(srv, "/generate", None, 422, "not valid JSON", "1e400",
                   raw=b'{"inputs": "x", "parameters": {"temperature": 1e400}}')
        C = lambda **b: {"prompt": "x", **b}
        openai = [
            (C(max_tokens=0), ["max_tokens", "at least 1"]),
            (C(max_tokens=10**18), [str(10**18), "new tokens"]),
            (C(max_completion_tokens=-5), ["max_tokens"]),
            (C(temperature=2.5), ["temperature", "[0, 2]"]),
            (C(top_p=-1), ["top_p"]),
            (C(seed="s"), ["seed", "integer"]),
            (C(n=3), ["n must be 1"]),
            (C(best_of=2), ["best_of"]),
            (C(logprobs=21), ["logprobs", "[0, 20]"]),
            (C(logprobs=True), ["logprobs"]),
            (C(top_logprobs=3), ["top_logprobs", "chat completions"]),
            (C(logit_bias={"50256": -100}), ["logit_bias"]),
            (C(suffix="end"), ["suffix"]),
            (C(presence_penalty=2.5), ["presence_penalty", "[-2, 2]"]),
            (C(frequency_penalty=-3), ["frequency_penalty", "[-2, 2]"]),
            (C(repetition_penalty=-1), ["repetition_penalty", "(0, 100]"]),
            (C(min_p=1.5), ["min_p", "[0, 1]"]),
            (C(top_k=-5), ["top_k"]),
            (C(stop=["1", "2", "3", "4", "5"]), ["stop", "at most 4"]),
            (C(response_format={"type": "yaml"}), ["response_format.type"]),
            (C(stream_options=3), ["stream_options"]),
            (C(model=7), ["model", "string"]),
        ]
        for body, words in openai:
            r = self.check(srv, "/v1/completions", body, 400, *words)
            self.assertEqual(r.json()["error"]["type"], "invalid_request_error", body)
        # What stays allowed: the neutral values a client library sends by default.
        r = post(srv, "/v1/completions", C(max_tokens=2, logprobs=None, best_of=1, logit_bias={}, n=1, top_logprobs=0,
                                           typical_p=None))
        self.assertEqual(r.status_code, 200, r.text)
        # The sampling fields vLLM's users send (penalties, and vLLM's top_k / min_p extensions).
        r = post(srv, "/v1/completions", C(max_tokens=2, presence_penalty=0.5, frequency_penalty=0.3,
                                           repetition_penalty=1.2, top_k=-1, min_p=0.05, seed=1))
        self.assertEqual(r.status_code, 200, r.text)
        r = post(srv, "/generate", L(max_new_tokens=2, repetition_penalty=1.3, frequency_penalty=0.2))
        self.assertEqual(r.status_code, 200, r.text)
        r = post(srv, "/generate", L(max_new_tokens=2, typical_p=1.0, top_n_tokens=0, decoder_input_details=False,
                                     top_k=10**12, do_sample=True, seed=3))
        self.assertEqual(r.status_code, 200, r.text)

    def test_port_in_use(self):
        srv = server("demo")
        p = subprocess.run([CLI, "serve", "--demo", "--threads", "1", "--port", str(srv.port)],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn(f"cannot listen on 127.0.0.1:{srv.port}", p.stderr)
        self.assertEqual(p.stdout, "")

    def test_logprobs_on_every_api(self):
        # Greedy, so each chosen token is its own most likely alternative: its log-probability is
        # the first of the alternatives, and every alternative after it is no more likely.
        import requests
        srv = server("demo")
        r = post(srv, "/v1/completions", {"prompt": "x", "max_tokens": 5, "temperature": 0, "logprobs": 3,
                                          "ignore_eos": True})
        self.assertEqual(r.status_code, 200, r.text)
        lp = r.json()["choices"][0]["logprobs"]
        self.assertEqual(len(lp["tokens"]), 5)
        self.assertEqual(len(lp["token_logprobs"]), 5)
        self.assertEqual(lp["text_offset"], sorted(lp["text_offset"]))
        for chosen, top in zip(lp["token_logprobs"], lp["top_logprobs"]):
            self.assertEqual(len(top), 3)
            self.assertAlmostEqual(chosen, max(top.values()), places=4)
            self.assertLessEqual(chosen, 0)
        smol = server("smol")  # a model with a chat template
        r = post(smol, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                                                "temperature": 0, "logprobs": True, "top_logprobs": 2,
                                                "ignore_eos": True})
        self.assertEqual(r.status_code, 200, r.text)
        content = r.json()["choices"][0]["logprobs"]["content"]
        self.assertEqual(len(content), 4)
        for c in content:
            self.assertEqual(len(c["top_logprobs"]), 2)
            self.assertEqual(c["token"], c["top_logprobs"][0]["token"])
            self.assertEqual(bytes(c["bytes"]).decode("utf-8", "replace"), c["token"])
        # Streaming: the log-probabilities come with the chunks, one entry per token.
        seen = 0
        with requests.post(smol.url + "/v1/chat/completions", json={
                "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0,
                "logprobs": True, "ignore_eos": True, "stream": True}, stream=True, timeout=120) as s:
            for line in s.iter_lines():
                if line.startswith(b"data: {"):
                    ch = json.loads(line[6:])["choices"]
                    if ch and ch[0]["logprobs"]:
                        seen += len(ch[0]["logprobs"]["content"])
        self.assertEqual(seen, 4)
        # TGI: top_n_tokens alternatives per token in details.
        r = post(srv, "/generate", {"inputs": "x", "parameters": {"max_new_tokens": 3, "details": True,
                                                                  "top_n_tokens": 2, "ignore_eos_token": True}})
        self.assertEqual(r.status_code, 200, r.text)
        d = r.json()["details"]
        self.assertEqual([len(t) for t in d["top_tokens"]], [2, 2, 2])
        self.assertEqual([t["id"] for t in d["tokens"]], [t[0]["id"] for t in d["top_tokens"]])

    def test_openai_errors(self):
        srv = server("demo")
        r = self.check(srv, "/v1/completions", {"prompt": "x", "max_tokens": "many"}, 400, "max_tokens")
        self.assertEqual(r.json()["error"]["type"], "invalid_request_error")
        self.check(srv, "/v1/completions", {"max_tokens": 3}, 400, "prompt is required")
        self.check(srv, "/v1/completions", {"prompt": "x", "model": "no-such-model"}, 404, "unknown adapter")
        self.check(srv, "/v1/completions", {"prompt": "x", "max_tokens": 5000}, 400, "5000 new tokens")
        self.check(srv, "/v1/chat/completions", {"messages": "hi"}, 400, "messages")
        # Fields OpenAI or vLLM define that the server does not implement: 400 naming them.
        self.check(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "tools": [
            {"type": "function", "function": {"name": "f"}}]}, 400, "tools is not supported")
        self.check(srv, "/v1/completions", {"prompt": "x", "min_tokens": 4}, 400, "min_tokens is not supported")
        self.check(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, 400,
                   "no chat template")
        self.check(srv, "/v1/completions", None, 400, "not valid JSON", raw=b"{")
        self.check(srv, "/v1/completions", {"prompt": "x", "response_format": {"type": "xml"}}, 400,
                   "response_format.type")
        self.check(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": 7}]}]}, 400,
                   "content parts")
        self.check(srv, "/v1/completions", {"prompt": "x", "response_format": {"type": ["json_object"]}}, 400,
                   "response_format.type")
        self.check(srv, "/v1/completions", {"prompt": "x", "response_format": {"type": "json_schema"}}, 400,
                   "json_schema.schema")
        if not info(srv)["structured_output"]["available"]:
            self.check(srv, "/", {"inputs": "x", "parameters": {"response_format": {"type": "json_object"}}}, 422,
                       "scripts/build_xgrammar")
            return
        self.check(srv, "/", {"inputs": "x", "parameters": {"response_format": {"type": "json_object", "schema": {
            "type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}}}, 422, "schema cannot be used")
        self.check(srv, "/", {"inputs": "x", "parameters": {"grammar": {"type": "regex", "value": "a+"}}}, 422,
                   "regex is not supported")


# ---- /tokenize, /detokenize ----------------------------------------------------------------------


class Tokenize(unittest.TestCase):
    def test_tokenize_and_detokenize(self):
        srv = server("demo")
        r = post(srv, "/tokenize", {"prompt": "Hello world", "return_token_strs": True})
        self.assertEqual(r.status_code, 200, r.text)
        self.assertEqual(r.json(), {"count": 2, "max_model_len": info(srv)["max_total_tokens"],
                                    "tokens": [15496, 995], "token_strs": ["Hello", "\u0120world"]})
        self.assertIsNone(post(srv, "/tokenize", {"prompt": "Hello world"}).json()["token_strs"])
        r = post(srv, "/detokenize", {"tokens": [15496, 995]})
        self.assertEqual((r.status_code, r.json()), (200, {"prompt": "Hello world"}))
        # The count is the one a completion's usage reports for the same prompt.
        prompt = "The quick brown fox jumps over the lazy dog"
        n = post(srv, "/tokenize", {"prompt": prompt}).json()["count"]
        usage = post(srv, "/v1/completions", {"prompt": prompt, "max_tokens": 1, "temperature": 0}).json()["usage"]
        self.assertEqual(usage["prompt_tokens"], n)

    def test_chat_messages_count_as_the_chat_route_does(self):
        srv = server("smol")
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a colour."}]
        t = post(srv, "/tokenize", {"messages": messages}).json()
        usage = post(srv, "/v1/chat/completions", {"messages": messages, "max_tokens": 1, "temperature": 0}).json()
        self.assertEqual(t["count"], usage["usage"]["prompt_tokens"])
        bare = post(srv, "/tokenize", {"messages": messages, "add_generation_prompt": False}).json()
        self.assertLess(bare["count"], t["count"])  # without the assistant turn's opening
        self.assertEqual(t["tokens"][:bare["count"]], bare["tokens"])

    def test_bad_bodies(self):
        srv = server("demo")
        check = BadInput.check
        check(self, srv, "/tokenize", {}, 400, "prompt or messages is required")
        check(self, srv, "/tokenize", {"prompt": 5}, 400, "prompt must be a string")
        check(self, srv, "/tokenize", {"prompt": "x", "messages": []}, 400, "not both")
        check(self, srv, "/tokenize", {"prompt": "x", "chat_template": "{{ x }}"}, 400, "chat_template is not supported")
        check(self, srv, "/tokenize", {"messages": [{"role": "user", "content": "x"}]}, 400, "no chat template")
        check(self, srv, "/tokenize", {"prompt": "x", "model": "nobody"}, 404, "unknown adapter")
        check(self, srv, "/detokenize", {}, 400, "tokens is required")
        check(self, srv, "/detokenize", {"tokens": "12"}, 400, "tokens must be a list")
        check(self, srv, "/detokenize", {"tokens": [1, -1]}, 400, "tokens[1]", "[0, 50257)")
        check(self, srv, "/detokenize", {"tokens": [18446744073709551615]}, 400, "tokens[0]")
        check(self, srv, "/detokenize", None, 400, "not valid JSON", raw=b"{")


# ---- exposing the server: API key, CORS, access log, TLS, request timeout --------------------------


def request(srv, method, path, body=None, headers=None, **kw):
    import requests
    return requests.request(method, srv.url + path, json=body, headers=headers or {}, timeout=120, **kw)


class Exposure(unittest.TestCase):
    def test_api_key(self):
        srv = server("guarded")
        key = {"Authorization": f"Bearer {API_KEY}"}
        r = request(srv, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
        self.assertEqual(r.status_code, 401, r.text)
        self.assertEqual(r.json()["error"]["type"], "authentication_error")
        self.assertEqual(r.headers.get("WWW-Authenticate"), "Bearer")
        r = request(srv, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 1},
                    {"Authorization": "Bearer wrong-key-1234"})
        self.assertEqual(r.status_code, 401, r.text)
        self.assertIn("not the server's", r.json()["error"]["message"])
        r = request(srv, "POST", "/generate", {"inputs": "x", "parameters": {"max_new_tokens": 1}})
        self.assertEqual((r.status_code, r.json()["error_type"]), (401, "unauthorized"))
        for path in ("/tokenize", "/info", "/v1/models"):
            self.assertEqual(request(srv, "POST" if path == "/tokenize" else "GET", path, {"prompt": "x"}).status_code,
                             401, path)
        # /health and /metrics stay open, as vLLM leaves them (serve --metrics-need-key closes /metrics).
        self.assertEqual(request(srv, "GET", "/health").status_code, 200)
        self.assertEqual(request(srv, "GET", "/metrics").status_code, 200)
        # With the key: the OpenAI client and plain HTTP are served.
        import openai
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key=API_KEY)
        out = client.completions.create(model="servelab-demo-gpt2", prompt="Hello", max_tokens=3, temperature=0)
        self.assertEqual(out.usage.completion_tokens, 3)
        with self.assertRaises(openai.AuthenticationError):
            openai.OpenAI(base_url=srv.url + "/v1", api_key="nope", max_retries=0).models.list()
        r = request(srv, "POST", "/generate", {"inputs": "x", "parameters": {"max_new_tokens": 2}}, key)
        self.assertEqual(r.status_code, 200, r.text)

    def test_cors(self):
        srv = server("guarded")
        pre = {"Origin": "http://lab.example", "Access-Control-Request-Method": "POST"}
        r = request(srv, "OPTIONS", "/v1/completions", headers=pre)  # a preflight needs no key
        self.assertEqual(r.status_code, 204, r.text)
        self.assertEqual(r.headers["Access-Control-Allow-Origin"], "http://lab.example")
        self.assertIn("Authorization", r.headers["Access-Control-Allow-Headers"])
        r = request(srv, "OPTIONS", "/v1/completions", headers={**pre, "Origin": "http://elsewhere.example"})
        self.assertEqual(r.status_code, 400, r.text)
        self.assertIn("not in --allowed-origins", r.json()["error"]["message"])
        r = request(srv, "GET", "/health", headers={"Origin": "http://lab.example"})
        self.assertEqual(r.headers.get("Access-Control-Allow-Origin"), "http://lab.example")
        self.assertNotIn("Access-Control-Allow-Origin", request(srv, "GET", "/health").headers)
        r = request(server("demo"), "OPTIONS", "/v1/completions", headers=pre)  # CORS is off by default
        self.assertEqual(r.status_code, 400, r.text)
        self.assertIn("cross-origin requests are off", r.json()["error"]["message"])

    def test_request_ids_and_the_access_log(self):
        srv = server("guarded")
        r = request(srv, "GET", "/health", headers={"X-Request-Id": "trace-abc-42"})
        self.assertEqual(r.headers["X-Request-Id"], "trace-abc-42")
        r = request(srv, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
        rid = r.headers["X-Request-Id"]
        self.assertTrue(rid.startswith("req-"), rid)
        log = lambda: open(srv.err_path).read()
        self.assertTrue(wait_for(lambda: f'{rid} ' in log(), 30), log())
        self.assertRegex(log(), rf'access: {rid} 127\.0\.0\.1:\d+ "POST /v1/completions" 401 [0-9.]+ ms')
        self.assertRegex(log(), r'access: trace-abc-42 127\.0\.0\.1:\d+ "GET /health" 200 ')

    def test_request_timeout(self):
        srv = server("timeout")
        r = post(srv, "/generate", {"inputs": "Once upon a time", "parameters": {"max_new_tokens": 1000}})
        self.assertEqual(r.status_code, 504, r.text)
        self.assertEqual(r.json()["error_type"], "timeout")
        self.assertIn("--request-timeout of 0.5 s", r.json()["error"])
        r = post(srv, "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 1000, "stream": True})
        self.assertEqual(r.status_code, 200)
        events = [l for l in r.text.splitlines() if l.startswith("data: ")]
        self.assertEqual(events[-1], "data: [DONE]")
        self.assertIn("--request-timeout", json.loads(events[-2][6:])["error"]["message"])
        # Both left their slot: cancelled, not failed (a short request's outcome would depend on the
        # machine's speed, so none is asked for here).
        self.assertTrue(wait_for(lambda: info(srv)["running"] == 0, 60), info(srv))
        self.assertEqual(info(srv)["requests"]["cancelled"], 2)
        self.assertEqual(info(srv)["requests"]["failed"], 0)

    def test_a_client_sending_a_byte_at_a_time_is_dropped(self):
        # Each byte comes well within the per-read wait; the whole request never comes within
        # --read-timeout (5 s): the server drops the connection and stays usable.
        srv = server("timeout")
        s = socket.create_connection((srv.host, srv.port))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        s.settimeout(0.1)
        dropped, sent = False, 0
        while not dropped and sent < 3000:  # at 0.1 s a byte, 300 s: far past the deadline
            try:
                s.sendall(b"a")
                sent += 1
                s.recv(4096)  # returns only once the server has closed (or answered) the connection
                dropped = True
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError):
                dropped = True
        s.close()
        self.assertTrue(dropped, f"still connected after {sent} bytes")
        self.assertLess(sent, 3000)
        log = lambda: open(srv.err_path).read()
        self.assertTrue(wait_for(lambda: '"POST /v1/completions" 400 (the request was not read whole)' in log(), 30), log())
        # Still serving (a POST that runs no model: this server's --request-timeout is 0.5 s).
        self.assertEqual(request(srv, "GET", "/health").status_code, 200)
        r = post(srv, "/tokenize", {"prompt": "Hello"})
        self.assertEqual(r.status_code, 200, r.text)

    def test_tls(self):
        cert, key = os.path.join(TMP, "cert.pem"), os.path.join(TMP, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                        "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        srv = Server("tls", ["--demo", "--max-batch", "1", "--threads", "2", "--ssl-certfile", cert,
                             "--ssl-keyfile", key])
        try:
            self.assertTrue(srv.url.startswith("https://"), srv.url)
            r = request(srv, "POST", "/generate", {"inputs": "x", "parameters": {"max_new_tokens": 2}}, verify=cert)
            self.assertEqual(r.status_code, 200, r.text)
            import requests
            with self.assertRaises(requests.exceptions.SSLError):  # a client that does not trust the certificate
                request(srv, "GET", "/health")
            with self.assertRaises(requests.exceptions.ConnectionError):  # plain HTTP gets no answer
                requests.get(f"http://{srv.host}:{srv.port}/health", timeout=10)
            # The load generator: trusting the certificate, or told not to verify; else it says why.
            for trust in (["--ca-file", cert], ["--insecure"]):
                rc, r, err = loadgen(srv.url, "--scenario", "single", "--max-new-tokens", "3", *trust)
                self.assertEqual(rc, 0, err)
                self.assertEqual(r["streams"][0]["tokens"], 3)
            rc, r, err = loadgen(srv.url, "--scenario", "single", "--max-new-tokens", "3")
            self.assertNotEqual(rc, 0)
            self.assertIn("its certificate is not trusted", r["streams"][0]["error"] if r else err)
        finally:
            rc, err = srv.stop()
        self.assertEqual(rc, 0, err)
        # A certificate that is not one: one line naming the flags, exit 1, before any model loads.
        with open(os.path.join(TMP, "junk.pem"), "w") as f:
            f.write("not a certificate\n")
        p = subprocess.run([CLI, "serve", "--demo", "--port", "0", "--ssl-certfile", f.name, "--ssl-keyfile", key],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("--ssl-certfile", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


# ---- /metrics ------------------------------------------------------------------------------------

METRIC_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def metrics(srv):
    """GET /metrics parsed strictly: {(name, frozenset of extra labels): value}; every sample has
    a # TYPE for its family and the model_name label."""
    import requests
    r = requests.get(srv.url + "/metrics", timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
    types, out = {}, {}
    for line in r.text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
            continue
        if line.startswith("#") or not line:
            continue
        m = METRIC_LINE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        name, labels, value = m.groups()
        family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in types else name
        assert family in types, f"{name} has no # TYPE line"
        pairs = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels or ""))
        assert "model_name" in pairs, line
        del pairs["model_name"]
        out[(name, frozenset(pairs.items()))] = float(value)
    return out


def metric(ms, name, **labels):
    return ms[(name, frozenset(labels.items()))]


class Metrics(unittest.TestCase):
    def test_counters_move_with_a_request(self):
        srv = server("demo")
        before = metrics(srv)
        for h in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"):
            buckets = sorted((float(dict(k[1])["le"]), v) for k, v in before.items()
                             if k[0] == h + "_bucket")
            self.assertEqual(buckets[-1][0], float("inf"))
            self.assertEqual(buckets[-1][1], metric(before, h + "_count"))
            self.assertEqual([v for _, v in buckets], sorted(v for _, v in buckets))  # cumulative
        r = post(srv, "/generate", {"inputs": "The rain in Spain", "parameters": {
            "max_new_tokens": 6, "details": True, "ignore_eos_token": True}})
        self.assertEqual(r.status_code, 200, r.text)
        prompt = r.json()["details"]["prompt_tokens"]
        after = metrics(srv)
        delta = lambda name, **kw: metric(after, name, **kw) - metric(before, name, **kw)
        self.assertEqual(delta("vllm:prompt_tokens_total"), prompt)
        self.assertEqual(delta("vllm:generation_tokens_total"), 6)
        self.assertEqual(delta("vllm:time_to_first_token_seconds_count"), 1)
        self.assertEqual(delta("vllm:inter_token_latency_seconds_count"), 5)
        self.assertEqual(delta("vllm:e2e_request_latency_seconds_count"), 1)
        self.assertEqual(delta("vllm:request_success_total", finished_reason="length"), 1)
        self.assertGreater(delta("vllm:time_to_first_token_seconds_sum"), 0)
        self.assertGreater(delta("servelab:engine_steps_total"), 0)
        # The engine thread's time by phase: the request ran one prefill and five decodes, sampled
        # six tokens and waited for work before it came; every phase only grows.
        phases = ("idle", "schedule", "prefill", "decode", "kv", "sample", "finish")
        phase = {p: delta("servelab:engine_phase_seconds_total", phase=p) for p in phases}
        self.assertEqual(len([k for k in after if k[0] == "servelab:engine_phase_seconds_total"]), len(phases))
        for p in ("idle", "prefill", "decode", "sample"):
            self.assertGreater(phase[p], 0, phase)
        self.assertTrue(all(v >= 0 for v in phase.values()), phase)
        self.assertEqual(metric(after, "vllm:num_requests_running"), 0)
        self.assertEqual(metric(after, "vllm:kv_cache_usage_perc"), 0)
        self.assertGreater(metric(after, "servelab:kv_cache_bytes"), 0)

    def test_adapter_cache_counters(self):
        srv = server("demo")
        before = metrics(srv)
        for _ in range(2):
            r = post(srv, "/generate", {"inputs": "x", "parameters": {"max_new_tokens": 2, "adapter_id": "mine"}})
            self.assertEqual(r.status_code, 200, r.text)
        after = metrics(srv)
        loads = metric(after, "servelab:lora_cache_loads_total") - metric(before, "servelab:lora_cache_loads_total")
        hits = metric(after, "servelab:lora_cache_hits_total") - metric(before, "servelab:lora_cache_hits_total")
        self.assertEqual(loads + hits, 2)  # each admission either loads the adapter or finds it
        self.assertGreaterEqual(hits, 1)
        self.assertGreaterEqual(metric(after, "servelab:lora_cache_resident"), 1)


# ---- the load generator ----------------------------------------------------------------------------

def loadgen(url, *args, timeout=300):
    """servelab-cli loadgen --json; returns (exit code, report or None, stderr)."""
    p = subprocess.run([CLI, "loadgen", "--url", url, "--json", *args], capture_output=True, text=True,
                       timeout=timeout)
    report = json.loads(p.stdout) if p.returncode == 0 or p.stdout.strip().startswith("{") else None
    return p.returncode, report, p.stderr


class StubTgi(threading.Thread):
    """An independent minimal TGI stream server (http.server): records each request's headers and
    body and answers three tokens, so that what loadgen sends is checked by someone else's parser."""
    def __init__(self):
        super().__init__(daemon=True)
        import http.server
        seen = self.seen = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                seen.append((self.path, dict(self.headers), body))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for i, text in enumerate([" a", " b", " c"]):
                    last = i == 2
                    ev = {"token": {"id": i, "text": text, "logprob": -1.0, "special": False},
                          "generated_text": " a b c" if last else None,
                          "details": {"finish_reason": "length", "generated_tokens": 3} if last else None}
                    self.wfile.write(b"data:" + json.dumps(ev).encode() + b"\n\n")
                    self.wfile.flush()

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]

    def run(self):
        self.httpd.serve_forever()


class LoadGenerator(unittest.TestCase):
    def test_single_stream(self):
        srv = server("demo")
        rc, r, err = loadgen(srv.url, "--scenario", "single", "--max-new-tokens", "12", "--ignore-eos")
        self.assertEqual(rc, 0, err)
        self.assertEqual((r["scenario"], r["api"], r["failed"]), ("single", "lorax", 0))
        (s,) = r["streams"]
        self.assertTrue(s["ok"], s)
        self.assertEqual((s["tokens"], len(s["token_ms"]), s["finish_reason"]), (12, 12, "length"))
        self.assertEqual(s["ttft_ms"], s["token_ms"][0])
        self.assertEqual(s["token_ms"], sorted(s["token_ms"]))
        self.assertGreater(s["tokens_per_s"], 0)
        # The same greedy text the server gives that prompt alone.
        ref = post(srv, "/generate", {"inputs": "What is deep learning?", "parameters": {
            "max_new_tokens": 12, "ignore_eos_token": True}}).json()["generated_text"]
        self.assertEqual(s["text"], ref)

    def test_three_streams_interleave(self):
        srv = server("demo")
        rc, r, err = loadgen(srv.url, "--scenario", "three_streams", "--ignore-eos")
        self.assertEqual(rc, 0, err)
        long, a, b = r["streams"]
        self.assertEqual([s["tokens"] for s in (long, a, b)], [100, 10, 10])
        # Continuous batching: the short streams end while the long one still runs.
        for short in (a, b):
            self.assertLess(short["start_ms"] + short["token_ms"][-1], long["start_ms"] + long["token_ms"][-1])
            self.assertLess(long["start_ms"] + long["token_ms"][0], short["start_ms"] + short["token_ms"][-1])

    def test_adapters_at_once(self):
        srv = server("demo")
        rc, r, err = loadgen(srv.url, "--scenario", "adapters", "--max-new-tokens", "6", "--ignore-eos")
        self.assertEqual(rc, 0, err)
        listed = [m["id"] for m in post_get(srv, "/v1/models")["data"]][1:]
        self.assertEqual([s["adapter"] for s in r["streams"]], listed)
        self.assertIn("mine", listed)
        for s in r["streams"]:
            if s["adapter"] == "broken/adapter":  # registered by BadInput, its config cut off
                self.assertFalse(s["ok"])
                self.assertIn("HTTP 424: adapter 'broken/adapter' could not be loaded", s["error"])
                continue
            self.assertTrue(s["ok"], s)
            self.assertEqual(s["tokens"], 6)
            ref = post(srv, "/generate", {"inputs": "What is deep learning?", "parameters": {
                "max_new_tokens": 6, "ignore_eos_token": True, "adapter_id": s["adapter"]}}).json()
            self.assertEqual(s["text"], ref["generated_text"], s["adapter"])
        rc, r, err = loadgen(srv.url, "--scenario", "adapters", "--adapter", "mine", "--adapter", "nobody/none",
                             "--max-new-tokens", "2")
        self.assertEqual(rc, 0, err)
        self.assertTrue(r["streams"][0]["ok"])
        self.assertFalse(r["streams"][1]["ok"])
        self.assertIn("HTTP 422", r["streams"][1]["error"])
        self.assertIn("unknown adapter 'nobody/none'", r["streams"][1]["error"])

    def test_structured_output(self):
        srv = server("demo")
        if not info(srv)["structured_output"]["available"]:
            raise unittest.SkipTest("no structured output in this build")
        for api in ("lorax", "tgi", "openai"):
            rc, r, err = loadgen(srv.url, "--api", api, "--scenario", "structured", "--max-new-tokens", "60")
            self.assertEqual(rc, 0, err)
            (s,) = r["streams"]
            self.assertTrue(s["ok"], s)
            if s["finish_reason"] in ("eos_token", "stop"):
                self.assertTrue(s["json_valid"], s["text"])
                value = json.loads(s["text"])
                self.assertEqual(set(value), {"name", "age"})

    def test_openai_api(self):
        srv = server("demo")
        before = metrics(srv)
        rc, r, err = loadgen(srv.url, "--api", "openai", "--scenario", "single", "--max-new-tokens", "8",
                             "--ignore-eos")
        self.assertEqual(rc, 0, err)
        # ignore_eos (vLLM's extension) holds the request to its whole budget.
        self.assertEqual(metric(metrics(srv), "vllm:generation_tokens_total")
                         - metric(before, "vllm:generation_tokens_total"), 8)
        self.assertEqual(r["model"], "servelab-demo-gpt2")  # the first of /v1/models
        (s,) = r["streams"]
        self.assertTrue(s["ok"], s)
        self.assertEqual(s["finish_reason"], "length")
        self.assertGreaterEqual(s["tokens"], 1)  # OpenAI chunks carry text; an empty piece is no chunk
        self.assertLessEqual(s["tokens"], 8)

    def test_sweep_closed_and_poisson(self):
        srv = server("demo")
        before = metrics(srv)
        rc, r, err = loadgen(srv.url, "--scenario", "sweep", "--clients", "1,3", "--requests", "4",
                             "--max-new-tokens", "5", "--ignore-eos")
        self.assertEqual(rc, 0, err)
        self.assertEqual([(l["clients"], l["requests"], l["ok"]) for l in r["levels"]], [(1, 4, 4), (3, 4, 4)])
        for l in r["levels"]:
            self.assertEqual(l["generated_tokens"], 20)
            self.assertGreater(l["tokens_per_s"], 0)
            self.assertLessEqual(l["ttft_p50_ms"], l["ttft_p99_ms"])
            self.assertLessEqual(l["itl_p50_ms"], l["itl_p99_ms"])
        after = metrics(srv)
        self.assertEqual(metric(after, "vllm:generation_tokens_total") - metric(before, "vllm:generation_tokens_total"), 40)
        rc, r, err = loadgen(srv.url, "--scenario", "sweep", "--arrival", "poisson", "--clients", "20",
                             "--requests", "4", "--max-new-tokens", "3")
        self.assertEqual(rc, 0, err)
        (l,) = r["levels"]
        self.assertEqual((l["arrival"], l["rate_per_s"], l["ok"]), ("poisson", 20, 4))

    def test_headers_and_prefix_reach_another_server(self):
        stub = StubTgi()
        stub.start()
        try:
            rc, r, err = loadgen(stub.url + "/base/", "--api", "tgi", "--header", "Authorization: Bearer sk-test",
                                 "--header", "X-Tenant:lab", "--max-new-tokens", "3")
            self.assertEqual(rc, 0, err)
            (s,) = r["streams"]
            self.assertEqual((s["ok"], s["tokens"], s["text"]), (True, 3, " a b c"))
            path, headers, body = stub.seen[0]
            self.assertEqual(path, "/base/generate_stream")
            self.assertEqual(headers["Authorization"], "Bearer sk-test")
            self.assertEqual(headers["X-Tenant"], "lab")
            self.assertEqual(body["parameters"]["max_new_tokens"], 3)
            self.assertNotIn("adapter_id", body["parameters"])
        finally:
            stub.httpd.shutdown()

    def test_bad_command_lines(self):
        srv = server("demo")
        for args, rc, words in [
                (["--scenario", "sweep", "--clients", "1,x"], 2, "--clients takes numbers"),
                (["--clients", "1,2"], 2, "--clients applies to --scenario sweep"),
                (["--header", "nocolon"], 2, "--header takes 'Key: value'"),
                (["--api", "grpc"], 1, "unknown API 'grpc'"),
                (["--scenario", "soak"], 1, "unknown scenario 'soak'"),
                (["--max-new-tokens", "0"], 1, "max new tokens must be at least 1"),
                (["--scenario", "sweep", "--clients", "1.5"], 1, "whole numbers")]:
            p = subprocess.run([CLI, "loadgen", "--url", srv.url, *args], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, rc, (args, p.stderr))
            self.assertIn(words, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        p = subprocess.run([CLI, "loadgen", "--url", "ftp://x"], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn("must start with http:// or https://", p.stderr)

    def test_nothing_listening(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        rc, r, err = loadgen(f"http://127.0.0.1:{port}", "--scenario", "single", timeout=60)
        self.assertEqual(rc, 1, err)
        self.assertIn("every request failed: cannot reach", err)
        self.assertIn("cannot reach", r["streams"][0]["error"])

    def test_vllm_stream_interval_counts_and_outputs(self):
        """Against tests/serve/loadgen_test_server.py streaming 3 tokens a chunk with usage at the end
        (and a chunk holding part of an emoji): exact token counts, the JSON, JSONL and CSV files."""
        here = os.path.dirname(os.path.abspath(__file__))
        stub = subprocess.Popen([sys.executable, os.path.join(here, "loadgen_test_server.py")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            url = "http://127.0.0.1:%d/s3-emoji" % int(stub.stdout.readline())
            out = os.path.join(TMP, "lg")
            rc, r, err = loadgen(url, "--api", "openai-chat", "--model", "m", "--scenario", "sweep",
                                 "--clients", "1,2", "--requests", "3", "--warmup", "1", "--max-new-tokens", "20",
                                 "--goodput", "e2el:600000", "--save-requests", out + ".jsonl", "--csv",
                                 out + ".csv", "--save-result", out + ".json")
            self.assertEqual(rc, 0, err)
            self.assertEqual(r["api"], "openai-chat")
            self.assertEqual(r["dataset"]["name"], "random")
            for l in r["levels"]:
                self.assertEqual((l["completed"], l["failed"], l["warmup_requests"]), (3, 0, 1))
                self.assertEqual(l["total_output_tokens"], 60)  # from usage, not the 8 chunks a stream
                self.assertEqual(l["request_goodput"], l["request_throughput"])
                self.assertLessEqual(l["p50_itl_ms"], l["p99_itl_ms"])
            self.assertEqual(json.load(open(out + ".json"))["levels"], r["levels"])
            lines = [json.loads(x) for x in open(out + ".jsonl")]
            self.assertEqual(len(lines), 8)
            self.assertEqual(sum(1 for x in lines if x.get("warmup")), 2)
            for x in lines:
                self.assertEqual((x["output_tokens"], x["output_tokens_source"], x["chunks"]), (20, "usage", 8))
                self.assertEqual(sum(x["chunk_tokens"]), 20)
                self.assertEqual(len(x["itl_ms"]), 19)
            rows = open(out + ".csv").read().splitlines()
            self.assertEqual(len(rows), 9)
            self.assertTrue(rows[0].startswith("arrival,level,index,warmup,ok,error_kind"))
        finally:
            stub.stdin.close()
            stub.wait(30)

    def test_server_goes_away_mid_run(self):
        victim = Server("victim", ["--demo", "--max-batch", "2", "--threads", "1"])
        try:
            p = subprocess.Popen([CLI, "loadgen", "--url", victim.url, "--json", "--scenario", "sweep", "--clients", "2",
                                  "--requests", "6", "--max-new-tokens", "400", "--ignore-eos"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertTrue(wait_for(lambda: metrics(victim)[("vllm:generation_tokens_total", frozenset())] >= 4))
            victim.proc.kill()  # no goodbye: the streams' connections just close
            out, err = p.communicate(timeout=120)  # no hang
            r = json.loads(out)
            (l,) = r["levels"]
            self.assertEqual(l["ok"], 0)
            self.assertGreaterEqual(l["failed"], 2)
            self.assertTrue(any("without its last event" in e for e in l["errors"]), l["errors"])
            self.assertTrue(all("without its last event" in e or "cannot reach" in e for e in l["errors"]),
                            l["errors"])
            self.assertEqual(p.returncode, 1)
            self.assertIn("every request failed", err)
        finally:
            victim.stop()


# ---- queue, disconnects, shutdown ----------------------------------------------------------------

def open_stream(srv, max_new, prompt="What is deep learning?"):
    """A raw streaming request; returns (socket, file) once the headers arrived."""
    body = json.dumps({"inputs": prompt, "parameters": {"max_new_tokens": max_new}}).encode()
    s = socket.create_connection((srv.host, srv.port), timeout=60)
    s.sendall(b"POST /generate_stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    return s, s.makefile("rb")


def read_events(f, n):
    events = []
    while len(events) < n:
        line = f.readline()
        if not line:
            break
        if line.startswith(b"data:"):
            events.append(json.loads(line[5:]))
    return events


def diagnose(srv, stream):
    """What the server and a stream say, for a failed wait."""
    i = info(srv)
    sock, f = stream
    sock.settimeout(2)
    try:
        first = f.readline()
    except OSError as e:
        first = repr(e)
    return f"running {i['running']}, waiting {i['waiting']}, requests {i['requests']}; the stream says {first!r}"


def wait_for(pred, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.05)
    return False


class Connections(unittest.TestCase):
    """Many clients connecting at once, and slow ones: a connection the kernel completed is never
    dropped without an answer (the 64-client bench lost requests to httplib's listen backlog of 5)."""

    def test_listen_backlog(self):
        srv = server("demo")
        ss = shutil.which("ss")
        self.assertIsNotNone(ss, "ss (iproute2) reads a listening socket's backlog: install it")
        out = subprocess.run([ss, "-ltnH", f"sport = :{srv.port}"], capture_output=True, text=True).stdout.split()
        somaxconn = int(open("/proc/sys/net/core/somaxconn").read())
        # A listening socket's Send-Q column is its backlog.
        self.assertEqual(int(out[2]), min(4096, somaxconn), out)

    def test_first_request_after_a_pause(self):
        # httplib waits keep-alive-timeout seconds for a connection's first request too: with 1 s,
        # a request whose first segment was retransmitted once (TCP's initial timeout is 1 s) was lost.
        srv = server("demo")
        with socket.create_connection((srv.host, srv.port), timeout=30) as s:
            time.sleep(2)
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            self.assertEqual(s.makefile("rb").readline(), b"HTTP/1.1 200 OK\r\n")

    def test_burst_while_the_server_is_frozen(self):
        # 64 clients connect while the server cannot accept (SIGSTOP), each writing its request in
        # two segments as httplib's client does; every one is answered once it runs again.
        srv = server("demo")
        body = json.dumps({"inputs": "x", "parameters": {"max_new_tokens": 1}}).encode()
        head = f"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" \
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        answers = [None] * 64  # within the demo server's batch + queue

        def client(i):
            try:
                with socket.create_connection((srv.host, srv.port), timeout=60) as s:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    s.sendall(head)
                    s.sendall(body)
                    answers[i] = s.makefile("rb").readline()
            except OSError as e:
                answers[i] = repr(e)

        os.kill(srv.proc.pid, signal.SIGSTOP)
        try:
            threads = [threading.Thread(target=client, args=(i,)) for i in range(len(answers))]
            for t in threads:
                t.start()
            time.sleep(1)
        finally:
            os.kill(srv.proc.pid, signal.SIGCONT)
        for t in threads:
            t.join()
        bad = [a for a in answers if a != b"HTTP/1.1 200 OK\r\n"]
        self.assertEqual(bad, [], f"{len(bad)} of {len(answers)} connections not answered")


class Lifecycle(unittest.TestCase):
    def test_1_queue_full_and_disconnect(self):
        srv = server("small")
        a, fa = open_stream(srv, 900)
        self.assertEqual(len(read_events(fa, 2)), 2)  # running, in the only slot
        b, fb = open_stream(srv, 900)  # waiting, the only queue place
        if not wait_for(lambda: info(srv)["waiting"] == 1):
            self.fail(diagnose(srv, (b, fb)))
        m = metrics(srv)
        self.assertEqual((metric(m, "vllm:num_requests_running"), metric(m, "vllm:num_requests_waiting")), (1, 1))
        self.assertGreater(metric(m, "vllm:kv_cache_usage_perc"), 0)
        aborted = metric(m, "vllm:request_success_total", finished_reason="abort")
        r = post(srv, "/generate", {"inputs": "x", "parameters": {"max_new_tokens": 2}})
        self.assertEqual(r.status_code, 429, r.text)
        self.assertEqual(metric(metrics(srv), "servelab:request_rejected_total"), 1)
        self.assertEqual(r.json()["error_type"], "overloaded")
        self.assertEqual(r.headers.get("Retry-After"), "1")
        # Both clients leave: the running request is cancelled at its next token (its write fails)
        # and frees the slot; the waiting one, admitted into it, likewise at its first tokens.
        for sock, f in ((b, fb), (a, fa)):
            f.close()  # the socket's file descriptor lives until its file object is closed too
            sock.close()
        self.assertTrue(wait_for(lambda: info(srv)["requests"]["cancelled"] == 2, 120), info(srv))
        i = info(srv)
        self.assertEqual((i["running"], i["waiting"]), (0, 0))
        m = metrics(srv)  # the slots freed by the disconnects, as a scraper sees them
        self.assertEqual((metric(m, "vllm:num_requests_running"), metric(m, "vllm:num_requests_waiting")), (0, 0))
        self.assertEqual(metric(m, "vllm:request_success_total", finished_reason="abort") - aborted, 2)
        self.assertEqual(metric(m, "vllm:kv_cache_usage_perc"), 0)
        r = post(srv, "/generate", {"inputs": "x", "parameters": {"max_new_tokens": 2}})
        self.assertEqual(r.status_code, 200, r.text)

    def test_2_sigterm_under_load(self):
        srv = server("small")
        streams = [open_stream(srv, 900)]
        self.assertEqual(len(read_events(streams[0][1], 3)), 3)  # running, in the only slot
        streams.append(open_stream(srv, 900))  # waiting, the only queue place
        if not wait_for(lambda: info(srv)["waiting"] == 1):
            self.fail(diagnose(srv, streams[1]))
        rc, err = srv.stop()
        del SERVERS["small"]
        self.assertEqual(rc, 0, err)
        self.assertIn("finishing 1 running and 1 waiting", err)
        self.assertIn("2 cancelled at shutdown", err)
        # Both clients were told: the running one by an error event, the waiting one by a 503.
        tail = streams[0][1].read()
        self.assertIn(b'"error_type":"generation"', tail)
        self.assertIn(b"503", streams[1][1].readline())
        with self.assertRaises(OSError):
            socket.create_connection((srv.host, srv.port), timeout=5)


    def test_3_sigterm_lets_running_requests_finish(self):
        srv = server("demo")  # --shutdown-grace 300: running requests end whole, however slow the machine
        streams = [open_stream(srv, 30, "The rain in Spain"), open_stream(srv, 25, "What comes up must")]
        for _, f in streams:  # both running before the signal
            self.assertEqual(len(read_events(f, 1)), 1)
        rc, err = srv.stop(timeout=360)
        del SERVERS["demo"]
        self.assertEqual(rc, 0, err)
        self.assertIn("0 cancelled at shutdown", err)
        for (sock, f), n in zip(streams, (29, 24)):
            events = read_events(f, n)
            self.assertEqual(len(events), n)
            self.assertEqual(events[-1]["details"]["finish_reason"], "length")


class TimedResult(unittest.TextTestResult):
    """Records each test's seconds."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seconds, self._started = {}, 0.0

    def startTest(self, test):
        self._started = time.time()
        super().startTest(test)

    def stopTest(self, test):
        self.seconds[test.id().split(".", 1)[-1]] = time.time() - self._started
        super().stopTest(test)


def main():
    global CLI, TMP
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("-v", action="store_true")
    ap.add_argument("-k", default=None, help="only tests whose name contains this")
    args = ap.parse_args()
    CLI = os.path.abspath(args.cli)
    TMP = tempfile.mkdtemp(prefix="servelab-serve-")
    try:
        import lorax, openai, requests  # noqa: F401
    except ImportError as e:
        print(f"test_serve: cannot import {e.name}; run scripts/bootstrap", file=sys.stderr)
        return 1
    t0 = time.time()
    make_adapters()
    print(f"adapters made in {time.time() - t0:.1f} s", flush=True)
    loader = unittest.TestLoader()
    if args.k:
        loader.testNamePatterns = [f"*{args.k}*"]
    suite = unittest.TestSuite(loader.loadTestsFromTestCase(c)
                               for c in (Lesson7, BuiltinAdapters, OpenAIClient, GreedyParity, PagedKv, BadInput, Tokenize, Exposure, Metrics,
                                                                  LoadGenerator,
                                                                  Connections, Lifecycle))
    result = unittest.TextTestRunner(verbosity=2 if args.v else 1, resultclass=TimedResult).run(suite)
    ok = result.wasSuccessful()
    # The slowest tests (a server's start counts to the first test that uses it): what to shrink
    # when the suite grows.
    for name, seconds in sorted(result.seconds.items(), key=lambda kv: -kv[1])[:8]:
        print(f"  {seconds:6.1f} s  {name}", flush=True)
    for name, srv in list(SERVERS.items()):
        rc, err = srv.stop()
        if rc != 0:
            print(f"{name} server: exit {rc} after SIGTERM\n{err}", file=sys.stderr)
            ok = False
    print(f"test_serve: {time.time() - t0:.1f} s", flush=True)
    shutil.rmtree(TMP, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

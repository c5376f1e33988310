#!/usr/bin/env python3
"""What test_serve.py's cases share: the servers they start (each once, on 127.0.0.1, port 0,
stopped with SIGTERM by test_serve.main), the adapters made for the demo model, and HTTP helpers.
test_serve.main sets CLI and TMP before any case runs."""
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


# The servers' OpenMP threads sleep at once at a barrier instead of spinning first. CTest runs
# this suite beside another on two cores, several servers here run at once, and spinning threads
# of one process then hold the cores that another's threads wait for: under two busy neighbours
# the preemption test took 87 s spinning against 25 s passive (9 s and 14 s on an idle machine).
# These servers are checked for what they answer, never timed; docs/engine.md says the same for
# any busy machine.
SERVER_ENV = {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "passive")}


class Server:
    def __init__(self, name, args, env=None, ready_s=180):
        self.name = name
        self.err_path = os.path.join(TMP, f"{name}.stderr")
        self.err = open(self.err_path, "w")
        self.proc = subprocess.Popen([CLI, "serve", "--port", "0", *args], stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, env={**os.environ, **SERVER_ENV, **(env or {})})
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


# Words the random prompts of the parity and soak cases are made of.
WORDS = "the quick brown fox jumped over lazy dog rain in Spain falls what comes up must serve tokens".split()


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



def request(srv, method, path, body=None, headers=None, **kw):
    import requests
    return requests.request(method, srv.url + path, json=body, headers=headers or {}, timeout=120, **kw)


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


def loadgen(url, *args, timeout=300):
    """servelab-cli loadgen --json; returns (exit code, report or None, stderr)."""
    p = subprocess.run([CLI, "loadgen", "--url", url, "--json", *args], capture_output=True, text=True,
                       timeout=timeout)
    report = json.loads(p.stdout) if p.returncode == 0 or p.stdout.strip().startswith("{") else None
    return p.returncode, report, p.stderr


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

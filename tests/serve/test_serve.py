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
import serve_harness as h
from serve_harness import *  # noqa: F401,F403 (the servers, helpers and imports the cases share)
from serve_input_cases import BadInput, Tokenize
from serve_load_cases import LoadGenerator


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
        utils_dir = os.path.join(h.TMP, "lesson")
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

    @contextlib.contextmanager
    def notebook_on_smol(self):
        """The notebook's namespace with its Setup section run against the built-in model's server:
        its `utils` module (the course's endpoint and headers) stands in as ours while it runs."""
        import types
        smol = types.ModuleType("utils")
        smol.endpoint_url, smol.headers = server("smol").url, {}
        saved = sys.modules.get("utils")
        sys.modules["utils"] = smol
        try:
            ns = {"__name__": "lesson7_smol"}
            exec(compile(self.sections["Setup"], "lesson7:Setup", "exec"), ns)
            yield ns
        finally:
            sys.modules["utils"] = saved

    def test_4_structured_output(self):
        """The lesson's bonus: a pydantic schema through response_format, on SmolLM2 (the random demo
        model would fill a JSON string with noise until max_new_tokens, as any model may)."""
        import jsonschema
        require_structured_output()
        with self.notebook_on_smol() as ns, contextlib.redirect_stdout(io.StringIO()):
            exec(compile(self.sections["Bonus: Structured Generation"], "lesson7:Bonus", "exec"), ns)
            person = json.loads(ns["resp"].generated_text)
            jsonschema.validate(person, ns["schema"])
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
        with self.notebook_on_smol() as ns:
            cell = self.sections["Bonus: Structured Generation (NER)"]
            # The template, the Output model, then the last cell (the adapter's answer).
            template = cell[:cell.index("# Base Mistral-7B")]
            model = cell[cell.index("from typing import List"):cell.index("schema = Output.schema()")]
            last = cell[cell.rindex("resp = client.generate("):]
            self.assertIn('adapter_id="predibase/conllpp"', last)
            exec(compile(template + model + "schema = Output.schema()\n" + last, "lesson7:NER", "exec"), ns)
            answer = json.loads(ns["resp"].generated_text)
            jsonschema.validate(answer, ns["schema"])
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
            p = subprocess.run([h.CLI, "serve", "--demo", "--port", "0", *args], capture_output=True, text=True,
                               timeout=120)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(word, p.stderr)
        p = subprocess.run([h.CLI, "serve", "--demo", "--port", "0", "--kv-budget-mb", "0.01"], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("holds no block of 16 positions", p.stderr)


# ---- exposing the server: API key, CORS, access log, TLS, request timeout --------------------------


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
        cert, key = os.path.join(h.TMP, "cert.pem"), os.path.join(h.TMP, "key.pem")
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
        with open(os.path.join(h.TMP, "junk.pem"), "w") as f:
            f.write("not a certificate\n")
        p = subprocess.run([h.CLI, "serve", "--demo", "--port", "0", "--ssl-certfile", f.name, "--ssl-keyfile", key],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("--ssl-certfile", p.stderr)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("-v", action="store_true")
    ap.add_argument("-k", default=None, help="only tests whose name contains this")
    args = ap.parse_args()
    h.CLI = os.path.abspath(args.cli)
    h.TMP = tempfile.mkdtemp(prefix="servelab-serve-")
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
    shutil.rmtree(h.TMP, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""test_serve's cases on what the server refuses: every bad request with its status and message,
and /tokenize and /detokenize."""
import serve_harness as h
from serve_harness import *  # noqa: F401,F403 (the servers, helpers and imports the cases share)


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
        p = subprocess.run([h.CLI, "serve", "--demo", "--threads", "1", "--port", str(srv.port)],
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

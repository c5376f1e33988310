#!/usr/bin/env python3
"""test_serve's cases on the load generator: against our server, a stub TGI, nothing listening and
a server killed mid-run."""
import serve_harness as h
from serve_harness import *  # noqa: F401,F403 (the servers, helpers and imports the cases share)


# ---- the load generator ----------------------------------------------------------------------------

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
            p = subprocess.run([h.CLI, "loadgen", "--url", srv.url, *args], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, rc, (args, p.stderr))
            self.assertIn(words, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        p = subprocess.run([h.CLI, "loadgen", "--url", "ftp://x"], capture_output=True, text=True, timeout=60)
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
            out = os.path.join(h.TMP, "lg")
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
            p = subprocess.Popen([h.CLI, "loadgen", "--url", victim.url, "--json", "--scenario", "sweep", "--clients", "2",
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

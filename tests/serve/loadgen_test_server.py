#!/usr/bin/env python3
"""A small streaming server for the load generator's tests (tests/core/test_load_generator.cpp,
test_load_readers.cpp, test_load_targets.cpp and the Serving tab's):
it streams as vLLM does with a stream interval (several tokens per server-sent event, the first
token alone, a usage chunk at the end, a chunk that ends inside a UTF-8 character and so carries no
text) and as TGI does (one event per token, details at the end), and it misbehaves on request.
Standard library only; listens on 127.0.0.1 only and prints its port on the first line.

Behaviour is chosen by the first path segment, options joined by '-', e.g.
POST /s3-emoji/v1/completions. Options:
  sN        N tokens per chunk after the first (vLLM's stream interval); default 1
  emoji     tokens 4-7 are the four bytes of one emoji (U+1F600), so a chunk holds part of it
  contusage usage (completion_tokens so far) in every chunk, as vLLM's continuous_usage_stats
  nousage   no usage chunk (OpenAI) / no details (TGI)
  finishsep the finish_reason in a chunk of its own with empty text (as servelab serve does)
  dN        N ms between chunks (default 2)
  faults: garbage (200 and plain text), json (200 and one JSON answer), badjson (an event that is
  not JSON), badusage (completion_tokens "many"), http500, cut (the connection closes mid-stream),
  nothttp (the answer is not HTTP), errorevent (an error event mid-stream), silent (no answer for
  600 s)
GET /<engine>metrics/metrics answers Prometheus text with that engine's metric names (vllm, sglang,
tgi, llamacpp; written from their documented names), running = POSTs in flight, waiting 3, KV usage
0.25; GET /brokenmetrics/metrics answers a line that is no sample.
GET <prefix>/health answers 200 (GuideLLM checks it); GET /stats answers {"requests": N, "prompts": [...], "models": [...], "authorizations": [...]} (POSTs so far; a model is
OpenAI's "model" or LoRAX's adapter_id; the Authorization header of every request but /stats, "" when none); GET <prefix>/v1/models lists
"test-model".
"""
import json
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
IN_FLIGHT = [0]
# /metrics texts written from each engine's documented metric names; {running} is filled in.
METRICS = {
    "vllmmetrics": """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="test-model"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="test-model"}} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="test-model"}} 0.25
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{engine="0",model_name="test-model"}} 7.0
""",
    "sglangmetrics": """# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="test-model"}} {running}
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{model_name="test-model"}} 3
# TYPE sglang:token_usage gauge
sglang:token_usage{{model_name="test-model"}} 0.25
""",
    "tgimetrics": """# TYPE tgi_batch_current_size gauge
tgi_batch_current_size {running}
# TYPE tgi_queue_size gauge
tgi_queue_size 3
""",
    "llamacppmetrics": """# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing {running}
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 3
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.25
""",
    "brokenmetrics": "vllm:num_requests_running{{engine=\"0\" 1\n",
}
STATS = {"requests": 0, "prompts": [], "models": [], "authorizations": []}
EMOJI = "\U0001F600".encode()


def token_bytes(i, emoji):
    if emoji and 4 <= i <= 7:
        return EMOJI[i - 4:i - 3]
    return (" w%d" % i).encode()


def parse_options(segment):
    o = {"s": 1, "d": 2}
    for part in segment.split("-"):
        if len(part) > 1 and part[0] in "sd" and part[1:].isdigit():
            o[part[0]] = int(part[1:])
        elif part:
            o[part] = True
    return o


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path != "/stats":
            with LOCK:
                STATS["authorizations"].append(self.headers.get("Authorization", ""))
        if self.path == "/stats":
            with LOCK:
                body = json.dumps(STATS).encode()
        elif self.path.endswith("/metrics"):
            engine = self.path.strip("/").split("/")[0]
            with LOCK:
                running = IN_FLIGHT[0]
            body = METRICS.get(engine, "").format(running=running).encode()
            if not body:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        elif self.path.endswith("/health"):
            body = b"{}"
        elif self.path.endswith("/v1/models"):
            body = json.dumps({"object": "list", "data": [{"id": "test-model", "object": "model"}]}).encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def event(self, obj):
        self.chunk(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")

    def do_POST(self):
        with LOCK:
            IN_FLIGHT[0] += 1
            STATS["authorizations"].append(self.headers.get("Authorization", ""))
        try:
            self.answer_post()
        finally:
            with LOCK:
                IN_FLIGHT[0] -= 1

    def answer_post(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        segments = self.path.strip("/").split("/")
        if segments[0] in ("v1", "generate_stream", "generate", ""):
            segments.insert(0, "")  # no options segment
        o = parse_options(segments[0])
        route = "/" + "/".join(segments[1:])
        chat = route == "/v1/chat/completions"
        openai = route in ("/v1/completions", "/v1/chat/completions")
        if openai:
            prompt = body["messages"][-1]["content"] if chat else body["prompt"]
            if isinstance(prompt, list):  # OpenAI's content parts, as GuideLLM sends them
                prompt = " ".join(p.get("text", "") for p in prompt if isinstance(p, dict))
            n = body.get("max_completion_tokens" if chat else "max_tokens", 16)
        else:
            prompt = body["inputs"]
            n = body["parameters"]["max_new_tokens"]
        with LOCK:
            STATS["requests"] += 1
            STATS["prompts"].append(prompt)
            STATS["models"].append(body.get("model") if openai else body["parameters"].get("adapter_id"))
        if o.get("nothttp"):
            self.wfile.write(b"SSH-2.0-OpenSSH_9.2\r\nProtocol mismatch.\r\n")
            self.close_connection = True
            return
        if o.get("silent"):
            time.sleep(600)
            return
        if o.get("http500"):
            err = json.dumps({"error": {"message": "the engine fell over", "type": "server_error"}}).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(err)))
            self.end_headers()
            self.wfile.write(err)
            return
        if o.get("json"):
            answer = json.dumps({"choices": [{"text": " w0 w1", "finish_reason": "length"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        if o.get("garbage"):
            self.chunk(b"hello, this is not an event stream\n\n")
            self.chunk(b"")
            return
        if o.get("badjson"):
            self.event(b"{\"choices\": [{\"text\": \" w0\"")
            self.chunk(b"")
            return
        prompt_tokens = len(prompt.split())
        # Chunks: the first token alone (the prefill's), then s tokens each.
        bounds, i = [], 0
        while i < n:
            size = 1 if i == 0 else o["s"]
            bounds.append((i, min(n, i + size)))
            i += size
        held = b""
        for c, (a, b) in enumerate(bounds):
            time.sleep(o["d"] / 1000.0)
            if o.get("cut") and c == 2:
                self.close_connection = True
                return  # no terminating chunk: the connection just closes
            if o.get("errorevent") and c == 2:
                self.event({"error": {"message": "out of KV blocks", "type": "server_error"}} if openai
                           else {"error": "out of KV blocks", "error_type": "generation"})
                self.chunk(b"")
                return
            raw = held + b"".join(token_bytes(t, o.get("emoji")) for t in range(a, b))
            # Complete characters only; an incomplete one waits for the chunk that completes it.
            cut = len(raw)
            for back in range(1, min(4, len(raw)) + 1):
                lead = raw[-back]
                if lead & 0xC0 == 0x80:
                    continue
                need = 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 1
                if need > back:
                    cut = len(raw) - back
                break
            text, held = raw[:cut].decode(), raw[cut:]
            last = c == len(bounds) - 1
            if openai:
                finish = "length" if last and not o.get("finishsep") else None
                choice = {"index": 0, "logprobs": None, "finish_reason": finish}
                if chat:
                    choice["delta"] = {"content": text}
                else:
                    choice["text"] = text
                ev = {"id": "cmpl-1", "object": "chat.completion.chunk" if chat else "text_completion",
                      "model": "test-model", "choices": [choice]}
                if o.get("contusage"):
                    ev["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": b,
                                   "total_tokens": prompt_tokens + b}
                if chat and c == 0:
                    # vLLM's first chat chunk: the role, no content.
                    first = dict(ev, choices=[{"index": 0, "delta": {"role": "assistant", "content": ""},
                                               "logprobs": None, "finish_reason": None}])
                    first.pop("usage", None)
                    self.event(first)
                self.event(ev)
            else:
                # TGI: one event per token; the last one carries generated_text and details.
                for t in range(a, b):
                    end = last and t == b - 1
                    tok_text = text if t == b - 1 else ""
                    ev = {"token": {"id": t, "text": tok_text, "logprob": -0.5, "special": False},
                          "generated_text": None, "details": None}
                    if end:
                        ev["generated_text"] = "(the whole text)"
                        if not o.get("nousage"):
                            ev["details"] = {"finish_reason": "length", "generated_tokens": n,
                                             "prompt_tokens": prompt_tokens}
                    self.event(ev)
        if openai:
            if o.get("finishsep"):
                fin = {"index": 0, "logprobs": None, "finish_reason": "length"}
                fin["delta" if chat else "text"] = {"content": ""} if chat else ""
                self.event({"id": "cmpl-1", "model": "test-model", "choices": [fin]})
            if o.get("badusage"):
                self.event({"id": "cmpl-1", "choices": [], "usage": {"completion_tokens": "many"}})
            elif not o.get("nousage"):
                self.event({"id": "cmpl-1", "choices": [], "usage": {
                    "prompt_tokens": prompt_tokens, "completion_tokens": n, "total_tokens": prompt_tokens + n}})
            self.event(b"[DONE]")
        self.chunk(b"")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256


def main():
    srv = Server(("127.0.0.1", 0), Handler)
    print(srv.server_address[1], flush=True)
    # End with the parent: stdin closing (the test exited or crashed) stops the server.
    threading.Thread(target=lambda: (sys.stdin.read(), srv.shutdown()), daemon=True).start()
    srv.serve_forever()


if __name__ == "__main__":
    main()

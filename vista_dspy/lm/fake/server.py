"""A stdlib OpenAI-compatible ``/v1/chat/completions`` server answering with the rule engine (``rules``): the real
HTTP path, with injected faults, latency, outages and a context limit. A request that asks for ``logprobs`` gets
token log-probabilities: each label value's first three letters are one token whose alternatives carry the engine's
distribution over the labels.

    python -m vista_dspy.lm.fake.server [--latency S] [--port N]    a server in its own process; prints its URL
"""

from __future__ import annotations

import collections
import contextlib
import json
import re
import threading

from .rules import RuleEngine

LABEL_VALUE = re.compile(r'"(?:label|category)": "([^"]+)"')


def token_logprobs(text: str, distributions: list[dict]) -> dict:
    """OpenAI-style ``logprobs`` for ``text``: words as tokens, each label value's first three letters a token of
    their own whose alternatives are the labels' first three letters with the distribution's log-probabilities."""
    import math

    content, position = [], 0
    matches = list(LABEL_VALUE.finditer(text))
    for match, distribution in zip(matches, distributions + [None] * (len(matches) - len(distributions))):
        start = match.start(1)
        for token in re.findall(r"\s*\S+|\s+", text[position:start]):
            content.append({"token": token, "logprob": 0.0, "top_logprobs": [{"token": token, "logprob": 0.0}]})
        value = match.group(1)
        alternatives = ([{"token": label[:3], "logprob": math.log(max(p, 1e-9))} for label, p in distribution.items()]
                        if distribution else [{"token": value[:3], "logprob": 0.0}])
        content.append({"token": value[:3], "logprob": 0.0, "top_logprobs": alternatives})
        position = start + 3
    for token in re.findall(r"\s*\S+|\s+", text[position:]):
        content.append({"token": token, "logprob": 0.0, "top_logprobs": [{"token": token, "logprob": 0.0}]})
    assert "".join(t["token"] for t in content) == text
    return {"content": content}


class FakeOpenAIServer:
    """A stdlib OpenAI-compatible ``/v1/chat/completions`` server answering with ``RuleEngine`` (real HTTP path)."""

    def __init__(self, engine: RuleEngine | None = None, *, faults: dict[str, float] | None = None,
                 latency: float = 0.0, hang: float = 3.0, seed: int = 0, port: int = 0,
                 down_after: int | None = None, logprobs: bool = True, context_tokens: int | None = None,
                 slots: int | None = None) -> None:
        """``faults``: rate per kind, drawn independently per request (seeded): ``500``, ``429``, ``401``, ``timeout``
        (answers after ``hang`` seconds), ``empty`` (no content), ``malformed`` (not JSON), ``truncated`` (half an
        answer, finish_reason length). ``latency``: seconds added to every answer. ``injected`` counts faults.
        ``down_after``: after that many requests the server goes down: it stops listening (connection refused) and
        drops the requests of connections still open without an answer. ``port``: 0 picks a free one.
        ``logprobs``: answer a request asking for token log-probabilities with them (False: an endpoint that gives
        none). ``context_tokens``: a prompt longer than that (4 characters a token) is refused as llama.cpp's server
        refuses one that does not fit its context (HTTP 400, ``exceed_context_size_error``). ``slots``: at most that
        many requests answered at once, the others waiting their turn (llama.cpp's parallel slots: a server that
        is the bottleneck, not the clients)."""
        import http.server
        import random
        import time

        self.engine = engine or RuleEngine()
        self.injected: collections.Counter = collections.Counter()
        self.requests = 0
        self.last_body: dict | None = None  # the JSON body of the latest request
        self.models: list[tuple[str, str]] = []  # (model named, stage) of every answered request
        self.prompts: list[str] = []  # the last message of every answered request
        self.in_flight = self.max_in_flight = 0
        self.down = False
        engine, server = self.engine, self
        rates = dict(faults or {})
        rng = random.Random(seed)
        lock = threading.Lock()
        serving = threading.BoundedSemaphore(slots) if slots else contextlib.nullcontext()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers: no TCP connection per request
            # Headers and body go out in two writes: with Nagle's algorithm on a kept-alive connection the body
            # waits for the client's delayed ACK (~40 ms a request). Real servers set TCP_NODELAY too.
            disable_nagle_algorithm = True

            def log_message(self, *args):
                pass

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout) before the answer

            def do_GET(self):  # llama.cpp's health check (a front or a client waiting for the server)
                if self.path == "/health":
                    self._send(200, {"status": "ok"})
                else:
                    self._send(404, {"error": {"message": f"no such path {self.path}", "type": "not_found"}})

            def do_POST(self):
                with lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    with serving:
                        self._answer()
                finally:
                    with lock:
                        server.in_flight -= 1

            def _answer(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with lock:
                    if down_after is not None and server.requests >= down_after:
                        if not server.down:
                            server.down = True
                            threading.Thread(target=server.stop_listening, daemon=True).start()
                        self.close_connection = True  # no answer: the client sees the connection dropped
                        return
                    server.requests += 1
                    server.last_body = body
                    fault = next((kind for kind, rate in rates.items() if rng.random() < rate), None)
                    if fault:
                        server.injected[fault] += 1
                if latency:
                    time.sleep(latency)
                if fault in ("500", "429", "401"):
                    self._send(int(fault), {"error": {"message": f"injected {fault}", "type": "server_error"}})
                    return
                if fault == "timeout":
                    time.sleep(hang)
                messages = body["messages"]
                system = "".join(m["content"] for m in messages if m["role"] == "system")
                prompt = messages[-1]["content"]
                if isinstance(prompt, list):
                    prompt = "".join(part.get("text", "") for part in prompt)
                tokens = sum(len(str(m["content"])) for m in messages) // 4
                if context_tokens is not None and tokens > context_tokens:
                    self._send(400, {"error": {
                        "code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": tokens,
                        "n_ctx": context_tokens,
                        "message": "the request exceeds the available context size, try increasing it"}})
                    return
                text, distributions = engine.answer_with_distributions(system, prompt, n_messages=len(messages) - 1)
                with lock:
                    server.models.append((body["model"], engine._stage(system)))
                    server.prompts.append(prompt)
                finish = "stop"
                if fault == "empty":
                    text = ""
                elif fault == "malformed":
                    text = "{this is not json"
                elif fault == "truncated":
                    text, finish = text[: len(text) // 2], "length"
                choice = {"index": 0, "finish_reason": finish, "message": {"role": "assistant", "content": text}}
                if body.get("logprobs") and logprobs:
                    choice["logprobs"] = token_logprobs(text, distributions)
                read, written = tokens, len(text) // 4  # every message read: demos cost what they say
                self._send(200, {
                    "id": "fake", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [choice],
                    "usage": {"prompt_tokens": read, "completion_tokens": written, "total_tokens": read + written},
                    # llama.cpp's own account of the call (lm.clients.timings): 1 ms per token read, 10 per written.
                    "timings": {"cache_n": 0, "prompt_n": read, "prompt_ms": float(read),
                                "predicted_n": written, "predicted_ms": 10.0 * written},
                })

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 256  # the stdlib's 5 resets connections when dozens arrive at once

        self.httpd = Server(("127.0.0.1", port), Handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._stopping = threading.Lock()
        self._closed = threading.Event()

    def stop_listening(self) -> None:
        """Stop accepting connections and close the listening socket (once; later callers wait until it is closed,
        so the port can be bound again right after)."""
        if self._stopping.acquire(blocking=False):
            self.httpd.shutdown()
            self.httpd.server_close()
            self._closed.set()
        self._closed.wait()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_listening()


if __name__ == "__main__":  # a fake server in its own process (benchmarks: no GIL shared with the client)
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(description="Serve FakeOpenAIServer until SIGTERM; prints its URL.")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--slots", type=int, default=None)
    options = parser.parse_args()
    with FakeOpenAIServer(latency=options.latency, port=options.port, slots=options.slots) as fake:
        print(fake.url, flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        signal.pause()

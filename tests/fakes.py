"""A rule-based fake LM engine: deterministic answers from simple text rules, for tests of logic only.

It reads the input fields DSPy rendered into the last user message, recognises the stage by its output fields,
and answers in JSON. Markers in the text inject failures:
    <<BAD-DECOMPOSE>> in a turn, <<BAD-VERIFY>> / <<BAD-CATEGORIZE>> in a claim -> unparseable answer;
    <<FLAKY-VERIFY>> in a claim -> unparseable the first time it is asked only; <<FLAKY2-VERIFY>> the first two.
    <<COPY-DEMO>> in a turn -> Decompose adds a claim the turn never made; <<SILENT>> -> Decompose finds no claim.
    <<PV=35>> in a claim -> Verify's probability of VERIFIED in percent (its label follows it).
The HTTP server answers a request that asks for ``logprobs`` with token log-probabilities: each label value's first
three letters are one token whose alternatives carry the engine's distribution over the labels (``distributions``).
"""

from __future__ import annotations

import collections
import json
import re
import threading

import dspy
from dspy.lm15 import Message, Response, TextPart, Usage

FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with|\Z)", re.S)


def norm(text: str) -> str:
    return " ".join(re.sub(r"[^\w ]", " ", text.lower()).split())


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in re.findall(r"[^.!?]+[.!?]?", text) if s.strip()]


class RuleEngine:
    """``dspy.LM("fake/rules", engine=RuleEngine())``; ``requests`` keeps (stage, inputs) of every call."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str]]] = []
        self.message_counts: list[int] = []  # messages per request: demos add a user/assistant pair each
        self.flaky_seen: collections.Counter = collections.Counter()
        self._lock = threading.Lock()

    def complete(self, request):
        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system or [])
        prompt = request.messages[-1].text or ""
        text = self.answer(system, prompt, n_messages=len(request.messages))
        return Response(
            id=None,
            model="fake-rules",
            message=Message.assistant([TextPart(text)]),
            finish_reason="stop",
            usage=Usage(input_tokens=len(system + prompt) // 4, output_tokens=len(text) // 4,
                        total_tokens=(len(system + prompt) + len(text)) // 4),
        )

    def answer(self, system: str, prompt: str, n_messages: int = 1) -> str:
        return self.answer_with_distributions(system, prompt, n_messages)[0]

    def answer_with_distributions(self, system: str, prompt: str, n_messages: int = 1) -> tuple[str, list[dict]]:
        """The answer text, and the label distribution of each label value in it, in order."""
        inputs = {name: value for name, value in FIELD.findall(prompt)}
        stage = self._stage(system)
        with self._lock:
            self.requests.append((stage, inputs))
            self.message_counts.append(n_messages)
        answer = self.generic(system) if stage == "generic" else getattr(self, stage)(inputs)
        if isinstance(answer, dict) and "`reasoning`" in system.split("Your output fields are:", 1)[-1]:
            answer = {"reasoning": "Step by step, by the rules.", **answer}  # chain-of-thought stages
        if isinstance(answer, str):
            return answer, []
        distributions: list[dict] = []
        return json.dumps(_without_distributions(answer, distributions)), distributions

    def stream(self, request):  # pragma: no cover - not used
        raise NotImplementedError

    def close(self):
        pass

    def inputs_of(self, stage: str) -> list[dict[str, str]]:
        return [inputs for s, inputs in self.requests if s == stage]

    @staticmethod
    def _stage(system: str) -> str:
        for stage, marker in (("verify_batch", "list[VerifiedClaim]"), ("categorize_batch", "list[CategorizedClaim]"),
                              ("joint_batch", "list[JudgedClaim]"), ("decompose_dialogue", "list[TurnClaims]")):
            if marker in system:
                return stage
        for stage, marker in (("decompose", "`claims`"), ("facts", "`facts`"), ("support", "`supported`"),
                              ("judge", "'hallucinated'"), ("verify", "`label`"), ("categorize", "`category`"),
                              ("contradiction", "`contradicts`"), ("chat", "`response`")):
            if marker in system:
                return stage
        return "generic"  # an optimizer's own prompts (e.g. MIPROv2's instruction proposals)

    @staticmethod
    def generic(system: str) -> dict[str, str]:
        """Every output field the system prompt asks for, as a short sentence."""
        outputs = system.split("Your output fields are:", 1)[-1].split("All interactions", 1)[0]
        names = re.findall(r"^\d+\. `(\w+)`", outputs, re.M)
        assert names, f"no output fields in system prompt: {system[:200]}"
        return {name: f"Judge each claim against the reference ({name})." for name in names}

    def _batch(self, inputs, judge):
        """Answers a numbered claim list claim by claim. <<DROP-BATCH>> in a claim leaves it out of the answer,
        <<BAD-BATCH>> in any claim makes the whole answer unparseable."""
        claims = [line.split(". ", 1)[1] for line in inputs["claims"].splitlines() if ". " in line]
        if any("<<BAD-BATCH>>" in c for c in claims):
            return "{broken"
        verdicts = []
        for number, claim in enumerate(claims, start=1):
            answer = judge({**inputs, "claim": claim}) if "<<DROP-BATCH>>" not in claim else None
            if isinstance(answer, dict):  # a claim with a per-claim failure marker is left out too
                verdicts.append({"claim": number, **answer})
        return {"verdicts": verdicts}

    def verify_batch(self, inputs):
        return self._batch(inputs, self.verify)

    def categorize_batch(self, inputs):
        return self._batch(inputs, self.categorize)

    def joint_batch(self, inputs):
        def judge(claim_inputs):
            verified = self.verify(claim_inputs)
            if not isinstance(verified, dict):
                return verified
            p = verified["_p"]["VERIFIED"]
            categorized = self.categorize(claim_inputs)
            joint = {"VERIFIED": p, **{c: (1 - p) * q for c, q in categorized["_p"].items()}}
            if verified["label"] == "VERIFIED":
                return {"explanation": verified["explanation"], "category": "VERIFIED", "_p": joint}
            return {"explanation": categorized["explanation"], "category": categorized["category"], "_p": joint}

        return self._batch(inputs, judge)

    MARKED_TURN = re.compile(r"\[turn (\d+)\] assistant: (.*?)(?=\n(?:\[turn \d+\] )?(?:user|assistant): |\Z)", re.S)

    def decompose_dialogue(self, inputs):
        """Each marked turn decomposed as on its own; a turn with <<DROP-TURN>> or <<BAD-DECOMPOSE>> is left out
        of the answer (so it is asked on its own), <<BAD-DIALOGUE>> anywhere makes the answer unparseable."""
        if "<<BAD-DIALOGUE>>" in inputs["dialogue"]:
            return "{broken"
        turns = []
        for number, text in self.MARKED_TURN.findall(inputs["dialogue"]):
            answer = self.decompose({"turn": text}) if "<<DROP-TURN>>" not in text else None
            if isinstance(answer, dict):
                turns.append({"turn": int(number), **answer})
        return {"turns": turns}

    def decompose(self, inputs):
        turn = inputs["turn"]
        if "<<BAD-DECOMPOSE>>" in turn:
            return "I will not answer in JSON."
        if "<<SILENT>>" in turn:
            return {"claims": []}
        claims = [s for s in split_sentences(turn.replace("<<COPY-DEMO>>", "")) if not s.endswith("?")]
        if "<<COPY-DEMO>>" in turn:  # a small model's habit: a claim of its demos, not of this turn
            claims.append("Hayao Miyazaki directed Spirited Away.")
        return {"claims": claims}

    def verify(self, inputs):
        claim = inputs["claim"]
        if "<<BAD-VERIFY>>" in claim:
            return "label: maybe"
        flaky = 1 if "<<FLAKY-VERIFY>>" in claim else 2 if "<<FLAKY2-VERIFY>>" in claim else 0
        if self.flaky_seen[claim] < flaky:
            self.flaky_seen[claim] += 1  # unparseable the first `flaky` times only
            return "label: maybe"
        sources = norm(inputs["reference"]) + " | " + " | ".join(
            norm(line.split(". ", 1)[-1]) for line in inputs["knowledge"].splitlines()
        )
        supported = norm(claim) in sources
        marked = re.search(r"<<PV=([0-9]+)>>", claim)
        p = int(marked.group(1)) / 100 if marked else (0.9 if supported else 0.1)
        label = "VERIFIED" if (p >= 0.5 if marked else supported) else "UNVERIFIABLE"
        return {"explanation": "found in sources" if supported else "not in sources", "label": label,
                "_p": {"VERIFIED": p, "UNVERIFIABLE": 1 - p}}

    def categorize(self, inputs):
        claim = inputs["claim"]
        if "<<BAD-CATEGORIZE>>" in claim:
            return "{not json"
        low = claim.lower()
        if "not sure" in low or "don't know" in low:
            category = "ABSTENTION"
        elif low.startswith("i think") or "i love" in low or "i like" in low:
            category = "OUT-OF-SCOPE"
        elif " not " in f" {low} " or "never" in low:
            category = "CONTRADICTED"
        else:
            category = "LACKING EVIDENCE"
        others = [c for c in ("LACKING EVIDENCE", "OUT-OF-SCOPE", "ABSTENTION", "CONTRADICTED") if c != category]
        return {"explanation": f"rule for {category}", "category": category,
                "_p": {category: 0.7, **dict.fromkeys(others, 0.1)}}

    def chat(self, inputs):
        """A grounded chatbot's answer: the document's first sentence, and an invented one when the history asks
        for it with <<LIE>>."""
        first = split_sentences(inputs.get("document", ""))[:1]
        invented = ["The city was founded in 1850."] if "<<LIE>>" in inputs.get("history", "") else []
        return {"response": " ".join(first + invented) or "I do not know."}

    def facts(self, inputs):
        return {"facts": [s for s in split_sentences(inputs["text"]) if not s.endswith("?")]}

    def support(self, inputs):
        return {"supported": norm(inputs["fact"]) in norm(inputs["reference"])}

    def judge(self, inputs):
        sentences = [s for s in split_sentences(inputs["turn"]) if not s.endswith("?")]
        faithful = all(norm(s) in norm(inputs["reference"]) for s in sentences)
        return {"explanation": "rule", "label": "faithful" if faithful else "hallucinated"}

    def contradiction(self, inputs):
        contradicts = "contrary" in inputs["turn"].lower()
        return {"explanation": "rule", "contradicts": contradicts}


def _without_distributions(answer, found: list[dict]):
    """``answer`` without its "_p" entries, collected into ``found`` in the order their labels appear."""
    if isinstance(answer, dict):
        if "_p" in answer:
            found.append(answer["_p"])
        return {k: _without_distributions(v, found) for k, v in answer.items() if k != "_p"}
    if isinstance(answer, list):
        return [_without_distributions(item, found) for item in answer]
    return answer


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


class AsyncRuleEngine:
    def __init__(self, sync: RuleEngine) -> None:
        self.sync = sync

    async def complete(self, request):
        return self.sync.complete(request)

    async def aclose(self):
        pass


def rule_lm(engine: RuleEngine | None = None) -> dspy.LM:
    engine = engine or RuleEngine()
    return dspy.LM("fake/rules", engine=engine, async_engine=AsyncRuleEngine(engine), cache=False, num_retries=0)


class FakeOpenAIServer:
    """A stdlib OpenAI-compatible ``/v1/chat/completions`` server answering with ``RuleEngine`` (real HTTP path)."""

    def __init__(self, engine: RuleEngine | None = None, *, faults: dict[str, float] | None = None,
                 latency: float = 0.0, hang: float = 3.0, seed: int = 0, port: int = 0,
                 down_after: int | None = None, logprobs: bool = True, context_tokens: int | None = None) -> None:
        """``faults``: rate per kind, drawn independently per request (seeded): ``500``, ``429``, ``401``, ``timeout``
        (answers after ``hang`` seconds), ``empty`` (no content), ``malformed`` (not JSON), ``truncated`` (half an
        answer, finish_reason length). ``latency``: seconds added to every answer. ``injected`` counts faults.
        ``down_after``: after that many requests the server goes down: it stops listening (connection refused) and
        drops the requests of connections still open without an answer. ``port``: 0 picks a free one.
        ``logprobs``: answer a request asking for token log-probabilities with them (False: an endpoint that gives
        none). ``context_tokens``: a prompt longer than that (4 characters a token) is refused as llama.cpp's server
        refuses one that does not fit its context (HTTP 400, ``exceed_context_size_error``)."""
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

            def do_POST(self):
                with lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
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
                self._send(200, {
                    "id": "fake", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [choice],
                    "usage": {"prompt_tokens": len(system + prompt) // 4, "completion_tokens": len(text) // 4,
                              "total_tokens": (len(system + prompt) + len(text)) // 4},
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
    options = parser.parse_args()
    with FakeOpenAIServer(latency=options.latency, port=options.port) as fake:
        print(fake.url, flush=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        signal.pause()

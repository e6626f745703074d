"""A rule-based fake LM engine: deterministic answers from simple text rules, for tests of logic only.

It reads the input fields DSPy rendered into the last user message, recognises the stage by its output fields,
and answers in JSON. Markers in the text inject failures:
    <<BAD-DECOMPOSE>> in a turn, <<BAD-VERIFY>> / <<BAD-CATEGORIZE>> in a claim -> unparseable answer.
"""

from __future__ import annotations

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
        self._lock = threading.Lock()

    def complete(self, request):
        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system or [])
        prompt = request.messages[-1].text or ""
        inputs = {name: value for name, value in FIELD.findall(prompt)}
        stage = self._stage(system)
        with self._lock:
            self.requests.append((stage, inputs))
        answer = getattr(self, stage)(inputs)
        text = answer if isinstance(answer, str) else json.dumps(answer)
        return Response(
            id=None,
            model="fake-rules",
            message=Message.assistant([TextPart(text)]),
            finish_reason="stop",
            usage=Usage(input_tokens=len(system + prompt) // 4, output_tokens=len(text) // 4,
                        total_tokens=(len(system + prompt) + len(text)) // 4),
        )

    def stream(self, request):  # pragma: no cover - not used
        raise NotImplementedError

    def close(self):
        pass

    @staticmethod
    def _stage(system: str) -> str:
        for stage, marker in (("decompose", "`claims`"), ("verify", "`label`"), ("categorize", "`category`"),
                              ("contradiction", "`contradicts`")):
            if marker in system:
                return stage
        raise AssertionError(f"unknown stage for system prompt: {system[:200]}")

    def decompose(self, inputs):
        turn = inputs["turn"]
        if "<<BAD-DECOMPOSE>>" in turn:
            return "I will not answer in JSON."
        claims = [s for s in split_sentences(turn) if not s.endswith("?")]
        return {"claims": claims}

    def verify(self, inputs):
        claim = inputs["claim"]
        if "<<BAD-VERIFY>>" in claim:
            return "label: maybe"
        sources = norm(inputs["reference"]) + " | " + " | ".join(
            norm(line.split(". ", 1)[-1]) for line in inputs["knowledge"].splitlines()
        )
        supported = norm(claim) in sources
        return {"explanation": "found in sources" if supported else "not in sources",
                "label": "VERIFIED" if supported else "UNVERIFIABLE"}

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
        return {"explanation": f"rule for {category}", "category": category}

    def contradiction(self, inputs):
        contradicts = "contrary" in inputs["turn"].lower()
        return {"explanation": "rule", "contradicts": contradicts}


def rule_lm(engine: RuleEngine | None = None) -> dspy.LM:
    return dspy.LM("fake/rules", engine=engine or RuleEngine(), cache=False, num_retries=0)

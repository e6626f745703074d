"""A rule-based fake LM engine: deterministic answers from simple text rules, for tests of logic only
(``rule_lm``: a ``dspy.LM`` that calls it in-process; ``server.FakeOpenAIServer``: the same over HTTP).

It reads the input fields DSPy rendered into the last user message, recognises the stage by its output fields,
and answers in JSON. Markers in the text inject failures:
    <<BAD-DECOMPOSE>> in a turn, <<BAD-VERIFY>> / <<BAD-CATEGORIZE>> in a claim -> unparseable answer;
    <<FLAKY-VERIFY>> in a claim -> unparseable the first time it is asked only; <<FLAKY2-VERIFY>> the first two.
    <<COPY-DEMO>> in a turn -> Decompose adds a claim the turn never made; <<SILENT>> -> Decompose finds no claim.
    <<PV=35>> in a claim -> Verify's probability of VERIFIED in percent (its label follows it).
``answer_with_distributions`` also gives the engine's distribution over the labels of each label value it answers.
"""

from __future__ import annotations

import collections
import json
import re
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dspy

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
        from dspy.lm15 import Message, Response, TextPart, Usage  # (the HTTP server answers without DSPy)

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


class AsyncRuleEngine:
    def __init__(self, sync: RuleEngine) -> None:
        self.sync = sync

    async def complete(self, request):
        return self.sync.complete(request)

    async def aclose(self):
        pass


def rule_lm(engine: RuleEngine | None = None) -> dspy.LM:
    import dspy

    engine = engine or RuleEngine()
    return dspy.LM("fake/rules", engine=engine, async_engine=AsyncRuleEngine(engine), cache=False, num_retries=0)

"""The paper's baselines, run with the same LM and returning the same verdict records as VISTA.

- ``FActScore``: split the turn into sentences, list each sentence's atomic facts, ask for each fact whether the
  reference supports it; the turn is hallucinated if any fact is not supported. ``split_sentences=False`` is the
  variant that extracts facts from the whole turn at once. No history, no knowledge store. Supported facts are
  recorded as VERIFIED, unsupported ones as LACKING EVIDENCE (FActScore has no finer categories).
- ``LLMJudge``: one holistic call per judged turn, given the reference and the history: faithful or hallucinated,
  with an explanation on the turn verdict (no claims).

Both read the reference as VISTA's stages do (``evidence.reading``): whole when it fits ``evidence_tokens``, else the passages
ranked for the turn's facts (FActScore; "unit": each fact's own) or sentences (LLM-as-Judge), within it; "full" reads
every word (the baselines as the paper ran them). LLM-as-Judge's history is its last turns within ``history_tokens``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import dspy

from . import scoring
from .evidence import TurnEvidence
from .evidence.reading import SourceReader, bounded_history
from .grounding import sentence_units, split_sentences
from .options import DEFAULT_EVIDENCE_TOKENS, DEFAULT_HISTORY_TOKENS, Evidence
from .prompts import clean_claims
from .schema import Category, ClaimVerdict, Dialogue, DialogueVerdict, Usage
from .signatures import AtomicFacts, IsSupported, JudgeTurn
from .stages import StageCall, StagedModule, StageResult, add_usage

FACT_DEMOS = [
    {"text": "Kilimanjaro, a dormant volcano in Tanzania, is Africa's highest mountain.",
     "facts": ["Kilimanjaro is a dormant volcano.", "Kilimanjaro is in Tanzania.",
               "Kilimanjaro is the highest mountain in Africa."]},
    {"text": "Have you ever been there?", "facts": []},
    {"text": "I love jazz, and Miles Davis recorded Kind of Blue in 1959.",
     "facts": ["The speaker loves jazz.", "Miles Davis recorded Kind of Blue.", "Kind of Blue was recorded in 1959."]},
]
SUPPORT_DEMOS = [
    {"reference": "Penicillin\nAlexander Fleming discovered penicillin in 1928 in London.",
     "fact": "Penicillin was discovered in 1928.", "supported": True},
    {"reference": "Penicillin\nAlexander Fleming discovered penicillin in 1928 in London.",
     "fact": "Fleming won a Nobel Prize.", "supported": False},
]
JUDGE_DEMOS = [
    {"reference": "Lisbon\nLisbon is built on seven hills and is served by historic trams.",
     "history": "user: Is Lisbon flat?", "turn": "Not at all, it sits on seven hills! I loved riding the old trams.",
     "explanation": "The hills and trams are in the reference; enjoying the trams is a personal remark.",
     "label": "faithful"},
    {"reference": "Lisbon\nLisbon is built on seven hills and is served by historic trams.",
     "history": "user: Is Lisbon old?", "turn": "Yes, it was founded by the Romans in 300 BC.",
     "explanation": "The founding by the Romans and the date are not in the reference.", "label": "hallucinated"},
]


def _examples(demos: list[dict]) -> list[dspy.Example]:
    return [dspy.Example(**demo) for demo in demos]


def _reader(reference: str | None, evidence: str, evidence_tokens: int) -> SourceReader:
    """How a baseline's prompt reads a turn's reference (it has no knowledge store)."""
    return SourceReader(TurnEvidence.of(reference, [], []), reference, [], reading=evidence,
                        reference_tokens=evidence_tokens, knowledge_tokens=evidence_tokens)


class FActScore(StagedModule):
    """FActScore adapted to dialogue turns (see the module docstring)."""

    def __init__(self, *, split_sentences: bool = True, zero_shot: bool = False,
                 short_answer_tokens: int | None = None, evidence: Evidence = "turn",
                 evidence_tokens: int = DEFAULT_EVIDENCE_TOKENS) -> None:
        super().__init__()
        self.facts = dspy.Predict(AtomicFacts)
        self.support = dspy.Predict(IsSupported)
        self.facts.demos = _examples(FACT_DEMOS)
        self.support.demos = _examples(SUPPORT_DEMOS)
        self.split_sentences = split_sentences
        self.zero_shot = zero_shot
        self.short_answer_tokens = short_answer_tokens
        self.evidence, self.evidence_tokens = evidence, evidence_tokens
        self.program_name = "factscore" if split_sentences else "factscore-nosplit"

    def option_values(self) -> dict[str, Any]:
        return {"split_sentences": self.split_sentences, "zero_shot": self.zero_shot,
                "short_answer_tokens": self.short_answer_tokens, "evidence": self.evidence,
                "evidence_tokens": self.evidence_tokens}

    def _judge(self, dialogue: Dialogue) -> Generator[list[StageCall], list[StageResult], DialogueVerdict]:
        usage, verdicts = Usage(), []
        for index in dialogue.judged_turns:
            turn = dialogue.turns[index]
            units = split_sentences(turn.text) if self.split_sentences else [turn.text]
            batch = [StageCall("decompose", self.facts, {"text": unit}) for unit in units]
            results = [add_usage(usage, "decompose", r) for r in (yield batch)]
            failed = [r.error for r in results if r.error is not None]
            facts, removed = clean_claims([f for r in results if r.error is None for f in (r.prediction.facts or [])])
            reader = _reader(turn.grounding.document, self.evidence, self.evidence_tokens)
            turn_read = reader.read(facts)
            read = [reader.read([f]) if self.evidence == "unit" else turn_read for f in facts]
            batch = [StageCall("verify", self.support, {"reference": r.reference, "fact": f})
                     for f, r in zip(facts, read)]
            checks = [add_usage(usage, "verify", r) for r in (yield batch)] if batch else []
            claims = [self._claim(fact, check).model_copy(update={"checked_against": r.checked_against()})
                      for fact, check, r in zip(facts, checks, read)]
            verdicts.append(scoring.turn_verdict(
                index, turn, claims, error=f"fact extraction failed: {failed[0]}" if failed else None,
                claims_source="decomposed", knowledge=[], duplicates_removed=removed))
        return self._verdict(dialogue, verdicts, usage, [])

    @staticmethod
    def _claim(fact: str, check: StageResult) -> ClaimVerdict:
        if check.error is not None:
            return ClaimVerdict(claim=fact, category=Category.ERROR, stage="verify", error=check.error)
        supported = bool(check.prediction.supported)
        return ClaimVerdict(
            claim=fact,
            category=Category.VERIFIED if supported else Category.LACKING_EVIDENCE,
            explanation="supported by the reference" if supported else "not supported by the reference",
            stage="verify",
        )


class LLMJudge(StagedModule):
    """One holistic faithful/hallucinated call per judged turn."""

    def __init__(self, *, zero_shot: bool = False, short_answer_tokens: int | None = None,
                 evidence: Evidence = "turn", evidence_tokens: int = DEFAULT_EVIDENCE_TOKENS,
                 history_tokens: int = DEFAULT_HISTORY_TOKENS) -> None:
        super().__init__()
        self.judge = dspy.Predict(JudgeTurn)
        self.judge.demos = _examples(JUDGE_DEMOS)
        self.zero_shot = zero_shot
        self.short_answer_tokens = short_answer_tokens
        self.evidence, self.evidence_tokens, self.history_tokens = evidence, evidence_tokens, history_tokens
        self.program_name = "judge"

    def option_values(self) -> dict[str, Any]:
        return {"zero_shot": self.zero_shot, "short_answer_tokens": self.short_answer_tokens,
                "evidence": self.evidence, "evidence_tokens": self.evidence_tokens,
                "history_tokens": self.history_tokens}

    def _reference(self, dialogue: Dialogue, index: int) -> str:
        """The reference as this judge reads it: for the turn's sentences (one call judges the whole turn)."""
        turn = dialogue.turns[index]
        reader = _reader(turn.grounding.document, self.evidence, self.evidence_tokens)
        return reader.read(sentence_units(turn.text) or [turn.text]).reference

    def _judge(self, dialogue: Dialogue) -> Generator[list[StageCall], list[StageResult], DialogueVerdict]:
        usage, verdicts = Usage(), []
        indices = dialogue.judged_turns
        batch = [
            StageCall("judge", self.judge, {
                "reference": self._reference(dialogue, i),
                "history": bounded_history(dialogue.turns[:i],
                                           None if self.evidence == "full" else self.history_tokens),
                "turn": dialogue.turns[i].text,
            })
            for i in indices
        ]
        # Turns are judged independently, so all of them go in one batch (concurrent under aforward).
        results = [add_usage(usage, "judge", r) for r in (yield batch)] if batch else []
        for index, result in zip(indices, results):
            verdicts.append(scoring.turn_verdict(
                index, dialogue.turns[index], [], error=result.error,
                label="unknown" if result.error else result.prediction.label, claims_source="decomposed",
                knowledge=[], explanation=None if result.error else result.prediction.explanation))
        return self._verdict(dialogue, verdicts, usage, [])


SYSTEMS = {
    "factscore": lambda **kw: FActScore(split_sentences=True, **kw),
    "factscore-nosplit": lambda **kw: FActScore(split_sentences=False, **kw),
    "judge": lambda **kw: LLMJudge(**kw),
}
# The judging options (``options.JudgeOptions``' names) each baseline takes: it has no knowledge store, FActScore no
# history; the other options are VISTA's.
SYSTEM_OPTIONS = {"factscore": ("zero_shot", "evidence", "evidence_tokens"),
                  "factscore-nosplit": ("zero_shot", "evidence", "evidence_tokens"),
                  "judge": ("zero_shot", "evidence", "evidence_tokens", "history_tokens")}


def baseline(name: str, *, short_answer_tokens: int | None = None,
             changes: dict[str, Any] | None = None) -> StagedModule:
    """Baseline ``name`` with those of the judging options ``changes`` that it takes (``SYSTEM_OPTIONS``)."""
    taken = {k: v for k, v in (changes or {}).items() if k in SYSTEM_OPTIONS[name]}
    return SYSTEMS[name](short_answer_tokens=short_answer_tokens, **taken)

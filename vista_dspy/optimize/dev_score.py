"""A program's score on dev dialogues (``DevScore``, judged with our own runner) and the gate of a compiled program
against its base on the same dialogues, end to end and on their human claims."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy

from ..program import Vista
from ..schema import Dialogue, DialogueVerdict
from .demos import Meter, agreement, annotated
from .gate import Gate, PairedTest
from .probing import safe


@dataclass
class DevScore:
    """``agreement`` averaged over dev dialogues (what the teleprompters maximize), turn accuracy over all dev turns
    and, when claims carry gold categories, claim accuracy (scoring.summarize's definitions). Item-wise readings of
    the same verdicts for paired tests: ``turns_right`` (one character per dev turn in dev order, "1" right, "0"
    wrong or unknown) and ``claims_right`` (one per human claim: its safe/unsafe decision agrees with the
    annotators'); end to end, the claim-set F1 of the decomposition against the human claims and the category
    agreement on decomposed claims matched to a human claim."""

    agreement: float
    turn_accuracy: float | None
    claim_accuracy: float | None
    turns_right: str = ""
    claims_right: str = ""
    decomposition_f1: float | None = None
    matched_category_accuracy: float | None = None
    summary: dict[str, Any] = field(default_factory=dict, repr=False)

    def as_dict(self) -> dict[str, Any]:
        turns = self.summary.get("turn_metrics", {})
        claims = self.summary.get("claim_metrics", {})
        return {"agreement": self.agreement, "turn_accuracy": self.turn_accuracy,
                "f1_hallucinated": turns.get("f1_hallucinated"), "claim_accuracy": self.claim_accuracy,
                "claim_decision_accuracy": (self.claims_right.count("1") / len(self.claims_right)
                                            if self.claims_right else None),
                "claim_macro_f1": claims.get("macro_f1"), "decomposition_f1": self.decomposition_f1,
                "lm_calls": self.summary.get("usage", {}).get("total", {}).get("calls")}


def score(program: Vista, dev: Sequence[Dialogue], *, given_claims: bool = False, threads: int = 1,
          meter: Meter | None = None, log: Callable[[str], None] | None = None) -> DevScore:
    """Score ``program`` on ``dev`` with the LM and adapter of the current dspy context (``given_claims``: on the
    human claims instead of end to end).

    Runs on our own runner, not ``dspy.Evaluate``: Evaluate re-submits any example still running after 120 s,
    which a slow local model reaches on long dialogues (duplicate LM calls, wasted minutes)."""
    from .. import scoring
    from ..run.runner import Threads, evaluate
    from .metrics import decomposition_agreement

    finished: list[str] = []

    def progress(verdict: DialogueVerdict) -> None:
        finished.append(verdict.dialogue_id)
        if log is not None:
            log(f"    {len(finished)}/{len(dev)} dev dialogues judged ({verdict.dialogue_id})")

    judge = program.with_options(given_claims=given_claims) if program.options.given_claims != given_claims \
        else program
    result = evaluate(dev, judge, Threads(dspy.settings.lm, dspy.settings.adapter, threads), on_done=progress)
    if result.interrupted:  # never score a program on the dialogues an interrupt happened to leave judged
        raise KeyboardInterrupt
    measured = (meter or Meter()).wrap(agreement)
    values = [measured(None, verdict) for verdict in result.verdicts]
    summary = scoring.summarize(result.verdicts)
    order = {d.id: i for i, d in enumerate(dev)}
    verdicts = sorted(result.verdicts, key=lambda v: order[v.dialogue_id])
    turns = [t for v in verdicts for t in sorted(v.turns, key=lambda t: t.turn_index) if t.gold_label is not None]
    claims = [c for t in (t for v in verdicts for t in sorted(v.turns, key=lambda t: t.turn_index))
              for c in t.claims if c.gold_category is not None]
    decomposition = decomposition_agreement(dev, result.verdicts)
    return DevScore(agreement=sum(values) / len(values) if values else 0.0,
                    turn_accuracy=summary.get("turn_metrics", {}).get("accuracy"),
                    claim_accuracy=summary.get("claim_metrics", {}).get("accuracy"),
                    turns_right="".join("1" if t.label == t.gold_label else "0" for t in turns),
                    claims_right="".join("1" if safe(c.category.value) == safe(c.gold_category.value) else "0"
                                         for c in claims),
                    decomposition_f1=decomposition.f1,
                    matched_category_accuracy=(decomposition.same_category / decomposition.matched
                                               if decomposition.matched else None),
                    summary=summary)


def has_human_claims(dialogues: Sequence[Dialogue]) -> bool:
    return bool(annotated(dialogues))


def gate_on(base: Vista, compiled: Vista, dev: Sequence[Dialogue], *, alpha: float, threads: int = 1,
            meter: Meter | None = None, base_score: DevScore | None = None,
            compiled_score: DevScore | None = None, log: Callable[[str], None] = lambda message: None
            ) -> tuple[Gate, dict[str, Any]]:
    """The gate of ``compiled`` against ``base`` on ``dev`` (end to end; and on the human claims where ``dev`` has
    them), and both programs' scores. Scores already measured end to end may be passed in."""
    if base_score is None:
        log(f"gate: the {base.program_name} program end to end on {len(dev)} dev dialogues")
        base_score = score(base, dev, threads=threads, meter=meter, log=log)
    if compiled_score is None:
        log(f"gate: the compiled program end to end on {len(dev)} dev dialogues")
        compiled_score = score(compiled, dev, threads=threads, meter=meter, log=log)
    scores = {"base": {"program": base.program_name, **base_score.as_dict()},
              "compiled": compiled_score.as_dict()}
    claims = None
    if has_human_claims(dev):
        log("gate: both programs on the dev dialogues' human claims")
        base_claims = score(base, annotated(dev), given_claims=True, threads=threads, meter=meter, log=log)
        compiled_claims = score(compiled, annotated(dev), given_claims=True, threads=threads, meter=meter, log=log)
        claims = PairedTest.of_strings(compiled_claims.claims_right, base_claims.claims_right)
        scores["base"]["given_claims"] = base_claims.as_dict()
        scores["compiled"]["given_claims"] = compiled_claims.as_dict()
    turns = (PairedTest.of_strings(compiled_score.turns_right, base_score.turns_right)
             if compiled_score.turns_right and len(compiled_score.turns_right) == len(base_score.turns_right)
             else None)
    return Gate(alpha=alpha, turns=turns, claims=claims, base=base.program_name), scores

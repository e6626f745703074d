"""Pure scoring: turn labels, VISTA scores, and agreement with gold annotations. No LM here.

Definitions (the paper's aggregation step, with this project's rule that no claim is dropped: a failed stage is an
ERROR claim and makes its turn ``unknown``):
- safe = VERIFIED, OUT-OF-SCOPE, ABSTENTION; unsafe = CONTRADICTED, LACKING EVIDENCE.
- A turn is ``hallucinated`` iff some claim is unsafe (or the contradiction check fired); otherwise ``unknown``
  if any claim (or the decomposition) failed, otherwise ``faithful``. A turn with content (``grounding.
  says_something``) from which Decompose took no claim is a failed decomposition: ``unknown``, with
  ``EMPTY_DECOMPOSITION`` as its error, unless the judge reads it as the paper does (``empty_turns="faithful"``).
  A turn that says nothing checkable (a greeting, a bare question) and has no claim is faithful.
- VISTA score = safe claims / judged claims (ERROR claims are not judged); ``None`` when nothing was judged. Every
  reader of a score that gates something (``run.testing``, ``run.judge_metric``) counts the ERROR claims too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from .schema import (
    JUDGED_CATEGORIES,
    SAFE_CATEGORIES,
    UNSAFE_CATEGORIES,
    Category,
    ClaimVerdict,
    ContradictionVerdict,
    DialogueVerdict,
    Turn,
    TurnLabel,
    TurnVerdict,
    Usage,
    number_passages,
)
from .spans import with_spans


def turn_label(categories: Iterable[Category], *, failed: bool = False, contradiction: bool = False) -> TurnLabel:
    """Label of one turn from its claim categories. ``failed``: the turn could not be decomposed."""
    categories = list(categories)
    if contradiction or any(c in UNSAFE_CATEGORIES for c in categories):
        return "hallucinated"
    if failed or any(c == Category.ERROR for c in categories):
        return "unknown"
    return "faithful"


def turn_verdict(index: int, turn: Turn, claims: list[ClaimVerdict], *, error: str | None = None,
                 contradiction: ContradictionVerdict | None = None, label: TurnLabel | None = None,
                 **fields: Any) -> TurnVerdict:
    """The verdict on judged turn ``index``: its label and score from its claims (``turn_label``; ``label`` for a
    holistic judge), what the turn was judged against, and its gold label. ``error``: why the turn has no claims (a
    failed decomposition). Each claim gets the span(s) of the turn it was said in (``spans``). ``fields``: the rest
    of ``TurnVerdict``'s."""
    claims = with_spans(turn.text, claims)  # where the turn said each claim
    categories = [c.category for c in claims]
    if label is None:
        label = turn_label(categories, failed=error is not None or bool(contradiction and contradiction.error),
                           contradiction=bool(contradiction and contradiction.contradicts))
    return TurnVerdict(turn_index=index, text=turn.text, grounding=turn.grounding.kind, claims=claims, label=label,
                       score=turn_score(categories), passages=turn.grounding.reference_passages,
                       contradiction=contradiction, error=error, gold_label=turn.gold.label if turn.gold else None,
                       **fields)


EmptyTurns = Literal["unknown", "faithful"]
EMPTY_DECOMPOSITION = ("Decompose found no claim in a turn with content: a failed decomposition (empty_turns="
                       "'faithful' reads such a turn as the paper does, faithful)")
_BACKGROUND_FAILURE = re.compile(r"^turn (\d+) \(background\): ")


def background_failure(index: int, error: str) -> str:
    """How a dialogue verdict records a background turn whose claims never reached the knowledge store."""
    return f"turn {index} (background): {error}"


def failed_background(errors: Iterable[str]) -> list[int]:
    """The background turns a dialogue verdict's ``errors`` say failed (``background_failure``), in order."""
    return sorted(int(m.group(1)) for e in errors if (m := _BACKGROUND_FAILURE.match(e)))


def settle_turns(turns: Sequence[TurnVerdict], errors: Sequence[str], *, empty_turns: EmptyTurns = "unknown",
                 accumulate: bool = True) -> list[TurnVerdict]:
    """What only the whole dialogue knows about its turns, written into their verdicts: a turn with content but no
    claim (``empty_decomposition``) is ``unknown`` with ``EMPTY_DECOMPOSITION`` as its error (``empty_turns=
    "faithful"``: left faithful, the paper's reading); a turn judged after a background turn whose decomposition
    failed lists that turn in ``knowledge_missing`` (its store lacked those claims; not under ``accumulate=False``,
    whose store never holds them)."""
    if empty_turns not in ("unknown", "faithful"):
        raise ValueError(f"empty_turns is 'unknown' or 'faithful', not {empty_turns!r}")
    lost = failed_background(errors) if accumulate else []
    settled = []
    for turn in turns:
        changes: dict[str, Any] = {}
        if turn.empty_decomposition and empty_turns == "unknown" and turn.label == "faithful" and turn.error is None:
            changes.update(label="unknown", error=EMPTY_DECOMPOSITION)
        missing = [i for i in lost if i < turn.turn_index]
        if missing:
            changes["knowledge_missing"] = missing
        settled.append(turn.model_copy(update=changes) if changes else turn)
    return settled


def safe_and_judged(categories: Iterable[Category]) -> tuple[int, int]:
    categories = [c for c in categories if c != Category.ERROR]
    return sum(c in SAFE_CATEGORIES for c in categories), len(categories)


def ratio(safe: int, judged: int) -> float | None:
    return safe / judged if judged else None


def turn_score(categories: Iterable[Category]) -> float | None:
    return ratio(*safe_and_judged(categories))


def micro_score(turns: Iterable[TurnVerdict]) -> float | None:
    """Micro-average VISTA score over turns (every judged claim weighs the same)."""
    safe = judged = 0
    for turn in turns:
        s, j = safe_and_judged(c.category for c in turn.claims)
        safe, judged = safe + s, judged + j
    return ratio(safe, judged)


def all_turns(verdicts: Iterable[DialogueVerdict]) -> list[TurnVerdict]:
    return [turn for verdict in verdicts for turn in verdict.turns]


def turn_metrics(predicted: Sequence[TurnLabel], gold: Sequence[str]) -> dict[str, Any]:
    """Turn-level detection of hallucinated turns (positive class = hallucinated).

    ``unknown`` predictions are reported twice: counted wrong (``accuracy``; for P/R/F1 an unknown counts as the
    label opposite to gold) and excluded (``accuracy_excluding_unknown``).
    """
    from sklearn.metrics import accuracy_score, precision_recall_fscore_support  # sets OpenMP variables on import

    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predictions for {len(gold)} gold labels")
    n = len(gold)
    if n == 0:
        return {"turns": 0}
    flip = {"faithful": "hallucinated", "hallucinated": "faithful"}
    counted_wrong = [flip[g] if p == "unknown" else p for p, g in zip(predicted, gold)]
    known = [(p, g) for p, g in zip(predicted, gold) if p != "unknown"]
    precision, recall, f1, _ = precision_recall_fscore_support(
        gold, counted_wrong, labels=["hallucinated"], average=None, zero_division=0
    )
    return {
        "turns": n,
        "unknown": n - len(known),
        "accuracy": float(accuracy_score(gold, counted_wrong)),
        "accuracy_excluding_unknown": float(accuracy_score(*zip(*known))) if known else None,
        "precision_hallucinated": float(precision[0]),
        "recall_hallucinated": float(recall[0]),
        "f1_hallucinated": float(f1[0]),
        # Trivial baselines on the same turns, to read every accuracy against.
        "always_hallucinated_accuracy": sum(g == "hallucinated" for g in gold) / n,
        "always_faithful_accuracy": sum(g == "faithful" for g in gold) / n,
    }


def claim_metrics(predicted: Sequence[Category], gold: Sequence[Category]) -> dict[str, Any]:
    """Agreement of claim categories with gold categories for the same claims (ERROR counts as wrong)."""
    from sklearn.metrics import accuracy_score, f1_score, precision_recall_fscore_support

    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predictions for {len(gold)} gold categories")
    if not gold:
        return {"claims": 0}
    labels = [c.value for c in JUDGED_CATEGORIES]
    pred = [c.value for c in predicted]
    true = [c.value for c in gold]
    precision, recall, f1, support = precision_recall_fscore_support(
        true, pred, labels=labels, average=None, zero_division=0
    )
    return {
        "claims": len(gold),
        "errors": sum(c == Category.ERROR for c in predicted),
        "accuracy": float(accuracy_score(true, pred)),
        "macro_f1": float(f1_score(true, pred, labels=labels, average="macro", zero_division=0)),
        "per_category": {
            label: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for label, p, r, f, s in zip(labels, precision, recall, f1, support)
        },
    }


def evidence_read(verdicts: Sequence[DialogueVerdict], turns: Sequence[TurnVerdict]) -> dict[str, Any]:
    """Which readings a run's prompts used (``options.evidence``; "full" for a record from before it existed) and how
    many claims asked of the LM were checked against a part of their sources."""
    readings = sorted({str(v.options.get("evidence", "full")) for v in verdicts})
    parts = left_out = 0
    for turn in turns:
        length = len(number_passages(turn.passages)) if turn.passages else 0
        for claim in turn.claims:
            checked = claim.checked_against
            if checked is None or claim.stage == "evidence":  # (no prompt: its cues read its windows)
                continue
            whole_reference = not turn.passages or checked.reference == [(0, length)]
            parts += not (whole_reference and len(checked.knowledge) == len(turn.knowledge))
            left_out += checked.left_out > 0
    return {"readings": readings, "claims_read_in_part": parts, "claims_with_windows_left_out": left_out}


def summarize(verdicts: Sequence[DialogueVerdict]) -> dict[str, Any]:
    """Dataset-level summary: label counts, micro VISTA score, category counts, usage, and gold agreement."""
    turns = all_turns(verdicts)
    usage = Usage()
    for verdict in verdicts:
        usage.merge(verdict.usage)
    categories: dict[str, int] = {c.value: 0 for c in Category}
    for turn in turns:
        for claim in turn.claims:
            categories[claim.category.value] += 1
    labels = {label: sum(t.label == label for t in turns) for label in ("faithful", "hallucinated", "unknown")}
    summary: dict[str, Any] = {
        "dialogues": len(verdicts),
        "judged_turns": len(turns),
        "claims": sum(len(t.claims) for t in turns),
        "turn_labels": labels,
        "vista_score": micro_score(turns),
        "categories": categories,
        "errors": {
            "claims": categories[Category.ERROR.value],
            "turns_failed": sum(t.error is not None for t in turns),
            "contradiction_checks": sum(bool(t.contradiction and t.contradiction.error) for t in turns),
            "dialogue_errors": sum(len(v.errors) for v in verdicts),
            # Judged against a knowledge store that lacks a background turn's claims (its decomposition failed).
            "turns_missing_background": sum(bool(t.knowledge_missing) for t in turns),
        },
        "decomposition": {
            "ungrounded_claims": sum(len(t.ungrounded) for t in turns)
            + sum(len(v.ungrounded_background) for v in verdicts),
            "empty_turns": sum(t.empty_decomposition for t in turns),
        },
        # Label probabilities the endpoint sent that could not be read (an ambiguous first token; a batched answer
        # whose probabilities do not line up with its items): those claims were decided without them.
        "unread_probabilities": sum(usage.unread_probabilities.values()),
        # How the prompts read the sources (``evidence.reading``): the run's readings, and the claims whose prompt carried a
        # part of the reference or of the store (over its budget) rather than all of it, or left a window out.
        "evidence": evidence_read(verdicts, turns),
        "usage": {
            "total": usage.total.model_dump(),
            "by_stage": {k: v.model_dump() for k, v in usage.by_stage.items()},
            "by_model": {k: v.model_dump() for k, v in usage.by_model.items()},
        },
    }
    gold_turns = [t for t in turns if t.gold_label is not None]
    if gold_turns:
        summary["turn_metrics"] = turn_metrics([t.label for t in gold_turns], [t.gold_label for t in gold_turns])
    gold_claims = [c for t in turns for c in t.claims if c.gold_category is not None]
    if gold_claims:
        summary["claim_metrics"] = claim_metrics(
            [c.category for c in gold_claims], [c.gold_category for c in gold_claims]
        )
    return summary

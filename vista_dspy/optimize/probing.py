"""Judging human-labelled claims to choose and check a compiled program: each claim asked of Verify and of Categorize
with label probabilities (``claim_probes.ClaimProbe`` records), and the claim-level scores every choice is made with
(pooled over claims, not averaged per dialogue). Folds by dialogue are ``cross_fitting``'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import dspy

from ..schema import Category, Dialogue, DialogueVerdict
from .claim_probes import LABELS, UNSAFE, ClaimProbe

# (predictor name, inputs, outputs) of every predictor call, in order.
Trace = list[tuple[str, dict[str, Any], Any]]


def probes_of(verdict: DialogueVerdict) -> list[ClaimProbe]:
    """The human-labelled claims of a verdict judged with ``given_claims`` (and ``categorize_all``, for both
    distributions) as probe records; ``raw`` is the verdict's own category (the program's decision rule, if any,
    applied)."""
    return [ClaimProbe(dialogue_id=verdict.dialogue_id, turn_index=turn.turn_index, position=position,
                       claim=claim.claim, gold=claim.gold_category.value, raw=claim.category.value,
                       verify=claim.probabilities.verify if claim.probabilities else None,
                       categorize=claim.probabilities.categorize if claim.probabilities else None)
            for turn in verdict.turns for position, claim in enumerate(turn.claims)
            if claim.gold_category is not None]


def probe(program, dialogues: Sequence[Dialogue], *, threads: int = 1,
          on_dialogue: Callable[[DialogueVerdict], None] | None = None
          ) -> tuple[list[DialogueVerdict], dict[str, Trace]]:
    """Judge the human claims of ``dialogues`` with ``program`` in the current dspy context, every claim asked of
    both stages (``categorize_all``): (verdicts in input order, {dialogue id: its predictor calls}). A rerun
    is served by the LM cache, so an interrupted probe resumes where it stopped."""
    judge = program.with_options(given_claims=True, categorize_all=True)
    names = {id(predictor): name for name, predictor in judge.named_predictors()}

    def one(dialogue: Dialogue) -> tuple[DialogueVerdict, Trace]:
        with dspy.context(trace=[]):
            verdict = judge(dialogue)
            return verdict, [(names.get(id(p), ""), inputs, outputs) for p, inputs, outputs in dspy.settings.trace]

    results: dict[str, tuple[DialogueVerdict, Trace]] = {}
    if threads <= 1:
        for dialogue in dialogues:
            results[dialogue.id] = one(dialogue)
            if on_dialogue is not None:
                on_dialogue(results[dialogue.id][0])
    else:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="vista-probe") as pool:
            futures = {d.id: pool.submit(_in_context(one), d) for d in dialogues}
            for dialogue in dialogues:
                results[dialogue.id] = futures[dialogue.id].result()
                if on_dialogue is not None:
                    on_dialogue(results[dialogue.id][0])
    return [results[d.id][0] for d in dialogues], {d.id: results[d.id][1] for d in dialogues}


def _in_context(function):
    """``function`` run in a worker thread under the caller's dspy settings (LM, adapter, cache)."""
    import contextvars

    snapshot = contextvars.copy_context()
    return lambda *args: snapshot.copy().run(function, *args)


# ---- scores ------------------------------------------------------------------------------------------------------
def safe(label: str) -> bool | None:
    """Whether a decision leaves its turn faithful (None for ERROR)."""
    return None if label == Category.ERROR.value else label not in UNSAFE


def claim_scores(decided: Sequence[str], gold: Sequence[str]) -> dict[str, Any]:
    """Agreement of claim decisions with the annotators, pooled over claims: the safe/unsafe decision (what sets a
    turn's label; ERROR counts wrong), five-way accuracy and macro-F1, and the predicted shares of each label beside
    the annotators'."""
    from sklearn.metrics import f1_score

    n = len(gold)
    if n == 0:
        return {"claims": 0}
    predicted, truth = Counter(decided), Counter(gold)
    return {
        "claims": n,
        "decision_accuracy": sum(safe(d) == safe(g) for d, g in zip(decided, gold)) / n,
        "accuracy": sum(d == g for d, g in zip(decided, gold)) / n,
        "macro_f1": float(f1_score(list(gold), list(decided), labels=list(LABELS), average="macro",
                                   zero_division=0)),
        "shares": {label: predicted[label] / n for label in (*LABELS, "ERROR")},
        "gold_shares": {label: truth[label] / n for label in LABELS},
    }


def turn_accuracy(probes: Sequence[ClaimProbe], decided: Sequence[str]) -> float | None:
    """The share of turns whose label from these claim decisions (hallucinated iff one is unsafe; unknown, and so
    wrong, when none is and one is an ERROR) agrees with the label the annotators' claims give: what the gate's
    turn test asks, on human claims instead of decomposed ones."""
    turns: dict[tuple[str, int], list[tuple[bool | None, bool | None]]] = {}
    for p, d in zip(probes, decided):
        turns.setdefault((p.dialogue_id, p.turn_index), []).append((safe(d), safe(p.gold)))
    right = 0
    for pairs in turns.values():
        gold_unsafe = any(g is False for _, g in pairs)
        if any(d is False for d, _ in pairs):
            right += gold_unsafe
        elif all(d is not None for d, _ in pairs):
            right += not gold_unsafe
    return right / len(turns) if turns else None


def decision_right(decided: Sequence[str], gold: Sequence[str]) -> list[bool]:
    return [safe(d) == safe(g) for d, g in zip(decided, gold)]

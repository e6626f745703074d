"""Fitting a decision rule (``decision``) on judged claims (``judged_turns``), cross-fitted by dialogue
(``cross_fitting``), and scoring it on turns (the recipes that choose a rule are ``recipes``'). Fitting is arithmetic
on saved answers: no LM call.

Every decision here goes through ``decision.decide``, as in the deployed program. A replay decides the base
program's answers again under a rule; the knowledge store stays the base's (a live run accumulates the rule's
decisions, so its later turns may see a slightly different store).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...decision import (
    CLASSES,
    FEATURES,
    JUDGE_FEATURES,
    UNSAFE_CLASS,
    Band,
    DecisionRule,
    LinearModel,
    by_evidence,
    decide,
    feature_matrix,
    may_be_unsafe,
    turn_flip,
)
from ...evidence import CUES
from ...schema import Category
from .cross_fitting import cross_fit
from .judged_turns import UNSAFE_GOLD, ClaimRow, TurnRows

FEATURE_SETS: dict[str, tuple[str, ...]] = {
    "evidence": CUES,
    "evidence + verify": (*CUES, "verify_logit"),
    "evidence + both stages": FEATURES,
}
DEFAULT_C = 1.0


# ---- fitting -------------------------------------------------------------------------------------------------------
def fit_model(rows: Sequence[ClaimRow], features: Sequence[str], C: float = DEFAULT_C) -> LinearModel:
    """A multinomial logistic regression of the annotators' judgements (CONTRADICTED as LACKING EVIDENCE) on
    ``features``, over the rows with a known judgement and an answer (no ERROR)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    usable = [r for r in rows if r.gold is not None and r.judge != "ERROR"
              and ("verify_logit" not in features or r.verify is not None)]
    if not usable:
        raise ValueError("no claim with a known judgement to fit a decision rule on")
    target = [_class_of(r.gold) for r in usable]
    x = feature_matrix([r.values for r in usable], features)
    present = sorted(set(target), key=CLASSES.index)
    if len(present) < 2:
        raise ValueError(f"every claim to fit on is {present[0]}: nothing to separate")
    model = LogisticRegression(C=C, max_iter=5000).fit(x, np.array([present.index(t) for t in target]))
    coef = {c: [0.0] * len(features) for c in CLASSES}
    # A class the fitting claims lack gets a score that never wins.
    intercept = {c: -30.0 for c in CLASSES}
    rows_coef = model.coef_ if len(present) > 2 else np.vstack([-model.coef_[0] / 2, model.coef_[0] / 2])
    rows_intercept = (model.intercept_ if len(present) > 2
                      else np.array([-model.intercept_[0] / 2, model.intercept_[0] / 2]))
    for i, c in enumerate(present):
        coef[c] = [round(float(w), 6) for w in rows_coef[i]]
        intercept[c] = round(float(rows_intercept[i]), 6)
    return LinearModel(features=tuple(features), coef=tuple(tuple(coef[c]) for c in CLASSES),
                       intercept=tuple(intercept[c] for c in CLASSES))


def _class_of(gold: str) -> str:
    return UNSAFE_CLASS if gold in UNSAFE_GOLD else gold


def fit_rule(turns: Sequence[TurnRows], features: Sequence[str], *, C: float = DEFAULT_C,
             fitted: dict[str, Any] | None = None) -> DecisionRule:
    """A rule fitted on every claim of ``turns``: the judged model over ``features`` (none if they are cues only),
    the evidence model over the cues, each with the threshold that gives the most turns their gold label."""
    rows = [r for t in turns for r in t.rows]
    evidence = fit_model(rows, CUES, C)
    evidence = evidence.model_copy(update={"threshold": best_threshold(turns, DecisionRule(evidence=evidence))})
    judged = None
    if any(f in JUDGE_FEATURES for f in features):
        judged = fit_model(rows, features, C)
        judged = judged.model_copy(update={"threshold": best_threshold(
            turns, DecisionRule(judged=judged, evidence=evidence))})
    return DecisionRule(judged=judged, evidence=evidence, fitted=fitted or {})


THRESHOLDS = tuple(round(0.05 * i, 2) for i in range(2, 19))


def best_threshold(turns: Sequence[TurnRows], rule: DecisionRule) -> float:
    """The threshold of the model that decides under ``rule`` (its judged model if it has one, else its evidence
    model) that gives the most turns their gold label; ties go to the one nearest 0.5."""
    role = "judged" if rule.judged is not None else "evidence"

    def accuracy(threshold: float) -> float:
        model = getattr(rule, role).model_copy(update={"threshold": threshold})
        return turn_scores(replay(turns, rule.model_copy(update={role: model})))["accuracy"]

    return max(THRESHOLDS, key=lambda t: (accuracy(t), -abs(t - 0.5)))


# ---- deciding and scoring --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TurnDecision:
    turn: TurnRows
    categories: list[str]  # per claim
    p_unsafe: list[float | None]
    by_evidence: list[bool]
    label: str  # hallucinated / faithful / unknown


def decide_turn(turn: TurnRows, rule: DecisionRule | None, *, judge: bool = True) -> TurnDecision:
    """A turn's claims decided as the deployed program decides them: the judge's labels (no rule), or the rule --
    the cascade first, then the judged model where Verify's probabilities exist (``judge``: the judge was asked at
    all; False is the evidence baseline), then the rule's turn decision through the turn's most doubtful claim
    (``decision.turn_flip``: its turn threshold or turn model makes that claim unsafe); the turn's label follows from
    its claims."""
    from ...scoring import turn_label

    categories: list[str] = []
    p_unsafe: list[float | None] = []
    evidence_only: list[bool] = []
    for row in turn.rows:
        if rule is None or (judge and row.judge == "ERROR"):  # the judge's own label (an ERROR stays one)
            category, p, alone = row.judge, None, False
        else:
            early = by_evidence(rule, row.cues) if judge else decide(rule, row.cues)
            decision = early or decide(rule, row.cues, row.verify, row.categorize, row.judge)
            category, p, alone = decision.category.value, decision.p_unsafe, early is not None
        categories.append(category)
        p_unsafe.append(None if p is None else round(p, 4))  # as a verdict records it
        evidence_only.append(alone)
    flip = turn_flip(rule, p_unsafe, categories, [may_be_unsafe(row.cues) for row in turn.rows])
    if flip is not None:
        categories[flip.index] = "CONTRADICTED" if turn.rows[flip.index].judge == "CONTRADICTED" else UNSAFE_CLASS
    label = turn_label([Category(c) for c in categories], failed=turn.unjudged)
    return TurnDecision(turn, categories, p_unsafe, evidence_only, label)


def replay(turns: Sequence[TurnRows], rule: DecisionRule | None, *, judge: bool = True) -> list[TurnDecision]:
    return [decide_turn(t, rule, judge=judge) for t in turns]


def cross_fitted(turns: Sequence[TurnRows], fold_of: Mapping[str, int],
                 fit: Callable[[Sequence[TurnRows]], DecisionRule], *, judge: bool = True
                 ) -> tuple[list[TurnDecision], list[DecisionRule]]:
    """Each turn decided by the rule fitted on the other folds' dialogues only (never on its own): (decisions in
    ``turns`` order, the rule of each fold)."""
    return cross_fit(turns, fold_of, fit, lambda turn, rule: decide_turn(turn, rule, judge=judge))


def turn_scores(decided: Sequence[TurnDecision]) -> dict[str, Any]:
    """``scoring.turn_metrics`` of the turns with a gold label (unknown counts wrong), under short names, with the
    false alarms and misses."""
    from ...scoring import turn_metrics

    scored = [d for d in decided if d.turn.gold_label in ("hallucinated", "faithful")]
    metrics = turn_metrics([d.label for d in scored], [d.turn.gold_label for d in scored])
    return {"turns": len(scored), "accuracy": metrics.get("accuracy", 0.0),
            "precision": metrics.get("precision_hallucinated", 0.0),
            "recall": metrics.get("recall_hallucinated", 0.0), "f1": metrics.get("f1_hallucinated", 0.0),
            "false_alarms": sum(d.label != "faithful" and d.turn.gold_label == "faithful" for d in scored),
            "misses": sum(d.label != "hallucinated" and d.turn.gold_label == "hallucinated" for d in scored)}


def turn_rights(decided: Sequence[TurnDecision]) -> list[bool]:
    return [d.label == d.turn.gold_label for d in decided if d.turn.gold_label in ("hallucinated", "faithful")]


def calls_per_turn(decided: Sequence[TurnDecision]) -> float:
    """LM calls per judged turn as the program would make them: Decompose as the base did, Verify for each claim
    the cascade did not decide, Categorize for those of them Verify did not verify."""
    total = 0.0
    for d in decided:
        asked = [r for r, alone in zip(d.turn.rows, d.by_evidence) if not alone]
        total += d.turn.decompose_calls + len(asked)
        total += sum(r.judge not in ("VERIFIED", "ERROR") for r in asked)
    return total / len(decided) if decided else 0.0


def claim_decisions(decided: Sequence[TurnDecision]) -> tuple[list[str], list[str]]:
    """(decided categories, annotators' judgements) of the claims with a known judgement."""
    pairs = [(c, r.gold) for d in decided for c, r in zip(d.categories, d.turn.rows) if r.gold is not None]
    return [c for c, _ in pairs], [g for _, g in pairs]


def with_cascade(rule: DecisionRule, band: Band | None) -> DecisionRule:
    return DecisionRule.model_validate({**rule.model_dump(), "cascade": band.model_dump() if band else None})


# The cascade's candidate bands on the evidence-only P(unsafe), narrowest first.
BANDS: tuple[Band, ...] = tuple(Band(low=low, high=high) for low, high in
                                ((0.03, 0.97), (0.05, 0.95), (0.1, 0.9), (0.15, 0.85), (0.2, 0.8), (0.25, 0.75)))


def scores(decided: Sequence[TurnDecision]) -> dict[str, Any]:
    """Turn scores, claim scores against the annotators (``probing.claim_scores``) and LM calls per turn."""
    from ..demos import claim_scores

    categories, gold = claim_decisions(decided)
    return {**turn_scores(decided), "claims": claim_scores(categories, gold),
            "calls_per_turn": round(calls_per_turn(decided), 2)}

"""Fitting a rule's turn model (``decision.TurnModel``) on turn labels: which summaries of a turn's claims' P(unsafe)
it reads is chosen by cross-fitted log-likelihood, not by accuracy at a threshold, and its threshold stays 0.5 (the
model is fitted for probabilities, so no knob is tuned on the turns that report the gain).

The P(unsafe) a turn model is fitted on must come from claim models that did not see the turn's dialogue
(``recipes`` passes the cross-fitted decisions of its threshold search); only turns with a gold label, at least one
claim decided with a P(unsafe) and no claim unsafe are fitted on, since those are the turns the model decides.
The choice among the candidates splits those turns by dialogue (a hash of its id, salted per repeat), one copy of
each turn (``one_per_turn``): no dialogue's turns sit on both sides of a split.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...decision import TURN_FEATURES, UNSAFE_CATEGORIES, TurnModel, unsafe_by_its_figures

# The candidates, each a set of summaries (``decision.TURN_FEATURES``); the first is what a single threshold on the
# most doubtful claim can express, the others know how many claims the turn has.
CANDIDATES: tuple[tuple[str, ...], ...] = (
    ("max_logit",),
    ("max_logit", "log_count"),
    ("noisy_or_logit",),
    ("noisy_or_logit", "log_count"),
    ("max_logit", "sum", "log_count"),
)
DEFAULT_C = 1.0
REPEATS = 3  # random halves of the fitting turns whose held-out log-likelihood chooses the candidate


@dataclass(frozen=True)
class TurnExample:
    """A turn the turn model decides: the P(unsafe) of its decided claims and whether the annotators found it
    hallucinated."""

    p_unsafe: tuple[float, ...]
    hallucinated: bool
    dialogue_id: str = ""
    turn_index: int = 0


def examples(decided: Sequence[Any], claim_threshold: float | None = None) -> list[TurnExample]:
    """The turns of ``decided`` (``rule_fitting.TurnDecision``) a turn model decides: a gold label, a claim with a
    P(unsafe), no unsafe claim (at ``claim_threshold`` when given -- with the factual claims whose figure or name no
    source holds, ``decision.unsafe_by_its_figures`` --, else as decided). (A turn whose decided claims are all
    self-descriptions or hedges is fitted on too, although the model cannot act through any of its claims
    (``decision.turn_flip``): the shipped turn models were fitted so.)"""
    out = []
    for d in decided:
        if d.turn.gold_label not in ("hallucinated", "faithful"):
            continue
        ps = [p for p in d.p_unsafe if p is not None]
        if not ps:
            continue
        unsafe = (any(c in UNSAFE_CATEGORIES for c, p in zip(d.categories, d.p_unsafe) if p is None)
                  or (max(ps) >= claim_threshold or any(unsafe_by_its_figures(r.cues) for r in d.turn.rows)
                      if claim_threshold is not None else any(c in UNSAFE_CATEGORIES for c in d.categories)))
        if not unsafe:
            out.append(TurnExample(tuple(ps), d.turn.gold_label == "hallucinated", d.turn.dialogue_id,
                                   d.turn.turn_index))
    return out


def one_per_turn(pooled: Sequence[TurnExample]) -> list[TurnExample]:
    """The first copy of each (dialogue, turn) of examples pooled from several cross-fittings."""
    seen: dict[tuple[str, int], TurnExample] = {}
    for example in pooled:
        seen.setdefault((example.dialogue_id, example.turn_index), example)
    return list(seen.values())


def _side(dialogue_id: str, repeat: int) -> int:
    return hashlib.sha256(f"{repeat}:{dialogue_id}".encode()).digest()[0] % 2


def fit_turn_model(data: Sequence[TurnExample], features: Sequence[str], C: float = DEFAULT_C) -> TurnModel | None:
    """A logistic regression of the turn labels on ``features``; None when the turns hold a single label (nothing
    to fit: no turn model)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    labels = [e.hallucinated for e in data]
    if len(set(labels)) < 2:
        return None
    x = np.array([[TURN_FEATURES[f](e.p_unsafe) for f in features] for e in data], dtype=float)
    model = LogisticRegression(C=C, max_iter=5000).fit(x, np.array(labels))
    return TurnModel(features=tuple(features), coef=tuple(round(float(w), 6) for w in model.coef_[0]),
                     intercept=round(float(model.intercept_[0]), 6))


def log_likelihood(model: TurnModel, data: Sequence[TurnExample]) -> float:
    """Mean log-likelihood of the turn labels under ``model`` (probabilities clipped to [1e-6, 1 - 1e-6])."""
    total = 0.0
    for e in data:
        p = min(max(model.probability(e.p_unsafe), 1e-6), 1 - 1e-6)
        total += math.log(p if e.hallucinated else 1 - p)
    return total / max(len(data), 1)


def cross_fitted_log_likelihood(data: Sequence[TurnExample], features: Sequence[str], repeats: int = REPEATS,
                                C: float = DEFAULT_C) -> float | None:
    """Mean held-out log-likelihood over ``repeats`` splits of ``data`` into halves by dialogue (each half scored by
    the model fitted on the other); None when a half cannot be fitted."""
    scores = []
    for repeat in range(repeats):
        for held in (0, 1):
            fit_on = [e for e in data if _side(e.dialogue_id, repeat) != held]
            score_on = [e for e in data if _side(e.dialogue_id, repeat) == held]
            model = fit_turn_model(fit_on, features, C)
            if model is None or not score_on:
                return None
            scores.append(log_likelihood(model, score_on) * len(score_on))
    return sum(scores) / (repeats * len(data))


def choose_turn_model(data: Sequence[TurnExample], candidates: Sequence[Sequence[str]] = CANDIDATES,
                      C: float = DEFAULT_C) -> tuple[TurnModel | None, dict[str, Any]]:
    """The candidate with the best cross-fitted log-likelihood (ties: the fewer features), fitted on all of
    ``data``; (None, ...) when the turns hold a single label. Returns (model, the log-likelihood of each)."""
    record: dict[str, Any] = {"turns": len(data), "hallucinated": sum(e.hallucinated for e in data)}
    scored = {}
    for names in candidates:
        ll = cross_fitted_log_likelihood(data, names, C=C)
        record[" + ".join(names)] = None if ll is None else round(ll, 4)
        if ll is not None:
            scored[tuple(names)] = ll
    if not scored:
        record["chosen"] = None
        return None, record
    chosen = max(scored, key=lambda names: (scored[names], -len(names)))
    record["chosen"] = " + ".join(chosen)
    return fit_turn_model(data, chosen, C), record

"""Calibration of a model's label probabilities (wave 3): a handful of numbers that turn them into decisions. Kept as
a comparison only -- no program decides with it and nothing in the package imports it (``benchmarks/
calibration_offline.py``, ``label_only.py`` and ``decision_rules.py`` do): a decision rule (``decision``) over the
probabilities and the claims' evidence cues replaced it (a threshold and offsets are what it could do; the rule sees
the evidence too).

A small judge's labels are biased (the 1.5B local model says CONTRADICTED for 13 % of claims where annotators say
1 %). Contextual calibration corrects such a bias with one number per label (Zhao et al. 2021, "Calibrate Before
Use"); here, following the method's two questions:

- Verify: a claim is VERIFIED when the model's probability of VERIFIED reaches ``verify_threshold`` (0.5 is the
  model's own choice between two labels);
- Categorize: the category with the highest log-probability plus its ``categorize_offsets`` entry (prior
  correction; all zero is the model's own choice).

A claim without probabilities (the endpoint gave none) keeps the model's own label. ``fit`` chooses the numbers on
human-labelled claims (``claim_probes.ClaimProbe`` records); fitting is arithmetic on saved probabilities, no LM
call; ``cross_fitted`` decides each claim by a calibration fitted on the other folds' dialogues.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .claim_probes import CATEGORIES, LABELS, UNSAFE, ClaimProbe
from .cross_fitting import cross_fit

# Probabilities this small count as this (a label the endpoint's top alternatives did not list at all).
FLOOR = 1e-6


class Calibration(BaseModel):
    """How one model's label probabilities become decisions (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    verify_threshold: float = Field(default=0.5, gt=0.0, lt=1.0)
    categorize_offsets: dict[str, float] = Field(default_factory=dict)

    @field_validator("categorize_offsets")
    @classmethod
    def _known_categories(cls, offsets: dict[str, float]) -> dict[str, float]:
        unknown = sorted(set(offsets) - set(CATEGORIES))
        if unknown:
            raise ValueError(f"offsets for unknown categories {', '.join(unknown)}; known: {', '.join(CATEGORIES)}")
        return {c: float(offsets[c]) for c in CATEGORIES if c in offsets}

    @property
    def identity(self) -> bool:
        return self.verify_threshold == 0.5 and not any(self.categorize_offsets.values())

    def verified(self, probabilities: Mapping[str, float]) -> bool:
        return probabilities["VERIFIED"] >= self.verify_threshold

    def category(self, probabilities: Mapping[str, float]) -> str:
        def score(category: str) -> float:
            return math.log(max(probabilities.get(category, 0.0), FLOOR)) + self.categorize_offsets.get(category, 0.0)

        return max(CATEGORIES, key=score)

    def describe(self) -> str:
        offsets = ", ".join(f"{c} {v:+.2f}" for c, v in self.categorize_offsets.items() if v)
        return f"VERIFIED at p >= {self.verify_threshold:.3f}" + (f"; category offsets {offsets}" if offsets else "")


# ---- fitting on human-labelled claims -----------------------------------------------------------------------------
OBJECTIVES = ("accuracy", "turns", "likelihood")
# The accuracy search: thresholds on the logit of P(VERIFIED), offsets (relative to LACKING EVIDENCE's, which is 0).
THRESHOLD_LOGITS = tuple(x / 4 for x in range(-24, 25))
OFFSET_GRID = tuple(x / 2 for x in range(-12, 13))


def decisions(probes: list[ClaimProbe], calibration: Calibration | None) -> list[str]:
    """Each claim's decision (one of LABELS, or ERROR) under ``calibration`` (None: the model's own)."""
    if calibration is None:
        return [p.raw for p in probes]
    return [("VERIFIED" if calibration.verified(p.verify) else calibration.category(p.categorize))
            if p.calibratable else p.raw for p in probes]


def _arrays(probes: list[ClaimProbe]):
    """The calibratable claims as arrays (P(VERIFIED), log-probabilities of the categories, gold label index), in
    the order of their turns, with each one's turn number; and per turn, whether the claims without probabilities
    already make it unsafe (their own decisions stand) and whether the annotators' claims make it unsafe."""
    import numpy as np

    turns: dict[tuple[str, int], int] = {}
    for p in probes:
        turns.setdefault((p.dialogue_id, p.turn_index), len(turns))
    usable = sorted((p for p in probes if p.calibratable), key=lambda p: turns[(p.dialogue_id, p.turn_index)])
    verified = np.array([p.verify["VERIFIED"] for p in usable])
    log_categories = np.log(np.maximum(np.array([[p.categorize.get(c, 0.0) for c in CATEGORIES] for p in usable]),
                                       FLOOR)).reshape(len(usable), len(CATEGORIES))
    gold = np.array([LABELS.index(p.gold) for p in usable], dtype=int)
    turn_of = np.array([turns[(p.dialogue_id, p.turn_index)] for p in usable], dtype=int)
    fixed_unsafe = np.zeros(len(turns), dtype=bool)
    gold_unsafe = np.zeros(len(turns), dtype=bool)
    for p in probes:
        index = turns[(p.dialogue_id, p.turn_index)]
        gold_unsafe[index] |= p.gold in UNSAFE
        if not p.calibratable:
            fixed_unsafe[index] |= p.raw in UNSAFE
    return verified, log_categories, gold, (turn_of, fixed_unsafe, gold_unsafe)


def fit(probes: list[ClaimProbe], objective: str = "accuracy") -> Calibration:
    """The calibration that best matches the annotators on ``probes`` (claims without probabilities keep their own
    decisions).

    ``accuracy``: a grid search for the threshold and offsets that make the most safe/unsafe decisions (what sets a
    turn's label) agree, then the most five-way labels; ties go to the calibration closest to none.
    ``turns``: the same search, first for the most turns whose label (hallucinated iff a claim is unsafe) agrees
    with the annotators' claims, then as ``accuracy``: a claim-level optimum can buy claim agreement with turns (on
    claims, always-safe is a strong answer; on turns it is not).
    ``likelihood``: the threshold and offsets that maximise the likelihood of the five-way labels (P(VERIFIED) shifted
    on the logit scale; the categories' log-probabilities shifted by the offsets), with a small L2 pull to none.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown calibration objective {objective!r}; choose one of {', '.join(OBJECTIVES)}")
    verified, log_categories, gold, turns = _arrays(probes)
    if len(gold) == 0:
        return Calibration()
    if objective == "likelihood":
        return _fit_likelihood(verified, log_categories, gold)
    return _fit_grid(verified, log_categories, gold, turns if objective == "turns" else None)


def _logit(p):
    import numpy as np

    p = np.clip(p, FLOOR, 1 - FLOOR)
    return np.log(p) - np.log1p(-p)


def _fit_grid(verified, log_categories, gold, turns=None) -> Calibration:
    import itertools

    import numpy as np

    unsafe_labels = np.array([label in UNSAFE for label in LABELS])
    gold_unsafe = unsafe_labels[gold]
    verified_logit = _logit(verified)
    offsets = np.array([(0.0, *combo) for combo in itertools.product(OFFSET_GRID, repeat=len(CATEGORIES) - 1)])
    # The category each claim gets under each offset vector: (offsets, claims).
    category = np.argmax(log_categories[None, :, :] + offsets[:, None, :], axis=2) + 1
    if turns is not None:
        turn_of, fixed_unsafe, gold_turn_unsafe = turns
        starts = np.flatnonzero(np.r_[True, turn_of[1:] != turn_of[:-1]])
        judged = turn_of[starts]  # the turns with calibratable claims, in order
        others = np.setdiff1d(np.arange(len(fixed_unsafe)), judged)
        constant = int(np.sum(fixed_unsafe[others] == gold_turn_unsafe[others]))
    best, best_key = Calibration(), None
    for threshold in THRESHOLD_LOGITS:
        is_verified = verified_logit >= threshold
        predicted = np.where(is_verified[None, :], 0, category)
        unsafe = unsafe_labels[predicted]
        safe_right = (unsafe == gold_unsafe[None, :]).sum(axis=1)
        label_right = (predicted == gold[None, :]).sum(axis=1)
        distance = np.abs(offsets).sum(axis=1) + abs(threshold)
        # Most safe/unsafe agreements, then most labels, then closest to no calibration.
        keys = safe_right * 10**6 + label_right * 10**3 - np.minimum(distance, 999)
        if turns is not None:  # ... after the most turns right
            turn_unsafe = np.logical_or.reduceat(unsafe, starts, axis=1) | fixed_unsafe[judged][None, :]
            turn_right = (turn_unsafe == gold_turn_unsafe[judged][None, :]).sum(axis=1) + constant
            keys = keys + turn_right * 10**9
        i = int(np.argmax(keys))
        if best_key is None or keys[i] > best_key:
            best_key = keys[i]
            best = _calibration(threshold, offsets[i])
    return best


def _fit_likelihood(verified, log_categories, gold, penalty: float = 0.05) -> Calibration:
    import numpy as np
    from scipy.optimize import minimize
    from scipy.special import log_expit, logsumexp

    verified_logit = _logit(verified)
    is_verified = gold == 0

    def loss(params):
        threshold, offsets = params[0], np.concatenate([[0.0], params[1:]])
        z = verified_logit - threshold
        shifted = log_categories + offsets
        log_category = shifted - logsumexp(shifted, axis=1, keepdims=True)
        log_unverified = log_expit(-z)
        picked = log_category[np.arange(len(gold)), np.maximum(gold - 1, 0)]
        log_likelihood = np.where(is_verified, log_expit(z), log_unverified + picked)
        return -log_likelihood.mean() + penalty * float(np.sum(params ** 2)) / len(params)

    result = minimize(loss, np.zeros(len(CATEGORIES)), method="L-BFGS-B",
                      bounds=[(-12, 12)] * len(CATEGORIES))
    return _calibration(result.x[0], np.concatenate([[0.0], result.x[1:]]))


def _calibration(threshold_logit: float, offsets) -> Calibration:
    threshold = 1.0 / (1.0 + math.exp(-float(threshold_logit)))
    threshold = min(max(threshold, 1e-6), 1 - 1e-6)
    return Calibration(verify_threshold=threshold,
                       categorize_offsets={c: round(float(o), 4) for c, o in zip(CATEGORIES, offsets) if o != 0})


def cross_fitted(probes: Sequence[ClaimProbe], fold_of: dict[str, int], objective: str
                 ) -> tuple[list[str], list[Calibration]]:
    """Each claim decided by a calibration fitted on the other folds' claims only (never on its own dialogue's):
    (decisions in ``probes`` order, the calibration fitted for each fold)."""
    return cross_fit(probes, fold_of, lambda part: fit(part, objective),
                     lambda probe, calibration: decisions([probe], calibration)[0])

"""The decision rule of a compiled program: the judge's label probabilities and the claim's evidence cues
(``evidence``) -> P(unsafe) and a category, through small linear models whose weights are plain numbers in the
program file (never a pickle). The seed program has no rule: the judge's own labels decide.

A rule holds two multinomial logistic models over the classes VERIFIED, OUT-OF-SCOPE, ABSTENTION and LACKING
EVIDENCE (CONTRADICTED is fitted as LACKING EVIDENCE, the unsafe class):

- ``judged``: the cues plus the judge's answers -- the logit of Verify's P(VERIFIED), and Categorize's distribution
  for a claim Verify did not verify (as the program asks it; zeros with ``categorized`` = 0 otherwise);
- ``evidence``: the cues alone, for an endpoint that gives no probabilities, for the cascade and for the
  ``evidence`` baseline.

A claim is unsafe when P(LACKING EVIDENCE) reaches the model's threshold (chosen for claim decisions). Its category
is then CONTRADICTED if the judge said so (overlap cannot show a contradiction) and LACKING EVIDENCE otherwise; a safe
claim takes the most probable safe class. Categories mean VISTA's, whatever the weights (the checks, ``evidence.
CHECKS``, which no fitted model weighs):
- a claim the judge found CONTRADICTED is never made VERIFIED (the rule may overrule the judge's decision, not make
  a claim supported against the evidence it cites);
- an opinion or a speaker's own remark (``opinion_or_remark``) is never VERIFIED: OUT-OF-SCOPE (or ABSTENTION);
- a factual claim (no remark, opinion or hedge) holding a figure, a date or a name that no source holds
  (``figures``) is unsafe whatever its P(unsafe) and the judge's label: a factual assertion its sources do not
  confirm is LACKING EVIDENCE by VISTA's definition (of the 460 annotated dev claims, 32 of the 34 such claims are
  unsafe; the 11 such sentences of the committed sentences probe all lie in hallucinated turns:
  ``benchmarks/coherence_replay.py``). A remark, opinion or hedge holding one is only kept off VERIFIED.
In each case the safe class is then the most probable of OUT-OF-SCOPE and ABSTENTION.

A turn is hallucinated iff one of its claims is unsafe, in every program. A rule's turn decision acts through the
claims (``turn_flip``): a ``turn`` model (``TurnModel``: the probability that a turn with no unsafe claim is
hallucinated all the same, from its claims' P(unsafe) through summaries that know how many claims there are -- the
largest, their noisy-OR, the count -- fitted on turn labels) or, in older programs, a ``turn_threshold``, makes the
turn's most doubtful claim (the highest P(unsafe) among the claims that may be unsafe: not a self-description or a
hedge, ``may_be_unsafe``) unsafe, and that claim says why. "Any claim above a threshold" flags a turn more often the
more claims it has; a model that sees the count need not. A turn model is asked only about a turn with no unsafe claim: a turn
whose claim is unsafe is hallucinated (the turn follows its claims; the model was fitted on the other turns only and
never clears a claim). A turn whose every decided claim is a self-description or a hedge has no claim the turn model
can act through, and stays faithful.
The cascade: a claim whose evidence-only P(unsafe) lies outside (``low``, ``high``) is decided by the evidence alone
and not sent to Verify or Categorize.

``decide`` is the one decision function: fitting (``rule_fitting``), cross-fitted scoring and the deployed judge
all call it.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from .evidence import CUES
from .schema import Category

CLASSES: tuple[str, ...] = ("VERIFIED", "OUT-OF-SCOPE", "ABSTENTION", "LACKING EVIDENCE")
SAFE_CLASSES: tuple[str, ...] = CLASSES[:3]
# The safe classes that do not say the sources support the claim: what a claim kept off VERIFIED (the judge found it
# CONTRADICTED, it is an opinion or a remark, or it holds a figure no source holds) may be when the rule calls it safe.
UNSUPPORTED_SAFE_CLASSES: tuple[str, ...] = CLASSES[1:3]
UNSAFE_CLASS = "LACKING EVIDENCE"
CATEGORIZE_LABELS: tuple[str, ...] = ("LACKING EVIDENCE", "OUT-OF-SCOPE", "ABSTENTION", "CONTRADICTED")
JUDGE_FEATURES: tuple[str, ...] = ("verify_logit", "categorized",
                                   *(f"categorize_{c.lower().replace(' ', '_').replace('-', '_')}"
                                     for c in CATEGORIZE_LABELS))
FEATURES: tuple[str, ...] = (*CUES, *JUDGE_FEATURES)
_LOGIT_BOUND = 8.0  # |logit P(VERIFIED)| beyond this carries no more information (probabilities of 1e-4 or less)

DecidedBy = Literal["rule", "evidence"]


class LinearModel(BaseModel):
    """A multinomial logistic model: P(class) = softmax(intercept + coef . features)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    features: tuple[str, ...]
    classes: tuple[str, ...] = CLASSES
    coef: tuple[tuple[float, ...], ...]  # one row per class
    intercept: tuple[float, ...]
    threshold: float = Field(default=0.5, gt=0.0, lt=1.0)  # P(unsafe) at or above it: unsafe

    @model_validator(mode="after")
    def _shapes(self) -> LinearModel:
        unknown = sorted(set(self.features) - set(FEATURES))
        if unknown:
            raise ValueError(f"unknown features {', '.join(unknown)}; known: {', '.join(FEATURES)}")
        if set(self.classes) != set(CLASSES):
            raise ValueError(f"classes must be {', '.join(CLASSES)}")
        if len(self.coef) != len(self.classes) or len(self.intercept) != len(self.classes):
            raise ValueError(f"coef and intercept need one row per class ({len(self.classes)})")
        if any(len(row) != len(self.features) for row in self.coef):
            raise ValueError(f"each coef row needs one weight per feature ({len(self.features)})")
        return self

    @property
    def uses_judge(self) -> bool:
        return any(f in JUDGE_FEATURES for f in self.features)

    def probabilities(self, values: Mapping[str, float]) -> dict[str, float]:
        x = [values[f] for f in self.features]
        scores = [b + sum(map(operator.mul, row, x)) for row, b in zip(self.coef, self.intercept)]
        top = max(scores)
        exp = [math.exp(s - top) for s in scores]
        total = sum(exp)
        return {c: e / total for c, e in zip(self.classes, exp)}

    def weights(self) -> dict[str, dict[str, float]]:
        """{class: {feature: weight}} (and the intercept), for reading a rule."""
        return {c: {"intercept": b, **dict(zip(self.features, row))}
                for c, row, b in zip(self.classes, self.coef, self.intercept)}


class Band(BaseModel):
    """The cascade's band on the evidence-only P(unsafe): outside (low, high) the evidence decides alone. A band with
    ``low >= high`` is empty: the evidence decides every claim (``DecisionRule.evidence_only``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    low: float = Field(ge=0.0, le=1.0)
    high: float = Field(ge=0.0, le=1.0)

    def decides(self, p_unsafe: float) -> bool:
        return p_unsafe <= self.low or p_unsafe >= self.high


def _logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


# Summaries of a turn's claims' P(unsafe) a turn model may read; each is defined for one claim or more.
TURN_FEATURES: dict[str, Callable[[Sequence[float]], float]] = {
    "max_logit": lambda ps: _logit(max(ps)),  # the most doubtful claim
    "noisy_or_logit": lambda ps: _logit(1 - math.prod(1 - p for p in ps)),  # some claim unsafe, claims independent
    "mean_logit": lambda ps: sum(_logit(p) for p in ps) / len(ps),
    "sum": lambda ps: float(sum(ps)),  # expected number of unsafe claims
    "log_count": lambda ps: math.log(len(ps)),  # how many chances the turn had
}


class TurnModel(BaseModel):
    """P(a turn with no unsafe claim is hallucinated) = sigmoid(intercept + coef . summaries of its claims'
    P(unsafe)) (``TURN_FEATURES``); hallucinated from ``threshold`` on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    features: tuple[str, ...]
    coef: tuple[float, ...]
    intercept: float
    threshold: float = Field(default=0.5, gt=0.0, lt=1.0)

    @model_validator(mode="after")
    def _shapes(self) -> TurnModel:
        unknown = sorted(set(self.features) - set(TURN_FEATURES))
        if unknown:
            raise ValueError(f"unknown turn features {', '.join(unknown)}; known: {', '.join(TURN_FEATURES)}")
        if len(self.coef) != len(self.features):
            raise ValueError(f"a turn model needs one weight per feature ({len(self.features)})")
        return self

    def probability(self, p_unsafe: Sequence[float]) -> float:
        """P(hallucinated) of a turn whose decided claims have these P(unsafe) (at least one)."""
        score = self.intercept + sum(w * TURN_FEATURES[f](p_unsafe) for w, f in zip(self.coef, self.features))
        return 1 / (1 + math.exp(-max(-60.0, min(60.0, score))))

    def describe(self) -> str:
        terms = " ".join(f"{w:+.2f}*{f}" for w, f in zip(self.coef, self.features))
        return f"turn model sigmoid({self.intercept:+.2f} {terms}) >= {self.threshold:.2f}"


@dataclass(frozen=True)
class TurnCall:
    """A turn model's decision on a turn with no unsafe claim: its P(hallucinated), and whether that reaches the
    model's threshold."""

    p_hallucinated: float
    hallucinated: bool


def turn_call(model: TurnModel | None, p_unsafe: Sequence[float | None], categories: Sequence[str]
              ) -> TurnCall | None:
    """The turn model's call on a turn (None: no model, no claim decided with a P(unsafe), or a claim already
    unsafe, which makes the turn hallucinated anyway)."""
    if model is None or any(c in UNSAFE_CATEGORIES for c in categories):
        return None
    decided = [p for p in p_unsafe if p is not None]
    if not decided:
        return None
    p = model.probability(sorted(decided, reverse=True))
    return TurnCall(p, p >= model.threshold)


@dataclass(frozen=True)
class TurnFlip:
    """The claim a rule's turn decision makes unsafe: its index, and the turn model's P(hallucinated) that did it
    (None: the rule's turn threshold did)."""

    index: int
    p_hallucinated: float | None = None


def turn_flip(rule: DecisionRule | None, p_unsafe: Sequence[float | None], categories: Sequence[str],
              eligible: Sequence[bool] | None = None) -> TurnFlip | None:
    """The claim of a turn that ``rule``'s turn decision makes unsafe (its turn threshold, ``most_doubtful``, or its
    turn model, ``turn_call``): the most doubtful of the claims that may be unsafe (``eligible``; default all); None
    when the rule leaves the turn to its claims. The deployed judge and every replay call this."""
    if rule is None:
        return None
    index = most_doubtful(rule.turn_threshold, p_unsafe, categories, eligible)
    if index is not None:
        return TurnFlip(index)
    call = turn_call(rule.turn, p_unsafe, categories)
    if call is None or not call.hallucinated:
        return None
    index = most_doubtful(0.0, p_unsafe, categories, eligible)
    return TurnFlip(index, call.p_hallucinated) if index is not None else None


def opinion_or_remark(cues: Mapping[str, float]) -> bool:
    """An opinion or a speaker's own remark (``evidence.CHECKS``: a speaker speaking of itself, an evaluative word;
    or the cue of a speaker's own view): OUT-OF-SCOPE in VISTA's terms, never VERIFIED."""
    return bool(cues.get("own_remark") or cues.get("evaluative") or cues.get("speaker_opinion"))


def may_be_unsafe(cues: Mapping[str, float]) -> bool:
    """Whether a turn's doubt may act through this claim (``turn_flip``): not a speaker's view of itself or a hedge
    (the cues of a self-description and of a refusal). A unit with a first-person or an evaluative word may: as a
    sentence it often states facts besides ("I loved Tromsø, which has 200 days of snow"), and keeping the turn
    model off such units left it unable to act on turns it was fitted to call (the committed sentences probe: 9
    more misses at the shipped rule, benchmarks/RESULTS.md 'Coherent verdicts')."""
    return not (cues.get("speaker_opinion") or cues.get("hedge"))


def lacks_a_source(cues: Mapping[str, float]) -> bool:
    """The claim holds a figure, a date or a name that no source holds (``evidence.CHECKS``)."""
    return bool(cues.get("figure_lacking") or cues.get("name_lacking"))


def unsafe_by_its_figures(cues: Mapping[str, float]) -> bool:
    """A factual claim (not an opinion, a remark or a hedge) holding a figure, a date or a name that no source
    holds: unsafe whatever the weights say."""
    return lacks_a_source(cues) and not (opinion_or_remark(cues) or cues.get("hedge"))


class DecisionRule(BaseModel):
    """How one model's answers and a claim's evidence become a decision (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    judged: LinearModel | None = None
    evidence: LinearModel
    cascade: Band | None = None
    # A turn's most doubtful claim is unsafe from this P(unsafe) on, below the deciding model's own threshold: a turn
    # is hallucinated when any claim is unsafe, so the turn's label needs its most doubtful claim found, while most
    # claims are safe (None: every claim at the model's threshold).
    turn_threshold: float | None = Field(default=None, gt=0.0, lt=1.0)
    # A turn with no unsafe claim is hallucinated, through its most doubtful claim, when this model says so
    # (``TurnModel``, ``turn_flip``; None: not without an unsafe claim).
    turn: TurnModel | None = None
    # How it was fitted (claims, their source, the model): for reading, not for deciding.
    fitted: dict = Field(default_factory=dict)

    @model_serializer(mode="wrap")
    def _without_unset_turn_threshold(self, handler):
        # A rule without a turn threshold is written (and content-hashed) as rules were before it existed.
        data = handler(self)
        if isinstance(data, dict):
            for name in ("turn_threshold", "turn"):  # written (and content-hashed) as rules were before them
                if data.get(name) is None:
                    data.pop(name, None)
        return data

    @model_validator(mode="after")
    def _roles(self) -> DecisionRule:
        if self.evidence.uses_judge:
            raise ValueError("the evidence model may use evidence cues only")
        if self.turn is not None and self.turn_threshold is not None:
            raise ValueError("a rule decides turns with a turn model or a turn threshold, not both")
        return self

    def evidence_only(self) -> DecisionRule:
        """This rule's evidence model deciding every claim: no Verify or Categorize call (the evidence baseline)."""
        return DecisionRule(evidence=self.evidence, cascade=Band(low=1.0, high=0.0), turn=self.turn,
                            fitted={**self.fitted, "evidence_only": True})

    def describe(self) -> str:
        turn = ([f"a turn's most doubtful claim unsafe at P >= {self.turn_threshold:.2f}"]
                if self.turn_threshold is not None else [])
        if self.turn is not None:
            turn.append(f"a turn with no unsafe claim: its most doubtful claim unsafe by its {self.turn.describe()}")
        if self.cascade is not None and self.cascade.low >= self.cascade.high:
            return "; ".join([f"the evidence cues alone decide every claim (unsafe at P >= "
                              f"{self.evidence.threshold:.2f})", *turn])
        parts = [f"decision rule over {'label probabilities and ' if self.judged else ''}evidence cues "
                 f"(unsafe at P >= {(self.judged or self.evidence).threshold:.2f})", *turn]
        if self.cascade is not None:
            parts.append(f"cascade: evidence alone decides at P(unsafe) <= {self.cascade.low:.2f} "
                         f"or >= {self.cascade.high:.2f}")
        return "; ".join(parts)


@dataclass(frozen=True)
class Decision:
    category: Category
    p_unsafe: float
    decided_by: DecidedBy
    # A check of VISTA's categories that changed what the model alone would decide: "lacking" (a figure or a name
    # no source holds made a factual claim unsafe, or kept a remark off VERIFIED), "remark" (an opinion or a remark
    # kept off VERIFIED), "contradicted" (the judge's CONTRADICTED kept it off VERIFIED); None otherwise.
    check: str | None = None


def features(cues: Mapping[str, float], verify: Mapping[str, float] | None = None,
             categorize: Mapping[str, float] | None = None) -> dict[str, float]:
    """The values a model reads: the cues, and what the judge said (``categorize`` only for a claim that Categorize
    was asked about because Verify did not verify it)."""
    values = dict(cues)
    if verify is not None:
        p = min(max(float(verify.get("VERIFIED", 0.0)), 1e-9), 1 - 1e-9)
        values["verify_logit"] = max(-_LOGIT_BOUND, min(_LOGIT_BOUND, math.log(p / (1 - p)))) / _LOGIT_BOUND
    values["categorized"] = 1.0 if categorize is not None else 0.0
    for label, name in zip(CATEGORIZE_LABELS, JUDGE_FEATURES[2:]):
        values[name] = float(categorize.get(label, 0.0)) if categorize is not None else 0.0
    return values


def decide(rule: DecisionRule, cues: Mapping[str, float], verify: Mapping[str, float] | None = None,
           categorize: Mapping[str, float] | None = None, judge_category: str | None = None) -> Decision:
    """A claim's decision under ``rule``: with the judged model when Verify's probabilities are known (and the rule
    has one), else with the evidence model. ``judge_category``: what the judge's own labels said (VERIFIED or one
    of the four categories; None when the judge was not asked)."""
    use_judge = rule.judged is not None and verify is not None
    model = rule.judged if use_judge else rule.evidence
    p = model.probabilities(features(cues, verify, categorize))
    p_unsafe = p[UNSAFE_CLASS]
    decided_by: DecidedBy = "rule" if use_judge else "evidence"
    unsafe = Category.CONTRADICTED if judge_category == "CONTRADICTED" else Category.LACKING_EVIDENCE
    if p_unsafe >= model.threshold:
        return Decision(unsafe, p_unsafe, decided_by)
    if unsafe_by_its_figures(cues):
        return Decision(unsafe, p_unsafe, decided_by, "lacking")
    barred = ("contradicted" if judge_category == "CONTRADICTED" else "lacking" if lacks_a_source(cues)
              else "remark" if opinion_or_remark(cues) else None)
    category = max(UNSUPPORTED_SAFE_CLASSES if barred else SAFE_CLASSES, key=p.__getitem__)
    changed = barred if barred and max(SAFE_CLASSES, key=p.__getitem__) == "VERIFIED" else None
    return Decision(Category(category), p_unsafe, decided_by, changed)


def by_evidence(rule: DecisionRule, cues: Mapping[str, float]) -> Decision | None:
    """The cascade: the evidence's decision of a claim it decides alone, or None (ask the judge)."""
    if rule.cascade is None:
        return None
    decision = decide(rule, cues)
    return decision if rule.cascade.decides(decision.p_unsafe) else None


def most_doubtful(turn_threshold: float | None, p_unsafe: Sequence[float | None], categories: Sequence[str],
                  eligible: Sequence[bool] | None = None) -> int | None:
    """The claim of a turn that a rule's ``turn_threshold`` makes unsafe: the one with the highest P(unsafe) among
    the claims the rule decided (``p_unsafe`` None: not decided by the rule) and that may be unsafe (``eligible``,
    default all), when that P reaches the threshold and the claim is not unsafe already; None otherwise (and without
    a threshold)."""
    if turn_threshold is None:
        return None
    decided = [i for i, p in enumerate(p_unsafe) if p is not None and (eligible is None or eligible[i])]
    if not decided:
        return None
    top = max(decided, key=lambda i: p_unsafe[i])
    if p_unsafe[top] < turn_threshold or categories[top] in UNSAFE_CATEGORIES:
        return None
    return top


UNSAFE_CATEGORIES = frozenset({"LACKING EVIDENCE", "CONTRADICTED"})


def feature_matrix(rows: Sequence[Mapping[str, float]], names: Sequence[str]):
    import numpy as np

    return np.array([[row[n] for n in names] for row in rows], dtype=float).reshape(len(rows), len(names))

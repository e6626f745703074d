"""Recipes that choose a decision rule on judged turns with no LM call (a recorded probe, or the annotators' claims),
and what compares their decisions with the seed's on the same turns: what ``benchmarks/refit_compile_part.py`` (the
shipped rules) and ``experiments/paired_table.py`` run.

- ``fit_for_turns`` (``"threshold"``): the rule's models fitted on the claims of some turns, then two thresholds
  chosen on cross-fitted P(unsafe) (no claim's probability comes from a model that saw its dialogue): the claim
  threshold for the claim decisions, then the lower turn threshold for the most doubtful claim of each turn
  (``decision.most_doubtful``) for the turn labels. A turn needs every unsafe claim found; a claim only its own.
- ``fit_for_turns`` (``"model"``) / ``choose_turn_model_rule``: the claim threshold as above and a turn model
  (``turn_fitting``) in place of the turn threshold.
- ``two_fold``: every turn decided by a recipe run on the other half of the turns only.
- ``probe_gate``: the one gate (``gate.seed_gate``: non-inferior to the seed within the margin, paired bootstrap over
  dialogues) of such decisions against the seed's own on the same turns; ``paired_turns`` / ``paired_claims``,
  ``turn_difference_interval`` and ``by_claim_count`` for the tables that read them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ...decision import UNSAFE_CATEGORIES, DecisionRule, may_be_unsafe, most_doubtful, unsafe_by_its_figures
from ..gate import SeedGate
from .cross_fitting import random_halves
from .judged_turns import TurnRows
from .rule_fitting import (
    FEATURE_SETS,
    THRESHOLDS,
    TurnDecision,
    cross_fitted,
    fit_rule,
    replay,
    turn_rights,
    with_cascade,
)


def at_thresholds(decided: Sequence[TurnDecision], claim: float, turn: float | None) -> list[tuple[list[str], str]]:
    """Per turn: each claim's category as safe / unsafe (VERIFIED standing for any safe class; a claim the rule did
    not decided keeps its category) and the turn's label, with the claims' P(unsafe) cut at ``claim`` (a factual claim
    whose figure or name no source holds unsafe at any P, ``decision.unsafe_by_its_figures``) and the turn's most
    doubtful claim that may be unsafe at ``turn``: the deployed rule's arithmetic (``most_doubtful``,
    ``scoring.turn_label``)."""
    from ...schema import Category
    from ...scoring import turn_label

    out = []
    for d in decided:
        categories = [c if p is None else "LACKING EVIDENCE" if p >= claim or unsafe_by_its_figures(r.cues)
                      else "VERIFIED" for p, c, r in zip(d.p_unsafe, d.categories, d.turn.rows)]
        flip = most_doubtful(turn, d.p_unsafe, categories, [may_be_unsafe(r.cues) for r in d.turn.rows])
        if flip is not None:
            categories[flip] = "LACKING EVIDENCE"
        out.append((categories, turn_label([Category(c) for c in categories], failed=d.turn.unjudged)))
    return out


def _accuracies(decided: Sequence[TurnDecision], claim: float, turn: float | None) -> tuple[float, float]:
    """(turn accuracy, claim decision accuracy) at these thresholds (an unknown turn counts wrong)."""
    turns_right = claims_right = claims = turns = 0
    for d, (categories, label) in zip(decided, at_thresholds(decided, claim, turn)):
        if d.turn.gold_label in ("hallucinated", "faithful"):
            turns += 1
            turns_right += label == d.turn.gold_label
        for c, row in zip(categories, d.turn.rows):
            if row.gold is not None:
                claims += 1
                claims_right += (c in UNSAFE_CATEGORIES) == (row.gold in UNSAFE_CATEGORIES)
    return turns_right / max(turns, 1), claims_right / max(claims, 1)


def _mean(decided: Sequence[Sequence[TurnDecision]], claim: float, turn: float | None) -> tuple[float, float]:
    """(turn accuracy, claim decisions) at these thresholds, averaged over the cross-fittings in ``decided``."""
    pairs = [_accuracies(d, claim, turn) for d in decided]
    return sum(p[0] for p in pairs) / len(pairs), sum(p[1] for p in pairs) / len(pairs)


def choose_claim_threshold(decided: Sequence[Sequence[TurnDecision]]) -> float:
    """The claim threshold with the best claim decisions (no turn threshold); ties go to the one nearest 0.5."""
    return max(THRESHOLDS, key=lambda t: (_mean(decided, t, None)[1], -abs(t - 0.5)))


def choose_thresholds(decided: Sequence[Sequence[TurnDecision]]) -> dict[str, float]:
    """The claim threshold (``choose_claim_threshold``), then the turn threshold (at most the claim threshold;
    equal: no lower bar) with the most turns right, then the best claim decisions; ties go to the threshold nearest
    0.5. ``decided``: one or more cross-fittings of the same turns (P(unsafe) from models that did not see their
    dialogue); each accuracy is their mean, so that one split's luck does not pick the threshold."""
    claim = choose_claim_threshold(decided)
    turn = max((t for t in THRESHOLDS if t <= claim), key=lambda t: (*_mean(decided, claim, t), -abs(t - 0.5)))
    turns, claims = _mean(decided, claim, turn)
    return {"claim": claim, "turn": turn, "turn_accuracy": round(turns, 4), "claim_decisions": round(claims, 4)}


REPEATS = 5  # cross-fittings (random halves of the dialogues) whose mean accuracy chooses the thresholds
# How a rule decides a turn with no unsafe claim: a lower threshold for its most doubtful claim (issue 35), or a turn
# model that knows the claim count (issue 40, ``turn_fitting``).
TURN_DECISIONS = ("threshold", "model")


def fit_for_turns(turns: Sequence[TurnRows], features: Sequence[str], turns_by: str, *, repeats: int = REPEATS
                  ) -> tuple[DecisionRule, dict[str, Any]]:
    """A rule over ``features`` fitted on every claim of ``turns``, its claim threshold chosen for claim decisions
    on ``repeats`` cross-fittings over random halves of the dialogues; then, by ``turns_by``, the turn threshold
    chosen on the same cross-fittings (``choose_thresholds``), or a turn model fitted on the turn labels of their
    P(unsafe) and chosen by held-out log-likelihood (``turn_fitting.choose_turn_model``)."""
    from .turn_fitting import choose_turn_model, examples, one_per_turn

    if turns_by not in TURN_DECISIONS:
        raise ValueError(f"turns_by is one of {', '.join(TURN_DECISIONS)}, not {turns_by!r}")
    inner = [cross_fitted(turns, random_halves(turns, r), lambda part: fit_rule(part, features))[0]
             for r in range(repeats)]
    if turns_by == "threshold":
        chosen = choose_thresholds(inner)
        turn_rule = {"turn_threshold": chosen["turn"] if chosen["turn"] < chosen["claim"] else None}
    else:
        claim = choose_claim_threshold(inner)
        turn_model, turn_record = choose_turn_model(one_per_turn([e for d in inner for e in examples(d, claim)]))
        chosen = {"claim": claim, "claim_decisions": round(_mean(inner, claim, None)[1], 4), "turn_model": turn_record}
        turn_rule = {"turn_threshold": None, "turn": turn_model}
    rule = fit_rule(turns, features)
    role = "judged" if rule.judged is not None else "evidence"
    model = getattr(rule, role).model_copy(update={"threshold": chosen["claim"]})
    rule = rule.model_copy(update={role: model, **turn_rule})
    return DecisionRule.model_validate(rule.model_dump()), chosen


# The features of the rule: the cues and Verify's probability (asked of every claim) when the endpoint gives
# probabilities, else the cues. Not chosen per fit: on the 59-turn halves of the dev file the choice among
# ``rule_fitting.FEATURE_SETS`` flipped between halves and lost more than it won (benchmarks/RESULTS.md, "One rule
# for claims and turns"); Categorize's distribution exists only for the claims Verify did not verify.
WITH_JUDGE = "evidence + verify"
WITHOUT_JUDGE = "evidence"


def choose_rule_for_turns(turns: Sequence[TurnRows], turns_by: str,
                          log: Callable[[str], None] = lambda message: None) -> tuple[DecisionRule, dict[str, Any]]:
    """The rule over the cues and Verify's probability (the cues alone when the probe has no probabilities), fitted
    on all ``turns`` (``fit_for_turns``). No cascade: every claim is asked."""
    has_probabilities = any(r.verify is not None for t in turns for r in t.rows)
    chosen = WITH_JUDGE if has_probabilities else WITHOUT_JUDGE
    rule, record = fit_for_turns(turns, FEATURE_SETS[chosen], turns_by)
    if turns_by == "threshold":
        log(f"   {chosen}: claim threshold {record['claim']:.2f}, turn threshold {record['turn']:.2f}; cross-fitted "
            f"turns {record['turn_accuracy']:.3f}, claim decisions {record['claim_decisions']:.3f}")
        fitted = {"thresholds": {k: record[k] for k in ("claim", "turn")}}
    else:
        log(f"   {chosen}: claim threshold {record['claim']:.2f}; turn model "
            f"{rule.turn.describe() if rule.turn else 'none'} (chosen by held-out log-likelihood: "
            f"{record['turn_model'].get('chosen')})")
        fitted = {"thresholds": {"claim": record["claim"]}, "turn_model": record["turn_model"].get("chosen")}
    record["features"] = chosen
    # The evidence-only rule carries the turn model itself; a turn threshold is carried over here.
    rule = with_cascade(rule, None) if rule.judged is not None else rule.evidence_only().model_copy(
        update={"turn_threshold": rule.turn_threshold})
    return DecisionRule.model_validate({**rule.model_dump(), "fitted": {
        "turns": len(turns), "claims": sum(r.gold is not None for t in turns for r in t.rows),
        "source": "decomposed claims, labelled through the human claims they match", "features": chosen,
        **fitted}}), record


def choose_two_threshold_rule(turns: Sequence[TurnRows], log: Callable[[str], None] = lambda message: None
                              ) -> tuple[DecisionRule, dict[str, Any]]:
    """Issue 35's recipe: a claim threshold and a lower turn threshold (``choose_rule_for_turns``)."""
    return choose_rule_for_turns(turns, "threshold", log)


def choose_turn_model_rule(turns: Sequence[TurnRows], log: Callable[[str], None] = lambda message: None
                           ) -> tuple[DecisionRule, dict[str, Any]]:
    """Issue 40's recipe: a claim threshold and a turn model (``choose_rule_for_turns``)."""
    return choose_rule_for_turns(turns, "model", log)


Recipe = Callable[[Sequence[TurnRows]], DecisionRule]


def two_fold(turns: Sequence[TurnRows], half_of: Mapping[str, str], recipe: Recipe, *, judge: bool = True
             ) -> tuple[list[TurnDecision], dict[str, DecisionRule]]:
    """Every turn decided by the rule that ``recipe`` chose on the other half only (``half_of``: dialogue id ->
    half name; two halves). Returns (decisions in ``turns`` order, {half: the rule that decided it})."""
    halves = sorted({half_of[t.dialogue_id] for t in turns})
    if len(halves) != 2:
        raise ValueError(f"two_fold needs turns of two halves, got {halves}")
    rules = {half: recipe([t for t in turns if half_of[t.dialogue_id] != half]) for half in halves}
    return [replay([t], rules[half_of[t.dialogue_id]], judge=judge)[0] for t in turns], rules


def claim_key(turn: TurnRows, position: int) -> tuple[str, int, str | int]:
    """A claim by dialogue, turn and text; by position where the record keeps no text (a probe of sentences)."""
    return turn.dialogue_id, turn.turn_index, turn.rows[position].claim or position


def paired_claims(candidate: Sequence[TurnDecision], base: Sequence[TurnDecision]) -> tuple[list[bool], list[bool]]:
    """(candidate right, base right) on the claims both decided that carry an annotators' judgement, matched by
    dialogue, turn and claim text (a claim added by coverage has no counterpart in a base without it)."""
    def rights(decided: Sequence[TurnDecision]) -> dict[tuple, bool]:
        return {claim_key(d.turn, i): (c in UNSAFE_CATEGORIES) == (r.gold in UNSAFE_CATEGORIES)
                for d in decided for i, (c, r) in enumerate(zip(d.categories, d.turn.rows))
                if r.gold is not None and r.cues.get("coverage", 0.0) == 0.0}

    mine, theirs = rights(candidate), rights(base)
    common = [k for k in mine if k in theirs]
    return [mine[k] for k in common], [theirs[k] for k in common]


def paired_turns(candidate: Sequence[TurnDecision], base: Sequence[TurnDecision]) -> tuple[list[bool], list[bool]]:
    """(candidate right, base right) on the turns both decided, matched by dialogue and turn."""
    def rights(decided: Sequence[TurnDecision]) -> dict[tuple, bool]:
        scored = [d for d in decided if d.turn.gold_label in ("hallucinated", "faithful")]
        return {(d.turn.dialogue_id, d.turn.turn_index): right for d, right in zip(scored, turn_rights(scored))}

    mine, theirs = rights(candidate), rights(base)
    common = [k for k in mine if k in theirs]
    return [mine[k] for k in common], [theirs[k] for k in common]


def turn_difference_interval(candidate: Sequence[TurnDecision], base: Sequence[TurnDecision], *,
                             confidence: float = 0.95, resamples: int = 10_000, seed: int = 0) -> dict[str, float]:
    """The candidate's turn accuracy minus the base's on the turns both decided, with a bootstrap interval that
    resamples dialogues (a dialogue's turns share its document and store, so they are not independent draws):
    {"difference", "low", "high", "confidence", "dialogues"}. ``scipy.stats.bootstrap`` (percentile, paired)."""
    import numpy as np
    from scipy.stats import bootstrap

    def by_dialogue(decided: Sequence[TurnDecision]) -> dict[tuple, bool]:
        scored = [d for d in decided if d.turn.gold_label in ("hallucinated", "faithful")]
        return {(d.turn.dialogue_id, d.turn.turn_index): right for d, right in zip(scored, turn_rights(scored))}

    mine, theirs = by_dialogue(candidate), by_dialogue(base)
    common = [k for k in mine if k in theirs]
    dialogues = sorted({k[0] for k in common})
    gain = np.array([sum(mine[k] - theirs[k] for k in common if k[0] == d) for d in dialogues], dtype=float)
    turns = np.array([sum(k[0] == d for k in common) for d in dialogues], dtype=float)
    difference = float(gain.sum() / turns.sum())
    result = bootstrap((gain, turns), lambda g, n: g.sum() / n.sum(), paired=True, vectorized=False,
                       n_resamples=resamples, confidence_level=confidence, method="percentile",
                       rng=np.random.default_rng(seed))
    return {"difference": round(difference, 4), "low": round(float(result.confidence_interval.low), 4),
            "high": round(float(result.confidence_interval.high), 4), "confidence": confidence,
            "dialogues": len(dialogues), "turns": len(common)}


def by_claim_count(decided: Sequence[TurnDecision]) -> dict[str, dict[str, int]]:
    """Turns right, false alarms and misses per number of claims (0-1, 2-3, 4+): where "any claim unsafe" errs as
    claims are added."""
    groups: dict[str, dict[str, int]] = {}
    for d in decided:
        gold = d.turn.gold_label
        if gold not in ("hallucinated", "faithful"):
            continue
        n = len(d.turn.rows)
        group = groups.setdefault("0-1" if n <= 1 else "2-3" if n <= 3 else "4+",
                                  {"turns": 0, "right": 0, "false_alarms": 0, "misses": 0})
        group["turns"] += 1
        group["right"] += d.label == gold
        group["false_alarms"] += d.label != "faithful" and gold == "faithful"
        group["misses"] += d.label != "hallucinated" and gold == "hallucinated"
    return dict(sorted(groups.items()))


def probe_gate(candidate: Sequence[TurnDecision], seed: Sequence[TurnDecision], *, name: str = "candidate"
               ) -> SeedGate:
    """The anchored gate (``gate.seed_gate``, the study's and ``vista compile``'s) of ``candidate``'s decisions against
    the seed's on the turns both decided that carry a gold turn label (the seed's from its own recorded probe: the
    judge's labels, no rule), paired by dialogue; claims paired by dialogue, turn and normalised text
    (``study.claim_key``) where both hold the claim with an annotators' judgement (units of other kinds, e.g. the
    turn's sentences against decomposed claims, share few)."""
    from ..gate import seed_gate
    from ..study.run import LABEL_LETTERS, claim_key

    def letters(decided: Sequence[TurnDecision]) -> tuple[dict[tuple[str, int], str], dict[str, str]]:
        turns = {(d.turn.dialogue_id, d.turn.turn_index): LABEL_LETTERS.get(d.label, "u") for d in decided
                 if d.turn.gold_label in LABEL_LETTERS}
        claims = {claim_key(d.turn.dialogue_id, d.turn.turn_index, r.claim):
                  ("u" if r.gold in UNSAFE_CATEGORIES else "s") + ("u" if c in UNSAFE_CATEGORIES else "s")
                  for d in decided for c, r in zip(d.categories, d.turn.rows)
                  if r.gold is not None and r.claim and r.cues.get("coverage", 0.0) == 0.0}
        return turns, claims

    (mine, my_claims), (theirs, their_claims) = letters(candidate), letters(seed)
    gold = {(d.turn.dialogue_id, d.turn.turn_index): LABEL_LETTERS[d.turn.gold_label] for d in candidate
            if d.turn.gold_label in LABEL_LETTERS}
    common = [k for k in mine if k in theirs]
    return seed_gate([(k[0], gold[k]) for k in common], "".join(mine[k] for k in common),
                     "".join(theirs[k] for k in common), candidate_claims=my_claims, seed_claims=their_claims,
                     name=name)

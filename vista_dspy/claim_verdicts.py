"""How a judged claim's answers become its verdict, and the one sentence a person reads for it.

The verdict: the judge's own labels (the seed, the paper's method), or a decision rule's decision over the judge's
label probabilities and the claim's evidence cues (``decision``); a claim the cascade decided by its evidence alone; a
turn's most doubtful claim under the rule's turn threshold; the sentence that says why a turn model called a turn
hallucinated.

The sentence, for a claim a decision rule decided: what was decided and its main reason. The chain behind it (the
judge's label and reason, the rule's P(unsafe) and threshold, what the rule decided alone, a turn threshold) is kept
in the verdict's own fields, not in the sentence.

The main reason is the rule's input that pushed hardest toward the decision: of the deciding linear model's inputs,
the one whose weight difference between the decided class and the strongest other class, times the distance of its
value from a value that speaks for neither side (an even share or probability, a cue not set), is largest. When every
input pushed the other way (the rule's intercept carried it), the sentence names the strongest of them and says it
was not enough. Every input's value is in the verdict's ``cues`` and ``probabilities``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .decision import (
    CATEGORIZE_LABELS,
    JUDGE_FEATURES,
    SAFE_CLASSES,
    UNSAFE_CATEGORIES,
    UNSAFE_CLASS,
    Decision,
    DecisionRule,
    TurnCall,
    decide,
    features,
)
from .schema import Category, ClaimVerdict, GoldClaim, LabelProbabilities
from .stages import StageResult


def claim_verdict(rule: DecisionRule | None, claim: str | GoldClaim, verified: StageResult,
                  categorized: StageResult | None, cues: dict[str, float]) -> ClaimVerdict:
    """A judged claim's verdict: the judge's own labels (no rule), or the rule's decision over the judge's
    probabilities and the claim's cues. Categorize was asked iff Verify's own label was not VERIFIED (or
    under ``categorize_all``, whose extra answer never changes a decision)."""
    text, gold = (claim.text, claim.category) if isinstance(claim, GoldClaim) else (claim, None)
    common: dict[str, Any] = {"claim": text, "gold_category": gold, "cues": cues,
                              "probabilities": _probabilities(verified, categorized)}
    if verified.error is not None:
        return ClaimVerdict(category=Category.ERROR, stage="verify", error=verified.error, **common)
    said_verified = verified.prediction.label == "VERIFIED"
    if not said_verified and (categorized is None or categorized.error is not None):
        error = categorized.error if categorized else "no categorize result"
        return ClaimVerdict(category=Category.ERROR, stage="categorize", error=error, **common)
    raw = "VERIFIED" if said_verified else categorized.prediction.category
    stage = "verify" if said_verified else "categorize"
    explanation = (verified.prediction.get("explanation") or "" if said_verified
                   else categorized.prediction.get("explanation") or "")
    # Categorize asked for its category alone (its answer has no explanation field; an empty one stays empty).
    label_alone = not said_verified and "explanation" not in categorized.prediction
    if rule is None:
        explanation = _label_alone_sentence(raw, cues) if label_alone else explanation
        return ClaimVerdict(category=Category(raw), explanation=explanation, stage=stage, **common)
    probabilities = common["probabilities"]
    verify = probabilities.verify if probabilities else None
    categorize = probabilities.categorize if probabilities and not said_verified else None
    decision = decide(rule, cues, verify, categorize, raw)
    chain: dict[str, Any] = {"raw_label": raw, "p_unsafe": round(decision.p_unsafe, 4),
                             "decided_by": decision.decided_by, "threshold": _threshold(rule, decision),
                             "rule_label": decision.category.value}
    if decision.category.value != raw:  # the sentence says why; the judge's own reason is kept beside it
        reason = main_reason(rule, decision.decided_by, decision.category.value, cues, verify, categorize)
        chain["judge_explanation"] = explanation or None
        explanation = _overruled_sentence(decision.category.value, raw, reason)
    elif label_alone:
        explanation = _agreed_sentence(raw, main_reason(rule, decision.decided_by, raw, cues, verify, categorize))
    return ClaimVerdict(category=decision.category, explanation=explanation, stage=stage, **chain, **common)


def by_evidence_verdict(rule: DecisionRule, claim: str | GoldClaim, decision: Decision, cues: dict[str, float]
                        ) -> ClaimVerdict:
    """A claim the cascade decided by its evidence alone: no LM call; its explanation names the cue that decided."""
    text, gold = (claim.text, claim.category) if isinstance(claim, GoldClaim) else (claim, None)
    reason = main_reason(rule, "evidence", decision.category.value, cues)
    return ClaimVerdict(claim=text, gold_category=gold, category=decision.category, stage="evidence",
                        explanation=_evidence_sentence(decision.category.value, reason),
                        cues=cues, p_unsafe=round(decision.p_unsafe, 4), decided_by="evidence",
                        threshold=_threshold(rule, decision), rule_label=decision.category.value)


def as_most_doubtful(verdict: ClaimVerdict, rule: DecisionRule) -> ClaimVerdict:
    """The turn's most doubtful claim, unsafe under the rule's turn threshold (``decision.most_doubtful``)."""
    category = Category.CONTRADICTED if verdict.raw_label == "CONTRADICTED" else Category.LACKING_EVIDENCE
    probabilities = verdict.probabilities
    reason = main_reason(rule, verdict.decided_by or "evidence", category.value, verdict.cues or {},
                         probabilities.verify if probabilities else None,
                         probabilities.categorize if probabilities and verdict.stage == "categorize" else None,
                         against=verdict.category.value)
    judge_explanation = (verdict.judge_explanation if verdict.judge_explanation is not None
                         else verdict.explanation if verdict.stage != "evidence" else None)
    return verdict.model_copy(update={"category": category, "turn_threshold": rule.turn_threshold,
                                      "judge_explanation": judge_explanation or None,
                                      "explanation": _most_doubtful_sentence(category.value, reason)})


def _threshold(rule: DecisionRule, decision: Decision) -> float:
    """The P(unsafe) from which the model that decided calls a claim unsafe."""
    return (rule.judged if decision.decided_by == "rule" and rule.judged is not None else rule.evidence).threshold


def turn_model_explanation(call: TurnCall, verdicts: list[ClaimVerdict]) -> str:
    """Why the turn model called a turn with no unsafe claim hallucinated, naming the claims that decided it."""
    named = "; ".join(f"claim {i + 1} (P(unsafe) {verdicts[i].p_unsafe:.2f}): {verdicts[i].claim}"
                      for i in call.deciding)
    return (f"Hallucinated by the turn model (P {call.p_hallucinated:.3f} over {len(verdicts)} claims) although no "
            f"claim alone is unsafe; decided by {named}.")


def _probabilities(verified: StageResult, categorized: StageResult | None) -> LabelProbabilities | None:
    """The label distributions the claim's Verify and Categorize answers carried, if any."""
    verify = verified.distributions[0] if verified.distributions else None
    categorize = categorized.distributions[0] if categorized is not None and categorized.distributions else None
    return LabelProbabilities(verify=verify, categorize=categorize) if verify or categorize else None


# ---- the sentence a person reads ----------------------------------------------------------------------------
_SOURCES = {
    "uncovered_reference": "the reference",
    "uncovered_knowledge": "the knowledge store",
    "uncovered_history": "the dialogue before it",
    "uncovered_all": "the reference, the knowledge store or the dialogue",
}
# What a cue says when it is set, and when it is not.
_FLAGS = {
    "speaker": ("it is about a speaker", "it is not about a speaker"),
    "opinion": ("it gives an opinion", "it gives no opinion"),
    "hedge": ("it hedges or declines", "it does not hedge"),
    "speaker_opinion": ("it is a speaker's own view", "it is not a speaker's own view"),
    "attributed": ("a speaker only frames what it says", "no speaker frames it"),
    "question": ("it is a question", "it is not a question"),
    "coverage": ("it is a sentence of the turn that no claim covered", "it is one of Decompose's claims"),
    "categorized": ("Verify did not verify it", "Verify verified it"),
}


def main_reason(rule: DecisionRule, decided_by: str, category: str, cues: Mapping[str, float],
                verify: Mapping[str, float] | None = None, categorize: Mapping[str, float] | None = None,
                against: str | None = None) -> str:
    """The main reason, in words, why ``rule``'s model (``decided_by``: "rule" for the judged model, "evidence" for
    the evidence model) put the claim in ``category`` rather than ``against`` (default: the most probable class on
    the other side of the unsafe threshold)."""
    model = rule.judged if decided_by == "rule" and rule.judged is not None else rule.evidence
    values = features(cues, verify, categorize)  # what ``decision.decide`` gave the model
    unsafe = category in UNSAFE_CATEGORIES
    decided = UNSAFE_CLASS if unsafe else category
    if against is None or against in UNSAFE_CATEGORIES:
        p = model.probabilities(values)
        against = max(SAFE_CLASSES, key=p.__getitem__) if unsafe else UNSAFE_CLASS
    rows = {c: dict(zip(model.features, row)) for c, row in zip(model.classes, model.coef)}
    push = {f: (rows[decided][f] - rows[against][f]) * (values[f] - _neutral(f)) for f in model.features}
    if not any(push.values()):
        return "of the rule's prior alone (no input of it moved the decision)"
    strongest = max(push, key=push.__getitem__)
    if push[strongest] > 0:
        return _say(strongest, values[strongest], unsafe, verify, categorize)
    # Every input pushed against the decision: the rule's intercept carried it.
    weakest = min(push, key=push.__getitem__)
    return (f"{_say(weakest, values[weakest], against in UNSAFE_CATEGORIES or against == UNSAFE_CLASS, verify, categorize)}"
            f", not enough for the rule to call it {against}")


def _neutral(feature: str) -> float:
    """The value of an input that speaks for neither side: an even share or probability, a cue not set."""
    if feature in _FLAGS:
        return 0.0
    if feature in JUDGE_FEATURES[2:]:
        return 1 / len(CATEGORIZE_LABELS)
    return 0.0 if feature == "verify_logit" else 0.5


def _say(feature: str, value: float, unsafe: bool, verify: Mapping[str, float] | None,
         categorize: Mapping[str, float] | None) -> str:
    if feature in _SOURCES:
        inside = 1 - value  # the share of its content words the source holds
        if inside <= 0 or inside >= 1:
            return f"{'none' if inside <= 0 else 'all'} of its content words are in {_SOURCES[feature]}"
        return (f"{value:.0%} of its content words are not in {_SOURCES[feature]}" if unsafe
                else f"{inside:.0%} of its content words are in {_SOURCES[feature]}")
    if feature in _FLAGS:
        return _FLAGS[feature][0 if value else 1]
    if feature == "length":
        words = round(value * 12)
        return ("it has 12 or more content words" if value >= 1 else "it has no content word" if not words
                else f"it has {words} content word{'s' if words > 1 else ''}")
    if feature == "verify_logit" and verify is not None:
        return f"Verify gave VERIFIED a probability of {float(verify.get('VERIFIED', 0.0)):.2f}"
    if feature in JUDGE_FEATURES[2:] and categorize is not None:
        label = CATEGORIZE_LABELS[JUDGE_FEATURES[2:].index(feature)]
        return f"Categorize gave {label} a probability of {float(categorize.get(label, 0.0)):.2f}"
    return f"its {feature.replace('_', ' ')}"


def _overruled_sentence(category: str, judge_label: str, reason: str) -> str:
    """A claim the rule decided against the judge's own label."""
    return f"{category} rather than the judge's {judge_label}, because {reason}."


def _evidence_sentence(category: str, reason: str) -> str:
    """A claim the cascade decided by its evidence alone, without asking the judge."""
    return f"{category} by its evidence alone (the judge was not asked), because {reason}."


def _most_doubtful_sentence(category: str, reason: str) -> str:
    """A claim made unsafe as its turn's most doubtful claim (the rule's turn threshold)."""
    return f"{category} as the most doubtful claim of its turn, because {reason}."


def _agreed_sentence(category: str, reason: str) -> str:
    """A claim the rule decided as the judge labelled it, the judge asked for its label alone (no reason of its own)."""
    return f"{category}, as the judge labelled it, because {reason}."


def _label_alone_sentence(category: str, cues: Mapping[str, float]) -> str:
    """A claim the judge labelled without an explanation (``explain_unverified=False``) and no rule decided: how much
    of it the reference holds."""
    unsafe = category in UNSAFE_CATEGORIES
    return (f"{category} by the judge (asked for its label alone); "
            f"{_say('uncovered_reference', cues['uncovered_reference'], unsafe, None, None)}.")

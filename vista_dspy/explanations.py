"""The one sentence a person reads for a claim a decision rule decided: what was decided and its main reason. The
chain behind it (the judge's label and reason, the rule's P(unsafe) and threshold, what the rule decided alone, a
turn threshold) is kept in the verdict's own fields, not in the sentence.

The main reason is the rule's input that pushed hardest toward the decision: of the deciding linear model's inputs,
the one whose weight difference between the decided class and the strongest other class, times the distance of its
value from a value that speaks for neither side (an even share or probability, a cue not set), is largest. When every
input pushed the other way (the rule's intercept carried it), the sentence names the strongest of them and says it
was not enough. Every input's value is in the verdict's ``cues`` and ``probabilities``.
"""

from __future__ import annotations

from collections.abc import Mapping

from .decision import (
    CATEGORIZE_LABELS,
    JUDGE_FEATURES,
    SAFE_CLASSES,
    UNSAFE_CATEGORIES,
    UNSAFE_CLASS,
    DecisionRule,
    features,
)

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
                against: str | None = None, probabilities: Mapping[str, float] | None = None) -> str:
    """The main reason, in words, why ``rule``'s model (``decided_by``: "rule" for the judged model, "evidence" for
    the evidence model) put the claim in ``category`` rather than ``against`` (default: the most probable class on
    the other side of the unsafe threshold). ``probabilities``: that model's class probabilities for these inputs
    when the caller has them already (``Decision.probabilities``)."""
    model = rule.judged if decided_by == "rule" and rule.judged is not None else rule.evidence
    values = features(cues, verify, categorize)  # what ``decision.decide`` gave the model
    unsafe = category in UNSAFE_CATEGORIES
    decided = UNSAFE_CLASS if unsafe else category
    if against is None or against in UNSAFE_CATEGORIES:
        p = probabilities or model.probabilities(values)
        against = max(SAFE_CLASSES, key=p.__getitem__) if unsafe else UNSAFE_CLASS
    rows = dict(zip(model.classes, model.coef))
    push = {f: (mine - other) * (values[f] - _neutral(f))
            for f, mine, other in zip(model.features, rows[decided], rows[against])}
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


def overruled(category: str, judge_label: str, reason: str) -> str:
    """A claim the rule decided against the judge's own label."""
    return f"{category} rather than the judge's {judge_label}, because {reason}."


def by_evidence(category: str, reason: str) -> str:
    """A claim the cascade decided by its evidence alone, without asking the judge."""
    return f"{category} by its evidence alone (the judge was not asked), because {reason}."


def most_doubtful(category: str, reason: str) -> str:
    """A claim made unsafe as its turn's most doubtful claim (the rule's turn threshold)."""
    return f"{category} as the most doubtful claim of its turn, because {reason}."


def agreed(category: str, reason: str) -> str:
    """A claim the rule decided as the judge labelled it, the judge asked for its label alone (no reason of its own)."""
    return f"{category}, as the judge labelled it, because {reason}."


def label_alone(category: str, cues: Mapping[str, float]) -> str:
    """A claim the judge labelled without an explanation (``explain_unverified=False``) and no rule decided: how much
    of it the reference holds."""
    unsafe = category in UNSAFE_CATEGORIES
    return (f"{category} by the judge (asked for its label alone); "
            f"{_say('uncovered_reference', cues['uncovered_reference'], unsafe, None, None)}.")

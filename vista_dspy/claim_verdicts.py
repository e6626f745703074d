"""How a judged claim's answers become its verdict: the judge's own labels (the seed, the paper's method), or a
decision rule's decision over the judge's label probabilities and the claim's evidence cues (``decision``); a claim
the cascade decided by its evidence alone; and a rule's turn decision acting through the turn's most doubtful claim
(``decision.turn_flip``), so that a turn's label, its claims and its score agree. Each explanation a rule writes
names evidence a reader can check (``explanations``)."""

from __future__ import annotations

from typing import Any

from . import explanations
from .decision import Decision, DecisionRule, TurnFlip, decide, may_be_unsafe, turn_flip
from .evidence import TurnEvidence
from .schema import Category, ClaimVerdict, GoldClaim, LabelProbabilities
from .stages import StageResult


def claim_verdict(rule: DecisionRule | None, claim: str | GoldClaim, verified: StageResult,
                  categorized: StageResult | None, cues: dict[str, float], evidence: TurnEvidence) -> ClaimVerdict:
    """A judged claim's verdict: the judge's own labels (no rule), or the rule's decision over the judge's
    probabilities and the claim's cues. Categorize was asked iff Verify's own label was not VERIFIED (or
    under ``categorize_all``, whose extra answer never changes a decision). ``evidence``: the turn's sources, which
    an explanation the program writes cites."""
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
        if label_alone:
            explanation = explanations.label_alone(raw, explanations.reason(raw, text, cues, evidence))
        return ClaimVerdict(category=Category(raw), explanation=explanation, stage=stage, **common)
    probabilities = common["probabilities"]
    verify = probabilities.verify if probabilities else None
    categorize = probabilities.categorize if probabilities and not said_verified else None
    decision = decide(rule, cues, verify, categorize, raw)
    chain: dict[str, Any] = {"raw_label": raw, "p_unsafe": round(decision.p_unsafe, 4),
                             "decided_by": decision.decided_by, "threshold": _threshold(rule, decision),
                             "rule_label": decision.category.value}
    # The sentence cites the evidence the decision rests on; the judge's own reason, if it gave one, is kept beside it.
    why = explanations.reason(decision.category.value, text, cues, evidence)
    chain["judge_explanation"] = explanation or None
    explanation = (explanations.overruled(decision.category.value, raw, why) if decision.category.value != raw
                   else explanations.agreed(raw, why))
    return ClaimVerdict(category=decision.category, explanation=explanation, stage=stage, **chain, **common)


def by_evidence_verdict(rule: DecisionRule, claim: str | GoldClaim, decision: Decision, cues: dict[str, float],
                        evidence: TurnEvidence) -> ClaimVerdict:
    """A claim the cascade decided by its evidence alone: no LM call; its explanation cites its sources."""
    text, gold = (claim.text, claim.category) if isinstance(claim, GoldClaim) else (claim, None)
    why = explanations.reason(decision.category.value, text, cues, evidence)
    return ClaimVerdict(claim=text, gold_category=gold, category=decision.category, stage="evidence",
                        explanation=explanations.by_evidence(decision.category.value, why),
                        cues=cues, p_unsafe=round(decision.p_unsafe, 4), decided_by="evidence",
                        threshold=_threshold(rule, decision), rule_label=decision.category.value)


def turn_through_claims(rule: DecisionRule | None, verdicts: list[ClaimVerdict], evidence: TurnEvidence
                        ) -> tuple[list[ClaimVerdict], str | None]:
    """The claims of a turn after the rule's turn decision (``decision.turn_flip``): the turn's most doubtful claim
    made unsafe when the rule's turn model (or turn threshold) calls a turn with no unsafe claim hallucinated, and
    the turn's explanation naming it (None: the claims stand as decided). The turn's label and score then follow from
    its claims (``scoring.turn_verdict``)."""
    flip = turn_flip(rule, [v.p_unsafe for v in verdicts], [v.category.value for v in verdicts],
                     [may_be_unsafe(v.cues or {}) for v in verdicts])
    if flip is None:
        return verdicts, None
    verdicts = list(verdicts)
    flipped = verdicts[flip.index] = _made_unsafe(verdicts[flip.index], rule, flip, len(verdicts), evidence)
    if flip.p_hallucinated is None:
        return verdicts, None
    return verdicts, (f"Hallucinated through claim {flip.index + 1}, the most doubtful (P(unsafe) "
                      f"{flipped.p_unsafe:.2f}), which the turn model made {flipped.category.value} (P(hallucinated) "
                      f"{flip.p_hallucinated:.3f} over {len(verdicts)} claims).")


def _made_unsafe(verdict: ClaimVerdict, rule: DecisionRule, flip: TurnFlip, claims: int, evidence: TurnEvidence
                 ) -> ClaimVerdict:
    """The turn's most doubtful claim, made unsafe by the rule's turn decision: CONTRADICTED if the judge said so,
    else LACKING EVIDENCE; its explanation says what decided it and what its sources lack."""
    category = Category.CONTRADICTED if verdict.raw_label == "CONTRADICTED" else Category.LACKING_EVIDENCE
    why = explanations.reason(category.value, verdict.claim, verdict.cues or {}, evidence)
    judge_explanation = (verdict.judge_explanation if verdict.judge_explanation is not None
                         else verdict.explanation if verdict.stage != "evidence" else None)
    by_model = flip.p_hallucinated is not None
    return verdict.model_copy(update={
        "category": category, "judge_explanation": judge_explanation or None,
        "turn_threshold": None if by_model else rule.turn_threshold,
        "turn_p_hallucinated": round(flip.p_hallucinated, 4) if by_model else None,
        "explanation": explanations.made_unsafe(category.value, why, claims=claims, p_hallucinated=flip.p_hallucinated,
                                                turn_threshold=rule.turn_threshold, p_unsafe=verdict.p_unsafe)})


def _threshold(rule: DecisionRule, decision: Decision) -> float:
    """The P(unsafe) from which the model that decided calls a claim unsafe."""
    return (rule.judged if decision.decided_by == "rule" and rule.judged is not None else rule.evidence).threshold


def _probabilities(verified: StageResult, categorized: StageResult | None) -> LabelProbabilities | None:
    """The label distributions the claim's Verify and Categorize answers carried, if any."""
    verify = verified.distributions[0] if verified.distributions else None
    categorize = categorized.distributions[0] if categorized is not None and categorized.distributions else None
    return LabelProbabilities(verify=verify, categorize=categorize) if verify or categorize else None

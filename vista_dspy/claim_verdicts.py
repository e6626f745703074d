"""How a judged claim's answers become its verdict: the judge's own labels (the seed, the paper's method), or a
decision rule's decision over the judge's label probabilities and the claim's evidence cues (``decision``); a claim
the cascade decided by its evidence alone; a turn's most doubtful claim under the rule's turn threshold; the sentence
that says why a turn model called a turn hallucinated."""

from __future__ import annotations

from typing import Any

from . import explanations
from .decision import Decision, DecisionRule, TurnCall, decide
from .explanations import main_reason
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
        explanation = explanations.label_alone(raw, cues) if label_alone else explanation
        return ClaimVerdict(category=Category(raw), explanation=explanation, stage=stage, **common)
    probabilities = common["probabilities"]
    verify = probabilities.verify if probabilities else None
    categorize = probabilities.categorize if probabilities and not said_verified else None
    decision = decide(rule, cues, verify, categorize, raw)
    chain: dict[str, Any] = {"raw_label": raw, "p_unsafe": round(decision.p_unsafe, 4),
                             "decided_by": decision.decided_by, "threshold": _threshold(rule, decision),
                             "rule_label": decision.category.value}
    if decision.category.value != raw:  # the sentence says why; the judge's own reason is kept beside it
        reason = main_reason(rule, decision.decided_by, decision.category.value, cues, verify, categorize,
                             probabilities=decision.probabilities)
        chain["judge_explanation"] = explanation or None
        explanation = explanations.overruled(decision.category.value, raw, reason)
    elif label_alone:
        explanation = explanations.agreed(raw, main_reason(rule, decision.decided_by, raw, cues, verify, categorize,
                                                           probabilities=decision.probabilities))
    return ClaimVerdict(category=decision.category, explanation=explanation, stage=stage, **chain, **common)


def by_evidence_verdict(rule: DecisionRule, claim: str | GoldClaim, decision: Decision, cues: dict[str, float]
                        ) -> ClaimVerdict:
    """A claim the cascade decided by its evidence alone: no LM call; its explanation names the cue that decided."""
    text, gold = (claim.text, claim.category) if isinstance(claim, GoldClaim) else (claim, None)
    reason = main_reason(rule, "evidence", decision.category.value, cues, probabilities=decision.probabilities)
    return ClaimVerdict(claim=text, gold_category=gold, category=decision.category, stage="evidence",
                        explanation=explanations.by_evidence(decision.category.value, reason),
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
                                      "explanation": explanations.most_doubtful(category.value, reason)})


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

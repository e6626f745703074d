"""How a judged claim's answers become its verdict: the judge's own labels (the seed, the paper's method), or a
decision rule's decision over the judge's label probabilities and the claim's evidence cues (``decision``); a claim
the cascade decided by its evidence alone; a turn's most doubtful claim under the rule's turn threshold; the sentence
that says why a turn model called a turn hallucinated."""

from __future__ import annotations

from typing import Any

from .decision import Decision, DecisionRule, TurnCall, decide
from .evidence import describe
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
                   else categorized.prediction.get("explanation") or f"Categorized {raw}: {describe(cues)}.")
    if rule is None:
        return ClaimVerdict(category=Category(raw), explanation=explanation, stage=stage, **common)
    probabilities = common["probabilities"]
    decision = decide(rule, cues, probabilities.verify if probabilities else None,
                      probabilities.categorize if probabilities and not said_verified else None, raw)
    if decision.category.value != raw:
        explanation = (f"Decided {decision.category.value} against the judge's {raw} (the rule's P(unsafe) "
                       f"{decision.p_unsafe:.2f}; {describe(cues)})." + (f" Judge: {explanation}"
                                                                        if explanation else ""))
    return ClaimVerdict(category=decision.category, explanation=explanation, stage=stage, raw_label=raw,
                        p_unsafe=round(decision.p_unsafe, 4), decided_by=decision.decided_by, **common)

def by_evidence_verdict(claim: str | GoldClaim, decision: Decision, cues: dict[str, float]) -> ClaimVerdict:
    """A claim the cascade decided by its evidence alone: no LM call, the cues as its explanation."""
    text, gold = (claim.text, claim.category) if isinstance(claim, GoldClaim) else (claim, None)
    return ClaimVerdict(claim=text, gold_category=gold, category=decision.category, stage="evidence",
                        explanation=f"Decided by evidence alone (P(unsafe) {decision.p_unsafe:.2f}): "
                                    f"{describe(cues)}.",
                        cues=cues, p_unsafe=round(decision.p_unsafe, 4), decided_by="evidence")


def as_most_doubtful(verdict: ClaimVerdict, rule: DecisionRule) -> ClaimVerdict:
    """The turn's most doubtful claim, unsafe under the rule's turn threshold (``decision.most_doubtful``)."""
    category = Category.CONTRADICTED if verdict.raw_label == "CONTRADICTED" else Category.LACKING_EVIDENCE
    said = f"; it was {verdict.category.value}" + (f": {verdict.explanation}" if verdict.explanation else "")
    return verdict.model_copy(update={"category": category, "explanation": (
        f"Decided {category.value} as the turn's most doubtful claim (the rule's P(unsafe) {verdict.p_unsafe:.2f} "
        f"reaches the turn threshold {rule.turn_threshold:.2f}){said}")})


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

"""The gate anchored to the seed (DESIGN.md, wave 7; issue 48): a candidate is compared with the seed program -- the
paper's method -- on the same turns, paired, never with the previous default. It passes when its balanced accuracy is
not worse than the seed's by more than ``MARGIN`` (1 point): the one-sided 95 % lower bound of the difference, from a
paired bootstrap over dialogues, is at least -``MARGIN``. Where the turns' dialogues have human claims, its claim
decisions (on the claims both programs decided, safe / unsafe as the annotators) must not be significantly worse: the
one-sided 95 % upper bound of their difference is at least 0. A win is claimed only when the lower bound of the turn
difference is above 0. Arithmetic over recorded decisions: no LM call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

# One gate, one rule: the instrument's ``anchored_gate`` on suite runs and ``seed_gate`` on a study's recorded turns.
GATE_MARGIN = 0.01
GATE_ALPHA = 0.05
MARGIN = GATE_MARGIN
CONFIDENCE = 1 - GATE_ALPHA


class SeedGate(BaseModel):
    """A candidate against the seed: turns (non-inferiority) and, where there are any, claims (not significantly
    worse)."""

    model_config = ConfigDict(frozen=True)

    candidate: str
    seed: str = "seed"
    margin: float = MARGIN
    confidence: float = CONFIDENCE
    turns: dict[str, Any]  # difference, low (one-sided), candidate / seed balanced accuracy, turns, dialogues
    claims: dict[str, Any] | None = None  # difference, high (one-sided), claims

    @property
    def turns_non_inferior(self) -> bool:
        return self.turns["low"] >= -self.margin

    @property
    def claims_not_worse(self) -> bool:
        return self.claims is None or self.claims["high"] >= 0

    @property
    def passed(self) -> bool:
        return self.turns_non_inferior and self.claims_not_worse

    @property
    def wins(self) -> bool:
        """Significantly better turns than the seed (the lower bound above 0)."""
        return self.turns["low"] > 0

    def describe(self) -> list[str]:
        """One line per test, then the verdict."""
        t = self.turns
        lines = [f"turns: {self.candidate} balanced accuracy {t['candidate']:.3f}, {self.seed} {t['seed']:.3f} on "
                 f"the same {t['turns']} turns of {t['dialogues']} dialogues; difference {t['difference']:+.3f}, "
                 f"one-sided {self.confidence:.0%} lower bound {t['low']:+.3f} (non-inferior if at least "
                 f"{-self.margin:+.3f})"]
        if self.claims is None:
            lines.append("claim decisions: not compared (no claims both decided in two dialogues or more)")
        else:
            c = self.claims
            lines.append(f"claim decisions: balanced accuracy {c['candidate']:.3f} vs {c['seed']:.3f} on the "
                         f"{c['claims']} claims both decided; difference {c['difference']:+.3f}, one-sided "
                         f"{self.confidence:.0%} upper bound {c['high']:+.3f} (not significantly worse if at least 0)")
        verdict = "passed" if self.passed else "failed"
        why = [] if self.passed else [w for ok, w in ((self.turns_non_inferior, "its turns lose to the seed's"),
                                                      (self.claims_not_worse, "its claim decisions are significantly "
                                                                              "worse")) if not ok]
        lines.append(f"gate against the {self.seed} (paired bootstrap over dialogues): {verdict}"
                     + (f" ({'; '.join(why)})" if why else "")
                     + ("; a significant win on turns" if self.wins else ""))
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {**self.model_dump(), "passed": self.passed, "wins": self.wins}


def seed_gate(turns: Sequence[tuple[str, str]], candidate: str, seed: str, *,
              candidate_claims: Mapping[str, str] | None = None, seed_claims: Mapping[str, str] | None = None,
              name: str = "candidate", seed_name: str = "seed", margin: float = MARGIN,
              confidence: float = CONFIDENCE, bootstrap_seed: int = 0) -> SeedGate:
    """The gate of ``candidate`` against ``seed``. ``turns``: (dialogue id, gold letter) per turn; ``candidate`` and
    ``seed``: one predicted letter per turn, in that order (a letter other than the gold's is wrong, unknown
    included). Claims: {claim key "dialogue#turn#hash": gold letter + decision letter}, paired on the keys both
    hold with the same gold."""
    from .metrics import balanced_accuracy, balanced_accuracy_difference

    if not turns or len(candidate) != len(turns) or len(seed) != len(turns):
        raise ValueError("the candidate and the seed were not judged on the same turns")
    groups, gold = [d for d, _ in turns], [g for _, g in turns]
    difference = balanced_accuracy_difference(gold, list(candidate), list(seed), groups, confidence=confidence,
                                              alternative="greater", seed=bootstrap_seed)
    turn_record = {"difference": round(difference["difference"], 6), "low": round(difference["low"], 6),
                   "candidate": round(balanced_accuracy(gold, list(candidate)), 6),
                   "seed": round(balanced_accuracy(gold, list(seed)), 6), "turns": len(turns),
                   "dialogues": len(set(groups))}
    claims = None
    theirs_by_key = seed_claims or {}
    common = [k for k, v in (candidate_claims or {}).items() if k in theirs_by_key and theirs_by_key[k][0] == v[0]]
    # Claims are compared only over two dialogues or more: one cannot be resampled (units judged as sentences share
    # few claim keys with the seed's decomposed claims).
    if len({k.split("#", 1)[0] for k in common}) >= 2:
        claim_gold = [candidate_claims[k][0] for k in common]
        mine, theirs = [candidate_claims[k][1] for k in common], [seed_claims[k][1] for k in common]
        c = balanced_accuracy_difference(claim_gold, mine, theirs, [k.split("#", 1)[0] for k in common],
                                         confidence=confidence, alternative="less", seed=bootstrap_seed)
        claims = {"difference": round(c["difference"], 6), "high": round(c["high"], 6),
                  "candidate": round(balanced_accuracy(claim_gold, mine), 6),
                  "seed": round(balanced_accuracy(claim_gold, theirs), 6), "claims": len(common)}
    return SeedGate(candidate=name, seed=seed_name, margin=margin, confidence=confidence, turns=turn_record,
                    claims=claims)

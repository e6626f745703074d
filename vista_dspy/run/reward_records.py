"""What ``VistaReward`` returns and counts: a completion's reward with VISTA's verdict on it (``RewardVerdict``),
why a completion has none (``Unjudged``), and the reward's running counts (``RewardStats``). Records only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..schema import Category, ClaimVerdict, TurnVerdict


@dataclass(frozen=True)
class Unjudged:
    """Why a completion (or its prompt's history) has no verdict to shape: its reward is None, never 0 or 1."""

    reason: str


NOT_JUDGED = Unjudged("not judged")


@dataclass(frozen=True)
class RewardVerdict:
    """One completion of a batch: its reward (None: not judged, ``reason`` says why) and VISTA's verdict on it."""

    index: int  # its position in the batch
    reward: float | None
    turn: TurnVerdict | None  # None when it was never judged
    reason: str | None = None
    cached: bool = False  # the same prompt, passages and completion were judged before

    @property
    def label(self) -> str:
        return self.turn.label if self.turn is not None and self.reward is not None else "unknown"

    def to_dict(self) -> dict[str, Any]:
        """For a log or a pairs file: the reward, the label, VISTA's score and every claim with its verdict and its
        character spans in the completion (``ClaimVerdict.spans``; empty: not found in it)."""
        turn = self.turn
        return {"reward": self.reward, "label": self.label, "score": turn.score if turn else None,
                "reason": self.reason,
                "claims": [claim_record(c) for c in (turn.claims if turn else [])]}


def claim_record(claim: ClaimVerdict) -> dict[str, Any]:
    """One judged claim as every consumer outside the package gets it (a pairs file, a training log, a platform's
    score metadata): its text, its category, the judge's reason and where the completion said it."""
    return {"claim": claim.claim, "category": claim.category.value,
            "explanation": claim.error if claim.category is Category.ERROR else claim.explanation,
            "spans": [list(span) for span in claim.spans]}


@dataclass
class RewardStats:
    """What the reward has done since it was built (thread-safe updates under the reward's lock)."""

    batches: int = 0
    completions: int = 0
    judged: int = 0  # completions sent to the judge
    cached: int = 0  # completions whose verdict was reused (judged before, or twice in one batch)
    unjudged: int = 0  # completions returned as None
    prompts: int = 0  # distinct prompts per batch, summed
    prompt_work: int = 0  # prompts whose common ground was computed (the rest had none, or it was kept)
    prompt_calls: int = 0  # LM calls spent on prompts' common ground (those that failed included)
    completion_calls: int = 0  # LM calls spent judging completions
    # LM calls sharing the prompts' work saved: each judged completion would have decomposed its prompt's history
    # itself, less the calls computing each prompt's common ground once took.
    calls_saved: int = 0

    def calls_per_completion(self) -> float | None:
        return (self.prompt_calls + self.completion_calls) / self.judged if self.judged else None


__all__ = ["NOT_JUDGED", "RewardStats", "RewardVerdict", "Unjudged", "claim_record"]

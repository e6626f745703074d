"""How ``VistaReward`` turns a judged completion into a number: the completion's claims counted (``Tally``), the
numbers the shapes read (``Weights``) and the shapes themselves (``SHAPES``). Pure functions, no LM."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..schema import Category, TurnVerdict

# Safe claims that inform of nothing checkable.
UNINFORMATIVE = (Category.OUT_OF_SCOPE, Category.ABSTENTION)


@dataclass(frozen=True)
class Tally:
    """The judged claims of one completion, counted by what they do for a reward."""

    verified: int  # VERIFIED: supported content
    uninformative: int  # OUT-OF-SCOPE and ABSTENTION: safe, but they inform of nothing checkable
    unsafe: int  # CONTRADICTED and LACKING EVIDENCE
    hallucinated: bool  # VISTA's turn label (an unsafe claim, or the contradiction check fired)

    @property
    def judged(self) -> int:
        return self.verified + self.uninformative + self.unsafe

    @classmethod
    def of(cls, turn: TurnVerdict) -> Tally:
        categories = [c.category for c in turn.claims]
        return cls(verified=categories.count(Category.VERIFIED),
                   uninformative=sum(c in UNINFORMATIVE for c in categories),
                   unsafe=categories.count(Category.CONTRADICTED) + categories.count(Category.LACKING_EVIDENCE),
                   hallucinated=turn.label == "hallucinated")


@dataclass(frozen=True)
class Weights:
    """The numbers the shapes read (see ``VistaReward``)."""

    min_claims: int = 3
    uninformative_credit: float = 0.1
    unsafe_penalty: float = 1.0

    def __post_init__(self) -> None:
        if self.min_claims < 1:
            raise ValueError(f"min_claims must be at least 1, not {self.min_claims}")
        if not 0 <= self.uninformative_credit * self.min_claims < 1:
            raise ValueError(
                f"uninformative_credit x min_claims must be in [0, 1) (got {self.uninformative_credit} x "
                f"{self.min_claims}): above it, a refusal or an answer of opinions could outscore a faithful "
                "answer with one verified claim")
        if self.unsafe_penalty <= 0:
            raise ValueError(f"unsafe_penalty must be positive, not {self.unsafe_penalty}")


def informative(tally: Tally, weights: Weights) -> float:
    """The default: a faithful completion earns its VERIFIED claims (and ``uninformative_credit`` per OUT-OF-SCOPE or
    ABSTENTION claim) over max(judged claims, ``min_claims``), in [0, 1]; a hallucinated one loses its unsafe claims
    over the same, in [-1, 0). Saying nothing earns 0, refusing or opining at most ``uninformative_credit``, and a
    faithful completion with one VERIFIED claim more than that, since ``uninformative_credit * min_claims < 1``."""
    scale = max(tally.judged, weights.min_claims)
    if tally.hallucinated:
        return -max(tally.unsafe, 1) / scale
    return (tally.verified + weights.uninformative_credit * tally.uninformative) / scale


def vista_score(tally: Tally, weights: Weights) -> float:
    """VISTA's score: safe claims / judged claims (1.0 without claims: nothing unsafe). Saying nothing scores 1."""
    return (tally.judged - tally.unsafe) / tally.judged if tally.judged else 1.0


def faithful(tally: Tally, weights: Weights) -> float:
    """VISTA's turn label: 1.0 faithful, 0.0 hallucinated. Saying nothing is faithful."""
    return 0.0 if tally.hallucinated else 1.0


def penalty(tally: Tally, weights: Weights) -> float:
    """``-unsafe_penalty`` per unsafe claim (per contradiction of an earlier turn when no claim is unsafe); 0.0 for
    a completion without one. Saying nothing scores 0, the top."""
    unsafe = tally.unsafe or int(tally.hallucinated)
    return -weights.unsafe_penalty * unsafe if unsafe else 0.0


@dataclass(frozen=True)
class Shape:
    reward: Callable[[Tally, Weights], float]
    # Whether a completion without claims gets this shape's best value: then a completion whose content yielded no
    # claim (the decomposer found none) is not scored -- a failure is never a pass.
    silence_is_best: bool


SHAPES: dict[str, Shape] = {
    "informative": Shape(informative, silence_is_best=False),
    "score": Shape(vista_score, silence_is_best=True),
    "faithful": Shape(faithful, silence_is_best=True),
    "penalty": Shape(penalty, silence_is_best=True),
}
DEFAULT_SHAPE = "informative"

__all__ = ["DEFAULT_SHAPE", "SHAPES", "UNINFORMATIVE", "Shape", "Tally", "Weights", "faithful", "informative",
           "penalty", "vista_score"]

"""What a compiled program must pass to replace its base, and the record a compiled program carries beside it.

The gate compares the two programs on data no choice saw, item by item (exact McNemar on the items only one of
them gets right): on turns (the label of each judged turn) and, where the data has human claims, on claims (the
safe/unsafe decision of each human claim, what sets a turn's label). With claims, a compiled program passes when its
claim decisions are significantly better (p < alpha) and its turn accuracy is not below its base's by more than
``turn_margin`` (2 points): a program that wins claims and loses turns is refused, and so is one that wins turns by
calling everything hallucinated (its claim decisions are worse). Without claims, its turns must be significantly
better. ``alpha`` >= 1 accepts any net win.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

META_VERSION = 1
TURN_MARGIN = 0.02  # with claims: turn accuracy may fall this much below the base's, no more


class PairedTest(BaseModel):
    """Two programs on the same items: how many only the candidate got right, only the base, and the exact
    McNemar p-value of that split."""

    model_config = ConfigDict(frozen=True)

    items: int
    candidate_right: int
    base_right: int
    candidate_only: int
    base_only: int
    pvalue: float

    @classmethod
    def of(cls, candidate: Sequence[bool], base: Sequence[bool]) -> PairedTest:
        from .metrics import mcnemar_exact

        if not candidate or len(candidate) != len(base):
            raise ValueError("the two programs were not scored on the same items")
        test = mcnemar_exact([True] * len(candidate), list(candidate), list(base))
        return cls(items=len(candidate), candidate_right=sum(candidate), base_right=sum(base),
                   candidate_only=test["a_only"], base_only=test["b_only"], pvalue=float(test["pvalue"]))

    @classmethod
    def of_strings(cls, candidate: str, base: str) -> PairedTest:
        """From two strings of "1" (right) and "0" (wrong), one character per item in the same order."""
        return cls.of([c == "1" for c in candidate], [c == "1" for c in base])

    def wins(self, alpha: float, *, significant: bool = True) -> bool:
        """Right on more items than the base, and (``significant``) p below ``alpha``."""
        return self.candidate_only > self.base_only and (not significant or alpha >= 1 or self.pvalue < alpha)

    def describe(self, what: str, candidate: str = "compiled", base: str = "base") -> str:
        return (f"{what}: {candidate} {self.candidate_right}/{self.items} right, {base} {self.base_right}/"
                f"{self.items}; right only with the {candidate} {self.candidate_only}, only with the {base} "
                f"{self.base_only}; exact McNemar p = {self.pvalue:.3f}")


class Gate(BaseModel):
    """The gate's two tests and its verdict (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    alpha: float
    turns: PairedTest | None = None
    claims: PairedTest | None = None
    base: str = "seed"
    turn_margin: float = TURN_MARGIN

    @property
    def turns_within_margin(self) -> bool:
        """Turn accuracy not below the base's by more than ``turn_margin``."""
        return (self.turns is not None and self.turns.items > 0
                and (self.turns.candidate_right - self.turns.base_right) / self.turns.items >= -self.turn_margin)

    @property
    def passed(self) -> bool:
        if self.turns is None:
            return False
        if self.claims is None:
            return self.turns.wins(self.alpha)
        return self.turns_within_margin and self.claims.wins(self.alpha)

    def describe(self, candidate: str = "compiled program") -> list[str]:
        """One line per test, then the verdict."""
        base = f"{self.base} program"
        lines = [test.describe(what, candidate, base) for what, test in (("turns", self.turns),
                                                                         ("claim decisions", self.claims)) if test]
        rule = (f"significantly better claim decisions, turn accuracy at most {self.turn_margin:.0%} below the "
                f"{base}'s" if self.claims is not None else "significantly more turns right")
        lines.append(f"gate ({rule}, alpha {self.alpha}): {'passed' if self.passed else 'failed'}"
                     if self.turns is not None else "gate: no paired turns to test (failed)")
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {**self.model_dump(), "passed": self.passed}


class ProgramMeta(BaseModel):
    """``<name>.meta.json``: how a program was compiled (``vista compile``, or ``--budget`` from a study), on which
    data (content hashes), how it and its base scored on data no choice saw, the gate, and the cost."""

    model_config = ConfigDict(extra="forbid")

    meta_version: int = META_VERSION
    program: str
    program_sha256: str | None = None  # the content hash of the program this meta describes (``compiled``)
    model: str | None = None
    model_name: str | None = None
    optimizer: str
    settings: dict[str, Any] = Field(default_factory=dict)
    train: dict[str, Any] = Field(default_factory=dict)
    dev: dict[str, Any] = Field(default_factory=dict)
    scores: dict[str, Any] = Field(default_factory=dict)  # base and compiled, on dev
    gate: dict[str, Any] = Field(default_factory=dict)  # Gate.as_dict()
    # The instrument's gate (``instrument.anchored_gate``): against the seed on the suite's compile part.
    anchored_gate: dict[str, Any] | None = None
    choice: dict[str, Any] = Field(default_factory=dict)  # the numbers each choice was made with
    options: dict[str, Any] = Field(default_factory=dict)  # the judging options saved with the program
    rule: dict[str, Any] | None = None  # the decision rule saved with the program (DecisionRule)
    # The dialogues each fitted part saw, per dataset ({dataset: ids}, or {part: {dataset: ids}}): never one of the
    # instrument's test part (tests/test_fitted_on.py).
    fitted_on: dict[str, Any] | None = None
    demos: dict[str, int] = Field(default_factory=dict)
    cost: dict[str, Any] = Field(default_factory=dict)  # LM calls and tokens, seconds
    dspy_version: str = ""
    date: str = Field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    note: str | None = None


def write_anchored_gate(meta: Path, record: dict[str, Any]) -> None:
    """Write the instrument's gate (``instrument.anchored_gate``'s record) into a program's meta file as
    ``anchored_gate``; a meta that cannot be read raises ValueError naming the file."""
    try:
        document = ProgramMeta.model_validate_json(meta.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"{meta}: cannot read the program meta ({exc})") from None
    meta.write_text(document.model_copy(update={"anchored_gate": record}).model_dump_json(indent=2) + "\n")

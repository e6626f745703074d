"""What every benchmark loader shares after reading: the gold label of a judged turn, the report of what was kept
and skipped, unique ids, and seeded samples and splits of the loaded dialogues."""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..schema import Dialogue, TurnGold
from .errors import InputError

logger = logging.getLogger("vista_dspy.data")


@dataclass
class LoadReport:
    """What one loader call kept and skipped (``skipped``: reason -> count; ``examples``: first few locations)."""

    dataset: str
    files: list[str] = field(default_factory=list)
    kept: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    # Rows kept with an adjustment worth knowing (e.g. no previous turn): reason -> count.
    notes: Counter = field(default_factory=Counter)
    sampled: int | None = None
    seed: int | None = None

    def skip(self, reason: str, where: str) -> None:
        self.skipped[reason] += 1
        examples = self.examples.setdefault(reason, [])
        if len(examples) < 5:
            examples.append(where)

    @property
    def total_skipped(self) -> int:
        return sum(self.skipped.values())

    def message(self) -> str:
        text = f"{self.dataset}: kept {self.kept} rows, skipped {self.total_skipped}"
        if self.skipped:
            text += " (" + ", ".join(f"{reason}: {count}" for reason, count in self.skipped.most_common()) + ")"
        if self.notes:
            text += "; kept with notes: " + ", ".join(f"{note}: {count}" for note, count in self.notes.most_common())
        if self.sampled is not None:
            text += f"; sampled {self.sampled} (seed {self.seed})"
        return text


# The report of the latest call of each loader, by registered name.
REPORTS: dict[str, LoadReport] = {}


def last_report(name: str) -> LoadReport:
    """The report of the latest load of benchmark ``name`` (KeyError if it was never loaded)."""
    return REPORTS[name]


def sample(dialogues: Sequence[Dialogue], n: int, seed: int = 0) -> list[Dialogue]:
    """``n`` dialogues chosen with ``random.Random(seed)``, in their original order. Same input, same output."""
    if n < 0:
        raise ValueError(f"cannot sample a negative number of dialogues ({n})")
    if n > len(dialogues):
        raise ValueError(f"asked for {n} dialogues but only {len(dialogues)} are available")
    chosen = sorted(random.Random(seed).sample(range(len(dialogues)), n))
    return [dialogues[i] for i in chosen]


def split(
    dialogues: Sequence[Dialogue],
    dev_fraction: float = 0.5,
    seed: int = 0,
    *,
    group: Callable[[Dialogue], Hashable] | None = None,
) -> tuple[list[Dialogue], list[Dialogue]]:
    """Seeded, disjoint (dev, test) split; each side keeps the original order.

    ``group`` keeps dialogues with the same key on the same side (e.g. FADE's ``source["dialogue_id"]`` or AIS's
    ``source["ex_idx"]``, where several rows share a context); ``dev_fraction`` then applies to groups.
    """
    if not 0.0 <= dev_fraction <= 1.0:
        raise ValueError(f"dev_fraction must be between 0 and 1, got {dev_fraction}")
    keys = [group(d) if group is not None else d.id for d in dialogues]
    distinct = list(dict.fromkeys(keys))
    random.Random(seed).shuffle(distinct)
    dev_keys = set(distinct[: round(dev_fraction * len(distinct))])
    dev = [d for d, k in zip(dialogues, keys) if k in dev_keys]
    test = [d for d, k in zip(dialogues, keys) if k not in dev_keys]
    return dev, test


# Named parts of one annotated file for compiling (``DATASET:part``): ``train`` / ``dev`` are the halves of a seeded
# split grouped by dialogue; ``pool`` / ``select`` halve ``train`` again, within each source dataset, so that demos
# (pool), the choice between candidate programs (select) and the final measurement (dev) never share a dialogue.
PARTS = ("train", "dev", "pool", "select", "all")


def part_of(dialogues: Sequence[Dialogue], part: str, seed: int = 0) -> list[Dialogue]:
    """The dialogues of one named part (``PARTS``), in file order."""
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}; choose one of {', '.join(PARTS)}")
    if part == "all":
        return list(dialogues)

    def group(d: Dialogue) -> Hashable:
        return d.source.get("dialogue_id", d.id)

    train, dev = split(dialogues, 0.5, seed, group=group)
    if part in ("train", "dev"):
        return train if part == "train" else dev
    strata: dict[str, list[Dialogue]] = {}
    for dialogue in train:
        strata.setdefault(str(dialogue.source.get("dataset", "")), []).append(dialogue)
    chosen = {d.id for key in sorted(strata)
              for d in split(strata[key], 0.5, seed, group=group)[0 if part == "pool" else 1]}
    return [d for d in train if d.id in chosen]


def balanced(path: Path, dialogues: list[Dialogue], side: Callable[[Dialogue], bool], n: int,
              seed: int) -> list[Dialogue]:
    """``n`` dialogues, half from each side (the ``side``-true half gets the extra one when ``n`` is odd)."""
    first = [d for d in dialogues if side(d)]
    second = [d for d in dialogues if not side(d)]
    want_first, want_second = n - n // 2, n // 2
    if want_first > len(first) or want_second > len(second):
        raise InputError(path, f"n={n} needs {want_first} + {want_second} dialogues but only {len(first)} + "
                               f"{len(second)} are available")
    chosen = {d.id for d in sample(first, want_first, seed) + sample(second, want_second, seed)}
    return [d for d in dialogues if d.id in chosen]


def finish(report: LoadReport, path: Path, dialogues: list[Dialogue], n: int | None, seed: int,
            side: Callable[[Dialogue], bool] | None = None) -> list[Dialogue]:
    report.kept = len(dialogues)
    check_unique(path, dialogues)
    if n is not None:
        if side is not None:
            dialogues = balanced(path, dialogues, side, n, seed)
        else:
            try:
                dialogues = sample(dialogues, n, seed)
            except ValueError as exc:
                raise InputError(path, str(exc)) from None
        report.sampled, report.seed = len(dialogues), seed
    REPORTS[report.dataset] = report
    logger.info(report.message())
    return dialogues


def check_unique(path: Path, dialogues: list[Dialogue]) -> None:
    seen: set[str] = set()
    for dialogue in dialogues:
        if dialogue.id in seen:
            raise InputError(path, f"dialogue id {dialogue.id!r} appears twice; ids must be unique")
        seen.add(dialogue.id)


def gold(hallucinated: bool) -> TurnGold:
    return TurnGold(label="hallucinated" if hallucinated else "faithful")

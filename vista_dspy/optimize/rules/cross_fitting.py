"""Cross-fitting by whole dialogue: folds of dialogues, and each item decided by what was fitted on the other folds
only (never on its own dialogue), for calibrations and decision rules alike.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    from ...schema import Dialogue


class OfDialogue(Protocol):
    dialogue_id: str


Item = TypeVar("Item", bound=OfDialogue)
Fitted = TypeVar("Fitted")
Decided = TypeVar("Decided")


def folds(dialogues: Sequence[Dialogue], k: int, seed: int = 0) -> list[list[Dialogue]]:
    """``k`` folds of whole dialogues (the claims of one dialogue never straddle two folds), as even in claims as
    a seeded greedy assignment makes them; each fold keeps file order."""
    if k < 2:
        raise ValueError("cross-fitting needs at least 2 folds")
    order = list(dialogues)
    random.Random(seed).shuffle(order)
    order.sort(key=_claims_in, reverse=True)
    sizes = [0] * k
    members: list[set[str]] = [set() for _ in range(k)]
    for dialogue in order:
        smallest = min(range(k), key=lambda i: (sizes[i], i))
        members[smallest].add(dialogue.id)
        sizes[smallest] += _claims_in(dialogue)
    return [[d for d in dialogues if d.id in fold] for fold in members]


def _claims_in(dialogue: Dialogue) -> int:
    return sum(len(dialogue.turns[i].gold.claims or []) for i in dialogue.judged_turns
               if dialogue.turns[i].gold is not None)


def random_halves(items: Sequence[OfDialogue], repeat: int) -> dict[str, int]:
    """Dialogue id -> fold 0 / 1: the ``repeat``-th seeded random split of ``items``' dialogues in two (for records
    that carry no dialogue text for ``folds``' balancing)."""
    ids = sorted({item.dialogue_id for item in items})
    random.Random(repeat).shuffle(ids)
    return {dialogue_id: i % 2 for i, dialogue_id in enumerate(ids)}


def cross_fit(items: Sequence[Item], fold_of: Mapping[str, int], fit: Callable[[list[Item]], Fitted],
              decide: Callable[[Item, Fitted], Decided]) -> tuple[list[Decided], list[Fitted]]:
    """Each item (a claim, a turn: anything with a ``dialogue_id``) decided by what ``fit`` made of the other folds'
    items only: (decisions in ``items`` order, what was fitted for each fold)."""
    k = max(fold_of.values()) + 1
    fitted = [fit([item for item in items if fold_of[item.dialogue_id] != f]) for f in range(k)]
    return [decide(item, fitted[fold_of[item.dialogue_id]]) for item in items], fitted

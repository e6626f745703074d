"""The project's two halves of VISTA's human re-annotation, cut from the authors' full file by one fixed rule.

Per source dataset (the ``dataset`` field of a conversation's scored turns), the conversations sorted by
``conversation_id``: the 1st, 3rd, 5th, ... form the development half, the others the held-out half. Each half lists
its conversations by source dataset, then by ``conversation_id``, and is written with ``json.dumps(part, indent=2)``
(no trailing newline): so written, the development half is byte for byte the file the project develops on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import InputError

Conversation = list[dict[str, Any]]


def _key(path: Path, number: int, conversation: Any) -> tuple[str, int]:
    """(source dataset, conversation_id) of a conversation, from its scored turns (they must agree)."""
    if not isinstance(conversation, list):
        raise InputError(path, "a conversation must be a list of turns", record=f"conversation {number}")
    keys = {(turn.get("dataset"), turn.get("conversation_id")) for turn in conversation
            if isinstance(turn, dict) and "conversation_id" in turn}
    if len(keys) != 1:
        found = "none" if not keys else ", ".join(map(str, sorted(keys, key=str)))
        raise InputError(path, f"expected one (dataset, conversation_id) over its scored turns, found {found}",
                         record=f"conversation {number}", field="conversation_id")
    [(dataset, conversation_id)] = keys
    if not isinstance(dataset, str) or not isinstance(conversation_id, int):
        raise InputError(path, "dataset must be a string and conversation_id an integer",
                         record=f"conversation {number}", field="dataset")
    return dataset, conversation_id


def split_halves(conversations: Any, path: Path = Path("<full file>")) -> tuple[list[Conversation],
                                                                                 list[Conversation]]:
    """(development half, held-out half) of the full file's conversations, by the rule in the module docstring."""
    if not isinstance(conversations, list):
        raise InputError(path, "expected a JSON list of conversations")
    keyed = sorted(((_key(path, number, c), c) for number, c in enumerate(conversations, 1)), key=lambda kc: kc[0])
    seen: set[tuple[str, int]] = set()
    dev: list[Conversation] = []
    heldout: list[Conversation] = []
    position: dict[str, int] = {}
    for key, conversation in keyed:
        if key in seen:
            raise InputError(path, f"conversation_id {key[1]} of {key[0]} appears in two conversations")
        seen.add(key)
        rank = position.get(key[0], 0)
        position[key[0]] = rank + 1
        (dev if rank % 2 == 0 else heldout).append(conversation)
    return dev, heldout


def half_bytes(part: list[Conversation]) -> bytes:
    """A half as written: ``json.dumps(part, indent=2)`` in UTF-8 (ASCII escapes, as ``json`` does by default)."""
    return json.dumps(part, indent=2).encode("utf-8")


def halves_from_file(path: Path) -> tuple[bytes, bytes]:
    """The bytes of (development half, held-out half) cut from the full file at ``path``."""
    try:
        conversations = json.loads(Path(path).read_bytes())
    except (OSError, ValueError) as exc:
        raise InputError(path, f"cannot read the full re-annotation file ({exc})") from None
    dev, heldout = split_halves(conversations, Path(path))
    return half_bytes(dev), half_bytes(heldout)

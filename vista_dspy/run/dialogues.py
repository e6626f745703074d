"""A response, the dialogue before it and its passages as one VISTA dialogue: the reading that ``VistaMetric`` (from
a DSPy example and prediction), ``VistaReward`` (from a trainer's prompt, completion and columns) and the platforms'
scorers (through the reward) share.

The response is the dialogue's last turn, judged against its passages (numbered for the judge), or against the
knowledge store alone when there are none. The earlier assistant turns are common ground (VISTA's "N/A" grounding:
decomposed, their claims stored unjudged), so a response may build on what was said before; system messages and the
given background facts seed the knowledge store. The dialogue's id is a hash of all it holds, so the same response to
the same dialogue and passages is the same dialogue.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Sequence
from typing import Any

import dspy

from ..schema import Dialogue, Grounding, Turn

# A history's roles: system messages seed the knowledge store (as a chat log's do); tool messages are no turns.
ROLES = {"user": "user", "apprentice": "user", "human": "user", "assistant": "assistant", "wizard": "assistant",
         "bot": "assistant", "system": "system", "developer": "system", "tool": None, "function": None}


def response_dialogue(history: Any, response: str, passages: Any, background: Sequence[Any] = (), *,
                      response_field: str = "response") -> Dialogue:
    """The dialogue that judges ``response``.

    Args:
        history: the dialogue before it: a text of ``role: text`` lines, a list of ``{"role", "content"}`` messages
            or of (role, text) pairs, a ``dspy.History``, or None.
        response: the judged text.
        passages: the reference: a text, or a list of retrieved passages (blank ones dropped); None or none: the
            response is judged against the knowledge store alone.
        background: facts that seed the knowledge store, before the history's system messages.
        response_field: in a ``dspy.History``, the field of a message that holds the assistant's earlier answer (its
            other fields are what the user gave).
    """
    turns, said_as_system = history_turns(history, response_field)
    background = [*(str(fact).strip() for fact in background if str(fact).strip()), *said_as_system]
    texts = [str(p) for p in (passages if isinstance(passages, (list, tuple)) else [passages or ""])]
    texts = [p for p in texts if p.strip()]
    grounding = Grounding.from_passages(texts) if texts else Grounding.knowledge_only()
    turns.append(Turn(role="assistant", text=response, grounding=grounding))
    said = [*(f"system:{fact}" for fact in background), *(f"{t.role}:{t.text}" for t in turns)]
    key = hashlib.sha256("\x1f".join(said).encode() + b"\x1e" + (grounding.document or "").encode()).hexdigest()
    return Dialogue(id=f"turn-{key[:16]}", turns=turns, background=background)


def history_turns(history: Any, response_field: str = "response") -> tuple[list[Turn], list[str]]:
    """Earlier turns from a history in any of the accepted shapes (assistant turns become common ground), and the
    texts of its system messages (background facts)."""
    pairs: list[tuple[str, str]] = []
    if history is None:
        return [], []
    if isinstance(history, dspy.History):
        for message in history.messages:
            if "role" in message:
                pairs.append((str(message["role"]), str(message.get("content", ""))))
                continue
            said = "\n".join(str(v) for k, v in message.items() if k != response_field and v)
            if said:
                pairs.append(("user", said))
            if message.get(response_field):
                pairs.append(("assistant", str(message[response_field])))
    elif isinstance(history, str):
        for line in history.splitlines():
            role, sep, text = line.partition(":")
            if sep and role.strip().lower() in ROLES:
                pairs.append((role.strip().lower(), text.strip()))
            elif line.strip():
                if pairs:
                    pairs[-1] = (pairs[-1][0], f"{pairs[-1][1]}\n{line.strip()}")
                else:
                    pairs.append(("user", line.strip()))
    elif isinstance(history, Sequence):
        for item in history:
            if isinstance(item, dict):
                pairs.append((str(item.get("role", "user")), str(item.get("content", item.get("text", "")))))
            else:
                role, text = item
                pairs.append((str(role), str(text)))
    else:
        raise ValueError(f"a history must be text, messages or a dspy.History, not {type(history).__name__}")
    turns, background = _turns(tuple(pairs))
    return list(turns), list(background)


@functools.lru_cache(maxsize=1024)
def _turns(pairs: tuple[tuple[str, str], ...]) -> tuple[tuple[Turn, ...], tuple[str, ...]]:
    """The turns and background facts of a history's (role, text) pairs: built once for the completions of one
    prompt (the turns are shared between their dialogues; nothing changes a turn once built)."""
    turns, background = [], []
    for role, text in pairs:
        kind = ROLES.get(role.strip().lower(), "user")
        if kind is None or not text.strip():
            continue
        if kind == "system":
            background.append(text.strip())
        else:
            turns.append(Turn(role="assistant", text=text, grounding=Grounding.background()) if kind == "assistant"
                         else Turn(role="user", text=text))
    return tuple(turns), tuple(background)

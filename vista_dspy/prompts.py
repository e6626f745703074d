"""How records become prompt fields: a turn, the history, the marked dialogue, the knowledge store; the cleaning
of a claim list; and the regrouping of per-item demos for prompts that ask about several claims or turns at once."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import dspy

from .schema import Turn
from .signatures import EMPTY_KNOWLEDGE, NO_HISTORY, TURN_MARK, TurnClaims, number_claims

# What Decompose sees in place of the history under the -history ablation.
HISTORY_OMITTED = "(history not given)"


def render_line(role: str, text: str) -> str:
    """One turn as the prompts show it."""
    return f"{role}: {text}"


def render_history(turns: Sequence[Turn]) -> str:
    if not turns:
        return NO_HISTORY
    return "\n".join(render_line(turn.role, turn.text) for turn in turns)


def render_marked(turns: Sequence[Turn], marked: Sequence[int]) -> str:
    """The dialogue up to its last ``marked`` turn, the marked turns numbered [turn 1], [turn 2], ... (for one
    Decompose call over a whole dialogue)."""
    numbers = {index: n for n, index in enumerate(marked, start=1)}
    return "\n".join((TURN_MARK.format(n=numbers[i]) if i in numbers else "") + render_line(turn.role, turn.text)
                     for i, turn in enumerate(turns[: max(marked) + 1]))


def render_knowledge(knowledge: Sequence[str]) -> str:
    if not knowledge:
        return EMPTY_KNOWLEDGE
    return "\n".join(f"{number}. {claim}" for number, claim in enumerate(knowledge, start=1))


def clean_claims(claims: Sequence[Any]) -> tuple[list[str], int]:
    """Strip, drop empty strings, and remove repeated claims (small models loop). Returns (claims, removed)."""
    seen: set[str] = set()
    kept: list[str] = []
    removed = 0
    for claim in claims:
        text = " ".join(str(claim).split())
        if not text:
            continue
        key = re.sub(r"[^\w ]", "", text.lower())
        if key in seen:
            removed += 1
            continue
        seen.add(key)
        kept.append(text)
    return kept, removed


def batch_demos(demos: Sequence[dspy.Example], item: type) -> list[dspy.Example]:
    """Per-claim demos regrouped for a batched prompt: demos that share their sources become one numbered list
    (the answer fields of ``item`` are taken from each demo)."""
    groups: dict[tuple, list[dspy.Example]] = {}
    for demo in demos:
        groups.setdefault(tuple(demo.get(k) for k in ("reference", "knowledge", "history")), []).append(demo)
    answer_fields = [name for name in item.model_fields if name != "claim"]
    converted = []
    for (reference, knowledge, history), group in groups.items():
        fields: dict[str, Any] = {"reference": reference, "knowledge": knowledge}
        if history is not None:
            fields["history"] = history
        fields["claims"] = number_claims([d["claim"] for d in group])
        fields["verdicts"] = [item(claim=i, **{f: d[f] for f in answer_fields}) for i, d in enumerate(group, 1)]
        converted.append(dspy.Example(**fields))
    return converted


def dialogue_demos(demos: Sequence[dspy.Example]) -> list[dspy.Example]:
    """Per-turn Decompose demos as one-call-per-dialogue demos: each demo's history and turn become a dialogue
    with one marked turn."""
    converted = []
    for demo in demos:
        history = demo.get("history")
        lines = [] if history in (None, NO_HISTORY) else [history]
        fields = {"dialogue": "\n".join([*lines, TURN_MARK.format(n=1) + render_line("assistant", demo["turn"])]),
                  "turns": [TurnClaims(turn=1, claims=list(demo["claims"] or []))]}
        if demo.get("reasoning") is not None:
            fields["reasoning"] = demo["reasoning"]
        converted.append(dspy.Example(**fields))
    return converted

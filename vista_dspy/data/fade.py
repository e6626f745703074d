"""FADE: knowledge-graph grounded dialogue turns with token-level hallucination tags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..schema import Dialogue, Grounding, Turn
from .errors import InputError
from .loading import LoadReport, finish, gold
from .readers import CSV, as_int, literal, read_table, under
from .registry import register

FADE_COLUMNS = ("history", "speaker", "knowledge_base", "dialogue_id", "corrupted_response", "hallucination_tags")


def roles_backwards(history: list[str]) -> list[Turn]:
    """History turns whose last one is the user's, alternating backwards (the judged turn follows them)."""
    count = len(history)
    return [Turn(role="user" if (count - 1 - i) % 2 == 0 else "assistant", text=text,
                 grounding=None if (count - 1 - i) % 2 == 0 else Grounding.background())
            for i, text in enumerate(history)]


@register("fade")
def load_fade(path: str | Path, data: Any = None, *, n: int | None = None, seed: int = 0) -> list[Dialogue]:
    """FADE ``human_verified_500.csv``: assistant rows; history turns before ``corrupted_response``, judged against
    ``knowledge_base['render']``; earlier assistant turns are background (not judged)."""
    path = under(Path(path), "data/human_verified_500.csv", "human_verified_500.csv")
    report = LoadReport("fade", files=[path.name])
    header, rows = read_table(path, CSV, FADE_COLUMNS, report)
    index_column = header[0] if header[0] in ("", "Unnamed: 0") else None
    dialogues = []
    for row in rows:
        v = row.values
        speaker = v["speaker"].strip().lower()
        if speaker == "user":
            report.skip("user turn", row.where)
            continue
        if speaker != "assistant":
            raise InputError(path, f"expected 'user' or 'assistant', got {v['speaker']!r}", record=row.where,
                             field="speaker")
        history = literal(path, row, "history", list)
        if not all(isinstance(t, str) for t in history):
            raise InputError(path, "expected a list of strings", record=row.where, field="history")
        tags = literal(path, row, "hallucination_tags", list)
        if not tags or not all(isinstance(t, str) for t in tags):
            raise InputError(path, "expected a non-empty list of tag strings", record=row.where,
                             field="hallucination_tags")
        knowledge = literal(path, row, "knowledge_base", dict) if v["knowledge_base"].strip() else {}
        render = knowledge.get("render")
        if not isinstance(render, str) or not render.strip():
            report.skip("no knowledge-graph render", row.where)
            continue
        if not v["corrupted_response"].strip():
            report.skip("empty response", row.where)
            continue
        corrupt_history = (literal(path, row, "corrupt_history", list)
                           if v.get("corrupt_history", "").strip() not in ("", "nan") else None)
        turns = roles_backwards(history)
        turns.append(Turn(role="assistant", text=v["corrupted_response"], grounding=Grounding.from_document(render),
                          gold=gold(any(tag != "O" for tag in tags))))
        source: dict[str, Any] = {
            "dataset": "fade", "file": path.name, "row": row.number, "line": row.line,
            "dialogue_id": as_int(v["dialogue_id"]), "original_response": v.get("response"),
            "kg_paths": knowledge.get("paths"), "hallucinated_tokens": sum(tag != "O" for tag in tags),
            # True when the perturbed history differs from the history beyond letter case.
            "history_corrupted": corrupt_history is not None
            and [t.lower() for t in corrupt_history] != [t.lower() for t in history],
        }
        if index_column is not None:
            source["source_index"] = as_int(v[index_column])
        for column in ("corrupt_entity", "original_entity", "corrupt_relation"):
            if v.get(column, "").strip() not in ("", "nan"):
                source[column] = literal(path, row, column, list)
        dialogues.append(Dialogue(id=f"fade-{row.number}", turns=turns, source=source))
    return finish(report, path, dialogues, n, seed)

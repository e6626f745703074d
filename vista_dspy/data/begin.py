"""BEGIN (Dziri et al.): knowledge-grounded responses labelled for attribution to their knowledge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..schema import Dialogue, Grounding, Turn
from .errors import InputError
from .loading import LoadReport, finish, gold
from .readers import TSV, read_table, under
from .registry import register

BEGIN_COLUMNS = ("model_name", "data_source", "knowledge", "message", "response", "begin_label")
BEGIN_LABELS = {"fully attributable": False, "not fully attributable": True}
BEGIN_SKIPPED = {"generic": "Generic label"}


@register("begin")
def load_begin(path: str | Path, data: Any = None, *, n: int | None = None, seed: int = 0) -> list[Dialogue]:
    """BEGIN v2 TSV (``wow/begin_test_wow.tsv`` when ``path`` is a directory): message -> user, response ->
    assistant judged against ``knowledge``; an empty message (first turn of the conversation) gives no user turn."""
    path = under(Path(path), "wow/begin_test_wow.tsv")
    report = LoadReport("begin", files=[path.name])
    _, rows = read_table(path, TSV, BEGIN_COLUMNS, report)
    tag = path.stem.removeprefix("begin_")
    dialogues = []
    for row in rows:
        v = row.values
        label = v["begin_label"].strip().lower()
        if label in BEGIN_SKIPPED:
            report.skip(BEGIN_SKIPPED[label], row.where)
            continue
        if label not in BEGIN_LABELS:
            raise InputError(path, f"unknown label {v['begin_label']!r}; expected 'Fully attributable', 'Not fully "
                                   "attributable' or 'Generic'", record=row.where, field="begin_label")
        for column in ("knowledge", "response"):
            if not v[column].strip():
                raise InputError(path, "empty", record=row.where, field=column)
        turns = []
        if v["message"].strip():
            turns.append(Turn(role="user", text=v["message"]))
        else:
            report.notes["no previous turn (empty message)"] += 1
        turns.append(Turn(role="assistant", text=v["response"], grounding=Grounding.from_document(v["knowledge"]),
                          gold=gold(BEGIN_LABELS[label])))
        dialogues.append(Dialogue(id=f"begin-{tag}-{row.number}", turns=turns, source={
            "dataset": "begin", "file": path.name, "row": row.number, "line": row.line,
            "model": v["model_name"], "data_source": v["data_source"], "original_label": v["begin_label"].strip(),
        }))
    return finish(report, path, dialogues, n, seed)

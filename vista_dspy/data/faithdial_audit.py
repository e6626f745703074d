"""The FaithDial data audit: BEGIN-labelled responses of knowledge-grounded corpora (not the FaithDial benchmark)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..schema import Dialogue, Grounding, Turn, TurnGold
from .errors import InputError
from .loading import LoadReport, finish
from .readers import CSV, read_table
from .registry import register

AUDIT_GOLD_COLUMNS = ("evidence", "history", "response", "BEGIN")
AUDIT_MODEL_COLUMNS = ("knowledge", "history", "begin_label")
AUDIT_TYPOS = {"entailmentt": "entailment", "hallucinated": "hallucination"}
AUDIT_TAGS = {"entailment", "hallucination", "partial hallucination", "generic", "uncooperative"}
AUDIT_CORPORA = {"topicalchat": "topical"}


def audit_label(raw: str) -> tuple[str | None, str | None]:
    """(gold label, None) or (None, reason to skip) for a BEGIN tag set such as 'entailment,uncooperative'."""
    tags = {AUDIT_TYPOS.get(t, t) for t in (" ".join(p.split()) for p in re.split(r"[,.;]", raw.lower())) if t}
    if not tags:
        return None, "no label"
    unknown = tags - AUDIT_TAGS
    if unknown:
        return None, f"unknown label {raw.strip()!r}"
    if tags & {"hallucination", "partial hallucination"}:
        return "hallucinated", None
    if "entailment" in tags or tags == {"uncooperative"}:
        return "faithful", None
    if tags == {"generic"}:
        return None, "Generic label"
    return None, f"unmapped label combination {raw.strip()!r}"


def _audit_files(path: Path) -> tuple[Path, list[Path]]:
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.is_file():
        return path.parent.parent, [path]
    root = path / "data-audit" if (path / "data-audit").is_dir() else path
    files = sorted(root.glob("gold/*.csv")) + sorted(root.glob("*/*_processed_*.csv"))
    if not files:
        raise InputError(path, "no data-audit CSV files (gold/*.csv, <model>/*_processed_*.csv) in this directory")
    return root, files


@register("faithdial-audit")
def load_faithdial_audit(path: str | Path, data: Any = None, *, n: int | None = None,
                         seed: int = 0) -> list[Dialogue]:
    """FaithDial's ``data-audit`` CSVs (a directory: all of them; or one CSV): previous utterance -> user,
    response (human or model) -> assistant judged against the evidence/knowledge snippet."""
    root, files = _audit_files(Path(path))
    report = LoadReport("faithdial-audit", files=[])
    dialogues = []
    for file in files:
        name = file.relative_to(root).as_posix() if file.is_relative_to(root) else file.name
        report.files.append(name)
        header, rows = read_table(file, CSV, ("history",), report)
        if "BEGIN" in header:
            required, extra = AUDIT_GOLD_COLUMNS, ["response"]
            knowledge_col, label_col, vrm_col = "evidence", "BEGIN", "VRM"
            responder, corpus = "human", file.stem
        else:
            required = AUDIT_MODEL_COLUMNS
            extra = [c for c in header if c not in AUDIT_MODEL_COLUMNS + ("vrm_label",)]
            knowledge_col, label_col, vrm_col = "knowledge", "begin_label", "vrm_label"
            responder, corpus = (extra[0] if extra else ""), file.stem.rpartition("_processed_")[2] or file.stem
        missing = [c for c in required if c not in header]
        if missing or len(extra) != 1:
            raise InputError(file, "expected the columns evidence, history, response, BEGIN, VRM (gold) or "
                                   f"knowledge, history, <model>, begin_label, vrm_label; found {', '.join(header)}",
                             record="header", field=missing[0] if missing else None)
        response_col = extra[0]
        corpus = AUDIT_CORPORA.get(corpus, corpus)
        subset = file.parent.name.lower()
        for row in rows:
            v = row.values
            where = f"{name} {row.where}"
            if not any(value.strip() for value in v.values()):
                report.skip("empty row", where)
                continue
            label, reason = audit_label(v[label_col])
            if reason is not None:
                report.skip(reason, where)
                continue
            if not v[knowledge_col].strip():
                report.skip("empty knowledge", where)
                continue
            if not v[response_col].strip():
                report.skip("empty response", where)
                continue
            turns = []
            if v["history"].strip():
                turns.append(Turn(role="user", text=v["history"]))
            else:
                report.notes["no previous turn (empty history)"] += 1
            turns.append(Turn(role="assistant", text=v[response_col],
                              grounding=Grounding.from_document(v[knowledge_col]), gold=TurnGold(label=label)))
            dialogues.append(Dialogue(id=f"faithdial-audit-{subset}-{corpus}-{row.number}", turns=turns, source={
                "dataset": "faithdial-audit", "file": name, "row": row.number, "line": row.line,
                "responder": responder, "corpus": corpus, "original_label": v[label_col].strip(),
                "vrm": v.get(vrm_col, "").strip(),
            }))
    return finish(report, Path(path), dialogues, n, seed)

"""Real-model probes as data that outlive the machine: the judged turns of a probe (``judged_turns.TurnRows``) in a
small JSONL file, read back for fitting and gating with no LM and no dataset at hand.

A record holds no text of the dataset: a turn is named by its dialogue id and turn index, and carries its gold label
and the half of the file it belongs to; a claim carries the model's own claim text (a sentence that coverage added
is the turn's own text, so it is left out, as is every unit of a program that judges the turn's sentences), its evidence cues, the judge's label and label probabilities, and the
annotators' judgement it was matched to. ``probe.json`` beside it says how the probe was made (command, commit,
program hash, model, date, the data file's sha256, wall time).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..data.records import read_record_text, record_path
from .judged_turns import ClaimRow, TurnRows

RECORD_VERSION = 1
TURNS = "turns.jsonl"
META = "probe.json"
# The fields of a claim record; ``claim`` is None for a sentence added by coverage (the dataset's own text).
CLAIM_FIELDS = ("claim", "added_by", "cues", "verify", "categorize", "categorize_all", "judge", "gold")


def _claim_record(row: ClaimRow, sentences: bool = False) -> dict[str, Any]:
    added = row.cues.get("coverage", 0.0) == 1.0
    return {"claim": None if added or sentences else row.claim, "added_by": "coverage" if added else None, "cues": row.cues,
            "verify": row.verify, "categorize": row.categorize, "categorize_all": row.categorize_all,
            "judge": row.judge, "gold": row.gold}


def write_probe(directory: Path, turns: Sequence[TurnRows], half_of: Mapping[str, str], meta: dict[str, Any]) -> Path:
    """Write ``turns.jsonl`` (a line per judged turn, in order) and ``probe.json`` into ``directory``. A probe of a
    program judging the turn's sentences (``meta["options"]["units"]``) keeps no claim text: each is the dataset's
    own (``grounding.sentence_units`` of the turn gives them back, in order)."""
    sentences = (meta.get("options") or {}).get("units") == "sentences"
    directory.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"dialogue_id": t.dialogue_id, "turn_index": t.turn_index, "half": half_of[t.dialogue_id],
                         "gold_label": t.gold_label, "failed": t.failed, "empty": t.empty,
                         "decompose_calls": t.decompose_calls,
                         "claims": [_claim_record(r, sentences) for r in t.rows]}, sort_keys=True) for t in turns]
    (directory / TURNS).write_text("\n".join(lines) + "\n")
    summary = {"turns": len(turns), "claims": sum(len(t.rows) for t in turns),
               "claims_with_judgement": sum(r.gold is not None for t in turns for r in t.rows),
               "added_by_coverage": sum(r.cues.get("coverage", 0.0) == 1.0 for t in turns for r in t.rows),
               "turns_without_claim": sum(not t.rows and not t.failed for t in turns),
               "turns_with_content_but_no_claim": sum(t.empty for t in turns)}
    (directory / META).write_text(json.dumps({"record_version": RECORD_VERSION, **meta, "counts": summary},
                                             indent=2, sort_keys=True) + "\n")
    return directory


class ProbeError(ValueError):
    """A probe record that cannot be read (names the file and the line)."""


def read_probe(directory: Path) -> tuple[list[TurnRows], dict[str, str], dict[str, Any]]:
    """(turns, {dialogue id: half}, the probe's meta) of a recorded probe."""
    path = record_path(Path(directory) / TURNS)  # turns.jsonl, or turns.jsonl.gz
    if not path.is_file():
        raise ProbeError(f"{directory}: no {TURNS}: not a recorded probe (benchmarks/record_probe.py writes one)")
    meta_path = Path(directory) / META
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    if meta.get("record_version", RECORD_VERSION) != RECORD_VERSION:
        raise ProbeError(f"{meta_path}: record_version {meta.get('record_version')} is not {RECORD_VERSION}")
    turns: list[TurnRows] = []
    half_of: dict[str, str] = {}
    for number, line in enumerate(read_record_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            rows = [ClaimRow(c["claim"] or "", dict(c["cues"]), c["verify"], c["categorize"], c["judge"], c["gold"],
                             c["categorize_all"]) for c in record["claims"]]
            turns.append(TurnRows(record["dialogue_id"], int(record["turn_index"]), record["gold_label"], rows,
                                  failed=bool(record["failed"]), empty=bool(record.get("empty", False)),
                                  decompose_calls=float(record["decompose_calls"])))
            half_of[record["dialogue_id"]] = record["half"]
        except (ValueError, KeyError, TypeError) as exc:
            raise ProbeError(f"{path}: line {number}: {type(exc).__name__}: {exc}") from None
    return turns, half_of, meta

"""RGM contradictions: dialogues whose last utterance may contradict the speaker's earlier turns."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..schema import Dialogue, Grounding, Turn
from .errors import InputError
from .loading import LoadReport, finish, gold
from .readers import field_value, read_objects
from .registry import register

PLACEHOLDER = re.compile(r"^\[\[[^\]]+:\d+\]\]$")


def _rgm_files(path: Path) -> tuple[Path, list[Path]]:
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.is_file():
        return path.parent, [path]
    root = path / "dataset" if (path / "dataset").is_dir() else path
    files = sorted(root.rglob("*.jsonl"))
    if not files:
        raise InputError(path, "no .jsonl files (expected dataset/**/*.jsonl built from contexts + responses)")
    return root, files


@register("rgm-contradictions")
def load_rgm_contradictions(path: str | Path, data: Any = None, *, n: int | None = None,
                            seed: int = 0) -> list[Dialogue]:
    """RGM contradiction test dialogues: the last speaker is the assistant; only its last utterance is judged."""
    root, files = _rgm_files(Path(path))
    report = LoadReport("rgm-contradictions", files=[f.relative_to(root).as_posix() for f in files])
    dialogues = []
    for file in files:
        name = file.relative_to(root).as_posix()
        for number, record in read_objects(file):
            where = f"line {number}"
            utterances = field_value(file, record, "utterances", where, list)
            speakers = field_value(file, record, "speakers", where, list)
            count = field_value(file, record, "contradictory_label_count", where, int)
            if not utterances or not all(isinstance(u, str) for u in utterances):
                raise InputError(file, "expected a non-empty list of strings", record=where, field="utterances")
            if len(speakers) != len(utterances):
                raise InputError(file, f"{len(speakers)} speakers for {len(utterances)} utterances", record=where,
                                 field="speakers")
            if len(set(map(str, speakers))) > 2:
                raise InputError(file, f"more than two speakers: {sorted(set(map(str, speakers)))}", record=where,
                                 field="speakers")
            if PLACEHOLDER.match(utterances[-1].strip()):
                raise InputError(file, f"unsubstituted response placeholder {utterances[-1]!r}; load the built "
                                       "dataset/ files, not contexts/", record=where, field="utterances")
            if not 0 <= count <= 3:
                raise InputError(file, f"expected 0-3 annotators, got {count}", record=where,
                                 field="contradictory_label_count")
            if count == 1:
                report.skip("1 of 3 annotators (ambiguous)", f"{name} {where}")
                continue
            contradictory = count >= 2
            last = len(utterances) - 1
            turns = []
            for i, (speaker, text) in enumerate(zip(speakers, utterances)):
                if speaker != speakers[-1]:
                    turns.append(Turn(role="user", text=text))
                elif i < last:
                    turns.append(Turn(role="assistant", text=text, grounding=Grounding.background()))
                else:
                    turns.append(Turn(role="assistant", text=text, grounding=Grounding.knowledge_only(),
                                      gold=gold(contradictory)))
            dialogues.append(Dialogue(id=f"rgm-{file.stem}-{number}", turns=turns, source={
                "dataset": "rgm-contradictions", "file": name, "line": number, "rgm": record.get("rgm_name"),
                "domain": file.parent.name, "contradictory": contradictory, "contradictory_label_count": count,
                "annotation_target_pair": record.get("annotation_target_pair"),
            }))
    return finish(report, Path(path), dialogues, n, seed, side=lambda d: d.source["contradictory"])

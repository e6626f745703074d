"""Input loaders: one module per format or benchmark, registered here by name, each returning ``Dialogue`` records
(the shared file readers are in ``readers``, sampling and load reports in ``loading``, where the datasets live in
``location``). Every loader reports bad input as an ``InputError`` that names the file, the record and the field.
"""

from __future__ import annotations

from pathlib import Path

from ..schema import Dialogue
from .errors import InputError
from .loading import PARTS, part_of, sample, split
from .location import data_dir
from .readers import read_json
from .registry import LOADERS, Loader, register


def load_dialogues(path: str | Path, format: str | None = None) -> list[Dialogue]:
    """Load dialogues from ``path``; ``format`` names a registered loader (VISTA's JSON ``vista``, ``dialogues``
    records, ``chat`` logs, ``hf`` for a Hugging Face dataset on disk, or a benchmark: begin, fade,
    faithdial-audit, coconot, rgm-contradictions, ais), or None to detect it (a directory, parquet or arrow file is
    a dataset; JSON and JSONL are told apart by their first conversation)."""
    from . import benchmarks, chat, hf, vista  # noqa: F401 (registers the loaders)

    if format in benchmarks.BENCHMARKS:
        return benchmarks.load_benchmark(format, path)
    if format is None and hf.is_dataset(Path(path)):
        format = "hf"
    # Whole-file JSON is parsed once here and handed to the loader; JSONL (and a dataset) is read by its loader.
    data = None if Path(path).suffix == ".jsonl" or format == "hf" else read_json(path)
    if format is None:
        format = vista.detect_format(path, data)
    if format not in LOADERS:
        raise InputError(path, f"unknown input format {format!r}; known: {', '.join(sorted(LOADERS))}")
    dialogues = LOADERS[format](path, data=data)
    if not dialogues:
        raise InputError(path, "no dialogues in the file")
    seen: set[str] = set()
    for dialogue in dialogues:
        if dialogue.id in seen:
            raise InputError(path, f"dialogue id {dialogue.id!r} appears twice; ids must be unique")
        seen.add(dialogue.id)
    return dialogues


__all__ = ["LOADERS", "PARTS", "InputError", "Loader", "data_dir", "load_dialogues", "part_of", "register", "sample",
           "split"]

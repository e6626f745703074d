"""Conversations in a Hugging Face dataset on disk, read offline through ``datasets``: a directory written by
``save_to_disk``, or parquet / JSON / arrow data files (one file, or a directory of them). A row is one conversation
in any of the shapes the file readers take: the chat shape (``messages``, see ``chat``), a ``Dialogue`` record
(``turns`` of ``{role, text, ...}``) or VISTA's turns (``turns`` of ``{role, utterance, retrieved_document?}``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from ..schema import Dialogue
from .chat import dialogue_from_chat, is_chat_record
from .errors import InputError
from .readers import dialogue_from_dict
from .registry import register
from .vista import dialogue_from_vista

BUILDERS = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".arrow": "arrow"}
# What only a dataset can be (a directory, or a columnar file); JSON files are datasets only with --format hf.
DATASET_SUFFIXES = (".parquet", ".arrow")
SHAPES = ("expected a conversation: messages of {role, content} (chat), or turns of {role, text} (Dialogue "
          "records) or of {role, utterance} (VISTA)")


def is_dataset(path: Path) -> bool:
    return path.is_dir() or path.suffix in DATASET_SUFFIXES


@register("hf")
def load_dataset_rows(path: str | Path, data: Any = None) -> list[Dialogue]:
    path = Path(path)
    return [dialogue_from_row(path, f"row {i}", row, i) for i, row in enumerate(read_rows(path))]


def dialogue_from_row(path: Path, where: str, row: Any, index: int) -> Dialogue:
    if is_chat_record(row):
        return dialogue_from_chat(path, where, row, index)
    turns = row.get("turns") if isinstance(row, dict) else None
    if not (isinstance(turns, list) and turns and isinstance(turns[0], dict)):
        raise InputError(path, SHAPES, record=where)
    if "utterance" in turns[0]:
        return dialogue_from_vista(path, where, [without_none(turn) for turn in turns], index)
    return dialogue_from_dict(path, where, without_none(row))


def without_none(value: Any) -> Any:
    """``value`` without the None entries of its objects: a table gives every row every column, absent ones None."""
    if isinstance(value, dict):
        return {k: without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_none(item) for item in value]
    return value


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Every row of the dataset at ``path`` as a dict, read without network access and without leaving a cache."""
    # Before the first import of datasets: nothing is looked up on the Hub.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import datasets

    if not path.exists():
        raise InputError(path, "no such file or directory")
    try:
        if (path / "dataset_dict.json").is_file():
            splits = datasets.load_from_disk(str(path))
            if len(splits) != 1:
                raise InputError(path, f"a dataset with {len(splits)} splits ({', '.join(splits)}): give one of "
                                       f"them, e.g. {path / next(iter(splits))}")
            return next(iter(splits.values())).to_list()
        if (path / "state.json").is_file():
            return datasets.load_from_disk(str(path)).to_list()
        builder, files = _data_files(path)
        bars = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()  # "Generating train split" for a file read in a second
        try:
            with tempfile.TemporaryDirectory(prefix="vista-datasets-") as cache:
                return datasets.load_dataset(builder, data_files=files, split="train", cache_dir=cache,
                                             keep_in_memory=True).to_list()
        finally:
            if bars:
                datasets.enable_progress_bars()
    except InputError:
        raise
    except Exception as exc:  # datasets and pyarrow have many error types for an unreadable file
        raise InputError(path, f"cannot be read with datasets: {type(exc).__name__}: {exc}") from None


def _data_files(path: Path) -> tuple[str, list[str]]:
    """The ``datasets`` builder and the data files of a file or a directory of files of one kind."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in BUILDERS)
    kinds = {BUILDERS.get(p.suffix) for p in files}
    if not files or None in kinds:
        raise InputError(path, f"not a dataset: expected a save_to_disk directory or {', '.join(BUILDERS)} files")
    if len(kinds) > 1:
        raise InputError(path, f"data files of several kinds ({', '.join(sorted(kinds))}): keep one")
    return kinds.pop(), [str(p) for p in files]

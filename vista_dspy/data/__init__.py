"""Input loaders: one per format or benchmark, registered by name, each returning ``Dialogue`` records.

Every loader reports bad input as an ``InputError`` that names the file, the record and the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..schema import MAX_TEXT, Dialogue


class InputError(ValueError):
    """Malformed input: says where (file, record, field) and what is wrong."""

    def __init__(self, path: str | Path, message: str, *, record: str | None = None, field: str | None = None):
        self.path, self.record, self.field = str(path), record, field
        where = [self.path]
        if record is not None:
            where.append(record)
        if field is not None:
            where.append(f"field '{field}'")
        super().__init__(f"{': '.join(where)}: {message}")


def read_text(path: str | Path) -> str:
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file")
    if not path.is_file():
        raise InputError(path, "not a file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not valid UTF-8 (byte {exc.start}): {exc.reason}") from None


def read_json(path: str | Path) -> Any:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None


def parse_jsonl(path: str | Path, text: str) -> list[tuple[int, Any]]:
    """(line number, parsed value) for each non-blank line of a JSON Lines text; bad JSON names its line."""
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise InputError(path, f"invalid JSON at column {exc.colno}: {exc.msg}", record=f"line {number}") from None
    return records


def check_length(path: str | Path, record: str, field: str, text: str) -> None:
    if len(text) > MAX_TEXT:
        raise InputError(path, f"{len(text)} characters; at most {MAX_TEXT} characters are accepted in one text "
                               "(far beyond any model's context: is the file broken?)", record=record, field=field)


def validation_message(error: ValidationError) -> tuple[str, str]:
    """(field path, message) of the first problem pydantic found."""
    first = error.errors()[0]
    location = ".".join(str(part) for part in first["loc"]) or "(record)"
    return location, first["msg"]


def dialogue_from_dict(path: str | Path, record: str, data: Any) -> Dialogue:
    if not isinstance(data, dict):
        raise InputError(path, f"expected a JSON object, got {type(data).__name__}", record=record)
    try:
        return Dialogue.model_validate(data)
    except ValidationError as exc:
        location, message = validation_message(exc)
        raise InputError(path, message, record=record, field=location) from None


# A loader takes the path and, for whole-file JSON formats, the already parsed content (or None).
Loader = Callable[..., list[Dialogue]]
LOADERS: dict[str, Loader] = {}


def register(name: str) -> Callable[[Loader], Loader]:
    def add(loader: Loader) -> Loader:
        LOADERS[name] = loader
        return loader

    return add


def load_dialogues(path: str | Path, format: str | None = None) -> list[Dialogue]:
    """Load dialogues from ``path``; ``format`` names a registered loader (VISTA's JSON ``vista``, ``dialogues``
    records, or a benchmark: begin, fade, faithdial-audit, coconot, rgm-contradictions, ais), or None to detect
    between the two JSON formats."""
    from . import benchmarks, vista  # registers the loaders

    if format in benchmarks.BENCHMARKS:
        return benchmarks.load_benchmark(format, path)
    # Whole-file JSON is parsed once here and handed to the loader; JSONL is read line by line by its loader.
    data = None if Path(path).suffix == ".jsonl" else read_json(path)
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

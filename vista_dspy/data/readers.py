"""Reading input files for the loaders: text, JSON, JSON Lines and CSV/TSV tables, with field checks that report
bad input as an ``InputError`` naming the file, the record (line or row) and the field."""

from __future__ import annotations

import ast
import csv
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from ..schema import MAX_TEXT, Dialogue
from .errors import InputError

if TYPE_CHECKING:
    from .loading import LoadReport

# A turn's gold label, as the annotated formats spell it.
LABELS = {"faithful", "hallucinated"}


def label_field(value: Any, path: Path, record: str, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or value.strip().lower() not in LABELS:
        raise InputError(path, f"expected 'faithful' or 'hallucinated', got {value!r}", record=record, field=field)
    return value.strip().lower()


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


def first_jsonl_record(path: str | Path) -> Any:
    """The first non-blank line of a JSON Lines file, parsed; None when there is none or it does not parse (the
    loader then reports the problem)."""
    try:
        with open(path, encoding="utf-8") as lines:
            line = next((line for line in lines if line.strip()), None)
        return None if line is None else json.loads(line)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None


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


def existing_file(path: Path) -> Path:
    if not path.exists():
        raise InputError(path, "no such file")
    if not path.is_file():
        raise InputError(path, "not a file")
    return path


def under(path: Path, *candidates: str) -> Path:
    """``path`` itself when it is a file; else the first candidate under the directory that exists."""
    path = Path(path)
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.is_file():
        return path
    for candidate in candidates:
        if (path / candidate).is_file():
            return path / candidate
    raise InputError(path, f"directory without the expected file ({' or '.join(candidates)})")


def decode(path: Path, csv_format: dict[str, Any] | None = None) -> str:
    """The file as text; bad UTF-8 is reported with its line (and row, for tables with a header)."""
    raw = existing_file(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        prefix = raw[: exc.start].decode("utf-8", errors="replace")
        line = prefix.count("\n") + 1
        where = f"line {line}"
        if csv_format is not None:
            # Records before the bad byte (the "x" completes a record that starts exactly at it).
            row = sum(1 for _ in csv.reader(io.StringIO(prefix + "x", newline=""), **csv_format)) - 1
            where = f"row {row} (line {line})" if row >= 1 else f"header (line {line})"
        raise InputError(path, f"not valid UTF-8 (byte {exc.start}: {exc.reason})", record=where) from None
    return text.removeprefix("\ufeff")


@dataclass
class Row:
    number: int  # 1-based data row (the header is row 0)
    line: int  # file line where the row starts
    values: dict[str, str]

    @property
    def where(self) -> str:
        return f"row {self.number} (line {self.line})"


TSV = {"delimiter": "\t", "quoting": csv.QUOTE_NONE}
CSV: dict[str, Any] = {}


def read_table(path: Path, csv_format: dict[str, Any], required: Sequence[str], report: LoadReport) -> tuple[
        list[str], list[Row]]:
    """Header (names stripped of surrounding blanks) and rows of a CSV/TSV file; every row must have every field."""
    text = decode(path, csv_format)
    reader = csv.reader(io.StringIO(text, newline=""), **csv_format)
    try:
        header = next(reader, None)
        if header is None:
            raise InputError(path, "empty file (no header row)")
        header = [name.strip() for name in header]
        missing = [name for name in required if name not in header]
        if missing:
            raise InputError(path, f"missing column(s) {', '.join(map(repr, missing))}; found "
                                   f"{', '.join(map(repr, header))}", record="header", field=missing[0])
        rows: list[Row] = []
        line = reader.line_num + 1
        for fields in reader:
            row = Row(len(rows) + 1, line, {})
            line = reader.line_num + 1
            if not fields:  # csv yields [] for a blank line
                report.skip("blank line", row.where)
                rows.append(row)
                continue
            if len(fields) != len(header):
                kind = "tab-separated " if csv_format.get("delimiter") == "\t" else ""
                raise InputError(path, f"expected {len(header)} {kind}fields ({', '.join(header)}), found "
                                       f"{len(fields)}", record=row.where)
            row.values = dict(zip(header, fields))
            rows.append(row)
    except csv.Error as exc:
        raise InputError(path, f"unreadable CSV: {exc}", record=f"line {reader.line_num}") from None
    return header, [row for row in rows if row.values]


def read_objects(path: Path) -> list[tuple[int, dict[str, Any]]]:
    records = parse_jsonl(path, decode(path))
    for number, item in records:
        if not isinstance(item, dict):
            raise InputError(path, f"expected a JSON object, got {type(item).__name__}", record=f"line {number}")
    return records


def field_value(path: Path, record: dict[str, Any], name: str, where: str, kind: type | tuple[type, ...],
           *, optional: bool = False) -> Any:
    if name not in record or record[name] is None:
        if optional:
            return None
        raise InputError(path, "missing", record=where, field=name)
    value = record[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise InputError(path, f"expected {expected}, got {type(value).__name__} {value!r}", record=where,
                         field=name)
    return value


def literal(path: Path, row: Row, column: str, kind: type) -> Any:
    text = row.values[column]
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise InputError(path, f"not a Python literal: {text[:80]!r}", record=row.where, field=column) from None
    if not isinstance(value, kind):
        raise InputError(path, f"expected a {kind.__name__}, got {type(value).__name__}", record=row.where,
                         field=column)
    return value


def as_int(text: str) -> int | str:
    return int(text) if text.strip().isdigit() else text

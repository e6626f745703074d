"""Committed records (a probe's ``turns.jsonl``, a study's answers) as JSON Lines, stored plain or gzipped: a reader
asks for ``NAME.jsonl`` and gets ``NAME.jsonl.gz`` when only that is there, so a new record may arrive uncompressed
and be compressed later (``compress``) without any reader changing."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

GZ = ".gz"


def record_path(path: str | Path) -> Path:
    """``path`` itself when it exists, else its gzipped twin when that exists (else ``path``, for the error)."""
    path = Path(path)
    if path.exists() or path.suffix == GZ:
        return path
    packed = path.with_name(path.name + GZ)
    return packed if packed.exists() else path


def record_exists(path: str | Path) -> bool:
    return record_path(path).is_file()


def read_record_text(path: str | Path) -> str:
    """The text of a record, plain or gzipped (``record_path``)."""
    found = record_path(path)
    data = found.read_bytes()
    return (gzip.decompress(data) if found.suffix == GZ else data).decode("utf-8")


def read_jsonl_records(path: str | Path) -> list[Any]:
    """Every non-blank line of a JSON Lines record, parsed."""
    return [json.loads(line) for line in read_record_text(path).splitlines() if line.strip()]


def compress(path: str | Path) -> Path:
    """Gzip a plain record beside itself and remove the plain file. The bytes depend on the content alone (no name,
    a fixed time in the header), so compressing the same record twice commits the same file."""
    path = Path(path)
    packed = path.with_name(path.name + GZ)
    with open(packed, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=9) as out:
        out.write(path.read_bytes())
    path.unlink()
    return packed

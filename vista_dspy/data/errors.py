"""The one error every loader raises for bad input: it names the file, the record and the field (the CLI prints it
and exits 2)."""

from __future__ import annotations

from pathlib import Path


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

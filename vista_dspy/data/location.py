"""Where the benchmark datasets live on this machine (they are never copied into the repository)."""

from __future__ import annotations

import os
from pathlib import Path


def data_dir(base: str | Path | None = None) -> Path:
    """``$VISTA_DATA_DIR``, else ``../shared/data`` or ``data/`` under ``base`` (the working directory by default),
    the first that exists; ``base/data`` when none does."""
    base = Path(base) if base is not None else Path()
    beside = Path(os.path.normpath(base / ".." / "shared" / "data"))
    for candidate in (os.environ.get("VISTA_DATA_DIR"), beside, base / "data"):
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return base / "data"

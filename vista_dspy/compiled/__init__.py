"""Saved programs shipped with the package (``<name>.json``: demos and instructions; ``<name>.meta.json``: how it
was compiled), and how a program is found by name."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

SEED_PROGRAM = "seed"
# Judging options a compiled program may carry in its meta file ("options"): `vista evaluate` applies them unless a
# flag says otherwise.
RUNTIME_OPTIONS = ("use_context", "reasoning", "claim_calls", "explain_verified")


def compiled_dir() -> Path:
    return Path(str(resources.files("vista_dspy") / "compiled"))


def program_path(program: str | Path | None) -> tuple[str, Path]:
    """(name, file) of a saved program: a path to a JSON file, a name in this folder, or None for the seed."""
    name = str(program or SEED_PROGRAM)
    path = Path(name)
    if not path.is_file():
        shipped = compiled_dir() / f"{name}.json"
        if not shipped.is_file():
            raise FileNotFoundError(f"no saved program at {path} nor {shipped}")
        path = shipped
    return name, path


def program_for_model(model: str | None) -> str:
    """The program `vista evaluate --model M` uses by default: compiled/<M>.json when it exists, else the seed."""
    from ..models import program_name_for

    name = program_name_for(model)
    return name if (compiled_dir() / f"{name}.json").is_file() else SEED_PROGRAM


def saved_options(program: str | Path | None) -> dict[str, Any]:
    """The judging options saved with a program (its ``<name>.meta.json`` "options", ``RUNTIME_OPTIONS`` only);
    empty when it has none."""
    _, path = program_path(program)
    meta = path.with_name(f"{path.stem}.meta.json")
    if not meta.is_file():
        return {}
    options = json.loads(meta.read_text()).get("options") or {}
    return {key: value for key, value in options.items() if key in RUNTIME_OPTIONS}

"""Saved programs shipped with the package, how one is found by name, and what a program file holds.

A program file (``<name>.json``) is everything per model that changes verdicts: DSPy's state (each predictor's
demos and instructions, never an LM or a key) and, under the ``vista`` key, the judging options it was chosen with
and its decision rule (``decision.DecisionRule``; none for the seed program). ``<name>.meta.json`` beside it says how it was compiled
(``gate.ProgramMeta``). A program is identified by its content: ``content_hash`` covers the state, the options
and the rule, so two files with the same name and different content never pass for one another.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

SEED_PROGRAM = "seed"
PROGRAM_FORMAT = 2
# Format 1 held a "calibration" (a Verify threshold and category offsets) where format 2 holds a decision rule; a
# format-1 file without one reads as it always did.
OLD_FORMATS = (1,)
SECTION = "vista"  # the key of a program file that holds what DSPy's state does not
# Options an older program kept in its meta file ("options"), before program files held them.
LEGACY_META_OPTIONS = ("use_context", "reasoning", "claim_calls", "explain_verified")


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


@dataclass
class ProgramFile:
    """The content of a program file: DSPy state, saved judging options (``JudgeOptions.saved``) and the decision
    rule (``DecisionRule.model_dump``: plain numbers)."""

    name: str
    state: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)
    rule: dict[str, Any] | None = None

    @property
    def content_hash(self) -> str:
        return content_hash(self.state, self.options, self.rule)

    def to_json(self) -> dict[str, Any]:
        return {SECTION: {"format": PROGRAM_FORMAT, "options": self.options, "rule": self.rule}, **self.state}


def content_hash(state: dict[str, Any], options: dict[str, Any], rule: dict[str, Any] | None) -> str:
    """sha256 of what a program judges with (dependency versions excluded), in canonical JSON. A program without a
    rule hashes as it did before rules existed."""
    judged: dict[str, Any] = {"state": {k: v for k, v in state.items() if k != "metadata"}, "options": options,
                              "calibration": None}
    if rule is not None:
        judged["rule"] = rule
    return hashlib.sha256(orjson.dumps(judged, option=orjson.OPT_SORT_KEYS)).hexdigest()


def read_program(program: str | Path | None) -> ProgramFile:
    """A program file by path or name (None: the seed). A file written before program files held options has its
    meta file's options, if any, and no rule."""
    name, path = program_path(program)
    state = json.loads(path.read_text())
    section = state.pop(SECTION, None)
    if section is None:
        meta = path.with_name(f"{path.stem}.meta.json")
        legacy = json.loads(meta.read_text()).get("options") or {} if meta.is_file() else {}
        return ProgramFile(name, state, {k: v for k, v in legacy.items() if k in LEGACY_META_OPTIONS})
    version = section.get("format")
    if version in OLD_FORMATS:
        if section.get("calibration"):
            raise ValueError(f"{path}: program format {version} with a calibration, which this version no longer "
                             "applies (a decision rule replaced it): compile the program again")
        return ProgramFile(name, state, section.get("options") or {})
    if version != PROGRAM_FORMAT:
        raise ValueError(f"{path}: program format {version!r}, this version reads {PROGRAM_FORMAT}")
    return ProgramFile(name, state, section.get("options") or {}, section.get("rule"))


def write_program(program: ProgramFile, path: Path) -> Path:
    """Write a program file (refusing one whose predictors carry an LM)."""
    for predictor, state in program.state.items():
        if isinstance(state, dict) and state.get("lm"):
            raise RuntimeError(f"{path}: predictor {predictor} carries a bound LM; refusing to save it")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(program.to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    return path

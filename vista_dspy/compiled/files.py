"""Saved programs shipped with the package, how one is found by name, and what a program file holds.

A program file (``<name>.json``) is everything per model that changes verdicts: DSPy's state (each predictor's
demos and instructions, never an LM or a key) and, under the ``vista`` key, the judging options it was chosen with
and its decision rule (``decision.DecisionRule``; none for the seed program). ``<name>.meta.json`` beside it says how it was compiled
(``gate.ProgramMeta``). A program is identified by its content: ``content_hash`` covers the state, the options
and the rule, so two files with the same name and different content never pass for one another.
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

SEED_PROGRAM = "seed"
# The rule the evidence system decides with when the program has none: cues fitted on the human claims of
# the instrument's compile part, no LM (benchmarks/refit_compile_part.py).
EVIDENCE_PROGRAM = "evidence"
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

    @classmethod
    def from_json(cls, name: str, data: dict[str, Any]) -> ProgramFile:
        """The inverse of ``to_json``: a program kept inside another record (a study keeps its starting programs)."""
        state = {k: v for k, v in data.items() if k != SECTION}
        section = data.get(SECTION) or {}
        return cls(name, state, section.get("options") or {}, section.get("rule"))


def content_hash(state: dict[str, Any], options: dict[str, Any], rule: dict[str, Any] | None) -> str:
    """sha256 of what a program judges with (dependency versions excluded), in canonical JSON. A program without a
    rule hashes as it did before rules existed."""
    judged: dict[str, Any] = {"state": {k: v for k, v in state.items() if k != "metadata"}, "options": options,
                              "calibration": None}
    if rule is not None:
        judged["rule"] = rule
    return hashlib.sha256(orjson.dumps(judged, option=orjson.OPT_SORT_KEYS)).hexdigest()


class StaleMeta(UserWarning):
    """A program file whose content no longer has the hash its meta file recorded: the meta's gate and scores
    describe another program."""


def read_program(program: str | Path | None) -> ProgramFile:
    """A program file by path or name (None: the seed). A file written before program files held options has its
    meta file's options, if any, and no rule.

    A file that is not a program (bad JSON, an option or rule value not allowed) raises ``data.InputError`` naming
    the file and the field. A file whose content hash differs from the one its meta file recorded (edited after its
    gate ran) is read, with a ``StaleMeta`` warning: its verdicts still name the program by its content (run.json,
    the verdicts' run), only the meta's gate result no longer describes it."""
    from ..data.errors import InputError
    from ..data.readers import read_json

    name, path = program_path(program)
    state = read_json(path)
    if not isinstance(state, dict):
        raise InputError(path, f"a program file is a JSON object, not {type(state).__name__}")
    section = state.pop(SECTION, None)
    meta_path = path.with_name(f"{path.stem}.meta.json")
    meta = read_json(meta_path) if meta_path.is_file() else {}
    if section is None:
        legacy = meta.get("options") or {}
        file = ProgramFile(name, state, {k: v for k, v in legacy.items() if k in LEGACY_META_OPTIONS})
    else:
        version = section.get("format") if isinstance(section, dict) else section
        if version in OLD_FORMATS and section.get("calibration"):
            raise InputError(path, f"program format {version} with a calibration, which this version no longer "
                             "applies (a decision rule replaced it): compile the program again",
                             field=f"{SECTION}.calibration")
        if version not in (PROGRAM_FORMAT, *OLD_FORMATS):
            raise InputError(path, f"program format {version!r}, this version reads {PROGRAM_FORMAT}",
                             field=f"{SECTION}.format")
        file = ProgramFile(name, state, section.get("options") or {}, section.get("rule"))
    _check_values(path, file)
    recorded = meta.get("program_sha256")
    if recorded and recorded != file.content_hash:
        warnings.warn(f"{path} was changed after it was compiled: its content (sha256 {file.content_hash[:12]}...) "
                      f"is not the program {meta_path.name} describes ({recorded[:12]}...), so that file's gate "
                      "result and scores do not describe it", StaleMeta, stacklevel=2)
    return file


def _check_values(path: Path, file: ProgramFile) -> None:
    """The saved options and rule, validated as a judge would read them: the first value not allowed, as an
    ``InputError`` naming the field and what is allowed."""
    from pydantic import ValidationError

    from ..data.errors import InputError
    from ..decision import DecisionRule
    from ..options import NOT_SAVED, JudgeOptions

    for field_name, model, value in (("options", JudgeOptions, file.options), ("rule", DecisionRule, file.rule)):
        if value is None:
            continue
        try:
            model.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in (SECTION, field_name, *first["loc"]))
            message = first["msg"]
            if first["type"] == "extra_forbidden":
                known = [k for k in model.model_fields if field_name != "options" or k not in NOT_SAVED]
                message = f"not a known {field_name} field; known: {', '.join(known)}"
            elif "input" in first and not isinstance(first["input"], (dict, list)):
                message = f"{first['input']!r} is not allowed: {message}"
            raise InputError(path, message, field=where) from None


def write_program(program: ProgramFile, path: Path) -> Path:
    """Write a program file (refusing one whose predictors carry an LM)."""
    for predictor, state in program.state.items():
        if isinstance(state, dict) and state.get("lm"):
            raise RuntimeError(f"{path}: predictor {predictor} carries a bound LM; refusing to save it")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(orjson.dumps(program.to_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    return path

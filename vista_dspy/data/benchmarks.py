"""Loaders for the public benchmarks VISTA is evaluated on, each returning ``Dialogue`` records with gold labels.

Gold labels go on the judged (last) assistant turn as ``TurnGold(label="faithful" | "hallucinated")``. Mappings,
one line each (the data and its label schemes are described in ``SOURCE.md`` next to each data set):

- ``begin``: "Fully attributable" -> faithful, "Not fully attributable" -> hallucinated, "Generic" -> skipped;
  the dialogue is the previous turn (user) and the model response (assistant) judged against ``knowledge``.
- ``fade``: assistant rows only; hallucinated iff any token tag is not ``O``; ``corrupted_response`` is judged
  against the knowledge-graph render, after the ``history`` (roles assigned backwards: the last one is the user).
- ``faithdial``: every Wizard turn is judged as it was in Wizard of Wikipedia: ``original_response`` when the turn
  was edited (-> hallucinated), else ``response`` (-> faithful); inferred from VISTA's re-annotated FaithDial
  dialogues (see ``load_faithdial``). From a local JSON/JSONL file of the hub's format, or the hub when online.
- ``faithdial-audit``: any (partial) hallucination -> hallucinated; entailment, alone or with uncooperative
  (and uncooperative alone, which the taxonomy defines as entailed) -> faithful; generic only, unlabelled,
  empty or unknown-label rows -> skipped.
- ``coconot``: refusals (``is_refusal`` true) expect abstention, preferred contrast answers (``chosen``) expect
  compliance; the expectation is ``source["expected"]``, ``TurnGold.label`` stays None; no document.
- ``rgm-contradictions``: >= 2 of 3 annotators -> contradictory (hallucinated), 0 -> not (faithful), 1 -> skipped;
  only the last utterance is judged, earlier turns of its speaker are background.
- ``ais``: ``INT & AIS`` 1 -> faithful, 0 -> hallucinated; the AIS ``output`` is judged against the WoW checked
  sentence after the WoW history (needs Wizard-of-Wikipedia ``test_random_split.json``, see ``load_ais``).

Every loader has the signature ``(path, data=None, *, n=None, seed=0) -> list[Dialogue]`` (``data`` is ignored;
it keeps the signature of the other registered loaders). Malformed input raises ``InputError`` naming the file,
the row or line and the column; rows that are well-formed but unusable are skipped, counted per reason in
``REPORTS[name]`` (see ``last_report``) and logged at INFO on the ``vista_dspy.data`` logger. With ``n`` a seeded
sample is returned (``sample``; balanced between the two sides for coconot and rgm-contradictions).
"""

from __future__ import annotations

import ast
import csv
import io
import logging
import os
import random
import re
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..schema import Dialogue, Grounding, Turn, TurnGold
from . import LOADERS, InputError, parse_jsonl, read_json, register, validation_message

logger = logging.getLogger("vista_dspy.data")

BENCHMARKS = ("begin", "fade", "faithdial", "faithdial-audit", "coconot", "rgm-contradictions", "ais")
FAITHDIAL_HUB = "McGill-NLP/FaithDial"
WOW_ENV = "VISTA_WOW_TEST"
WOW_FILE = "test_random_split.json"
WOW_URL = "http://parl.ai/downloads/wizard_of_wikipedia/wizard_of_wikipedia.tgz"


# --------------------------------------------------------------------------------------------------------------
# Load reports, sampling and splitting


@dataclass
class LoadReport:
    """What one loader call kept and skipped (``skipped``: reason -> count; ``examples``: first few locations)."""

    dataset: str
    files: list[str] = field(default_factory=list)
    kept: int = 0
    skipped: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    # Rows kept with an adjustment worth knowing (e.g. no previous turn): reason -> count.
    notes: Counter = field(default_factory=Counter)
    sampled: int | None = None
    seed: int | None = None

    def skip(self, reason: str, where: str) -> None:
        self.skipped[reason] += 1
        examples = self.examples.setdefault(reason, [])
        if len(examples) < 5:
            examples.append(where)

    @property
    def total_skipped(self) -> int:
        return sum(self.skipped.values())

    def message(self) -> str:
        text = f"{self.dataset}: kept {self.kept} rows, skipped {self.total_skipped}"
        if self.skipped:
            text += " (" + ", ".join(f"{reason}: {count}" for reason, count in self.skipped.most_common()) + ")"
        if self.notes:
            text += "; kept with notes: " + ", ".join(f"{note}: {count}" for note, count in self.notes.most_common())
        if self.sampled is not None:
            text += f"; sampled {self.sampled} (seed {self.seed})"
        return text


# The report of the latest call of each loader, by registered name.
REPORTS: dict[str, LoadReport] = {}


def last_report(name: str) -> LoadReport:
    """The report of the latest load of benchmark ``name`` (KeyError if it was never loaded)."""
    return REPORTS[name]


def sample(dialogues: Sequence[Dialogue], n: int, seed: int = 0) -> list[Dialogue]:
    """``n`` dialogues chosen with ``random.Random(seed)``, in their original order. Same input, same output."""
    if n < 0:
        raise ValueError(f"cannot sample a negative number of dialogues ({n})")
    if n > len(dialogues):
        raise ValueError(f"asked for {n} dialogues but only {len(dialogues)} are available")
    chosen = sorted(random.Random(seed).sample(range(len(dialogues)), n))
    return [dialogues[i] for i in chosen]


def split(
    dialogues: Sequence[Dialogue],
    dev_fraction: float = 0.5,
    seed: int = 0,
    *,
    group: Callable[[Dialogue], Hashable] | None = None,
) -> tuple[list[Dialogue], list[Dialogue]]:
    """Seeded, disjoint (dev, test) split; each side keeps the original order.

    ``group`` keeps dialogues with the same key on the same side (e.g. FADE's ``source["dialogue_id"]`` or AIS's
    ``source["ex_idx"]``, where several rows share a context); ``dev_fraction`` then applies to groups.
    """
    if not 0.0 <= dev_fraction <= 1.0:
        raise ValueError(f"dev_fraction must be between 0 and 1, got {dev_fraction}")
    keys = [group(d) if group is not None else d.id for d in dialogues]
    distinct = list(dict.fromkeys(keys))
    random.Random(seed).shuffle(distinct)
    dev_keys = set(distinct[: round(dev_fraction * len(distinct))])
    dev = [d for d, k in zip(dialogues, keys) if k in dev_keys]
    test = [d for d, k in zip(dialogues, keys) if k not in dev_keys]
    return dev, test


def _balanced(path: Path, dialogues: list[Dialogue], side: Callable[[Dialogue], bool], n: int,
              seed: int) -> list[Dialogue]:
    """``n`` dialogues, half from each side (the ``side``-true half gets the extra one when ``n`` is odd)."""
    first = [d for d in dialogues if side(d)]
    second = [d for d in dialogues if not side(d)]
    want_first, want_second = n - n // 2, n // 2
    if want_first > len(first) or want_second > len(second):
        raise InputError(path, f"n={n} needs {want_first} + {want_second} dialogues but only {len(first)} + "
                               f"{len(second)} are available")
    chosen = {d.id for d in sample(first, want_first, seed) + sample(second, want_second, seed)}
    return [d for d in dialogues if d.id in chosen]


def _finish(report: LoadReport, path: Path, dialogues: list[Dialogue], n: int | None, seed: int,
            side: Callable[[Dialogue], bool] | None = None) -> list[Dialogue]:
    report.kept = len(dialogues)
    _check_unique(path, dialogues)
    if n is not None:
        if side is not None:
            dialogues = _balanced(path, dialogues, side, n, seed)
        else:
            try:
                dialogues = sample(dialogues, n, seed)
            except ValueError as exc:
                raise InputError(path, str(exc)) from None
        report.sampled, report.seed = len(dialogues), seed
    REPORTS[report.dataset] = report
    logger.info(report.message())
    return dialogues


def _check_unique(path: Path, dialogues: list[Dialogue]) -> None:
    seen: set[str] = set()
    for dialogue in dialogues:
        if dialogue.id in seen:
            raise InputError(path, f"dialogue id {dialogue.id!r} appears twice; ids must be unique")
        seen.add(dialogue.id)


# --------------------------------------------------------------------------------------------------------------
# Reading files


def _existing_file(path: Path) -> Path:
    if not path.exists():
        raise InputError(path, "no such file")
    if not path.is_file():
        raise InputError(path, "not a file")
    return path


def _under(path: Path, *candidates: str) -> Path:
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


def _decode(path: Path, csv_format: dict[str, Any] | None = None) -> str:
    """The file as text; bad UTF-8 is reported with its line (and row, for tables with a header)."""
    raw = _existing_file(path).read_bytes()
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
class _Row:
    number: int  # 1-based data row (the header is row 0)
    line: int  # file line where the row starts
    values: dict[str, str]

    @property
    def where(self) -> str:
        return f"row {self.number} (line {self.line})"


TSV = {"delimiter": "\t", "quoting": csv.QUOTE_NONE}
CSV: dict[str, Any] = {}


def _table(path: Path, csv_format: dict[str, Any], required: Sequence[str], report: LoadReport) -> tuple[
        list[str], list[_Row]]:
    """Header (names stripped of surrounding blanks) and rows of a CSV/TSV file; every row must have every field."""
    text = _decode(path, csv_format)
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
        rows: list[_Row] = []
        line = reader.line_num + 1
        for fields in reader:
            row = _Row(len(rows) + 1, line, {})
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


def _jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    records = parse_jsonl(path, _decode(path))
    for number, item in records:
        if not isinstance(item, dict):
            raise InputError(path, f"expected a JSON object, got {type(item).__name__}", record=f"line {number}")
    return records


def _field(path: Path, record: dict[str, Any], name: str, where: str, kind: type | tuple[type, ...],
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


def _literal(path: Path, row: _Row, column: str, kind: type) -> Any:
    text = row.values[column]
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise InputError(path, f"not a Python literal: {text[:80]!r}", record=row.where, field=column) from None
    if not isinstance(value, kind):
        raise InputError(path, f"expected a {kind.__name__}, got {type(value).__name__}", record=row.where,
                         field=column)
    return value


def _number(text: str) -> int | str:
    return int(text) if text.strip().isdigit() else text


def _gold(hallucinated: bool) -> TurnGold:
    return TurnGold(label="hallucinated" if hallucinated else "faithful")


# --------------------------------------------------------------------------------------------------------------
# BEGIN

BEGIN_COLUMNS = ("model_name", "data_source", "knowledge", "message", "response", "begin_label")
BEGIN_LABELS = {"fully attributable": False, "not fully attributable": True}
BEGIN_SKIPPED = {"generic": "Generic label"}


@register("begin")
def load_begin(path: str | Path, data: Any = None, *, n: int | None = None, seed: int = 0) -> list[Dialogue]:
    """BEGIN v2 TSV (``wow/begin_test_wow.tsv`` when ``path`` is a directory): message -> user, response ->
    assistant judged against ``knowledge``; an empty message (first turn of the conversation) gives no user turn."""
    path = _under(Path(path), "wow/begin_test_wow.tsv")
    report = LoadReport("begin", files=[path.name])
    _, rows = _table(path, TSV, BEGIN_COLUMNS, report)
    tag = path.stem.removeprefix("begin_")
    dialogues = []
    for row in rows:
        v = row.values
        label = v["begin_label"].strip().lower()
        if label in BEGIN_SKIPPED:
            report.skip(BEGIN_SKIPPED[label], row.where)
            continue
        if label not in BEGIN_LABELS:
            raise InputError(path, f"unknown label {v['begin_label']!r}; expected 'Fully attributable', 'Not fully "
                                   "attributable' or 'Generic'", record=row.where, field="begin_label")
        for column in ("knowledge", "response"):
            if not v[column].strip():
                raise InputError(path, "empty", record=row.where, field=column)
        turns = []
        if v["message"].strip():
            turns.append(Turn(role="user", text=v["message"]))
        else:
            report.notes["no previous turn (empty message)"] += 1
        turns.append(Turn(role="assistant", text=v["response"], grounding=Grounding.from_document(v["knowledge"]),
                          gold=_gold(BEGIN_LABELS[label])))
        dialogues.append(Dialogue(id=f"begin-{tag}-{row.number}", turns=turns, source={
            "dataset": "begin", "file": path.name, "row": row.number, "line": row.line,
            "model": v["model_name"], "data_source": v["data_source"], "original_label": v["begin_label"].strip(),
        }))
    return _finish(report, path, dialogues, n, seed)


# --------------------------------------------------------------------------------------------------------------
# FADE

FADE_COLUMNS = ("history", "speaker", "knowledge_base", "dialogue_id", "corrupted_response", "hallucination_tags")


def _roles_backwards(history: list[str]) -> list[Turn]:
    """History turns whose last one is the user's, alternating backwards (the judged turn follows them)."""
    count = len(history)
    return [Turn(role="user" if (count - 1 - i) % 2 == 0 else "assistant", text=text,
                 grounding=None if (count - 1 - i) % 2 == 0 else Grounding.background())
            for i, text in enumerate(history)]


@register("fade")
def load_fade(path: str | Path, data: Any = None, *, n: int | None = None, seed: int = 0) -> list[Dialogue]:
    """FADE ``human_verified_500.csv``: assistant rows; history turns before ``corrupted_response``, judged against
    ``knowledge_base['render']``; earlier assistant turns are background (not judged)."""
    path = _under(Path(path), "data/human_verified_500.csv", "human_verified_500.csv")
    report = LoadReport("fade", files=[path.name])
    header, rows = _table(path, CSV, FADE_COLUMNS, report)
    index_column = header[0] if header[0] in ("", "Unnamed: 0") else None
    dialogues = []
    for row in rows:
        v = row.values
        speaker = v["speaker"].strip().lower()
        if speaker == "user":
            report.skip("user turn", row.where)
            continue
        if speaker != "assistant":
            raise InputError(path, f"expected 'user' or 'assistant', got {v['speaker']!r}", record=row.where,
                             field="speaker")
        history = _literal(path, row, "history", list)
        if not all(isinstance(t, str) for t in history):
            raise InputError(path, "expected a list of strings", record=row.where, field="history")
        tags = _literal(path, row, "hallucination_tags", list)
        if not tags or not all(isinstance(t, str) for t in tags):
            raise InputError(path, "expected a non-empty list of tag strings", record=row.where,
                             field="hallucination_tags")
        knowledge = _literal(path, row, "knowledge_base", dict) if v["knowledge_base"].strip() else {}
        render = knowledge.get("render")
        if not isinstance(render, str) or not render.strip():
            report.skip("no knowledge-graph render", row.where)
            continue
        if not v["corrupted_response"].strip():
            report.skip("empty response", row.where)
            continue
        corrupt_history = (_literal(path, row, "corrupt_history", list)
                           if v.get("corrupt_history", "").strip() not in ("", "nan") else None)
        turns = _roles_backwards(history)
        turns.append(Turn(role="assistant", text=v["corrupted_response"], grounding=Grounding.from_document(render),
                          gold=_gold(any(tag != "O" for tag in tags))))
        source: dict[str, Any] = {
            "dataset": "fade", "file": path.name, "row": row.number, "line": row.line,
            "dialogue_id": _number(v["dialogue_id"]), "original_response": v.get("response"),
            "kg_paths": knowledge.get("paths"), "hallucinated_tokens": sum(tag != "O" for tag in tags),
            # True when the perturbed history differs from the history beyond letter case.
            "history_corrupted": corrupt_history is not None
            and [t.lower() for t in corrupt_history] != [t.lower() for t in history],
        }
        if index_column is not None:
            source["source_index"] = _number(v[index_column])
        for column in ("corrupt_entity", "original_entity", "corrupt_relation"):
            if v.get(column, "").strip() not in ("", "nan"):
                source[column] = _literal(path, row, column, list)
        dialogues.append(Dialogue(id=f"fade-{row.number}", turns=turns, source=source))
    return _finish(report, path, dialogues, n, seed)


# --------------------------------------------------------------------------------------------------------------
# FaithDial (the benchmark; on the Hugging Face hub only)


def _faithdial_records(path: Path, split: str) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    """(name, [(where, record)]) from a local file, or from the hub when ``path`` is its id or ``hub``."""
    if path.exists():
        if path.is_dir():
            path = _under(path, f"data/{split}.json", f"{split}.json")
        if path.suffix == ".jsonl":
            return path.name, [(f"line {n}", r) for n, r in _jsonl(path)]
        data = read_json(path)
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise InputError(path, "expected a JSON list of FaithDial dialogues (objects with 'utterances')")
        return path.name, [(f"dialogue {i}", r) for i, r in enumerate(data)]
    if str(path) not in ("hub", FAITHDIAL_HUB):
        raise InputError(path, f"no such file; FaithDial is on the Hugging Face hub only: pass a local copy of "
                               f"{FAITHDIAL_HUB}'s data/{split}.json, or 'hub' to download it (online)")
    import datasets

    try:
        rows = datasets.load_dataset(FAITHDIAL_HUB, split=split)
    except Exception as exc:  # noqa: BLE001 - offline, hub errors and script-loading refusals all end here
        raise InputError(FAITHDIAL_HUB, f"cannot load {split!r} from the Hugging Face hub ({type(exc).__name__}: "
                                        f"{str(exc)[:200]}); offline, download data/{split}.json from "
                                        f"https://huggingface.co/datasets/{FAITHDIAL_HUB} and pass its path") from None
    return f"{FAITHDIAL_HUB}:{split}", [(f"row {i}", dict(r)) for i, r in enumerate(rows)]


@register("faithdial")
def load_faithdial(path: str | Path, data: Any = None, *, n: int | None = None, seed: int = 0,
                   split: str = "test") -> list[Dialogue]:
    """FaithDial dialogues (``{"utterances": [{"history", "speaker", "knowledge", "original_response",
    "response", "BEGIN", "VRM"}, ...]}`` per dialogue, or the flat rows of the hub's loading script).

    Every Wizard turn is judged against its ``knowledge``. The judged text is the original Wizard-of-Wikipedia
    turn: ``original_response`` when FaithDial's editors rewrote it (gold hallucinated) and ``response`` when
    they kept it (gold faithful). This is how VISTA's re-annotated FaithDial dialogues read; it is an inference,
    as VISTA publishes no mapping. The Apprentice turn before each Wizard turn is the last item of its
    ``history``; the first Wizard turn's whole history opens the dialogue.
    """
    name, records = _faithdial_records(Path(path), split)
    report = LoadReport("faithdial", files=[name])
    dialogues = []
    for where, record in records:
        utterances = record["utterances"] if "utterances" in record else [record]
        if not isinstance(utterances, list) or not utterances:
            raise InputError(name, "expected a non-empty list", record=where, field="utterances")
        turns: list[Turn] = []
        edited = 0
        for k, utterance in enumerate(utterances):
            at = f"{where} utterance {k}"
            if not isinstance(utterance, dict):
                raise InputError(name, f"expected an object, got {type(utterance).__name__}", record=at)
            history = _field(Path(name), utterance, "history", at, list)
            if not all(isinstance(t, str) for t in history):
                raise InputError(name, "expected a list of strings", record=at, field="history")
            knowledge = _field(Path(name), utterance, "knowledge", at, str)
            response = _field(Path(name), utterance, "response", at, str)
            original = _field(Path(name), utterance, "original_response", at, str, optional=True)
            hallucinated = bool(original and original.strip())
            edited += hallucinated
            if k == 0:
                turns.extend(_roles_backwards(history))
            elif history:
                turns.append(Turn(role="user", text=history[-1]))
            text = original if hallucinated else response
            if not text.strip():
                report.skip("empty response", at)
                continue
            turns.append(Turn(role="assistant", text=text, grounding=Grounding.from_document(knowledge),
                              gold=_gold(hallucinated)))
        if not any(t.gold is not None for t in turns):
            continue
        index = where.split()[-1]
        # Flat rows (one per Wizard turn) share their dialogue's dialog_idx; the row index keeps ids unique.
        ident = record.get("dialog_idx", index) if "utterances" in record else index
        dialogues.append(Dialogue(id=f"faithdial-{split}-{ident}", turns=turns, source={
            "dataset": "faithdial", "file": name, "record": where, "dialog_idx": record.get("dialog_idx"),
            "edited_turns": edited}))
    return _finish(report, Path(name), dialogues, n, seed)


# --------------------------------------------------------------------------------------------------------------
# FaithDial data audit (BEGIN-labelled responses; not the FaithDial benchmark)

AUDIT_GOLD_COLUMNS = ("evidence", "history", "response", "BEGIN")
AUDIT_MODEL_COLUMNS = ("knowledge", "history", "begin_label")
AUDIT_TYPOS = {"entailmentt": "entailment", "hallucinated": "hallucination"}
AUDIT_TAGS = {"entailment", "hallucination", "partial hallucination", "generic", "uncooperative"}
AUDIT_CORPORA = {"topicalchat": "topical"}


def audit_label(raw: str) -> tuple[str | None, str | None]:
    """(gold label, None) or (None, reason to skip) for a BEGIN tag set such as 'entailment,uncooperative'."""
    tags = {AUDIT_TYPOS.get(t, t) for t in (" ".join(p.split()) for p in re.split(r"[,.;]", raw.lower())) if t}
    if not tags:
        return None, "no label"
    unknown = tags - AUDIT_TAGS
    if unknown:
        return None, f"unknown label {raw.strip()!r}"
    if tags & {"hallucination", "partial hallucination"}:
        return "hallucinated", None
    if "entailment" in tags or tags == {"uncooperative"}:
        return "faithful", None
    if tags == {"generic"}:
        return None, "Generic label"
    return None, f"unmapped label combination {raw.strip()!r}"


def _audit_files(path: Path) -> tuple[Path, list[Path]]:
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.is_file():
        return path.parent.parent, [path]
    root = path / "data-audit" if (path / "data-audit").is_dir() else path
    files = sorted(root.glob("gold/*.csv")) + sorted(root.glob("*/*_processed_*.csv"))
    if not files:
        raise InputError(path, "no data-audit CSV files (gold/*.csv, <model>/*_processed_*.csv) in this directory")
    return root, files


@register("faithdial-audit")
def load_faithdial_audit(path: str | Path, data: Any = None, *, n: int | None = None,
                         seed: int = 0) -> list[Dialogue]:
    """FaithDial's ``data-audit`` CSVs (a directory: all of them; or one CSV): previous utterance -> user,
    response (human or model) -> assistant judged against the evidence/knowledge snippet."""
    root, files = _audit_files(Path(path))
    report = LoadReport("faithdial-audit", files=[])
    dialogues = []
    for file in files:
        name = file.relative_to(root).as_posix() if file.is_relative_to(root) else file.name
        report.files.append(name)
        header, rows = _table(file, CSV, ("history",), report)
        if "BEGIN" in header:
            required, extra = AUDIT_GOLD_COLUMNS, ["response"]
            knowledge_col, label_col, vrm_col = "evidence", "BEGIN", "VRM"
            responder, corpus = "human", file.stem
        else:
            required = AUDIT_MODEL_COLUMNS
            extra = [c for c in header if c not in AUDIT_MODEL_COLUMNS + ("vrm_label",)]
            knowledge_col, label_col, vrm_col = "knowledge", "begin_label", "vrm_label"
            responder, corpus = (extra[0] if extra else ""), file.stem.rpartition("_processed_")[2] or file.stem
        missing = [c for c in required if c not in header]
        if missing or len(extra) != 1:
            raise InputError(file, "expected the columns evidence, history, response, BEGIN, VRM (gold) or "
                                   f"knowledge, history, <model>, begin_label, vrm_label; found {', '.join(header)}",
                             record="header", field=missing[0] if missing else None)
        response_col = extra[0]
        corpus = AUDIT_CORPORA.get(corpus, corpus)
        subset = file.parent.name.lower()
        for row in rows:
            v = row.values
            where = f"{name} {row.where}"
            if not any(value.strip() for value in v.values()):
                report.skip("empty row", where)
                continue
            label, reason = audit_label(v[label_col])
            if reason is not None:
                report.skip(reason, where)
                continue
            if not v[knowledge_col].strip():
                report.skip("empty knowledge", where)
                continue
            if not v[response_col].strip():
                report.skip("empty response", where)
                continue
            turns = []
            if v["history"].strip():
                turns.append(Turn(role="user", text=v["history"]))
            else:
                report.notes["no previous turn (empty history)"] += 1
            turns.append(Turn(role="assistant", text=v[response_col],
                              grounding=Grounding.from_document(v[knowledge_col]), gold=TurnGold(label=label)))
            dialogues.append(Dialogue(id=f"faithdial-audit-{subset}-{corpus}-{row.number}", turns=turns, source={
                "dataset": "faithdial-audit", "file": name, "row": row.number, "line": row.line,
                "responder": responder, "corpus": corpus, "original_label": v[label_col].strip(),
                "vrm": v.get(vrm_col, "").strip(),
            }))
    return _finish(report, Path(path), dialogues, n, seed)


# --------------------------------------------------------------------------------------------------------------
# CoCoNot

COCONOT_REFUSALS = "legacy_commit_3206be6/data/coconot_evaluation.jsonl"
COCONOT_COMPLIANT = "data/coconot_pref.jsonl"


def _coconot_dialogue(path: Path, root: Path, number: int, record: dict[str, Any], response: str,
                      expected: str) -> Dialogue:
    coconot_id = record["id"]
    return Dialogue(
        id=f"coconot-{coconot_id}",
        turns=[Turn(role="user", text=record["prompt"]),
               Turn(role="assistant", text=response, grounding=Grounding.knowledge_only(), gold=TurnGold())],
        source={"dataset": "coconot", "file": path.relative_to(root).as_posix(), "line": number,
                "coconot_id": coconot_id, "category": record.get("category"),
                "subcategory": record.get("subcategory"), "expected": expected},
    )


COCONOT_HUB = "allenai/coconot"


def _coconot_from_hub(n: int | None, seed: int) -> list[Dialogue]:
    """Refusals: the ``original`` config's train responses (noncompliant by construction); compliant answers:
    the ``pref`` config's ``chosen`` responses."""
    import datasets

    parts = []
    for config, column, expected in (("original", "response", "abstention"), ("pref", "chosen", "compliant")):
        try:
            parts.append((config, column, expected, datasets.load_dataset(COCONOT_HUB, config, split="train")))
        except Exception as exc:  # noqa: BLE001 - offline and hub errors alike
            raise InputError(COCONOT_HUB, f"cannot load config {config!r} from the Hugging Face hub "
                                          f"({type(exc).__name__}: {str(exc)[:200]}); offline, pass the coconot/ "
                                          "directory of the GitHub release instead") from None
    report = LoadReport("coconot", files=[f"{COCONOT_HUB}:{config}" for config, *_ in parts])
    dialogues = []
    root = Path(COCONOT_HUB)
    for config, column, expected, rows in parts:
        name = root / config
        for number, record in enumerate(rows, start=1):
            record = dict(record)
            where = f"{config} row {number}"
            for field_name in ("id", "prompt", column):
                _field(name, record, field_name, where, str)
            if not record["prompt"].strip() or not record[column].strip():
                report.skip("empty prompt or response", where)
                continue
            dialogue = _coconot_dialogue(name, root, number, record, record[column], expected)
            dialogues.append(dialogue.model_copy(update={"id": f"coconot-{config}-{record['id']}"}))
    return _finish(report, root, dialogues, n, seed, side=lambda d: d.source["expected"] == "abstention")


@register("coconot")
def load_coconot(path: str | Path, data: Any = None, *, n: int | None = None, seed: int = 0) -> list[Dialogue]:
    """CoCoNot directory: GPT-4 refusals of the original eval prompts (expected "abstention") followed by the
    preferred answers to the contrast prompts (expected "compliant"); no reference document."""
    root = Path(path)
    if str(path) in ("hub", COCONOT_HUB):
        return _coconot_from_hub(n, seed)
    if not root.is_dir():
        raise InputError(root, "expected the coconot/ directory (with legacy_commit_3206be6/ and data/), or 'hub' "
                               f"to load {COCONOT_HUB} from the Hugging Face hub (online)")
    report = LoadReport("coconot", files=[COCONOT_REFUSALS, COCONOT_COMPLIANT])
    dialogues = []
    refusals = root / COCONOT_REFUSALS
    for number, record in _jsonl(refusals):
        where = f"line {number}"
        for name in ("id", "prompt"):
            _field(refusals, record, name, where, str)
        refused = _field(refusals, record, "is_refusal", where, bool)
        response = _field(refusals, record, "response", where, str, optional=True)
        if not refused:
            report.skip("not a refusal (is_refusal false)", f"{COCONOT_REFUSALS} {where}")
        elif record.get("Faeze_Remove") is True or record.get("Sachin_Remove") is True:
            report.skip("flagged for removal", f"{COCONOT_REFUSALS} {where}")
        elif not record["prompt"].strip():
            report.skip("empty prompt", f"{COCONOT_REFUSALS} {where}")
        elif response is None or not response.strip():
            report.skip("missing response", f"{COCONOT_REFUSALS} {where}")
        else:
            dialogues.append(_coconot_dialogue(refusals, root, number, record, response, "abstention"))
    compliant = root / COCONOT_COMPLIANT
    for number, record in _jsonl(compliant):
        where = f"line {number}"
        for name in ("id", "prompt", "chosen"):
            _field(compliant, record, name, where, str)
        if not record["prompt"].strip():
            report.skip("empty prompt", f"{COCONOT_COMPLIANT} {where}")
        elif not record["chosen"].strip():
            report.skip("missing response", f"{COCONOT_COMPLIANT} {where}")
        else:
            dialogues.append(_coconot_dialogue(compliant, root, number, record, record["chosen"], "compliant"))
    return _finish(report, root, dialogues, n, seed, side=lambda d: d.source["expected"] == "abstention")


# --------------------------------------------------------------------------------------------------------------
# RGM contradictions

PLACEHOLDER = re.compile(r"^\[\[[^\]]+:\d+\]\]$")


def _rgm_files(path: Path) -> tuple[Path, list[Path]]:
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if path.is_file():
        return path.parent, [path]
    root = path / "dataset" if (path / "dataset").is_dir() else path
    files = sorted(root.rglob("*.jsonl"))
    if not files:
        raise InputError(path, "no .jsonl files (expected dataset/**/*.jsonl built from contexts + responses)")
    return root, files


@register("rgm-contradictions")
def load_rgm_contradictions(path: str | Path, data: Any = None, *, n: int | None = None,
                            seed: int = 0) -> list[Dialogue]:
    """RGM contradiction test dialogues: the last speaker is the assistant; only its last utterance is judged."""
    root, files = _rgm_files(Path(path))
    report = LoadReport("rgm-contradictions", files=[f.relative_to(root).as_posix() for f in files])
    dialogues = []
    for file in files:
        name = file.relative_to(root).as_posix()
        for number, record in _jsonl(file):
            where = f"line {number}"
            utterances = _field(file, record, "utterances", where, list)
            speakers = _field(file, record, "speakers", where, list)
            count = _field(file, record, "contradictory_label_count", where, int)
            if not utterances or not all(isinstance(u, str) for u in utterances):
                raise InputError(file, "expected a non-empty list of strings", record=where, field="utterances")
            if len(speakers) != len(utterances):
                raise InputError(file, f"{len(speakers)} speakers for {len(utterances)} utterances", record=where,
                                 field="speakers")
            if len(set(map(str, speakers))) > 2:
                raise InputError(file, f"more than two speakers: {sorted(set(map(str, speakers)))}", record=where,
                                 field="speakers")
            if PLACEHOLDER.match(utterances[-1].strip()):
                raise InputError(file, f"unsubstituted response placeholder {utterances[-1]!r}; load the built "
                                       "dataset/ files, not contexts/", record=where, field="utterances")
            if not 0 <= count <= 3:
                raise InputError(file, f"expected 0-3 annotators, got {count}", record=where,
                                 field="contradictory_label_count")
            if count == 1:
                report.skip("1 of 3 annotators (ambiguous)", f"{name} {where}")
                continue
            contradictory = count >= 2
            last = len(utterances) - 1
            turns = []
            for i, (speaker, text) in enumerate(zip(speakers, utterances)):
                if speaker != speakers[-1]:
                    turns.append(Turn(role="user", text=text))
                elif i < last:
                    turns.append(Turn(role="assistant", text=text, grounding=Grounding.background()))
                else:
                    turns.append(Turn(role="assistant", text=text, grounding=Grounding.knowledge_only(),
                                      gold=_gold(contradictory)))
            dialogues.append(Dialogue(id=f"rgm-{file.stem}-{number}", turns=turns, source={
                "dataset": "rgm-contradictions", "file": name, "line": number, "rgm": record.get("rgm_name"),
                "domain": file.parent.name, "contradictory": contradictory, "contradictory_label_count": count,
                "annotation_target_pair": record.get("annotation_target_pair"),
            }))
    return _finish(report, Path(path), dialogues, n, seed, side=lambda d: d.source["contradictory"])


# --------------------------------------------------------------------------------------------------------------
# AIS (Wizard-of-Wikipedia portion)

AIS_COLUMNS = ("ex-idx", "model-name", "output", "INT & AIS")
NO_PASSAGE = "no_passages_used"


def _wow_role(path: Path, speaker: Any, where: str) -> str:
    name = str(speaker).strip().lower()
    if name.endswith("wizard"):
        return "assistant"
    if name.endswith("apprentice"):
        return "user"
    raise InputError(path, f"unknown speaker {speaker!r}; expected a name ending in Wizard or Apprentice",
                     record=where, field="speaker")


@register("ais")
def load_ais(path: str | Path, data: Any = None, *, n: int | None = None, seed: int = 0,
             wow_path: str | Path | None = None) -> list[Dialogue]:
    """AIS ``ann_wow.csv`` (or a directory holding it), joined with Wizard of Wikipedia ``test_random_split.json``.

    The WoW file comes from ``wow_path``, else the ``VISTA_WOW_TEST`` environment variable, else
    ``test_random_split.json`` next to the CSV; it is in ParlAI's ``wizard_of_wikipedia.tgz``. Join: ``ex-idx`` is
    ``convo_no:turn_no``; ``dialog = wow[convo_no]['dialog']``; the history is ``dialog[i]['text']`` for
    ``i < turn_no`` (speaker ...Wizard -> assistant, ...Apprentice -> user; history assistant turns are background);
    the judged turn is the AIS ``output`` (not the WoW text, kept as ``source['wow_text']``) judged against the single
    value of ``dialog[turn_no]['checked_sentence']``; rows whose wizard used no passage are skipped.
    """
    path = _under(Path(path), "ann_wow.csv")
    if "qrecc" in path.name.lower():
        raise InputError(path, "QReCC rows need the SCAI-QReCC-21 passages, which are not supported; use ann_wow.csv")
    _existing_file(path)
    if wow_path is None:
        wow_path = os.environ.get(WOW_ENV) or path.parent / WOW_FILE
    wow_path = Path(wow_path)
    if not wow_path.is_file():
        raise InputError(wow_path, f"Wizard-of-Wikipedia test file not found; AIS rows of {path.name} need it for "
                                   f"the history and the passage. Get {WOW_FILE} from ParlAI's {WOW_URL} (unpack "
                                   f"the archive) and pass wow_path= or set {WOW_ENV}")
    report = LoadReport("ais", files=[path.name, wow_path.name])
    _, rows = _table(path, CSV, AIS_COLUMNS, report)
    wow = read_json(wow_path)
    if not isinstance(wow, list):
        raise InputError(wow_path, f"expected a JSON list of dialogues, got {type(wow).__name__}")
    dialogues = []
    for row in rows:
        v = row.values
        match = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", v["ex-idx"])
        if match is None:
            raise InputError(path, f"expected convo_no:turn_no, got {v['ex-idx']!r}", record=row.where, field="ex-idx")
        convo_no, turn_no = int(match.group(1)), int(match.group(2))
        label = v["INT & AIS"].strip()
        if label not in ("0", "1"):
            raise InputError(path, f"expected 0 or 1, got {label!r}", record=row.where, field="INT & AIS")
        if not v["output"].strip():
            raise InputError(path, "empty", record=row.where, field="output")
        join = f"dialogue {convo_no} (from {path.name} {row.where}, ex-idx {v['ex-idx'].strip()})"
        if convo_no >= len(wow) or not isinstance(wow[convo_no], dict) or not isinstance(
                wow[convo_no].get("dialog"), list):
            raise InputError(wow_path, f"no such dialogue (the file has {len(wow)}); is this {WOW_FILE}?",
                             record=join)
        dialog = wow[convo_no]["dialog"]
        if turn_no >= len(dialog) or not all(isinstance(t, dict) for t in dialog[: turn_no + 1]):
            raise InputError(wow_path, f"no turn {turn_no} (the dialogue has {len(dialog)}); is this {WOW_FILE}?",
                             record=join)
        target = dialog[turn_no]
        if _wow_role(wow_path, target.get("speaker"), f"{join}, turn {turn_no}") != "assistant":
            raise InputError(wow_path, f"turn {turn_no} is not a Wizard turn; is this {WOW_FILE}?", record=join,
                             field="speaker")
        checked = target.get("checked_sentence")
        if not isinstance(checked, dict):
            raise InputError(wow_path, "expected an object", record=f"{join}, turn {turn_no}",
                             field="checked_sentence")
        if len(checked) > 1:
            raise InputError(wow_path, f"expected a single sentence, got {len(checked)}",
                             record=f"{join}, turn {turn_no}", field="checked_sentence")
        passage = next(iter(checked.values()), NO_PASSAGE)
        if not isinstance(passage, str) or not passage.strip() or passage == NO_PASSAGE:
            report.skip("no checked sentence in WoW (no_passages_used)", row.where)
            continue
        turns = []
        for i, turn in enumerate(dialog[:turn_no]):
            text = turn.get("text")
            if not isinstance(text, str):
                raise InputError(wow_path, "missing or not a string", record=f"{join}, turn {i}", field="text")
            role = _wow_role(wow_path, turn.get("speaker"), f"{join}, turn {i}")
            turns.append(Turn(role=role, text=text, grounding=Grounding.background() if role == "assistant" else None))
        turns.append(Turn(role="assistant", text=v["output"], grounding=Grounding.from_document(passage),
                          gold=_gold(label == "0")))
        dialogues.append(Dialogue(id=f"ais-wow-{row.number}", turns=turns, source={
            "dataset": "ais", "file": path.name, "row": row.number, "line": row.line, "wow_file": wow_path.name,
            "ex_idx": f"{convo_no}:{turn_no}", "convo_no": convo_no, "turn_no": turn_no, "model": v["model-name"],
            "int": v.get("INT", "").strip(), "flagged": v.get("Flagged", "").strip(),
            "checked_sentence_key": next(iter(checked), None), "topic": wow[convo_no].get("chosen_topic"),
            "wow_text": target.get("text"),
        }))
    return _finish(report, path, dialogues, n, seed)


# --------------------------------------------------------------------------------------------------------------


def load_benchmark(name: str, path: str | Path, *, n: int | None = None, seed: int = 0,
                   **kwargs: Any) -> list[Dialogue]:
    """Load benchmark ``name`` from ``path`` (optionally ``n`` seeded samples); ids are checked to be unique."""
    if name not in BENCHMARKS or name not in LOADERS:
        raise InputError(path, f"unknown benchmark {name!r}; known: {', '.join(BENCHMARKS)}")
    try:
        dialogues = LOADERS[name](path, n=n, seed=seed, **kwargs)
    except ValidationError as exc:  # a record the loader's own checks let through (e.g. a text too long)
        location, message = validation_message(exc)
        raise InputError(path, message, field=location) from None
    if not dialogues:
        raise InputError(path, f"no {name} dialogues loaded")
    _check_unique(Path(path), dialogues)
    return dialogues

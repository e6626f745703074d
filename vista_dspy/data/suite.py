"""The instrument: a fixed suite of labelled turns from the paper's benchmarks and the annotated dev half, split into
a compile part (choices and gates see it) and a test part (read once, to report what ships).

The sampling is not a recipe that runs at load time: it is the committed list ``suite.json`` (package data beside
this module) of dialogue ids per dataset, with each dataset's pinned source files (their sha256 from the fetch
registry) and the sha256 of the selected dialogues' content, so a changed file or loader is refused, not judged.
``benchmarks/make_suite.py`` wrote it once (seeded, label-balanced where a dataset's labels allow, benchmark rows
whose response occurs in the human re-annotation excluded); the split is a hash of the dialogue's group id (the
dialogue id, or the source conversation for rows that share one), so one conversation never sits on both sides.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from ..schema import Dialogue
from .errors import InputError

SUITE_FILE = "suite.json"
PARTS = ("compile", "test")


def group_id_of(dialogue_id: str, source: dict[str, Any]) -> str:
    """What the split hashes: the source conversation when rows share one (FADE), else the dialogue id."""
    conversation = source.get("dialogue_id")
    return f"{source.get('dataset', '')}:{conversation}" if conversation is not None else dialogue_id


def group_id(dialogue: Dialogue) -> str:
    return group_id_of(dialogue.id, dialogue.source)


def part_of_group(group: str) -> str:
    """'compile' or 'test': the parity of the first byte of sha256(group)."""
    return PARTS[hashlib.sha256(group.encode("utf-8")).digest()[0] % 2]


def content_sha256(dialogues: Iterable[Dialogue]) -> str:
    """sha256 over the dialogues' JSON records in id order: what the suite judges, byte for byte."""
    digest = hashlib.sha256()
    for dialogue in sorted(dialogues, key=lambda d: d.id):
        digest.update(dialogue.model_dump_json().encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def read_suite(path: Path | None = None) -> dict[str, Any]:
    """The committed suite record (``suite.json`` shipped with the package, or ``path``)."""
    if path is not None:
        return json.loads(Path(path).read_text())
    return json.loads(resources.files(__package__).joinpath(SUITE_FILE).read_text())


def suite_datasets(suite: dict[str, Any] | None = None) -> list[str]:
    return list((suite or read_suite())["datasets"])


def load_suite(paths: dict[str, Path], part: str = "all", suite: dict[str, Any] | None = None
               ) -> dict[str, list[Dialogue]]:
    """{dataset: its suite dialogues of ``part`` ('compile', 'test' or 'all')} in the suite's order, read from
    ``paths`` (dataset -> where its loader reads it). A dataset whose selected content no longer hashes as recorded,
    or that lacks an id, raises ``InputError`` naming the dataset and what differs."""
    from . import load_dialogues
    from .benchmarks import BENCHMARKS, load_benchmark

    if part not in (*PARTS, "all"):
        raise ValueError(f"unknown suite part {part!r}; known: compile, test, all")
    suite = suite or read_suite()
    out: dict[str, list[Dialogue]] = {}
    for name, record in suite["datasets"].items():
        if name not in paths:
            continue
        path = paths[name]
        loaded = load_benchmark(name, path) if name in BENCHMARKS else load_dialogues(path, "vista")
        by_id = {d.id: d for d in loaded}
        missing = [i for i in record["ids"] if i not in by_id]
        if missing:
            raise InputError(path, f"suite dataset {name}: {len(missing)} of its {len(record['ids'])} dialogues are "
                                   f"not in this copy (first: {missing[0]}); fetch it with `vista data get {name}`")
        chosen = [by_id[i] for i in record["ids"]]
        got = content_sha256(chosen)
        if got != record["content_sha256"]:
            raise InputError(path, f"suite dataset {name}: the selected dialogues hash to {got}, the suite recorded "
                                   f"{record['content_sha256']} (another copy of the data, or a changed loader)")
        out[name] = [d for d in chosen if part == "all" or part_of_group(group_id(d)) == part]
    return out

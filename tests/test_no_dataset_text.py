"""No tracked file holds text of the human-annotated dev file (its utterances, retrieved documents and annotators'
claims carry no licence to be copied): every 40-character window of those texts, whitespace and case normalised, is
looked for in every file `git ls-files` lists. The one exception is a recorded real-model probe
(``benchmarks/probes/*/turns.jsonl``), whose ``claims[].claim`` is the model's own claim and may quote a turn; every
other field of those files is checked."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
from collections.abc import Iterable, Iterator
from fnmatch import fnmatch
from pathlib import Path

import pytest
from conftest import DEV_FILE

REPO = Path(__file__).resolve().parents[1]
WINDOW = 40
PROBE_FILES = "benchmarks/probes/*/turns.jsonl"
_ESCAPES = re.compile(r"\\[ntr]")  # a newline written as JSON or Python writes it inside a string
_SPACE = re.compile(r"\s+")


def normalise(text: str) -> str:
    return _SPACE.sub(" ", _ESCAPES.sub(" ", text).replace('\\"', '"')).strip().lower()


def dataset_texts(dialogues: list) -> Iterator[str]:
    """The texts of VISTA's JSON format: every turn's utterance and retrieved document, every human claim."""
    for dialogue in dialogues:
        for turn in dialogue:
            yield turn.get("utterance") or ""
            document = turn.get("retrieved_document")
            if isinstance(document, str) and document not in ("N/A", "NONE", "Prompt Information"):
                yield document
            for claim in turn.get("human_claims") or []:
                yield claim.get("claim_text") or ""


def shingles(texts: Iterable[str]) -> set[str]:
    """Every WINDOW-character window of the normalised texts."""
    found: set[str] = set()
    for text in texts:
        text = normalise(text)
        found.update(text[i:i + WINDOW] for i in range(len(text) - WINDOW + 1))
    return found


def first_copy(text: str, windows: set[str]) -> str | None:
    """The first window of ``text`` (normalised) that is one of ``windows``, or None."""
    text = normalise(text)
    return next((text[i:i + WINDOW] for i in range(len(text) - WINDOW + 1) if text[i:i + WINDOW] in windows), None)


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _without_model_claims(record):
    """A probe record without the model's own claim texts (``claims[].claim``), everything else kept."""
    if isinstance(record, dict):
        return {key: ([{k: v for k, v in c.items() if k != "claim"} if isinstance(c, dict) else _without_model_claims(c)
                       for c in value] if key == "claims" and isinstance(value, list) else _without_model_claims(value))
                for key, value in record.items()}
    if isinstance(record, list):
        return [_without_model_claims(item) for item in record]
    return record


def checked_texts(path: str, content: bytes) -> Iterator[str]:
    """What of a file is checked: its text (a probe file: the strings of each record but the model's claims), and
    for JSON the strings it holds (unescaped). A gzipped file is checked as what it holds."""
    if path.endswith(".gz"):
        path, content = path.removesuffix(".gz"), gzip.decompress(content)
    text = content.decode("utf-8", errors="ignore")
    if fnmatch(path, PROBE_FILES):
        for line in text.splitlines():
            if line.strip():
                yield from _strings(_without_model_claims(json.loads(line)))
        return
    yield text
    if path.endswith((".json", ".jsonl")):
        lines = text.splitlines() if path.endswith(".jsonl") else [text]
        for line in lines:
            try:
                yield from _strings(json.loads(line))
            except ValueError:
                pass  # not JSON after all: its text was checked


def copies(files: dict[str, bytes], windows: set[str]) -> dict[str, str]:
    """{path: the first copied window} for every file that holds one."""
    found = {}
    for path, content in files.items():
        for text in checked_texts(path, content):
            window = first_copy(text, windows)
            if window is not None:
                found[path] = window
                break
    return found


@pytest.fixture(scope="module")
def windows() -> set[str]:
    if not DEV_FILE.exists():
        pytest.skip(f"the dev file is not at {DEV_FILE} (../shared is absent): no dataset text to compare with")
    return shingles(dataset_texts(json.loads(DEV_FILE.read_text(encoding="utf-8"))))


def test_no_tracked_file_holds_a_40_character_window_of_the_dev_file(windows):
    paths = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    files = {p: (REPO / p).read_bytes() for p in paths.decode().split("\0") if p and (REPO / p).is_file()}
    assert len(files) > 50  # the whole checkout was read
    assert copies(files, windows) == {}


def test_the_guard_finds_a_planted_copy_and_spares_only_a_probe_s_own_claims(windows):
    dialogues = json.loads(DEV_FILE.read_text(encoding="utf-8"))
    utterance = next(t["utterance"] for d in dialogues for t in d if len(t.get("utterance", "")) > 80)
    claim = next(c["claim_text"] for d in dialogues for t in d for c in t.get("human_claims") or []
                 if len(c["claim_text"]) > 45)
    planted = {
        "README.md": f"Here it is:\n\n    {utterance.upper()}\n".encode(),  # case and whitespace do not hide it
        "tests/data.json": json.dumps({"demo": claim}).encode(),
        "benchmarks/probes/p/turns.jsonl": json.dumps({"text": utterance, "claims": []}).encode(),
        "benchmarks/probes/r/turns.jsonl.gz": gzip.compress(json.dumps({"text": utterance, "claims": []}).encode()),
        "benchmarks/probes/q/turns.jsonl": json.dumps({"claims": [{"claim": utterance, "category": "VERIFIED"}]
                                                       }).encode(),  # the model's own claim: allowed
        "notes.md": b"A constructed sentence about Lisbon, its seven hills and its many bridges over the river.",
    }
    found = copies(planted, windows)
    assert sorted(found) == ["README.md", "benchmarks/probes/p/turns.jsonl", "benchmarks/probes/r/turns.jsonl.gz",
                             "tests/data.json"]
    assert found["README.md"] == normalise(utterance)[:WINDOW]

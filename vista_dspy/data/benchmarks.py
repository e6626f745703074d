"""The public benchmarks VISTA is evaluated on, by name: one loader module each, returning ``Dialogue`` records
with gold labels, and ``load_benchmark``.

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
``loading.REPORTS[name]`` (see ``last_report``) and logged at INFO on the ``vista_dspy.data`` logger. With ``n`` a seeded
sample is returned (``sample``; balanced between the two sides for coconot and rgm-contradictions).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..schema import Dialogue
from .ais import WOW_ENV, WOW_FILE, load_ais
from .begin import load_begin
from .coconot import load_coconot
from .errors import InputError
from .fade import load_fade
from .faithdial import FAITHDIAL_HUB, load_faithdial
from .faithdial_audit import audit_label, load_faithdial_audit
from .loading import LoadReport, check_unique, last_report, sample, split
from .readers import validation_message
from .registry import LOADERS
from .rgm import load_rgm_contradictions

BENCHMARKS = ("begin", "fade", "faithdial", "faithdial-audit", "coconot", "rgm-contradictions", "ais")

__all__ = [
    "BENCHMARKS", "FAITHDIAL_HUB", "WOW_ENV", "WOW_FILE", "LoadReport", "audit_label", "last_report", "load_ais",
    "load_begin", "load_benchmark", "load_coconot", "load_fade", "load_faithdial", "load_faithdial_audit",
    "load_rgm_contradictions", "sample", "split",
]


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
    check_unique(Path(path), dialogues)
    return dialogues

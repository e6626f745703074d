"""What a prompt reads of a judged turn's sources (issue 63): the reference document and the knowledge store whole when
each fits its token budget, else the passages that decide -- for each unit, the window of each source that shares most
of its content words (``TurnEvidence.local``: a sentence with its neighbours in its paragraph, a store claim
with the claims beside it), best first, within the budget -- so that a long source costs what its deciding passages
cost and no turn fails for want of context. The history a prompt carries is its last turns within a budget.

Three readings (``options.EVIDENCE_READINGS``): "turn" reads one evidence set for all the units of a turn (the union of
their windows, in source order), so every claim's prompt of the turn shares its prefix up to the claim; "unit" reads
each unit's own windows; "full" reads everything (the paper's method). What was read is recorded on the claim
(``schema.CheckedAgainst``) as character spans of the reference and numbers of the store's claims.

Ranking is the evidence package's (the windows its cues read); this module only locates those windows in the sources,
orders them and fits them into the budget (it changes no cue).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..schema import CheckedAgainst, Turn
from ..signatures import EMPTY_KNOWLEDGE, NO_HISTORY, NO_REFERENCE
from . import TurnEvidence

# Characters per token: the budgets' unit, model-independent (English text with the usual BPE vocabularies).
TOKEN_CHARS = 4
OMITTED = "[...]"  # between two passages of the reference that are not neighbours in it
NO_PASSAGE = "(no passage of the reference document shares a word with the claims judged here)"
NO_STORE_CLAIM = "(no claim of the knowledge store shares a word with the claims judged here)"
EARLIER_TURNS = "({n} earlier turns not shown)"
REFERENCE, KNOWLEDGE = 0, 1  # ``evidence.SOURCES`` indices


def tokens(text: str) -> int:
    """A text's length in budget tokens (``TOKEN_CHARS`` characters each, rounded up)."""
    return -(-len(text) // TOKEN_CHARS)


@dataclass(frozen=True)
class SourcesRead:
    """What one prompt carries of a turn's reference and store, and where it comes from."""

    reference: str  # the ``reference`` field's text
    knowledge: str  # the ``knowledge`` field's text
    reading: str
    reference_spans: tuple[tuple[int, int], ...] = ()
    knowledge_numbers: tuple[int, ...] = ()
    left_out: int = 0

    def fields(self) -> dict[str, str]:
        return {"reference": self.reference, "knowledge": self.knowledge}

    def checked_against(self) -> CheckedAgainst:
        return CheckedAgainst(reading=self.reading, reference=[list(s) for s in self.reference_spans],
                              knowledge=list(self.knowledge_numbers), left_out=self.left_out)


class SourceReader:
    """The sources of one judged turn, read under a reading and budgets (``JudgeOptions``' ``evidence``,
    ``evidence_tokens``, ``knowledge_tokens``): ``read(units)`` -- the turn's units' evidence set, or one unit's --,
    ``full()`` everything, ``windows(u)`` the windows a unit's cues read."""

    def __init__(self, evidence: TurnEvidence, reference: str | None, knowledge: Sequence[str], *,
                 reading: str = "turn", reference_tokens: int, knowledge_tokens: int) -> None:
        self.evidence = evidence
        self.document = reference if reference and reference.strip() else None
        self.knowledge = list(knowledge)
        self.reading = reading
        self.budgets = (reference_tokens, knowledge_tokens)
        # Each source's passages (``evidence.passages`` indices, in order) and where each one is: character spans of
        # the document; the store number of a store passage (one per non-empty claim, in order).
        self._sequence = (evidence.sequences[REFERENCE], evidence.sequences[KNOWLEDGE])
        self._starts: dict[int, tuple[int, int]] = {}
        if self.document is not None:
            position = 0
            for i in self._sequence[REFERENCE]:
                text = evidence.passages[i].text
                start = self.document.find(text, position)
                if start < 0:  # (never: a passage is a sentence of the document; read it whole then)
                    self._starts = {}
                    break
                self._starts[i] = (start, start + len(text))
                position = start + len(text)
        numbers = [n for n, claim in enumerate(self.knowledge, start=1) if claim.strip()]
        self._numbers = dict(zip(self._sequence[KNOWLEDGE], numbers))

    def read(self, units: Sequence[str]) -> SourcesRead:
        """The reading's evidence for ``units`` (the turn's, under "turn"; under "unit", give one)."""
        return self._read(units, full=self.reading == "full")

    def full(self) -> SourcesRead:
        return self._read((), full=True)

    def windows(self, unit: str) -> SourcesRead:
        """The windows ``unit``'s cues read, whatever the budgets (a claim decided by its evidence alone)."""
        return self._read([unit], full=False, whole_when_fits=False, budgeted=False, reading="unit")

    def _read(self, units: Sequence[str], *, full: bool, whole_when_fits: bool = True, budgeted: bool = True,
              reading: str | None = None) -> SourcesRead:
        reading = reading or self.reading
        whole_reference = self.document is None or full or not self._starts or (
            whole_when_fits and tokens(self.document) <= self.budgets[REFERENCE])
        whole_store = full or (whole_when_fits and tokens(_numbered(self.knowledge, range(1, len(self.knowledge) + 1)))
                               <= self.budgets[KNOWLEDGE])
        left_out = 0
        if whole_reference:
            reference = self.document or NO_REFERENCE
            spans = ((0, len(self.document)),) if self.document is not None else ()
        else:
            chosen, dropped = self._choose(units, REFERENCE, budgeted, self._reference_cost)
            spans = self._reference_spans(chosen)
            reference = self._render_reference(spans) if spans else NO_PASSAGE
            left_out += dropped
        if whole_store:
            numbers = tuple(range(1, len(self.knowledge) + 1))
            knowledge = _numbered(self.knowledge, numbers) if self.knowledge else EMPTY_KNOWLEDGE
        else:
            chosen, dropped = self._choose(units, KNOWLEDGE, budgeted, self._store_cost)
            numbers = tuple(self._numbers[i] for i in sorted(chosen))
            knowledge = _numbered(self.knowledge, numbers) if numbers else (
                NO_STORE_CLAIM if self.knowledge else EMPTY_KNOWLEDGE)
            left_out += dropped
        return SourcesRead(reference, knowledge, reading, spans, numbers, left_out)

    def _choose(self, units: Sequence[str], source: int, budgeted: bool, cost) -> tuple[set[int], int]:
        """The passages (indices) of the units' windows in ``source`` that the budget holds: each unit's window, the
        windows sharing the largest part of their unit first; a window that would overflow the budget is left out
        (counted), unless nothing else was chosen -- then the best one is read anyway, and a prompt that still does
        not fit the model fails as it always has (nothing is cut)."""
        ranked: list[tuple[float, int, tuple[int, ...]]] = []
        for order, unit in enumerate(dict.fromkeys(units)):
            found = self.evidence.local(unit)
            window = found.windows[source]
            where = self._locate(window, source) if window is not None else None
            if where is not None:
                ranked.append((-len(found.covered(source)) / max(len(found.words), 1), order, where))
        chosen: set[int] = set()
        left_out = 0
        for _, _, where in sorted(ranked):
            grown = chosen | set(where)
            if grown == chosen:
                continue
            if budgeted and chosen and cost(grown) > self.budgets[source]:
                left_out += 1
                continue
            chosen = grown
        return chosen, left_out

    def _locate(self, window, source: int) -> tuple[int, ...] | None:
        """The passage indices a window is made of (its first occurrence, as ``TurnEvidence.local`` picks the first
        of equal windows)."""
        passages = self.evidence.passages
        sequence = self._sequence[source]
        for position, i in enumerate(sequence):
            if not window.text.startswith(passages[i].text):
                continue
            text = passages[i].text
            for last in range(position, len(sequence)):
                if last > position:
                    text = f"{text} {passages[sequence[last]].text}"
                if text == window.text:
                    return tuple(sequence[position:last + 1])
                if len(text) >= len(window.text):
                    break
        return None

    def _reference_spans(self, chosen: set[int]) -> tuple[tuple[int, int], ...]:
        """Character spans of the document covering the chosen passages, neighbours joined, in order."""
        spans: list[list[int]] = []
        previous = None
        for i in sorted(chosen):
            start, end = self._starts[i]
            if previous is not None and i == previous + 1:
                spans[-1][1] = end
            else:
                spans.append([start, end])
            previous = i
        return tuple((a, b) for a, b in spans)

    def _render_reference(self, spans: Sequence[tuple[int, int]]) -> str:
        document = self.document or ""
        parts = [OMITTED] if spans and spans[0][0] > 0 else []
        for n, (start, end) in enumerate(spans):
            if n:
                parts.append(OMITTED)
            parts.append(document[start:end])
        if spans and document[spans[-1][1]:].strip():
            parts.append(OMITTED)
        return "\n".join(parts)

    def _reference_cost(self, chosen: set[int]) -> int:
        return tokens(self._render_reference(self._reference_spans(chosen)))

    def _store_cost(self, chosen: set[int]) -> int:
        return tokens(_numbered(self.knowledge, [self._numbers[i] for i in sorted(chosen)]))


def _numbered(knowledge: Sequence[str], numbers: Sequence[int]) -> str:
    """The store's claims at ``numbers`` (1-based), as ``prompts.render_knowledge`` numbers them."""
    return "\n".join(f"{n}. {knowledge[n - 1]}" for n in numbers)


def bounded_history(turns: Sequence[Turn], budget: int | None) -> str:
    """The dialogue before a turn as the prompts show it (``prompts.render_history``), within ``budget`` tokens (None:
    all of it), with a line saying how many earlier turns are not shown.

    Cut where a server's prefix cache loses least: the history starts at an anchor -- a turn where the dialogue's
    running length passes a multiple of half the budget, the same turns for every later prompt -- the earliest anchor
    from which the rest fits. Consecutive prompts then share their history's start (the cache serves it) until the
    history outgrows the budget, and it shows between half the budget and all of it; sliding by one turn per prompt
    would make the cache read the whole history again each time. When no anchor leaves a history that fits, the last
    turns within the budget (at least one)."""
    from ..prompts import render_line

    if not turns:
        return NO_HISTORY
    lines = [render_line(turn.role, turn.text) for turn in turns]
    costs = [tokens(line) + 1 for line in lines]
    if budget is None or sum(costs) <= budget:
        return "\n".join(lines)
    half = max(budget // 2, 1)
    anchors, running, mark = [], 0, 0
    for index, cost in enumerate(costs):
        if running >= mark:
            anchors.append(index)
            mark = (running // half + 1) * half
        running += cost
    tail = [sum(costs[a:]) for a in anchors]
    start = next((a for a, rest in zip(anchors, tail) if rest <= budget), None)
    if start is None:
        start, used = len(lines) - 1, costs[-1]
        while start > 0 and used + costs[start - 1] <= budget:
            start -= 1
            used += costs[start]
    return "\n".join(([EARLIER_TURNS.format(n=start)] if start else []) + lines[start:])

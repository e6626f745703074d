"""Where in its turn each claim was said: character spans of the turn's text, found with no LM call.

Decompose rewrites what it takes from a turn (a pronoun becomes the name it stands for, a presupposition a statement
of its own), so a claim is seldom a substring of its turn. Each claim is aligned in the first way that finds it:

- ``exact``: its own text (case, spacing and final punctuation aside) occurs in the turn; a coverage claim, a
  sentence of the turn, always does;
- ``words``: at least half of its content words (``grounding``'s crude stems, numbers kept; a word whose stem the
  turn lacks stands for the turn's closest word when difflib's similarity ratio reaches 0.8: Tromso ~ Tromsø) are in
  the turn. The span is the shortest stretch of the sentence holding most of them that holds all of those, plus the
  stretch of any other sentence holding two or more of the rest that are not names (a name alone is what a resolved
  pronoun brings: "He directed it." gives "Hayao Miyazaki directed Spirited Away" that sentence's span only);
- ``unaligned``: neither: no span rather than a wrong one.

Where two places fit equally (a phrase said twice), a claim takes the first at or after the previous claim's place
that no earlier claim took: Decompose lists claims in the order the turn says them (and coverage adds its sentences
after them, in the turn's order). Deterministic: the same turn and claims give the same spans.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple, TypeVar

from .grounding import content_stem, split_sentences

if TYPE_CHECKING:
    from .schema import ClaimVerdict, TurnVerdict

Span = tuple[int, int]
Alignment = Literal["exact", "words", "unaligned"]
# A claim is aligned when at least this share of its content words is found in the span(s) (grounding's share).
ALIGNED_SHARE = 0.5
# difflib.SequenceMatcher ratio from which a claim's word stands for a turn's word it does not share a stem with.
CLOSE_RATIO = 0.8
# Words (not names) of the claim that another sentence must hold to add its span.
EXTRA_WORDS = 2
# What a content word that is not the claim's costs a span that stretches over it, in the claim's words.
STRETCH_COST = 0.25
_TOKEN = re.compile(r"\w+")
_FINAL = ".!?;:,"


@dataclass(frozen=True)
class Aligned:
    spans: tuple[Span, ...]
    how: Alignment


UNALIGNED = Aligned((), "unaligned")


class _Word(NamedTuple):  # (a tuple: made for every word of every turn, it is built four times as fast)
    word: str  # lowercased
    stem: str
    start: int
    end: int
    name: bool  # capitalised where it is said


def _words(text: str, start: int = 0, end: int | None = None) -> list[_Word]:
    """The content words of ``text[start:end]`` in order, with their offsets in ``text``."""
    found = []
    for match in _TOKEN.finditer(text, start, len(text) if end is None else end):
        word = match.group().lower()
        stem = word if word.isdigit() else content_stem(word)
        if stem:
            found.append(_Word(word, stem, match.start(), match.end(), match.group()[0].isupper()))
    return found


def _sentence_bounds(text: str) -> list[Span]:
    """Each sentence of ``text`` (``grounding.split_sentences``) as offsets, in order."""
    bounds, cursor = [], 0
    for sentence in split_sentences(text):
        start = text.find(sentence, cursor)
        if start >= 0:
            bounds.append((start, start + len(sentence)))
            cursor = start + len(sentence)
    return bounds or [(0, len(text))]


def _occurrences(text: str, claim: str) -> list[Span]:
    """Where ``claim``'s text occurs in ``text`` as whole words (case, spacing and final punctuation aside)."""
    words = claim.strip().rstrip(_FINAL).split()
    if not words or not _TOKEN.search(" ".join(words)):
        return []
    return (_ascii_occurrences if text.isascii() and claim.isascii() else _pattern_occurrences)(text, words)


def _pattern_occurrences(text: str, words: Sequence[str]) -> list[Span]:
    """``_occurrences``' matches: ``words`` separated by spaces, whole words, case aside."""
    pattern = r"(?<!\w)" + r"\s+".join(map(re.escape, words)) + r"(?!\w)"
    return [match.span() for match in re.finditer(pattern, text, re.IGNORECASE)]


def _ascii_occurrences(text: str, words: Sequence[str]) -> list[Span]:
    """``_pattern_occurrences``' matches for an ASCII text and claim, found by string search instead of a regular expression
    compiled for each claim (a compilation costs more than the rest of a claim's alignment with no LM, and floods the
    ``re`` module's cache that pysbd's patterns live in). The same matches: on ASCII, IGNORECASE is ``str.lower``,
    ``\\s`` is ``str.isspace`` and ``\\w`` is ``str.isalnum`` or ``_``; ``\\s+`` before a word (which starts with
    no space) takes the whole run of spaces; the search resumes after each match, as ``re.finditer``'s does."""
    lowered = text.lower()
    wanted = [word.lower() for word in words]
    spaced = " ".join(wanted)  # the words one space apart, as a sentence of the turn most often holds them
    found: list[Span] = []
    start = lowered.find(wanted[0])
    while start >= 0:
        end = start + len(wanted[0])
        if lowered.startswith(spaced, start):  # (each word starts with no space: each gap is that one space)
            end = start + len(spaced)
        else:
            for word in wanted[1:]:
                gap = end
                while gap < len(lowered) and lowered[gap].isspace():
                    gap += 1
                if gap == end or not lowered.startswith(word, gap):
                    end = -1
                    break
                end = gap + len(word)
        if end >= 0 and not (start and _word_char(lowered[start - 1])) and not (
                end < len(lowered) and _word_char(lowered[end])):
            found.append((start, end))
            start = lowered.find(wanted[0], end)
        else:
            start = lowered.find(wanted[0], start + 1)
    return found


def _word_char(char: str) -> bool:
    return char.isalnum() or char == "_"


def _windows(words: Sequence[_Word], targets: set[str]) -> tuple[tuple[float, int], list[tuple[Span, set[str]]]]:
    """The best stretches of ``words`` for ``targets``, and their score: the claim's words a stretch holds, less
    ``STRETCH_COST`` per other content word inside it (a resolved name at a sentence's start does not stretch the
    span over the clause between); equal scores keep the one holding more of them. Several stretches when a phrase
    repeats: each with the targets it holds."""
    best: tuple[float, int] = (0.0, 0)
    found: list[tuple[Span, set[str]]] = []
    for i, first in enumerate(words):
        if first.stem not in targets:
            continue
        held: set[str] = set()
        others = 0
        for last in words[i:]:
            if last.stem not in targets:
                others += 1
                continue
            held.add(last.stem)
            key = (len(held) - STRETCH_COST * others, len(held))
            if key > best:
                best, found = key, []
            if key == best:
                found.append(((first.start, last.end), set(held)))
    # A stretch holding another of the same score is that one with words of no use around it.
    found = [(span, held) for span, held in found
             if not any(o != span and span[0] <= o[0] and o[1] <= span[1] for o, _ in found)]
    return best, found


def _pick(places: Sequence[Span], cursor: int, taken: set[Span]) -> Span:
    """Of equally good places, the first at or after ``cursor`` that no earlier claim took, else the first not
    taken, else the first at or after ``cursor``, else the first."""
    ordered = sorted(places)
    for fits in (lambda s: s[0] >= cursor and s not in taken, lambda s: s not in taken, lambda s: s[0] >= cursor):
        for place in ordered:
            if fits(place):
                return place
    return ordered[0]


class _Turn:
    """A turn's sentences and content words, read once for all its claims -- and only for a claim that its own text
    does not find (a turn whose claims are its sentences never needs them)."""

    def __init__(self, text: str) -> None:
        self.text = text

    @functools.cached_property
    def sentences(self) -> list[list[_Word]]:
        return [_words(self.text, start, end) for start, end in _sentence_bounds(self.text)]

    @functools.cached_property
    def stem_of(self) -> dict[str, str]:
        return {w.word: w.stem for sentence in self.sentences for w in sentence}

    @functools.cached_property
    def vocabulary(self) -> list[str]:
        return sorted(self.stem_of)

    @functools.cached_property
    def stems(self) -> set[str]:
        return set(self.stem_of.values())

    def _targets(self, claim: str) -> dict[str, str | None]:
        """{each content stem of the claim: the turn's stem it stands for, or None}."""
        targets: dict[str, str | None] = {}
        for word in _words(claim):
            if word.stem in targets:
                continue
            if word.stem in self.stems:
                targets[word.stem] = word.stem
            else:
                close = difflib.get_close_matches(word.word, self.vocabulary, n=1, cutoff=CLOSE_RATIO)
                targets[word.stem] = self.stem_of[close[0]] if close else None
        return targets

    def align(self, claim: str, cursor: int, taken: set[Span]) -> tuple[Aligned, Span | None]:
        """The claim's alignment, and its main span (where the next claim's search starts)."""
        occurrences = _occurrences(self.text, claim)
        if occurrences:
            place = _pick(occurrences, cursor, taken)
            return Aligned((place,), "exact"), place
        targets = self._targets(claim)
        wanted = {t for t in targets.values() if t is not None}
        best = [_windows(sentence, wanted) for sentence in self.sentences]
        top = max((key for key, _ in best), default=(0.0, 0))
        if not top[1]:
            return UNALIGNED, None
        places = {span: (i, held) for i, (key, found) in enumerate(best) if key == top for span, held in found}
        main = _pick(list(places), cursor, taken)
        spans, (sentence, found) = [main], places[main]
        for i in range(len(self.sentences)):
            rest = wanted - found
            if i == sentence or not rest:
                continue
            _, extra = _windows(self.sentences[i], rest)
            plain = {w.stem for w in self.sentences[i] if w.stem in rest and not w.name}
            if extra and len(plain & extra[0][1]) >= EXTRA_WORDS:
                spans.append(extra[0][0])
                found = found | extra[0][1]
        if sum(t in found for t in targets.values()) < ALIGNED_SHARE * len(targets):
            return UNALIGNED, None
        return Aligned(tuple(sorted(spans)), "words"), main


def align_claims(turn: str, claims: Sequence[str], coverage: Sequence[bool] = ()) -> list[Aligned]:
    """Each claim's span(s) in ``turn`` (see the module docstring). ``coverage``: per claim, whether coverage added
    it (those come after Decompose's claims, in the turn's order, so their search starts again at the turn's
    start)."""
    reading = _Turn(turn)
    cursor, taken, aligned = 0, set(), []
    for i, claim in enumerate(claims):
        if i < len(coverage) and coverage[i] and (i == 0 or not coverage[i - 1]):
            cursor = 0
        alignment, main = reading.align(claim, cursor, taken)
        if main is not None:
            cursor = main[0]
            taken.add(main)
        aligned.append(alignment)
    return aligned


def with_spans(turn: str, claims: Sequence[ClaimVerdict]) -> list[ClaimVerdict]:
    """The verdicts of a turn's claims with their spans in ``turn`` and how they were found."""
    aligned = align_claims(turn, [c.claim for c in claims], [c.added_by == "coverage" for c in claims])
    return [c.model_copy(update={"spans": list(a.spans), "alignment": a.how}) for c, a in zip(claims, aligned)]


T = TypeVar("T")


def cut(text: str, marks: Sequence[tuple[Span, T]]) -> list[tuple[str, list[T]]]:
    """``text`` cut at both ends of every mark: its pieces in order, each with the marks that cover it (in the
    order given)."""
    ends = sorted({0, len(text), *(min(max(p, 0), len(text)) for span, _ in marks for p in span)})
    return [(text[a:b], [mark for (start, end), mark in marks if start <= a and b <= end])
            for a, b in zip(ends, ends[1:]) if a < b]


def where(claim: ClaimVerdict) -> str:
    """A claim's place in its turn, for a terminal: ``chars 0-35`` (several: ``chars 0-12, 40-61``), ``not found in
    the turn``, or nothing for a record written before spans existed."""
    if claim.alignment is None:
        return ""
    if not claim.spans:
        return "not found in the turn"
    return "chars " + ", ".join(f"{start}-{end}" for start, end in claim.spans)


# Which unsafe category a piece of the turn shows when several claims cover it: the graver first.
_GRAVITY = ("CONTRADICTED", "LACKING EVIDENCE")


def unsafe_parts(turn: TurnVerdict) -> list[dict[str, str | None]]:
    """The turn's text in pieces for a page that highlights its unsafe claims: each piece's ``text``, and for a piece
    an unsafe claim was said in, its ``category`` (the graver when several) and a ``note`` naming each such claim with
    its category and explanation."""
    unsafe = sorted((c for c in turn.claims if c.category.value in _GRAVITY),
                    key=lambda c: _GRAVITY.index(c.category.value))
    marks = [(span, claim) for claim in unsafe for span in claim.spans]
    return [{"text": text,
             "category": covering[0].category.value if covering else None,
             "note": "\n".join(f"{c.category.value}: \u201c{c.claim}\u201d \u2014 {c.explanation or 'no reason given'}"
                               for c in covering) or None}
            for text, covering in cut(turn.text, marks)]

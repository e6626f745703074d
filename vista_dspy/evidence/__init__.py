"""Evidence cues of a claim, computed by the program with no LM call: how much of the claim the turn's sources say,
whether it is about a speaker, an opinion, a hedge. A decision rule (``decision``) weighs them with the judge's
label probabilities. Beside them, the checks (``CHECKS``) that no fitted weight overrides (``decision.decide``): a
figure or a name that no source holds (``figures``), a speaker's own remark, an evaluative word; and what an
explanation cites (``TurnEvidence.support``: the passage that shares most of a claim; ``unsaid``: its words that
passage lacks).

Every source is read locally (issue 60): a claim is read against, in each source, the window that shares most of its
content words (``TurnEvidence.local``: a sentence with its neighbours in the same paragraph; a claim of the store
with those beside it), never against the bag of all the sources' words. Coverage cues are shares of the claim's
content words (``grounding.content_words``: crude stems, without function words and speaker words) that those
windows do NOT contain -- the reference document's, the knowledge store's, the dialogue before the turn's, and the
three together; the figure and name checks and the explanations read the same windows. Text added to the sources
that does not support the claim better than what was there changes no cue. The speaker cue treats "I", "my", "you",
"the assistant", "the wizard" and "the user" alike, so it does not depend on how an annotator or a decomposer names
the speakers. Each cue is a number in [0, 1].
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..grounding import TEXT_CACHE, content_stem, content_words, split_sentences
from ..schema import Dialogue
from .figures import Figure, SourceFigures, figures

CUES: tuple[str, ...] = (
    "uncovered_reference",  # share of content words not in the reference document (1 without one)
    "uncovered_knowledge",  # ... not in the knowledge store
    "uncovered_history",  # ... not in the dialogue before the turn
    "uncovered_all",  # ... in none of the three
    "speaker",  # the claim names or addresses a speaker: I, my, you, the assistant, the user, ...
    "opinion",  # preference, opinion or evaluation words
    "hedge",  # uncertainty or refusal
    "speaker_opinion",  # both: a self-description or a personal view
    "attributed",  # a speaker is only the frame of a content clause: "the assistant thinks that the museum ..."
    "length",  # content words / 12, at most 1
    "question",  # a question mark
    "coverage",  # a sentence of the turn that no claim covered, judged as a claim of its own (grounding.coverage)
)
# Checks: 0/1 values a verdict carries beside its cues, read by ``decision.decide`` as rules of VISTA's categories, not
# weighed by a fitted model (the probes recorded before them lack them; a rule that weighs them is a later fit).
CHECKS: tuple[str, ...] = (
    "figure_lacking",  # a number, quantity or date that no source holds (``figures``)
    "name_lacking",  # a proper name that no source holds
    "own_remark",  # a speaker speaks of itself: I, my, we, our, the assistant, the user ... (not a generic "you")
    "evaluative",  # an evaluative word in lower case: great, amazing, fascinating, worth, should ...
)

_WORD = re.compile(r"[a-z0-9]+")  # as ``grounding.content_words`` reads words
_SPEAKER = re.compile(r"\b(i|i'm|i've|i'd|i'll|me|my|mine|myself|we|our|us|you|your|yours|"
                      r"(the )?(assistant|user|wizard|apprentice|speaker|bot|agent))\b")
_OPINION = re.compile(r"\b(like[sd]?|love[sd]?|loving|enjoy(s|ed|ing)?|think(s|ing)?|thought|believe[sd]?|"
                      r"feel(s|ing)?|felt|favou?rite|prefer(s|red)?|great|amazing|awesome|interesting|fun|cool|"
                      r"beautiful|best|wonderful|hope[sd]?|wish(es|ed)?|recommend(s|ed)?|should|glad|happy|"
                      r"sorry|nice|fascinating|hate[sd]?|fond|impressive|exciting|delicious|lovely|cute)\b")
_HEDGE = re.compile(r"(not sure|unsure|don't know|do not know|doesn't know|does not know|no idea|not certain|"
                    r"can't say|cannot say|can't tell|cannot tell|not aware|no information|don't have|"
                    r"do not have|unable to|couldn't find|could not find|not familiar)")
# "<speaker> thinks / says / believes (that) <clause>": the speaker frames the content.
_FRAME = re.compile(r"^\s*(the )?(assistant|user|wizard|apprentice|speaker|i|you|we)\s+(\w+\s+)?"
                    r"(think|thinks|thought|believe|believes|believed|say|says|said|mention|mentions|mentioned|"
                    r"state|states|stated|claim|claims|claimed|know|knows|heard|hears|read|learned|notes|noted)"
                    r"\s+(that\s+)?(?P<clause>.+)$")
# A speaker speaking of itself (the US is no "us"), and an evaluative word written in lower case (not "Great Neck").
_OWN = re.compile(r"\b(?:(?P<i>I|I'm|I've|I'd|I'll)|(?P<we>me|my|mine|myself|we|we're|we've|we'd|our|ours|us|"
                  r"ourselves)|(?P<role>the (?:assistant|wizard|apprentice|speaker|bot|agent|user)(?:'s)?))\b",
                  re.IGNORECASE)
_TITLE_AFTER = re.compile(r"\s+(?:the\s+)?[A-Z]")  # what follows a capitalised "We" that opens a title
_EVALUATIVE_WORDS = ("great", "amazing", "awesome", "wonderful", "fantastic", "beautiful", "gorgeous", "stunning",
                     "interesting", "fascinating", "cool", "fun", "nice", "lovely", "delicious", "exciting",
                     "impressive", "boring", "terrible", "awful", "horrible", "favou?rite", "worth",
                     "recommend(?:s|ed)?", "should", "must-see", "breathtaking", "incredible", "enjoyable", "glad",
                     "happy", "sorry")
_EVALUATIVE = re.compile(r"\b(" + "|".join(_EVALUATIVE_WORDS) + r")\b", re.IGNORECASE)
# What every match of ``_EVALUATIVE`` holds, in lower case (the letters before the first optional part): an ASCII text
# without any of them has no evaluative word, and is not searched.
_EVALUATIVE_STEMS = tuple(re.sub(r".\?.*|\(.*", "", w) for w in _EVALUATIVE_WORDS)
_FRAMED_WORDS = 3  # content words the framed clause needs to be a statement of its own
_LENGTH_SCALE = 12


@dataclass(frozen=True)
class Passage:
    """A passage of a claim's sources an explanation can cite: where it is, its text, its content words."""

    source: str  # "the reference", "the knowledge store" or "the dialogue before it"
    text: str
    words: frozenset[str]


@dataclass(frozen=True)
class Support:
    """The passage of the sources that shares most content words with a claim, and how many it shares."""

    passage: Passage
    shared: int
    of: int  # the claim's content words


SOURCES: tuple[str, ...] = ("the reference", "the knowledge store", "the dialogue before it")
# A window is a passage and its neighbours in the same source: a sentence of the reference with the sentences before
# and after it, a claim of the store with the claims beside it, a sentence of the dialogue with its neighbours.
WINDOW = 1


@dataclass(frozen=True)
class UnitEvidence:
    """What one unit is read against: in each source, the window (a passage and its neighbours) that shares most of
    the unit's content words (None: no passage of that source shares one). Every cue, check and explanation of the
    unit reads these windows, never the rest of the sources, so that unrelated text added to the sources changes
    nothing unless it supports the unit better than what was there."""

    words: frozenset[str]  # the unit's content words
    windows: tuple[Passage | None, ...]  # one per ``SOURCES``
    quotes: tuple[Passage | None, ...]  # within each window, the shortest span sharing as many words

    def covered(self, source: int) -> frozenset[str]:
        window = self.windows[source]
        return self.words & window.words if window is not None else frozenset()

    @functools.cached_property
    def figures(self) -> SourceFigures:
        return SourceFigures.of(w.text for w in self.windows if w is not None)

    @functools.cached_property
    def stems(self) -> frozenset[str]:
        return frozenset().union(*(w.words for w in self.windows if w is not None))


@dataclass(frozen=True)
class TurnEvidence:
    """The passages of one judged turn's sources, indexed by content word, computed once for all its claims; what
    each claim is read against is found per claim (``local``)."""

    has_reference: bool
    # Every source as a sequence of passages (the reference's sentences, the store's claims, the sentences of the
    # dialogue before the turn), in order; ``sequences[k]`` holds the passage indices of ``SOURCES[k]``.
    passages: tuple[Passage, ...] = ()
    sequences: tuple[tuple[int, ...], ...] = ((), (), ())
    # The paragraph of each passage: a window never leaves its centre's paragraph (a line of a document, with the title
    # line above it; the whole store; a line of one earlier turn), so that two unrelated documents that happen to be
    # neighbours in the sources are never read as one.
    paragraphs: tuple[int, ...] = ()

    @classmethod
    def of(cls, reference: str | None, knowledge: Sequence[str], history: Sequence[str]) -> TurnEvidence:
        """``reference``: the turn's document (None: judged against the store alone); ``knowledge``: the store as
        the turn is judged against it; ``history``: the texts of the turns before it. (Cached: the completions of
        one prompt share their sources.)"""
        return _turn_evidence(reference, tuple(knowledge), tuple(history))

    @classmethod
    def _read(cls, reference: str | None, knowledge: tuple[str, ...], history: tuple[str, ...]) -> TurnEvidence:
        passages: list[Passage] = []
        sequences: list[tuple[int, ...]] = []
        paragraphs: list[int] = []
        for source, texts in zip(SOURCES, ([reference or ""], knowledge, history)):
            start = len(passages)
            groups = [group for text in texts for group in _paragraphs(source, text)]
            if source == SOURCES[1]:  # the whole store is one paragraph: a window may join the claims beside it
                groups = [tuple(p for group in groups for p in group)]
            for group in groups:
                paragraphs.extend([paragraphs[-1] + 1 if paragraphs else 0] * len(group))
                passages.extend(group)
            sequences.append(tuple(range(start, len(passages))))
        return cls(bool(reference and reference.strip()), tuple(passages), tuple(sequences), tuple(paragraphs))

    def local(self, claim: str) -> UnitEvidence:
        """The windows ``claim`` is read against (cached per claim: its cues, checks and explanation share them)."""
        found = self._local.get(claim)
        if found is None:
            words = frozenset(content_words(claim))
            found_windows = [self._window(words, k) for k in range(len(SOURCES))]
            found = self._local[claim] = UnitEvidence(words, tuple(w[0] if w else None for w in found_windows),
                                                      tuple(w[1] if w else None for w in found_windows))
        return found

    def _window(self, words: frozenset[str], source: int) -> tuple[Passage, Passage] | None:
        """(window, quote) of ``SOURCES[source]`` for ``words``: the window sharing most of them (the most shared
        words; on a tie the rarer ones by inverse passage frequency, then the centre passage sharing most, then the
        first), and within it the shortest span around its centre that shares as many (what an explanation quotes);
        None when no passage of the source shares one."""
        sequence = self.sequences[source]
        if not sequence:
            return None
        first, last = sequence[0], sequence[-1]
        own: dict[int, int] = {}
        for word in words:
            for i in self._passages_with.get(word, ()):
                if first <= i <= last:
                    own[i] = own.get(i, 0) + 1
        if not own:
            return None

        paragraphs = self.paragraphs

        def bounds(i: int) -> tuple[int, int]:
            lo, hi = i, i
            while lo > first and i - lo < WINDOW and paragraphs[lo - 1] == paragraphs[i]:
                lo -= 1
            while hi < last and hi - i < WINDOW and paragraphs[hi + 1] == paragraphs[i]:
                hi += 1
            return lo, hi

        def held(lo: int, hi: int) -> list[str]:
            return [word for word in words if any(word in self.passages[i].words for i in range(lo, hi + 1))]

        def shared(lo: int, hi: int) -> int:
            return len(held(lo, hi))

        idf = self._idf
        best_key, centre = None, -1
        for i in sorted(own):
            found = held(*bounds(i))
            # Most words shared; on a tie, the rarer words (a name before "often"), then the centre sharing most.
            key = (len(found), round(sum(idf[w] for w in found), 9), own[i])
            if best_key is None or key > best_key:
                best_key, centre = key, i
        lo, hi = bounds(centre)
        spans = sorted(((a, b) for a in range(lo, centre + 1) for b in range(centre, hi + 1)),
                       key=lambda span: (span[1] - span[0], span[0] != centre))
        quote = next(span for span in spans if shared(*span) == best_key[0])
        return self._span(source, lo, hi), self._span(source, *quote)

    def _span(self, source: int, lo: int, hi: int) -> Passage:
        return Passage(SOURCES[source], " ".join(self.passages[i].text for i in range(lo, hi + 1)),
                       frozenset().union(*(self.passages[i].words for i in range(lo, hi + 1))))

    def cues(self, claim: str, *, added: bool = False) -> dict[str, float]:
        """The claim's cue values, by ``CUES`` name, and its checks, by ``CHECKS`` name; ``added``: the claim is a
        sentence that coverage added. Coverage is read against the windows of ``local``."""
        unit = self.local(claim)
        n = len(unit.words)
        lower = claim.lower()
        speaker = bool(_SPEAKER.search(lower))
        opinion = bool(_OPINION.search(lower))
        frame = _FRAME.match(lower)
        attributed = bool(frame) and len(content_words(frame.group("clause"))) >= _FRAMED_WORDS
        lacking = self.lacking(claim)

        def uncovered(*sources: int) -> float:
            return len(unit.words.difference(*(unit.covered(k) for k in sources))) / n if n else 0.0

        return {
            "uncovered_reference": uncovered(0) if self.has_reference else (1.0 if n else 0.0),
            "uncovered_knowledge": uncovered(1),
            "uncovered_history": uncovered(2),
            "uncovered_all": uncovered(0, 1, 2),
            "speaker": float(speaker),
            "opinion": float(opinion),
            "hedge": float(bool(_HEDGE.search(lower))),
            "speaker_opinion": float(speaker and opinion),
            "attributed": float(attributed),
            "length": min(n / _LENGTH_SCALE, 1.0),
            "question": float("?" in claim),
            "coverage": float(added),
            "figure_lacking": float(any(f.kind != "name" for f in lacking)),
            "name_lacking": float(any(f.kind == "name" for f in lacking)),
            "own_remark": float(_speaks_of_itself(claim)),
            "evaluative": float(_evaluates(claim)),
        }

    def lacking(self, claim: str) -> list[Figure]:
        """The figures, dates and names of ``claim`` that none of its windows holds (``figures``)."""
        return self.local(claim).figures.lacking(claim)

    def support(self, claim: str) -> Support | None:
        """The window sharing most of the claim's content words (the reference first, then the store, then the
        dialogue before it, on ties); None when no passage shares one."""
        unit = self.local(claim)
        best = max(range(len(SOURCES)), key=lambda k: (len(unit.covered(k)), -k))
        quote = unit.quotes[best]
        if quote is None:
            return None
        return Support(quote, len(unit.covered(best)), len(unit.words))

    def unsaid(self, claim: str) -> list[str]:
        """The claim's content words (as lower-case words) whose stem none of its windows holds, in order, once."""
        sources = self.local(claim).stems
        seen: set[str] = set()
        out = []
        for word in _WORD.findall(claim.lower()):
            stem = content_stem(word)
            if stem and stem not in sources and stem not in seen:
                seen.add(stem)
                out.append(word)
        return out

    def reference_figure_texts(self, claim: str, kinds: frozenset[str]) -> tuple[str, ...]:
        """The figures of these kinds ("number", "date") that the claim's reference window gives, as written, in
        order, each once."""
        window = self.local(claim).windows[0]
        if window is None:
            return ()
        return tuple(dict.fromkeys(f.text for f in _reference_figures(window.text) if f.kind in kinds))

    # Found once per claim and per turn's sources (the evidence is cached per prompt), not once per cue.
    @functools.cached_property
    def _local(self) -> dict[str, UnitEvidence]:
        return {}

    @functools.cached_property
    def _idf(self) -> dict[str, float]:
        """{content word: its inverse passage frequency}, BM25's: what breaks a tie between two windows sharing as
        many of a unit's words (only ever a tie-break: how many words a window shares does not depend on the rest)."""
        n = len(self.passages)
        return {word: math.log((n - len(found) + 0.5) / (len(found) + 0.5) + 1.0)
                for word, found in self._passages_with.items()}

    @functools.cached_property
    def _passages_with(self) -> dict[str, tuple[int, ...]]:
        """{content word: the indices of the passages holding it}."""
        index: dict[str, list[int]] = {}
        for i, passage in enumerate(self.passages):
            for word in passage.words:
                index.setdefault(word, []).append(i)
        return {word: tuple(found) for word, found in index.items()}


@functools.lru_cache(maxsize=128)  # a turn's, read for each of its claims (and each completion of a prompt)
def _turn_evidence(reference: str | None, knowledge: tuple[str, ...], history: tuple[str, ...]) -> TurnEvidence:
    return TurnEvidence._read(reference, knowledge, history)


def own_words(claim: str) -> list[str]:
    """The words by which a speaker speaks of itself in ``claim`` ("I", "my", "the assistant"; not "US", nor the "We"
    of a title such as "We the Living")."""
    return [m.group() for m in _OWN.finditer(claim) if _own(claim, m)]


def _own(claim: str, match: re.Match) -> bool:
    word = match.group()
    return word != "US" and not (word[0].isupper() and _TITLE_AFTER.match(claim, match.end()))


def _speaks_of_itself(claim: str) -> bool:
    """``bool(own_words(claim))``, stopping at the first."""
    return any(_own(claim, m) for m in _OWN.finditer(claim))


def evaluative_words(claim: str) -> list[str]:
    """The evaluative words of ``claim`` written in lower case ("great", not the "Great" of "Great Neck")."""
    return list(_evaluative(claim))


def _evaluates(claim: str) -> bool:
    """``bool(evaluative_words(claim))``, stopping at the first."""
    return next(_evaluative(claim), None) is not None


def _evaluative(claim: str) -> Iterator[str]:
    if claim.isascii() and not _may_evaluate(claim.lower()):
        return
    yield from (m.group() for m in _EVALUATIVE.finditer(claim) if m.group()[0].islower())


def _may_evaluate(lower: str) -> bool:
    """Whether a lower-cased ASCII text holds the letters an evaluative word starts with (on ASCII, ``_EVALUATIVE``'s
    IGNORECASE is ``str.lower``: a text without them has no match)."""
    return any(stem in lower for stem in _EVALUATIVE_STEMS)


def remark_marks(claim: str) -> tuple[list[str], list[str], list[str]]:
    """The words that make ``claim`` a remark, as an explanation quotes them: (a speaker speaking of itself or
    addressed -- "I", "my", "you" --, opinion or evaluative words, hedge or refusal words)."""
    lower = claim.lower()
    opinion = [m.group() for m in _OPINION.finditer(lower)] if _SPEAKER.search(lower) else []
    speakers = own_words(claim) or ([m.group() for m in _SPEAKER.finditer(lower)] if opinion else [])
    return (list(dict.fromkeys(speakers)), list(dict.fromkeys(evaluative_words(claim) + opinion)),
            list(dict.fromkeys(m.group() for m in _HEDGE.finditer(lower))))


_ENDS_A_SENTENCE = tuple(".!?:;\"\u201d')]")
_TITLE_WORDS = 12


@functools.lru_cache(maxsize=TEXT_CACHE)
def _paragraphs(source: str, text: str) -> tuple[tuple[Passage, ...], ...]:
    """The paragraphs of one source text, each a tuple of sentence passages: a line is a paragraph, and a short line
    that ends no sentence (a title: "Tromsø climate") opens the paragraph of the line below it. A store claim is one
    passage. Read once per text."""
    if source == SOURCES[1]:
        return ((Passage(source, text, frozenset(content_words(text))),),) if text.strip() else ()
    groups: list[list[Passage]] = []
    title: list[Passage] = []
    for line in text.splitlines():
        found = [Passage(source, s, frozenset(content_words(s))) for s in split_sentences(line) if s.strip()]
        if not found:
            continue
        stripped = line.strip()
        if len(found) == 1 and not stripped.endswith(_ENDS_A_SENTENCE) and len(stripped.split()) <= _TITLE_WORDS:
            if title:
                groups.append(title)
            title = found
            continue
        groups.append(title + found)
        title = []
    if title:
        groups.append(title)
    return tuple(tuple(g) for g in groups)


@functools.lru_cache(maxsize=TEXT_CACHE)
def _reference_figures(reference: str) -> tuple[Figure, ...]:
    return tuple(f for f in figures(reference, source=True) if f.kind != "name")


def evidence_of(dialogue: Dialogue, index: int, knowledge: Sequence[str]) -> TurnEvidence:
    """The evidence of judged turn ``index`` against ``knowledge`` (the store as the turn is judged against it)."""
    turn = dialogue.turns[index]
    return TurnEvidence.of(turn.grounding.document if turn.grounding else None, knowledge,
                           [t.text for t in dialogue.turns[:index]])


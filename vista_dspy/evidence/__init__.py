"""Evidence cues of a claim, computed by the program with no LM call: how much of the claim the turn's sources say,
whether it is about a speaker, an opinion, a hedge. A decision rule (``decision``) weighs them with the judge's
label probabilities. Beside them, the checks (``CHECKS``) that no fitted weight overrides (``decision.decide``): a
figure or a name that no source holds (``figures``), a speaker's own remark, an evaluative word; and what an
explanation cites (``TurnEvidence.support``: the passage that shares most of a claim; ``unsaid``: its words no
source holds).

Coverage cues are shares of the claim's content words (``grounding.content_words``: crude stems, without function
words and speaker words) that its sources do NOT contain -- the reference document, the knowledge store, the dialogue
before the turn, and all three together. The speaker cue treats "I", "my", "you", "the assistant", "the wizard" and
"the user" alike, so it does not depend on how an annotator or a decomposer names the speakers. Each cue is a number
in [0, 1].
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ..grounding import content_stem, content_words, split_sentences
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


@dataclass(frozen=True)
class TurnEvidence:
    """The content words, figures and passages of one judged turn's sources, computed once for all its claims."""

    reference: frozenset[str]
    knowledge: frozenset[str]
    history: frozenset[str]
    figures: SourceFigures = SourceFigures(frozenset(), frozenset())
    passages: tuple[Passage, ...] = ()
    reference_figures: tuple[Figure, ...] = ()  # the reference's numbers and dates, as written

    @classmethod
    def of(cls, reference: str | None, knowledge: Sequence[str], history: Sequence[str]) -> TurnEvidence:
        """``reference``: the turn's document (None: judged against the store alone); ``knowledge``: the store as
        the turn is judged against it; ``history``: the texts of the turns before it. (Cached: the completions of
        one prompt share their sources.)"""
        return _turn_evidence(reference, tuple(knowledge), tuple(history))

    @classmethod
    def _read(cls, reference: str | None, knowledge: tuple[str, ...], history: tuple[str, ...]) -> TurnEvidence:
        passages = [p for source, texts in (("the reference", [reference or ""]), ("the knowledge store", knowledge),
                                            ("the dialogue before it", history))
                    for text in texts for p in _passages(source, text)]
        return cls(frozenset(content_words(reference or "")), frozenset(content_words(" ".join(knowledge))),
                   frozenset(content_words(" ".join(history))), SourceFigures.of([reference or "", *knowledge, *history]),
                   tuple(passages), _reference_figures(reference or ""))

    def cues(self, claim: str, *, added: bool = False) -> dict[str, float]:
        """The claim's cue values, by ``CUES`` name, and its checks, by ``CHECKS`` name; ``added``: the claim is a
        sentence that coverage added."""
        words = content_words(claim)
        lower = claim.lower()
        n = len(words)
        # Shares of the claim's words a source lacks: set differences (counted as a loop over the words counted them).
        speaker = bool(_SPEAKER.search(lower))
        opinion = bool(_OPINION.search(lower))
        frame = _FRAME.match(lower)
        attributed = bool(frame) and len(content_words(frame.group("clause"))) >= _FRAMED_WORDS
        lacking = self.lacking(claim)
        return {
            "uncovered_reference": (len(words - self.reference) / n if self.reference else 1.0) if n else 0.0,
            "uncovered_knowledge": len(words - self.knowledge) / n if n else 0.0,
            "uncovered_history": len(words - self.history) / n if n else 0.0,
            "uncovered_all": len(words.difference(self.reference, self.knowledge, self.history)) / n if n else 0.0,
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
        """The figures, dates and names of ``claim`` that none of the turn's sources holds (``figures``)."""
        return self.figures.lacking(claim)

    def support(self, claim: str) -> Support | None:
        """The passage of the sources sharing most of the claim's content words (the reference first, then the
        store, then the dialogue before it, on ties); None when no passage shares one."""
        words = content_words(claim)
        shared: dict[int, int] = {}
        for word in words:
            for i in self._passages_with.get(word, ()):
                shared[i] = shared.get(i, 0) + 1
        if not shared:
            return None
        most = max(shared.values())
        best = min(i for i, n in shared.items() if n == most)  # the first passage sharing the most
        return Support(self.passages[best], most, len(words))

    def unsaid(self, claim: str) -> list[str]:
        """The claim's content words (as lower-case words) whose stem none of the sources holds, in order, once."""
        sources = self._words
        seen: set[str] = set()
        out = []
        for word in _WORD.findall(claim.lower()):
            stem = content_stem(word)
            if stem and stem not in sources and stem not in seen:
                seen.add(stem)
                out.append(word)
        return out

    def reference_figure_texts(self, kinds: frozenset[str]) -> tuple[str, ...]:
        """The reference's figures of these kinds ("number", "date"), as written, in order, each once."""
        if kinds not in self._figure_texts:
            self._figure_texts[kinds] = tuple(dict.fromkeys(f.text for f in self.reference_figures if f.kind in kinds))
        return self._figure_texts[kinds]

    # Read once per turn's sources (the evidence is cached per prompt), not once per claim.
    @functools.cached_property
    def _figure_texts(self) -> dict[frozenset[str], tuple[str, ...]]:
        return {}

    @functools.cached_property
    def _words(self) -> frozenset[str]:
        return self.reference | self.knowledge | self.history

    @functools.cached_property
    def _passages_with(self) -> dict[str, tuple[int, ...]]:
        """{content word: the indices of the passages holding it}."""
        index: dict[str, list[int]] = {}
        for i, passage in enumerate(self.passages):
            for word in passage.words:
                index.setdefault(word, []).append(i)
        return {word: tuple(found) for word, found in index.items()}


@functools.lru_cache(maxsize=256)
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


@functools.lru_cache(maxsize=8192)
def _passages(source: str, text: str) -> tuple[Passage, ...]:
    """The sentences of one source text as passages (a store claim is one passage): read once per text."""
    sentences = [text] if source == "the knowledge store" else [
        s for line in text.splitlines() for s in split_sentences(line)]
    return tuple(Passage(source, s, frozenset(content_words(s))) for s in sentences if s.strip())


@functools.lru_cache(maxsize=1024)
def _reference_figures(reference: str) -> tuple[Figure, ...]:
    return tuple(f for f in figures(reference, source=True) if f.kind != "name")


def evidence_of(dialogue: Dialogue, index: int, knowledge: Sequence[str]) -> TurnEvidence:
    """The evidence of judged turn ``index`` against ``knowledge`` (the store as the turn is judged against it)."""
    turn = dialogue.turns[index]
    return TurnEvidence.of(turn.grounding.document if turn.grounding else None, knowledge,
                           [t.text for t in dialogue.turns[:index]])


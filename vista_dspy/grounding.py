"""Whether Decompose's claims come from the turn it decomposed, and whether they cover it. Come from: : a claim whose content words are mostly absent from
the turn, the dialogue before it and the dialogue's background was not said there (a small model copies its demos'
claims), so it is neither judged nor accepted into the knowledge store. Lexical, no LM: a copied claim shares
almost no word with the turn, so a crude stem is enough. Cover: a sentence of the turn most of whose content words
no claim carries holds content that would go unjudged; with ``coverage`` on, it is judged as a claim of its own.
And the units a turn is judged in without Decompose: its sentences, or their clauses (``TEXT_UNITS``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence

import pysbd

_WORD = re.compile(r"[a-z0-9]+")
# Function words, and the words a claim adds when it restates who said what ("the assistant thinks that ...").
_IGNORED = frozenset("""
a an the of to is are was were be been being am and or but if so than then that this these those it its in on at for
with as by from about into over after before up out not no yes do does did has have had will would can could should
may might must shall there here which who whom what when where why how all any some many much more most other such
only just also very really too one i me my mine you your yours we us our he him his she her hers they them their
assistant user speaker wizard apprentice person someone says said say states stated state mentions mentioned mention
thinks think thought believes believe believed feels feel felt likes like liked loves love enjoys enjoy knows know
wants want told tell tells claims claim
""".split())
# A claim is grounded when at least this share of its content words occur in its sources.
GROUNDED_SHARE = 0.5
# A turn with at least this many content words says something: no claim from it is flagged.
CONTENT_WORDS = 4


def _stem(word: str) -> str:
    """Crude stem: the first four letters of a longer word (smoke ~ smoking, directed ~ director, sold ~ sold),
    a short word without its plural s (cars ~ car)."""
    return word[:4] if len(word) > 4 else word.rstrip("s") or word


def content_stem(word: str) -> str | None:
    """The stem ``content_words`` keeps for one lowercased word, or None for a function or speaker word."""
    return _stem(word) if len(word) > 1 and word not in _IGNORED else None


def content_words(text: str) -> set[str]:
    return {_stem(w) for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in _IGNORED}


def grounded(claim: str, sources: set[str]) -> bool:
    """Whether ``claim`` is made of the words of ``sources`` (``content_words`` of the turn and what precedes it)."""
    words = content_words(claim)
    return not words or sum(w in sources for w in words) >= GROUNDED_SHARE * len(words)


def split_grounded(claims: Iterable[str], sources_text: str) -> tuple[list[str], list[str]]:
    """(claims grounded in ``sources_text``, claims that are not), each in order."""
    sources = content_words(sources_text)
    kept: list[str] = []
    dropped: list[str] = []
    for claim in claims:
        (kept if grounded(claim, sources) else dropped).append(claim)
    return kept, dropped


def says_something(turn: str) -> bool:
    """Whether a turn has enough content words that an empty decomposition is suspect."""
    return len(content_words(turn)) >= CONTENT_WORDS


def split_sentences(text: str) -> list[str]:
    """The sentences of a turn, by pysbd's rule-based English segmenter (no data download; abbreviations such as
    "Dr." or "p.m." do not end a sentence); pieces without a word are dropped."""
    return list(_sentences(text.strip()))


# Entries of each cache of text reading (sentences, paragraphs, figures): what recurs is a turn's texts within its
# dialogue (a document read for every claim, a history for every turn) and a prompt's within its completions (a
# reward's group), not the texts of dialogues long judged, which never recur in a run; at a few entries a dialogue, the
# caches are full after about a hundred dialogues and a long run's memory stays flat (benchmarks/growth.py (c)). A
# pass over a set judged again (a study's trials) splits its texts again: ~0.5 ms a text.
TEXT_CACHE = 512


@functools.lru_cache(maxsize=TEXT_CACHE)
def _sentences(text: str) -> tuple[str, ...]:
    """A segmenter per text (pysbd keeps the text it works on as state); the same text (a document, a turn judged
    again) is split once: pysbd's regular expressions cost ~0.5 ms a text, most of a judgement with no LM."""
    if not text:
        return ()
    segmenter = pysbd.Segmenter(language="en", clean=False)
    found = segmenter.processor(text).process()
    # (An empty sentence, never seen, would match everywhere: pysbd's own search then.)
    sentences = _in_text(text, found) if all(found) else segmenter.segment(text)
    return tuple(s.strip() for s in sentences if re.search(r"\w", s))  # not a stray "." of tokenized text


def _in_text(text: str, sentences: Sequence[str]) -> list[str]:
    """What ``pysbd.Segmenter(clean=False).segment(text)`` returns for the (non-empty) sentences its processor found:
    each found again in ``text`` with the spaces after it -- its first occurrence ending after the previous one's -- by string
    search. pysbd finds each with a regular expression made for that sentence (``re.escape(sentence) + r"\\s*"``):
    one compilation per new sentence, which cost as much as the rest of the split and pushed pysbd's own patterns
    out of the ``re`` module's cache (512 patterns). The same pieces: the sentence is matched literally, ``\\s`` is
    ``str.isspace``, and the search resumes after each match as ``re.finditer``'s does."""
    pieces, previous_end = [], 0
    for sentence in sentences:
        start = text.find(sentence)
        while start >= 0:
            end = start + len(sentence)
            while end < len(text) and text[end].isspace():
                end += 1
            if end > previous_end:
                pieces.append(text[start:end])
                previous_end = end
                break
            start = text.find(sentence, end)
    return pieces


# A sentence is uncovered when at least this share of its content words occur in no claim of its turn (measured on
# the 1.5B model's recorded probe of the seed on the dev file: 52 of its 118 judged turns hold such a sentence).
UNCOVERED_SHARE = 0.5
# ... and it has at least this many content words ("Sure!", "That's cool." carry nothing to judge).
COVERAGE_WORDS = 2


def uncovered_sentences(turn: str, claims: Sequence[str]) -> list[str]:
    """The sentences of ``turn`` whose content no claim carries, in order: statements (not questions) with at least
    ``COVERAGE_WORDS`` content words, ``UNCOVERED_SHARE`` or more of them in no claim. A turn that says something
    (``says_something``) but got no claim at all gets every sentence with a content word (questions only when it has nothing else), so
    that it never ends with no claim."""
    if not claims and not says_something(turn):
        return []  # "Sure, happy to help!" holds nothing to judge
    carried = content_words(" ".join(claims))
    sentences = split_sentences(turn)
    found = []
    for sentence in sentences:
        words = content_words(sentence)
        if sentence.endswith("?") or len(words) < (1 if not claims else COVERAGE_WORDS):
            continue
        if sum(w not in carried for w in words) >= UNCOVERED_SHARE * len(words):
            found.append(sentence)
    if not claims and not found:
        found = [s for s in sentences if content_words(s)]
    return found


def sentence_units(turn: str) -> list[str]:
    """The units a turn is judged in without Decompose (``units="sentences"``): its statements (not questions) that
    hold a content word, in order. A turn of questions and pleasantries has none: it claims nothing."""
    return [s for s in split_sentences(turn) if not s.endswith("?") and content_words(s)]


# Where a sentence's clauses part: a semicolon; a colon (not one between digits: 5:30, 3:1); a dash set off by spaces;
# a comma before a conjunction or a relative word. The conjunction stays with the clause it opens; nothing is added.
_CLAUSE_BREAK = re.compile(r"\s*(?:;|(?<!\d):(?!\d)|\s[-\u2013\u2014]\s|,\s*(?=(?:and|but|so|while|although|though|"
                           r"because|which|who|where|whereas|since|as well as)\b))\s*", re.IGNORECASE)


def clause_units(turn: str) -> list[str]:
    """The units of ``units="clauses"``: each statement of ``sentence_units`` cut where the punctuation marks a clause
    ("Lisbon is the capital, and it has seven hills." -> "Lisbon is the capital", "and it has seven hills."), the
    pieces that hold a content word, in order: closer to one checkable detail per unit than a sentence (claim-set F1
    against the annotators' claims on the suite's compile part 0.444, sentences 0.414:
    benchmarks/premise/evidence-compile.json), with no LM call and no text that the turn does not say. Cut by rule:
    the dependencies split sentences only (pysbd), and the libraries that parse clauses (spaCy, Stanza) need a parser
    model fetched at run time, which an offline install lacks and a tier that judges a thousand turns a second per
    core cannot pay for."""
    return [c for s in sentence_units(turn) for c in _CLAUSE_BREAK.split(s) if content_words(c)]


# How a turn is cut into units with no Decompose call, by ``options.units``.
TEXT_UNITS: dict[str, Callable[[str], list[str]]] = {"sentences": sentence_units, "clauses": clause_units}

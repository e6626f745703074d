"""Figures and names a unit states that none of its sources holds: numbers, quantities, dates and proper names, read
with no LM. A figure that no source holds is what a reader can check in one look ("the document says minus 4, the
turn says minus 30"), and a unit that rests on one is a factual assertion its sources do not confirm.

Numbers are compared by value, however they are written: "minus 4", "-4" and "negative four" are one figure, "30"
and "thirty" another, "1,000", "a thousand" and "one thousand" a third, "3.5 million" is 3500000, "the 1990s"
holds 1990, an ordinal ("3rd", "third") its number, and a month or a weekday its name ("Sept" is September). Number
words are read with a small table here (no number-word library is a dependency of this package). A standalone
"one", "first" or "second" in a unit is not a figure ("one of the best", "at first", "wait a second"); in a source
it counts, so that it can hold a unit's "1".

A proper name is a run of capitalised words that does not open a sentence (a sentence's first word is capitalised
whatever it is), or an acronym anywhere ("NASA"); a text written mostly in capitals has none. A source holds a name when it holds each of its content words, by
the crude stem ``grounding`` uses (first four letters: "Norway" holds "Norwegian"), case aside: a lenient match, so
that a name called missing is missing in every spelling the stem can see.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from ..grounding import TEXT_CACHE, content_stem

_UNITS = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen".split())}
_TENS = {w: 10 * i for i, w in enumerate("twenty thirty forty fifty sixty seventy eighty ninety".split(), start=2)}
_ORDINALS = {w: i for i, w in enumerate(
    "zeroth first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth "
    "fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth".split())}
_ORDINALS |= {w: 10 * i for i, w in enumerate(
    "twentieth thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth".split(), start=2)}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000,
           "trillion": 1_000_000_000_000}
_NUMBER_WORDS = {**_UNITS, **_TENS, **_ORDINALS}
_NUMBER_STARTS = frozenset({*_NUMBER_WORDS, *_SCALES, "a"})  # the words a number written in words starts with
_NEGATIVE = frozenset({"minus", "negative"})
# A unit's words that read as numbers but seldom state a figure; "100's" and "1000s" are "hundreds", "thousands".
_NOT_FIGURES = frozenset({"one", "first", "second"})
_VAGUE = re.compile(r"10+'?s")
_MONTHS = {name: number for number, names in enumerate((
    ("january", "jan"), ("february", "feb"), ("march",), ("april", "apr"), ("may",), ("june", "jun"),
    ("july", "jul"), ("august", "aug"), ("september", "sept", "sep"), ("october", "oct"), ("november", "nov"),
    ("december", "dec")), start=1) for name in names}
_WEEKDAYS = {name: number for number, names in enumerate((
    ("monday", "mon"), ("tuesday", "tue", "tues"), ("wednesday", "wed"), ("thursday", "thu", "thurs"),
    ("friday", "fri"), ("saturday", "sat"), ("sunday", "sun")), start=1) for name in names}
_DATE_WORDS = frozenset({*_MONTHS, *_WEEKDAYS})
# Abbreviations that are ordinary words as often as dates: a month or a day only written in full.
_AMBIGUOUS_DATES = frozenset({"jan", "mar", "may", "jun", "aug", "sep", "sept", "oct", "nov", "dec", "mon", "tue",
                              "wed", "thu", "fri", "sat", "sun"})
# Capitalised words that are no proper name: the pronoun I, speakers, titles.
_NOT_NAMES = frozenset({"i", "i'm", "i've", "i'd", "i'll", "ok", "okay", "mr", "mrs", "ms", "dr", "sir", "assistant",
                        "user", "wizard", "apprentice", "oh", "yes", "no", "hi", "hello", "wow", "yeah", "well"})

# A token: a numeral (with thousands separators, a decimal part, an ordinal or decade suffix), or a word.
_TOKEN = re.compile(r"(?P<num>(?<![\w.])[-\u2212]?\d(?:[\d,]*\d)?(?:\.\d+)?(?:(?:st|nd|rd|th|'?s)(?![^\W\d_]))?)"
                    r"|(?P<word>[^\W\d_]+(?:'[^\W\d_]+)?)")
_ORDINAL_SUFFIX = re.compile(r"(st|nd|rd|th)$")
_POSSESSIVE = re.compile(r"'s?$")
_DECADE = re.compile(r"\d\d(\d\d)'?s")  # a decade written with its century: "1950s"
# What, between two words, ends a sentence (or opens a quotation, a parenthesis, a title line).
_BREAK = re.compile(r"[.!?:;\"\u201c\u201d(\[\u2014\u2013\n]")


@dataclass(frozen=True)
class Figure:
    """One figure or name of a text: as written, and the key it is compared by."""

    text: str
    key: str
    kind: str  # "number", "date" or "name"


class _Token(NamedTuple):  # (a tuple: built for every word of every unit read)
    text: str
    lower: str
    start: int
    end: int
    numeral: bool
    sentence_start: bool
    gap: str  # the text between the token before and this one


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    previous = None  # where the token before ended
    for match in _TOKEN.finditer(text):
        word = match.group()
        start, end = match.span()
        gap = "" if previous is None else text[previous:start]
        tokens.append(_Token(word, word.lower(), start, end, match.group("num") is not None,
                             previous is None or (gap != " " and bool(_BREAK.search(gap))), gap))
        previous = end
    return tokens


def _number_key(value: float) -> str:
    return f"n:{round(value, 6):g}"


def _numeral(token: str) -> float | None:
    body = token.lstrip("-\u2212").rstrip("s").rstrip("'")
    body = _ORDINAL_SUFFIX.sub("", body).replace(",", "")
    try:
        value = float(body)
    except ValueError:
        return None
    return -value if token[0] in "-\u2212" else value


@functools.lru_cache(maxsize=TEXT_CACHE)
def figures(text: str, *, source: bool = False) -> tuple[Figure, ...]:
    """The figures and names of ``text``, in order. ``source``: read as a source (a standalone "one", "first" or
    "second" counts as 1 or 2). (Cached: a unit's figures are read for its cues and again for its explanation.)"""
    tokens = _tokens(text)
    letters = "".join(filter(str.isalpha, text))
    shouted = sum(map(str.isupper, letters)) > len(letters) / 2  # capitals mark no name in a text all capitals
    found: list[Figure] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        low = token.lower
        if (not token.numeral and not token.text[0].isupper() and low not in _NUMBER_STARTS and "-" not in low
                and low.rstrip(".") not in _DATE_WORDS):
            i += 1  # (most words: no number, date or name starts at a lower-case word no number word starts)
            continue
        run_end, value = _number_run(tokens, i)
        if run_end > i:
            words = [t.lower for t in tokens[i:run_end]]
            negative = i > 0 and tokens[i - 1].lower in _NEGATIVE
            begin = tokens[i - 1].start if negative else token.start
            if source or not (len(words) == 1 and (words[0] in _NOT_FIGURES or _VAGUE.fullmatch(words[0]))):
                found.append(Figure(text[begin:tokens[run_end - 1].end], _number_key(-value if negative else value),
                                    "number"))
            i = run_end
            continue
        date = _date_key(token)
        if date is not None:
            found.append(Figure(token.text, date, "date"))
            i += 1
            continue
        name_end = i if shouted else _name_run(tokens, i, text)
        if name_end > i:
            found.append(Figure(text[token.start:tokens[name_end - 1].end], _name_key(tokens[i:name_end]), "name"))
            i = name_end
            continue
        i += 1
    return tuple(f for f in found if f.key)


def _number_run(tokens: list[_Token], i: int) -> tuple[int, float]:
    """(end, value) of the number that starts at token ``i`` (end == i: none): a numeral, optionally times a scale
    word ("3.5 million"), or a run of number words ("two hundred and fifty", "twenty-five", "a thousand")."""
    token = tokens[i]
    if token.numeral:
        value = _numeral(token.lower)
        if value is None:
            return i, 0.0
        end = i + 1
        while end < len(tokens) and tokens[end].lower in _SCALES and _joined(tokens, end):
            value *= _SCALES[tokens[end].lower]
            end += 1
        return end, value
    if token.lower not in _NUMBER_STARTS and "-" not in token.lower:
        return i, 0.0  # (most words: what the two tests below find, in one look)
    words = token.lower.split("-")
    if token.lower == "a" and i + 1 < len(tokens) and tokens[i + 1].lower in _SCALES:
        start, total, current = i + 1, 0.0, 1.0  # "a thousand"
    elif all(w in _NUMBER_WORDS for w in words) or (len(words) == 1 and words[0] in _SCALES):
        start, total, current = i, 0.0, 0.0
    else:
        return i, 0.0
    end = start
    while end < len(tokens) and (end == start or _joined(tokens, end)):
        word = tokens[end].lower
        parts = word.split("-")
        if all(p in _NUMBER_WORDS for p in parts):
            current += sum(_NUMBER_WORDS[p] for p in parts)
        elif word in _SCALES:
            scale = _SCALES[word]
            if scale == 100:
                current = (current or 1) * scale
            else:
                total, current = total + (current or 1) * scale, 0.0
        elif (word == "and" and end > start and tokens[end - 1].lower in _SCALES and end + 1 < len(tokens)
              and tokens[end + 1].lower in _NUMBER_WORDS):
            pass  # "two hundred and fifty"
        else:
            break
        end += 1
    return end, total + current


def _joined(tokens: list[_Token], end: int) -> bool:
    """Whether token ``end`` continues the number before it: nothing but spaces or a hyphen between them."""
    return tokens[end].gap.strip(" -") == ""


def _date_key(token: _Token) -> str | None:
    word = token.lower.rstrip(".")
    if word in _AMBIGUOUS_DATES and (not token.text[0].isupper() or token.sentence_start):
        return None  # "may", "sat", "sun": a month or a day only when capitalised inside a sentence
    if word in _MONTHS:
        return f"month:{_MONTHS[word]}"
    if word in _WEEKDAYS:
        return f"weekday:{_WEEKDAYS[word]}"
    return None


def _is_name_word(token: _Token) -> bool:
    return (not token.numeral and token.text[0].isupper() and token.lower not in _NOT_NAMES
            and token.lower.rstrip(".") not in _MONTHS and token.lower.rstrip(".") not in _WEEKDAYS)


def _acronym(token: _Token) -> bool:
    return len(token.text) >= 2 and token.text.isupper() and token.text.isalpha() and token.lower not in _NOT_NAMES


def _name_run(tokens: list[_Token], i: int, text: str) -> int:
    """The end of the proper name that starts at token ``i`` (== i: none): capitalised words in a row (joined by
    "of", "the", "de" ... inside), not opening a sentence unless an acronym or followed by another capitalised word
    ("New Zealand is ...")."""
    token = tokens[i]
    if not _is_name_word(token):
        return i
    end = i + 1
    while end < len(tokens):
        nxt = tokens[end]
        adjacent = text[tokens[end - 1].end:nxt.start].strip() == ""
        if adjacent and _is_name_word(nxt):
            end += 1
        elif (adjacent and nxt.lower in ("of", "the", "de", "la", "van", "von", "del", "da") and end + 1 < len(tokens)
              and _is_name_word(tokens[end + 1])):
            end += 2
        else:
            break
    if token.sentence_start and end == i + 1 and not _acronym(token):
        return i  # a sentence's capitalised first word: a name or not, it cannot tell
    return end


def _name_key(tokens: Iterable[_Token]) -> str:
    stems = [_word_stem(t.lower) for t in tokens]
    return " ".join(s for s in stems if s)


def _word_stem(word: str) -> str | None:
    """``grounding.content_stem`` of a word without its accents and possessive ("Müller's" ~ "Muller")."""
    plain = unicodedata.normalize("NFKD", word).encode("ascii", "ignore").decode()
    return content_stem(_POSSESSIVE.sub("", plain))


@dataclass(frozen=True)
class SourceFigures:
    """What the sources of a unit hold to compare its figures with: number, date and name keys, and the stems of
    every source word (a name is held when each of its stems is)."""

    keys: frozenset[str]
    stems: frozenset[str]

    @classmethod
    def of(cls, texts: Iterable[str]) -> SourceFigures:
        keys: set[str] = set()
        stems: set[str] = set()
        for text in texts:
            if text:
                text_keys, text_stems = _source_keys(text)
                keys |= text_keys
                stems |= text_stems
        return cls(frozenset(keys), frozenset(stems))

    def holds(self, figure: Figure) -> bool:
        if figure.kind == "name":
            return all(stem in self.stems for stem in figure.key.split())
        return figure.key in self.keys

    def lacking(self, unit: str) -> list[Figure]:
        """The figures and names of ``unit`` that none of the sources holds, in order, each once."""
        seen: set[str] = set()
        out = []
        for figure in figures(unit):
            if figure.key not in seen and not self.holds(figure):
                seen.add(figure.key)
                out.append(figure)
        return out


@functools.lru_cache(maxsize=TEXT_CACHE)
def _source_keys(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(figure keys, word stems) of one source text; a document or a turn is read once however many claims and
    completions are judged against it."""
    keys: set[str] = set()
    for figure in figures(text, source=True):
        if figure.kind != "name":
            keys.add(figure.key)
            if _DECADE.fullmatch(figure.text):  # "the 1950s" holds "the 50s"
                keys.add(_number_key(float(figure.text[2:4])))
    stems = {s for t in _TOKEN.finditer(text.lower()) if (s := _word_stem(t.group()))}
    return frozenset(keys), frozenset(stems)

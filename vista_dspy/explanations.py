"""The one sentence a person reads for a claim that a decision rule decided (or that the judge labelled without a
reason of its own): what was decided, by whom, and evidence the reader can check in the claim's sources -- the passage that
supports it, the figures, names or words that no source holds, the words that make it an opinion, a remark or a
hedge. Never a cue's weight. The chain behind it (the judge's label and reason, the rule's P(unsafe) and threshold,
what the rule decided alone, the turn decision that made it unsafe) is kept in the verdict's own fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .decision import UNSAFE_CATEGORIES, lacks_a_source
from .evidence import TurnEvidence, remark_marks
from .evidence.figures import Figure

_QUOTE = 140  # characters of a passage quoted in full; a longer one is cut with an ellipsis
_WORDS = 6  # unsaid words named at most


def reason(category: str, claim: str, cues: Mapping[str, float], evidence: TurnEvidence) -> str:
    """The evidence behind ``category`` for ``claim``, in words a reader can check against its sources."""
    if category in UNSAFE_CATEGORIES:
        return _unsupported(claim, evidence)
    said = []
    if category in ("OUT-OF-SCOPE", "ABSTENTION"):  # (a VERIFIED claim's remark words are never quoted)
        speakers, opinions, hedges = remark_marks(claim)
        if category == "ABSTENTION" and hedges:
            said.append(f"it hedges or declines ({_listed(hedges)})")
        if opinions:
            said.append(f"it gives an opinion ({_listed(opinions)})")
        if speakers:
            said.append(f"it is a speaker's own remark ({_listed(speakers)})")
    lacking = evidence.lacking(claim) if lacks_a_source(cues) else []
    if lacking:
        said.append(_lacking(claim, lacking, evidence))
    if said:
        return "; ".join(said)
    return _closest(claim, evidence, supported=category == "VERIFIED")


def _unsupported(claim: str, evidence: TurnEvidence) -> str:
    """Why a claim is unsafe, checkably: the figures or names no source holds, else the words none holds, and the
    closest passage."""
    lacking = evidence.lacking(claim)
    if lacking:
        return _lacking(claim, lacking, evidence)
    unsaid = evidence.unsaid(claim)
    closest = _closest(claim, evidence, supported=False)
    if not unsaid:
        return f"each of its content words is in its passages, but no passage says it: {closest}"
    more = len(unsaid) - _WORDS
    words = _listed(unsaid[:_WORDS]) + (f" and {more} more" if more > 0 else "")
    return f"its passages hold no {words}; {closest}"


def _lacking(claim: str, lacking: Sequence[Figure], evidence: TurnEvidence) -> str:
    """"its passages hold no 200 or minus 30 (the reference's passage gives minus 4)": the passages the claim rests on
    (``TurnEvidence.local``) and what its passage of the reference gives, not every figure of a long document."""
    numbers = [f for f in lacking if f.kind != "name"]
    names = [f for f in lacking if f.kind == "name"]
    parts = []
    if numbers:
        given = evidence.reference_figure_texts(claim, frozenset(n.kind for n in numbers))
        parts.append(f"its passages hold no {_listed([f.text for f in numbers], 'or', quote=False)}"
                     + (f" (the reference's passage gives {_listed(given[:4], 'and', quote=False)})"
                        if given else ""))
    if names:
        parts.append(f"its passages name no {_listed([f.text for f in names], 'or', quote=False)}")
    return "; ".join(parts)


def _closest(claim: str, evidence: TurnEvidence, *, supported: bool) -> str:
    """The passage of the sources sharing most of the claim, quoted, and how much it shares."""
    support = evidence.support(claim)
    if support is None:
        return "no passage of its sources shares a content word with it"
    share = ("all" if support.shared == support.of else f"{support.shared}") + f" of its {support.of} content words"
    if supported:
        return f"{support.passage.source} says \"{_quoted(support.passage.text)}\" ({share})"
    return f"the closest passage, in {support.passage.source}, \"{_quoted(support.passage.text)}\", shares {share}"


def _quoted(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _QUOTE else text[: _QUOTE - 1].rstrip() + "…"


def _listed(items: Sequence[str], last: str = "and", *, quote: bool = True) -> str:
    quoted = [f"'{i}'" for i in items] if quote else list(items)
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} {last} {quoted[-1]}"


# ---- how a decision came about, around the reason ------------------------------------------------------------------
def overruled(category: str, judge_label: str, why: str) -> str:
    """A claim the rule decided against the judge's own label."""
    return f"{category} rather than the judge's {judge_label}: {why}."


def by_evidence(category: str, why: str) -> str:
    """A claim the cascade decided by its evidence alone, without asking the judge."""
    return f"{category} by its evidence alone (the judge was not asked): {why}."


def agreed(category: str, why: str) -> str:
    """A claim the rule decided as the judge labelled it (the judge's own reason, if any, is kept beside it)."""
    return f"{category}, as the judge labelled it: {why}."


def label_alone(category: str, why: str) -> str:
    """A claim the judge labelled without an explanation (``explain_unverified=False``) and no rule decided."""
    return f"{category} by the judge (asked for its label alone): {why}."


def made_unsafe(category: str, why: str, *, claims: int, p_hallucinated: float | None,
                turn_threshold: float | None, p_unsafe: float) -> str:
    """A claim made unsafe as its turn's most doubtful claim, by the rule's turn model or turn threshold."""
    if p_hallucinated is not None:
        how = (f"the most doubtful of its turn's {claims} claims, which the turn model finds hallucinated "
               f"(P {p_hallucinated:.2f})" if claims > 1
               else f"the only claim of a turn the turn model finds hallucinated (P {p_hallucinated:.2f})")
    else:
        how = (f"the most doubtful claim of its turn (P(unsafe) {p_unsafe:.2f} reaches the turn threshold "
               f"{turn_threshold:.2f})")
    return f"{category} as {how}: {why}."

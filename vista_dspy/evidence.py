"""Evidence cues of a claim, computed by the program with no LM call: how much of the claim the turn's sources say,
whether it is about a speaker, an opinion, a hedge. A decision rule (``decision``) weighs them with the judge's
label probabilities.

Coverage cues are shares of the claim's content words (``grounding.content_words``: crude stems, without function
words and speaker words) that its sources do NOT contain -- the reference document, the knowledge store, the dialogue
before the turn, and all three together. The speaker cue treats "I", "my", "you", "the assistant", "the wizard" and
"the user" alike, so it does not depend on how an annotator or a decomposer names the speakers. Each cue is a number
in [0, 1].
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass

from .grounding import content_words
from .schema import Dialogue

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
_FRAMED_WORDS = 3  # content words the framed clause needs to be a statement of its own
_LENGTH_SCALE = 12


@dataclass(frozen=True)
class TurnEvidence:
    """The content words of one judged turn's sources, computed once for all its claims."""

    reference: frozenset[str]
    knowledge: frozenset[str]
    history: frozenset[str]

    @classmethod
    def of(cls, reference: str | None, knowledge: Sequence[str], history: Sequence[str]) -> TurnEvidence:
        """``reference``: the turn's document (None: judged against the store alone); ``knowledge``: the store as
        the turn is judged against it; ``history``: the texts of the turns before it."""
        return cls(_source_words(reference or ""), _source_words(" ".join(knowledge)),
                   _source_words(" ".join(history)))

    def cues(self, claim: str, *, added: bool = False) -> dict[str, float]:
        """The claim's cue values, by ``CUES`` name; ``added``: the claim is a sentence that coverage added."""
        words = content_words(claim)
        lower = claim.lower()

        def uncovered(*sources: frozenset[str]) -> float:
            if not words:
                return 0.0
            return len(words.difference(*sources)) / len(words)

        speaker = bool(_SPEAKER.search(lower))
        opinion = bool(_OPINION.search(lower))
        frame = _FRAME.match(lower)
        attributed = bool(frame) and len(content_words(frame.group("clause"))) >= _FRAMED_WORDS
        return {
            "uncovered_reference": uncovered(self.reference) if self.reference else 1.0 if words else 0.0,
            "uncovered_knowledge": uncovered(self.knowledge),
            "uncovered_history": uncovered(self.history),
            "uncovered_all": uncovered(self.reference, self.knowledge, self.history),
            "speaker": float(speaker),
            "opinion": float(opinion),
            "hedge": float(bool(_HEDGE.search(lower))),
            "speaker_opinion": float(speaker and opinion),
            "attributed": float(attributed),
            "length": min(len(words) / _LENGTH_SCALE, 1.0),
            "question": float("?" in claim),
            "coverage": float(added),
        }


@functools.lru_cache(maxsize=64)
def _source_words(text: str) -> frozenset[str]:
    """A source's content words: the same document, store and history come back for every claim of a turn and for
    every completion of a prompt (a reward's batch), and reading a long one costs more than the claim's cues."""
    return frozenset(content_words(text))


def evidence_of(dialogue: Dialogue, index: int, knowledge: Sequence[str]) -> TurnEvidence:
    """The evidence of judged turn ``index`` against ``knowledge`` (the store as the turn is judged against it)."""
    turn = dialogue.turns[index]
    return TurnEvidence.of(turn.grounding.document if turn.grounding else None, knowledge,
                           [t.text for t in dialogue.turns[:index]])


"""The judged turns a decision rule is fitted and scored on (``TurnRows`` of ``ClaimRow``), from verdicts of the base
program judged with label probabilities, each claim with its evidence cues against its turn's own store.

Categorize's answer counts only for a claim Verify did not verify, as the deployed program asks it, even where
``categorize_all`` asked it about every claim. The annotators' claims (``given_claims``) carry their own judgement;
decomposed claims take one through the human claims of their turn (``label_claims``), and a decomposed claim left
without one is decided in the turn scores but not fitted on. Records and arithmetic: no LM call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ...decision import features
from ...evidence import evidence_of
from ...schema import Dialogue, DialogueVerdict
from ..metrics import match_claims

UNSAFE_GOLD = frozenset({"LACKING EVIDENCE", "CONTRADICTED"})


@dataclass(frozen=True)
class ClaimRow:
    """One judged claim as a rule sees it."""

    claim: str
    cues: dict[str, float]
    verify: dict[str, float] | None  # Verify's distribution, if the endpoint gave one
    categorize: dict[str, float] | None  # Categorize's, for a claim Verify did not verify
    judge: str  # the judge's own label: VERIFIED, one of the four categories, or ERROR
    gold: str | None  # the annotators' judgement (of the matched human claim), None if unknown
    categorize_all: dict[str, float] | None = None  # Categorize's distribution whatever Verify said, if asked

    @property
    def values(self) -> dict[str, float]:
        return features(self.cues, self.verify, self.categorize)


@dataclass
class TurnRows:
    """One judged turn: its claims and what decides its label besides them."""

    dialogue_id: str
    turn_index: int
    gold_label: str | None  # hallucinated / faithful (the turn's own gold label)
    rows: list[ClaimRow]
    failed: bool = False  # Decompose failed: unknown unless a claim is unsafe
    # Decompose found no claim in a turn with content: unknown under the default reading (``scoring.settle_turns``,
    # ``empty_turns="unknown"``), faithful under the paper's.
    empty: bool = False
    decompose_calls: float = 0.0  # the base's Decompose calls of the dialogue, shared among its judged turns

    @property
    def unjudged(self) -> bool:
        """Unknown unless a claim is unsafe: Decompose failed, or found nothing in a turn with content."""
        return self.failed or (self.empty and not self.rows)


LABELLINGS = ("matched", "nearest", "nearest+faithful")
DEFAULT_LABELLING = "nearest+faithful"


def turns_of(verdicts: Iterable[DialogueVerdict], dialogues: Mapping[str, Dialogue],
             labelling: str = DEFAULT_LABELLING) -> list[TurnRows]:
    """The judged turns of ``verdicts`` as rule inputs, cues computed against each turn's own store; decomposed
    claims labelled by ``labelling`` (``label_claims``)."""
    turns: list[TurnRows] = []
    for verdict in verdicts:
        dialogue = dialogues[verdict.dialogue_id]
        judged = len(verdict.turns) or 1
        decompose_calls = verdict.usage.by_stage.get("decompose")
        for turn in verdict.turns:
            evidence = evidence_of(dialogue, turn.turn_index, turn.knowledge)
            gold = label_claims(dialogue, turn.turn_index, [c.claim for c in turn.claims], turn.claims_source,
                                labelling)
            rows = []
            for claim, gold_category in zip(turn.claims, gold):
                judge = claim.raw_label or claim.category.value
                probabilities = claim.probabilities
                verify = probabilities.verify if probabilities else None
                categorize = probabilities.categorize if probabilities and judge != "VERIFIED" else None
                rows.append(ClaimRow(claim.claim, evidence.cues(claim.claim, added=claim.added_by == "coverage"),
                                     verify, categorize, judge, gold_category,
                                     probabilities.categorize if probabilities else None))
            empty = turn.empty_decomposition and not rows
            turns.append(TurnRows(verdict.dialogue_id, turn.turn_index, turn.gold_label, rows,
                                  failed=turn.error is not None and not empty, empty=empty,
                                  decompose_calls=(decompose_calls.calls if decompose_calls else 0) / judged))
    return turns


NEAREST = 0.3  # the least content-word F1 for a decomposed claim to take a human claim's judgement


def label_claims(dialogue: Dialogue, index: int, claims: Sequence[str], source: str,
                 labelling: str = DEFAULT_LABELLING) -> list[str | None]:
    """The annotators' judgement of each claim of a judged turn: a human claim's own (given claims, in order); for
    decomposed claims, that of the human claim matched one to one (``metrics.match_claims``, ``matched``), then
    (``nearest``) that of the most similar human claim for the others (content-word F1 of at least ``NEAREST``),
    then (``nearest+faithful``) for a claim still without one in a turn the annotators found faithful, a safe
    judgement (every claim of a faithful turn is safe): its most similar safe human claim's, else VERIFIED.
    None: unknown (not fitted on)."""
    from ..metrics import token_f1

    if labelling not in LABELLINGS:
        raise ValueError(f"unknown labelling {labelling!r}; choose one of {', '.join(LABELLINGS)}")
    gold = dialogue.turns[index].gold
    if gold is None or gold.claims is None:
        return [None] * len(claims)
    human = [c.category.value for c in gold.claims]
    if source == "given":
        return human[: len(claims)] + [None] * (len(claims) - len(human))
    texts = [c.text for c in gold.claims]
    labels: list[str | None] = [None] * len(claims)
    for e, g, _ in match_claims(list(claims), texts).pairs:
        labels[e] = human[g]
    for e, claim in enumerate(claims):
        if labels[e] is not None or labelling == "matched" or not texts:
            continue
        similarity = [token_f1(claim, t) for t in texts]
        best = max(range(len(texts)), key=similarity.__getitem__)
        if similarity[best] >= NEAREST:
            labels[e] = human[best]
        elif labelling == "nearest+faithful" and gold.label == "faithful":
            safe = [g for g in range(len(texts)) if human[g] not in UNSAFE_GOLD]
            labels[e] = human[max(safe, key=similarity.__getitem__)] if safe else "VERIFIED"
    return labels

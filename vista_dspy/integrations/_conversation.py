"""The judging path under the peers' conversational metrics (DeepEval, RAGAS): a whole conversation in, every
assistant turn judged in order against its own passages and the claims of the turns before it (VISTA's knowledge
store), out one ``ConversationVerdict``: a score over all the conversation's claims, a reason naming each unsafe
claim with its turn, and a verdict per assistant turn. The conversation is built by each framework's module from its
own test-case shape (``conversation``: (role, text, passages) triples)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..schema import Category, Dialogue, DialogueVerdict, Grounding, Turn, TurnVerdict

UNSAFE = (Category.CONTRADICTED, Category.LACKING_EVIDENCE)


class ConversationNotJudged(RuntimeError):
    """No claim of the conversation could be judged (every decomposition failed, or every claim is an ERROR): it
    has no score. The frameworks report it as the metric's error."""


@dataclass(frozen=True)
class ConversationVerdict:
    """VISTA's verdict on a conversation, as a framework's metric shows it."""

    score: float  # safe claims / all claims of every judged assistant turn (an ERROR claim counts as not safe)
    label: str  # hallucinated (a turn is), unknown (a turn could not be judged and none is hallucinated), faithful
    reason: str  # the decision in a sentence, then each unsafe claim with its turn, category and reason
    turns: list[dict[str, Any]] = field(default_factory=list)  # per assistant turn: index, label, score, claims
    unjudged: list[str] = field(default_factory=list)  # what could not be judged, each naming its turn


def conversation(turns: Sequence[tuple[str, str, Sequence[str] | None]], *, background: Sequence[str] = (),
                 where: str = "conversation") -> Dialogue:
    """(role, text, passages) triples as a VISTA dialogue: "user" turns as they are, "assistant" turns judged
    against their passages (none given: against the knowledge store alone). ``where`` names the conversation in
    errors. The dialogue's id is a hash of its content, so that a conversation judged before is recognised."""
    built = []
    for index, (role, text, passages) in enumerate(turns):
        if role not in ("user", "assistant"):
            raise ValueError(f"{where}, turn {index}: role {role!r} is neither 'user' nor 'assistant'")
        if not isinstance(text, str):
            raise ValueError(f"{where}, turn {index}: the content is {type(text).__name__}, not a text")
        if role == "user":
            built.append(Turn(role="user", text=text))
            continue
        kept = [p for p in (passages or []) if p and p.strip()]
        grounding = Grounding.from_passages(kept) if kept else Grounding.knowledge_only()
        built.append(Turn(role="assistant", text=text, grounding=grounding))
    if not any(turn.role == "assistant" for turn in built):
        raise ValueError(f"{where} has no assistant turn: there is nothing in it for VISTA to judge")
    content = json.dumps([[t.role, t.text, t.grounding.reference_passages if t.grounding else None] for t in built]
                         + [list(background)], ensure_ascii=False)
    return Dialogue(id=f"{where}-{hashlib.sha256(content.encode()).hexdigest()[:16]}", turns=built,
                    background=list(background))


def judge_conversation(metric: Any, dialogue: Dialogue, positions: Sequence[int] | None = None
                       ) -> ConversationVerdict:
    """``dialogue`` judged by ``metric`` (a ``VistaMetric``), as a ``ConversationVerdict``; ``positions``: each
    dialogue turn's index in the framework's own list (default: the same)."""
    return conversation_verdict(metric.judge_dialogue(dialogue), positions)


async def ajudge_conversation(metric: Any, dialogue: Dialogue, positions: Sequence[int] | None = None
                              ) -> ConversationVerdict:
    """``judge_conversation`` off the event loop (the judge's calls block; the framework's loop keeps running)."""
    return await asyncio.to_thread(judge_conversation, metric, dialogue, positions)


def conversation_verdict(verdict: DialogueVerdict, positions: Sequence[int] | None = None) -> ConversationVerdict:
    """A dialogue's verdict as one score, one reason and a verdict per assistant turn, each turn named by its index
    in the framework's list (``positions[turn_index]``; default: the dialogue's own index)."""
    from ..run.judge_metric import claim_line, unjudged_parts
    from ..run.reward_records import claim_record

    claims = [(turn, claim) for turn in verdict.turns for claim in turn.claims]
    errors = sum(claim.category is Category.ERROR for _, claim in claims)
    unjudged = unjudged_parts(verdict)
    if errors == len(claims) and (errors or any(turn.error for turn in verdict.turns)):
        raise ConversationNotJudged(f"VISTA could not judge any claim of {verdict.dialogue_id}: "
                                    + "; ".join(unjudged or ["no claim was found"]))
    safe = sum(claim.category not in UNSAFE and claim.category is not Category.ERROR for _, claim in claims)
    score = safe / len(claims) if claims else 1.0
    unsafe = [(turn, claim) for turn, claim in claims if claim.category in UNSAFE]
    labels = [turn.label for turn in verdict.turns]
    label = ("hallucinated" if "hallucinated" in labels else "unknown" if "unknown" in labels else "faithful")
    def at(turn: TurnVerdict) -> int:
        return positions[turn.turn_index] if positions is not None else turn.turn_index

    turns = [{**turn_record(turn, claim_record), "turn": at(turn)} for turn in verdict.turns]
    n_turns = len(verdict.turns)
    if not claims:
        reason = f"Faithful: its {n_turns} assistant turn(s) make no claim, so nothing in them can be unsupported."
    elif not unsafe:
        reason = (f"Faithful: none of the {len(claims)} claims in its {n_turns} assistant turn(s) is contradicted "
                  f"or lacks evidence in the turn's passages or the conversation before it.")
    else:
        reason = "\n".join([f"Hallucinated: {len(unsafe)} of the {len(claims)} claims in its {n_turns} assistant "
                            f"turn(s) {'is' if len(unsafe) == 1 else 'are'} not supported by the turn's passages "
                            f"or the conversation before it.",
                            *(f"- turn {at(turn)}: {claim_line(claim)}" for turn, claim in unsafe)])
    if unjudged:
        reason += "\n" + "\n".join(f"(not judged: {part})" for part in unjudged)
    return ConversationVerdict(score, label, reason, turns, unjudged)


def turn_record(turn: TurnVerdict, claim_record: Any) -> dict[str, Any]:
    """One assistant turn's verdict as a framework's per-turn record: its index in the conversation, its text, its
    label and score, and every claim with its category and reason."""
    return {"turn": turn.turn_index, "text": turn.text, "label": turn.label, "score": turn.score,
            "claims": [claim_record(claim) for claim in turn.claims], "error": turn.error}


__all__ = ["ConversationNotJudged", "ConversationVerdict", "ajudge_conversation", "conversation",
           "conversation_verdict", "judge_conversation"]

"""The DSPy Signatures of VISTA's stages. Each docstring is the instruction the model sees.

Long, stable inputs (reference document, knowledge store, history) come before the claim so that an
inference server can reuse the cached prompt prefix across the claims of one turn.
"""

from __future__ import annotations

from functools import cache, lru_cache
from typing import Any, Literal, get_args

import dspy
from pydantic import BaseModel, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import core_schema

VerifyLabel = Literal["VERIFIED", "UNVERIFIABLE"]
UnverifiableCategory = Literal["LACKING EVIDENCE", "OUT-OF-SCOPE", "ABSTENTION", "CONTRADICTED"]
# (output field, its labels): where a stage's label distribution is read (label_probabilities).
VERIFY_LABEL: tuple[str, tuple[str, ...]] = ("label", get_args(VerifyLabel))
CATEGORY_LABEL: tuple[str, tuple[str, ...]] = ("category", get_args(UnverifiableCategory))
JOINT_LABEL: tuple[str, tuple[str, ...]] = ("category", ("VERIFIED", *get_args(UnverifiableCategory)))



class ClaimList(list):
    """A list of claim strings whose JSON schema is bounded (at most MAX_CLAIMS claims of MAX_CLAIM_CHARS each).

    A server that enforces the schema with a grammar (llama.cpp) then cannot loop on one claim until the token
    cap: the answer stays valid JSON and the repeats are removed afterwards. Validation itself does not enforce
    the bounds, so a hosted model's long answer is never rejected (and no claim is dropped).
    """

    MAX_CLAIMS = 24
    MAX_CLAIM_CHARS = 240
    # A tighter bound for one call's answer grammar only, never for the prompt: (claims, characters per claim).
    # The prompt shows the class bound above, so a turn's bound does not change the cached prompt prefix; an
    # adapter that builds the answer's grammar reads this (clients.adapters.JSONAdapter). None: the class bound.
    answer_bound: tuple[int, int] | None = None

    @classmethod
    def bounded(cls, claims: int, chars: int) -> type[ClaimList]:
        """This list type with an answer bound of ``claims`` claims of ``chars`` characters (one class per bound)."""
        return _bounded_claim_list(max(1, min(claims, cls.MAX_CLAIMS)), max(20, min(chars, cls.MAX_CLAIM_CHARS)))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        # Always a plain ClaimList (never a bounded copy of the class, which pickle cannot find by name).
        return core_schema.no_info_after_validator_function(ClaimList, handler(list[str]))

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler) -> dict:
        json_schema = handler(schema)
        json_schema["maxItems"] = cls.MAX_CLAIMS
        json_schema["items"]["maxLength"] = cls.MAX_CLAIM_CHARS
        return json_schema


@cache
def _bounded_claim_list(claims: int, chars: int) -> type[ClaimList]:
    # The same name as ClaimList: the prompt names the type.
    return type("ClaimList", (ClaimList,), {"answer_bound": (claims, chars), "__qualname__": "ClaimList"})


# Decompose's answer bound for a turn: a few claims more than the turn has content words (no human claim set of the
# annotated dev file exceeds content words + 2, nor a human claim the turn's length + 57 characters), each at most as
# long as the turn plus room for resolved names. A small model that loops then stops at the bound, not at the token cap.
BOUND_SLACK_CLAIMS = 6
BOUND_SLACK_CHARS = 80


def decompose_bound(content_words: int, turn_chars: int, *, retry: int = 0) -> tuple[int, int]:
    """(claims, characters per claim) for Decompose's answer on a turn; each retry halves the claims and shortens
    the claims, so a repeated call never asks the identical question."""
    claims = (content_words + BOUND_SLACK_CLAIMS) >> retry
    chars = min(turn_chars + BOUND_SLACK_CHARS, ClaimList.MAX_CLAIM_CHARS) * 2 // (2 + retry)
    return max(1, min(claims, ClaimList.MAX_CLAIMS)), max(20, chars)


# One class per turn's bound (its length): a class is a pydantic model, so the turns of the last few dialogues only,
# or a long run would keep one per turn it ever judged (building one costs ~1 ms, against an LM call's seconds).
@lru_cache(maxsize=128)
def with_claims_bound(signature: type[dspy.Signature], bound: tuple[int, int]) -> type[dspy.Signature]:
    """``signature`` whose ``claims`` answer is bounded to ``bound`` in the answer's grammar (the prompt text is
    unchanged); one class per (signature, bound)."""
    field = signature.output_fields["claims"]
    return signature.with_updated_fields("claims", type_=ClaimList.bounded(*bound), desc=field.json_schema_extra["desc"])


NO_REFERENCE = "(no reference document for this turn: use the knowledge store only)"
EMPTY_KNOWLEDGE = "(empty)"
NO_HISTORY = "(this is the first turn)"


class Decompose(dspy.Signature):
    """Break the assistant's target turn into atomic claims: short, self-contained statements that each carry one
    piece of information the assistant conveys. Extract claims from the target turn only, never from the history.

    Rules:
    - One fact per claim. Split lists, and clauses joined by "and", "but", "because", "so", "which": a sentence
      usually holds several claims.
    - Replace pronouns and vague references ("it", "they", "there", "the latter") with what they stand for, using
      the dialogue history, so that each claim can be read on its own. Call the speakers "the assistant" and
      "the user".
    - Make presuppositions and implicatures explicit as claims of their own (e.g. "He stopped touring in 1990"
      presupposes that he used to tour; "I know Lisbon is hilly" presupposes that Lisbon is hilly).
    - Keep what the assistant says about itself as claims: opinions, likes, feelings, habits, experiences,
      recommendations, and statements of uncertainty or refusal ("The assistant likes ...", "The assistant does
      not know ...").
    - A question on its own states nothing: it yields no claim. Greetings and thanks yield no claim unless they
      imply something about the world.
    - Do not judge whether a claim is true; only extract it. Do not repeat a claim.
    """

    history: str = dspy.InputField(desc="earlier turns of the dialogue, one 'role: text' line each")
    turn: str = dspy.InputField(desc="the assistant turn to decompose")
    claims: ClaimList = dspy.OutputField(desc="the atomic claims, in order; an empty list if there are none")


class Verify(dspy.Signature):
    """Decide whether a claim is directly supported by the sources.

    The sources are the reference document and the knowledge store (claims established earlier in the same
    dialogue). Answer VERIFIED only if the sources state the claim or something that plainly entails it
    (paraphrases count). Otherwise answer UNVERIFIABLE: a claim the sources do not mention, a claim they
    contradict, an opinion, a recommendation, a personal experience or a refusal. Do not use your own knowledge
    of the world, even if you believe the claim is true.
    """

    reference: str = dspy.InputField(desc="the reference document retrieved for this turn")
    knowledge: str = dspy.InputField(desc="the knowledge store: numbered claims accepted earlier in the dialogue")
    claim: str = dspy.InputField(desc="the claim to verify")
    explanation: str = dspy.OutputField(desc="at most 20 words: which source supports the claim, or what is missing")
    label: VerifyLabel = dspy.OutputField()


class Categorize(dspy.Signature):
    """A claim from the assistant's turn could not be verified from the sources. Say why, as exactly one category:

    - LACKING EVIDENCE: a factual assertion about the world that the sources do not settle: they neither confirm
      nor deny it. This is the usual case for a fact that goes beyond the reference, even if it sounds true.
    - OUT-OF-SCOPE: not a checkable assertion about the world: the assistant's opinion, preference, feeling,
      recommendation or advice, something about the assistant's own life or experience, or a conversational
      remark.
    - ABSTENTION: the assistant declines to answer, says it does not know, or expresses uncertainty.
    - CONTRADICTED: the reference or the knowledge store explicitly states something that cannot be true together
      with the claim (another date, number, place, or the negation). Use it only when you can point to the
      conflicting statement; a detail the sources do not mention is LACKING EVIDENCE, not CONTRADICTED.

    Use only the sources given, not your own knowledge of the world.
    """

    reference: str = dspy.InputField(desc="the reference document retrieved for this turn")
    knowledge: str = dspy.InputField(desc="the knowledge store: numbered claims accepted earlier in the dialogue")
    claim: str = dspy.InputField(desc="the claim that could not be verified")
    explanation: str = dspy.OutputField(desc="at most 20 words justifying the category")
    category: UnverifiableCategory = dspy.OutputField()


# Verify's and Categorize's instructions in fewer words: the same labels, the same rules (a contradicted claim is not
# VERIFIED; CONTRADICTED needs a conflicting statement in the sources), for a small model whose short prompts are
# mostly instructions. A choice of the priced study (``instructions="terse"``), not a default.
TERSE_INSTRUCTIONS = {
    "verify": "Is the claim supported by the sources (the reference document and the knowledge store)? Answer "
              "VERIFIED if they state it or plainly entail it, paraphrases included. Otherwise answer UNVERIFIABLE: "
              "not mentioned, contradicted, or an opinion, advice, experience or refusal. Use no outside knowledge.",
    "categorize": "The claim is not supported by the sources. Say why, as one category:\n"
                  "- CONTRADICTED: a source states something incompatible with it (another number, date, place, "
                  "or the negation).\n"
                  "- LACKING EVIDENCE: a fact about the world that the sources neither confirm nor deny.\n"
                  "- OUT-OF-SCOPE: no checkable fact: an opinion, advice, a feeling, the speaker's own experience, "
                  "or small talk.\n"
                  "- ABSTENTION: the assistant declines, does not know, or is unsure.\n"
                  "Use only the sources.",
}


class CheckContradiction(dspy.Signature):
    """Decide whether the assistant's new turn contradicts anything said earlier in the dialogue, by either
    speaker. A contradiction is a statement that cannot be true together with an earlier one (a changed fact, a
    reversed preference, an inconsistent detail). New information, changes of topic and answers to questions are
    not contradictions.
    """

    history: str = dspy.InputField(desc="earlier turns of the dialogue, one 'role: text' line each")
    turn: str = dspy.InputField(desc="the new assistant turn")
    explanation: str = dspy.OutputField(desc="one short sentence: the conflicting statements, or why there is none")
    contradicts: bool = dspy.OutputField()


HISTORY_FIELD_DESC = "the dialogue so far, one 'role: text' line each (for contradictions with earlier turns)"

# The call-time variants below are built once per (signature class, ...): signature classes are immutable, and
# building one (a pydantic model) per call would cost a millisecond of CPU on every LM request.
_variant = lru_cache(maxsize=256)


@_variant
def with_history(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """The +ctx variant of Verify/Categorize: the dialogue history is given too, just before the claim.

    Built at call time from the predictor's own (possibly compiled) signature, so saved programs keep one
    field layout whatever the switches.
    """
    index = list(signature.input_fields).index("claim")
    return signature.insert(index, "history", dspy.InputField(desc=HISTORY_FIELD_DESC), type_=str)


REASONING_DESC = "think step by step before answering"


@_variant
def with_reasoning(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """The chain-of-thought variant of a stage (what ``dspy.ChainOfThought`` does): a ``reasoning`` output first.

    Built at call time like ``with_history``, so a saved program keeps one layout; demos without reasoning are
    shown by DSPy as examples with that field not supplied."""
    return signature.prepend("reasoning", dspy.OutputField(desc=REASONING_DESC), type_=str)


@_variant
def label_only(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """Verify (or Categorize) answering with its label alone, no explanation: the explanation a user reads for an
    unverified claim is Categorize's, so Verify's is seen only on VERIFIED claims (a third of the tokens of a turn
    with the local model); Categorize's is left out where no one reads it (``explain_unverified``). Demos keep their explanations in the saved program; DSPy shows only the fields a signature has."""
    return signature.delete("explanation")


# ---- all claims of a turn in one call ---------------------------------------------------------------------------
class VerifiedClaim(BaseModel):
    claim: int  # the claim's number in the list
    explanation: str
    label: VerifyLabel


class CategorizedClaim(BaseModel):
    claim: int
    explanation: str
    category: UnverifiableCategory


class JudgedClaim(BaseModel):
    claim: int
    explanation: str
    category: Literal["VERIFIED", "LACKING EVIDENCE", "OUT-OF-SCOPE", "ABSTENTION", "CONTRADICTED"]


BATCH_NOTE = """

The claims come as a numbered list. Judge each one on its own, exactly as described above, and answer with one
entry per claim, in the order given, each carrying the claim's number."""
JOINT_NOTE = """

A claim that is not VERIFIED is labelled instead with the category that says why, as follows.

"""
CLAIMS_DESC = "the claims to judge, numbered, one per line"


@_variant
def batched(signature: type[dspy.Signature], item: type[BaseModel], instructions: str | None = None
            ) -> type[dspy.Signature]:
    """The one-call-per-turn twin of a per-claim signature (possibly compiled, possibly +ctx): the same sources
    and instructions, numbered claims in, one ``item`` per claim out."""
    batch = signature
    for name in ["claim", *(f for f in signature.output_fields if f != "reasoning")]:
        batch = batch.delete(name)
    batch = batch.append("claims", dspy.InputField(desc=CLAIMS_DESC), type_=str)
    batch = batch.append("verdicts", dspy.OutputField(desc="one entry per claim, in order"), type_=list[item])
    return batch.with_instructions((instructions or signature.instructions) + BATCH_NOTE)


def joint_instructions(verify: type[dspy.Signature], categorize: type[dspy.Signature]) -> str:
    """Verify's instructions followed by Categorize's: one call decides VERIFIED or the category."""
    return verify.instructions + JOINT_NOTE + categorize.instructions


def number_claims(claims: list[str]) -> str:
    return "\n".join(f"{i}. {claim}" for i, claim in enumerate(claims, start=1))


# ---- all assistant turns of a dialogue in one Decompose call ----------------------------------------------------
class TurnClaims(BaseModel):
    turn: int  # the assistant turn's number, as marked in the dialogue
    claims: ClaimList


TURN_MARK = "[turn {n}] "
DIALOGUE_NOTE = """

The dialogue comes whole, one 'role: text' line per turn, and the assistant turns to decompose are marked
[turn 1], [turn 2], ... Decompose each marked turn on its own, exactly as described above: the lines before it are
its history. Answer with one entry per marked turn, in order, each carrying the turn's number."""
DIALOGUE_DESC = "the whole dialogue, one 'role: text' line per turn; the turns to decompose are marked [turn N]"


@_variant
def per_dialogue(signature: type[dspy.Signature]) -> type[dspy.Signature]:
    """The one-call-per-dialogue twin of Decompose (possibly compiled, possibly chain of thought): the same
    instructions, the whole dialogue in, one ``TurnClaims`` per marked assistant turn out."""
    batch = signature.delete("history").delete("turn").delete("claims")
    batch = batch.append("dialogue", dspy.InputField(desc=DIALOGUE_DESC), type_=str)
    batch = batch.append("turns", dspy.OutputField(desc="one entry per marked turn, in order"), type_=list[TurnClaims])
    return batch.with_instructions(signature.instructions + DIALOGUE_NOTE)


# ---- baselines ------------------------------------------------------------------------------------------------
class AtomicFacts(dspy.Signature):
    """List the atomic facts that the text states: short, independent statements that each carry one piece of
    information. Keep names instead of pronouns. A question, greeting or thanks states no fact."""

    text: str = dspy.InputField(desc="one sentence, or a whole dialogue turn")
    facts: ClaimList = dspy.OutputField(desc="the atomic facts, in order; an empty list if there are none")


class IsSupported(dspy.Signature):
    """Is the fact supported by the reference document? Answer true only if the document states it or plainly
    entails it; a fact the document does not mention is not supported. Do not use outside knowledge."""

    reference: str = dspy.InputField(desc="the reference document")
    fact: str = dspy.InputField()
    supported: bool = dspy.OutputField()


class JudgeTurn(dspy.Signature):
    """Judge the assistant's latest turn as a whole. It is faithful if everything it asserts as fact is supported
    by the reference document or by what was said earlier in the conversation; it is hallucinated if it asserts
    anything the sources do not support or contradict. Opinions, questions, chit-chat and admissions of not
    knowing do not make a turn hallucinated. Do not use outside knowledge."""

    reference: str = dspy.InputField(desc="the reference document retrieved for this turn")
    history: str = dspy.InputField(desc="earlier turns of the dialogue, one 'role: text' line each")
    turn: str = dspy.InputField(desc="the assistant turn to judge")
    explanation: str = dspy.OutputField(desc="at most 30 words")
    label: Literal["faithful", "hallucinated"] = dspy.OutputField()

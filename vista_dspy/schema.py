"""Typed records for dialogues going in and verdicts coming out.

Everything that crosses a module boundary (loaders -> program -> scoring -> reports) is one of these
pydantic models, so every record round-trips through JSON unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

# 2: a claim records what it was checked against (``ClaimVerdict.checked_against``); a version-1 record reads with
# it None.
SCHEMA_VERSION = 2
# Longest text accepted in one turn, document or claim (characters): far beyond any LM context, so a longer one
# is a broken input file, refused by name before any LM call.
MAX_TEXT = 200_000


class Category(str, Enum):
    """The verdict on one claim. ERROR means no verdict could be obtained (never silently dropped)."""

    VERIFIED = "VERIFIED"
    OUT_OF_SCOPE = "OUT-OF-SCOPE"
    ABSTENTION = "ABSTENTION"
    CONTRADICTED = "CONTRADICTED"
    LACKING_EVIDENCE = "LACKING EVIDENCE"
    ERROR = "ERROR"

    def __str__(self) -> str:
        return self.value


SAFE_CATEGORIES = frozenset({Category.VERIFIED, Category.OUT_OF_SCOPE, Category.ABSTENTION})
UNSAFE_CATEGORIES = frozenset({Category.CONTRADICTED, Category.LACKING_EVIDENCE})
# The five categories a judge (human or model) can assign; ERROR is ours.
JUDGED_CATEGORIES = (
    Category.VERIFIED,
    Category.OUT_OF_SCOPE,
    Category.ABSTENTION,
    Category.CONTRADICTED,
    Category.LACKING_EVIDENCE,
)

TurnLabel = Literal["faithful", "hallucinated", "unknown"]
GoldLabel = Literal["faithful", "hallucinated"]
# "evidence": a compiled program's cascade decided the claim by its evidence cues alone, with no LM call.
Stage = Literal["decompose", "verify", "categorize", "contradiction", "judge", "evidence"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False, use_enum_values=False)


def number_passages(passages: Sequence[str]) -> str:
    """Several retrieved passages as one reference text, numbered so that an explanation can cite them (one passage
    is its own text)."""
    if len(passages) == 1:
        return passages[0]
    return "\n\n".join(f"[{number}] {passage.strip()}" for number, passage in enumerate(passages, start=1))


class Grounding(_Record):
    """What an assistant turn is judged against.

    - ``document``: the turn's reference document plus the knowledge store;
    - ``knowledge_only``: no document, judged against the knowledge store alone
      (VISTA's missing / "NONE" / "Prompt Information");
    - ``background``: not judged; the turn's claims join the knowledge store as common ground (VISTA's "N/A").

    A reference that came as several retrieved passages keeps them in ``passages``; ``document`` is then their
    numbered text (``[1] ...``, ``[2] ...``), which is what the judge reads and what its explanations can cite.
    """

    kind: Literal["document", "knowledge_only", "background"]
    document: str | None = Field(default=None, max_length=MAX_TEXT)
    passages: list[str] | None = None

    @model_validator(mode="after")
    def _document_iff_kind(self) -> Grounding:
        if self.passages is not None:
            if self.kind != "document":
                raise ValueError(f"a '{self.kind}' grounding takes no passages")
            if not self.passages or any(not passage.strip() for passage in self.passages):
                raise ValueError("passages must be non-empty texts (a turn without any is 'knowledge_only')")
            numbered = number_passages(self.passages)
            if len(numbered) > MAX_TEXT:
                raise ValueError(f"the passages hold {len(numbered)} characters; at most {MAX_TEXT} are accepted")
            if self.document is not None and self.document != numbered:
                raise ValueError("give the passages or the document, not both (the document of passages is their "
                                 "numbered text)")
            self.document = numbered
        if self.kind == "document":
            if not self.document or not self.document.strip():
                raise ValueError("a 'document' grounding needs a non-empty document text")
        elif self.document is not None:
            raise ValueError(f"a '{self.kind}' grounding takes no document text")
        return self

    @classmethod
    def from_document(cls, text: str) -> Grounding:
        return cls(kind="document", document=text)

    @classmethod
    def from_passages(cls, passages: Sequence[str]) -> Grounding:
        """A reference of retrieved passages: one passage is the document itself; several are numbered."""
        passages = list(passages)
        return cls.from_document(passages[0]) if len(passages) == 1 else cls(kind="document", passages=passages)

    @property
    def reference_passages(self) -> list[str]:
        """The texts the turn is judged against, in the judge's numbering: the passages, or the one document."""
        if self.passages is not None:
            return list(self.passages)
        return [self.document] if self.document is not None else []

    @model_serializer(mode="wrap")
    def _without_derived_document(self, handler) -> dict[str, Any]:
        data = handler(self)
        # The document of passages is derived (again when read back); a grounding without passages is written as
        # before they existed.
        data.pop("document" if self.passages is not None else "passages", None)
        return data

    @classmethod
    def knowledge_only(cls) -> Grounding:
        return cls(kind="knowledge_only")

    @classmethod
    def background(cls) -> Grounding:
        return cls(kind="background")

    @property
    def judged(self) -> bool:
        return self.kind != "background"


class GoldClaim(_Record):
    text: str = Field(min_length=1, max_length=MAX_TEXT)
    category: Category

    @model_validator(mode="after")
    def _judged_category(self) -> GoldClaim:
        if self.category == Category.ERROR:
            raise ValueError("a gold claim cannot be labelled ERROR")
        return self


class TurnGold(_Record):
    """Human annotations of one turn, when the input file has them."""

    label: GoldLabel | None = None
    claims: list[GoldClaim] | None = None
    original_label: GoldLabel | None = None


class Turn(_Record):
    role: Literal["user", "assistant"]
    text: str = Field(max_length=MAX_TEXT)
    # Only assistant turns carry a grounding; a missing one means "judge against the knowledge store only".
    grounding: Grounding | None = None
    gold: TurnGold | None = None
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _grounding_for_assistant(self) -> Turn:
        if self.role == "user":
            if self.grounding is not None:
                raise ValueError("user turns are never judged and take no grounding")
            if self.gold is not None:
                raise ValueError("user turns are never judged and take no gold annotations")
        elif self.grounding is None:
            self.grounding = Grounding.knowledge_only()
        return self

    @property
    def judged(self) -> bool:
        return self.role == "assistant" and self.grounding is not None and self.grounding.judged


class Dialogue(_Record):
    id: str = Field(min_length=1)
    turns: list[Turn] = Field(min_length=1)
    # Facts that seed the knowledge store before the first turn (e.g. an agent persona).
    background: list[str] = Field(default_factory=list)
    source: dict[str, Any] = Field(default_factory=dict)

    @property
    def judged_turns(self) -> list[int]:
        return [i for i, turn in enumerate(self.turns) if turn.judged]


class UsageCounts(_Record):
    """Calls and tokens as the endpoint counted them; with an endpoint that reports its own timings (llama.cpp's
    ``timings``, ``lm.clients.timings``) also the prompt tokens its prefix cache served and the milliseconds the
    model spent reading the rest and writing the answer (zero where the endpoint reports none). ``cache_hits``: the
    answers the LM cache gave instead of a call (no token or millisecond of theirs reached a model, so a run replayed
    from the cache says so, rather than looking free)."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0
    prompt_ms: float = 0.0
    generation_ms: float = 0.0
    cache_hits: int = 0

    def __add__(self, other: UsageCounts) -> UsageCounts:
        return UsageCounts(**{name: getattr(self, name) + getattr(other, name) for name in type(self).model_fields})

    @property
    def model_ms(self) -> float:
        """The model's own time: reading the uncached prompt and writing the answer."""
        return self.prompt_ms + self.generation_ms


class Usage(_Record):
    """LM calls and tokens that reached a model (cache hits are not calls), per stage and per model; and, per stage,
    the label probabilities an answer carried that could not be read (``unread_probabilities``: the claim was
    decided without them)."""

    by_stage: dict[str, UsageCounts] = Field(default_factory=dict)
    by_model: dict[str, UsageCounts] = Field(default_factory=dict)
    unread_probabilities: dict[str, int] = Field(default_factory=dict)

    def unread(self, stage: str, count: int) -> None:
        if count:
            self.unread_probabilities[stage] = self.unread_probabilities.get(stage, 0) + count

    def add(self, stage: str, model: str, counts: UsageCounts) -> None:
        self.by_stage[stage] = self.by_stage.get(stage, UsageCounts()) + counts
        self.by_model[model] = self.by_model.get(model, UsageCounts()) + counts

    def merge(self, other: Usage) -> None:
        for stage, counts in other.by_stage.items():
            self.by_stage[stage] = self.by_stage.get(stage, UsageCounts()) + counts
        for model, counts in other.by_model.items():
            self.by_model[model] = self.by_model.get(model, UsageCounts()) + counts
        for stage, count in other.unread_probabilities.items():
            self.unread(stage, count)

    @property
    def total(self) -> UsageCounts:
        return sum(self.by_stage.values(), UsageCounts())


class LabelProbabilities(_Record):
    """The probability the model gave each label, read from the endpoint's token log-probabilities (None where the
    stage was not asked or the endpoint gave none)."""

    verify: dict[str, float] | None = None  # VERIFIED, UNVERIFIABLE
    categorize: dict[str, float] | None = None  # the four categories of an unverified claim


class CheckedAgainst(_Record):
    """What a claim was checked against: the parts of the turn's sources its judge read (``evidence.reading``'s budgets), or,
    for a claim decided by its evidence alone, the windows its cues read.

    ``reading``: "full" (every source word and every earlier claim: the paper's), "turn" (the evidence set of the
    claim's turn, the same for all its claims), "unit" (the claim's own windows). ``reference``: character spans
    ``[start, end)`` of the turn's reference document (``TurnVerdict.passages``, numbered as the judge read it) that the
    prompt carried -- one span of the whole document when it was read whole, none without a reference or when no
    passage shares a word with the claims. ``knowledge``: the numbers of the store's claims the prompt carried (1 is the
    first of ``TurnVerdict.knowledge``). ``left_out``: windows ranked for the claims that the budget left out."""

    reading: Literal["full", "turn", "unit"]
    reference: list[tuple[int, int]] = Field(default_factory=list)
    knowledge: list[int] = Field(default_factory=list)
    left_out: int = 0


class ClaimVerdict(_Record):
    claim: str
    category: Category
    explanation: str = ""
    # The stage whose answer the claim got: verify (Verify said VERIFIED), categorize (Categorize's category), the
    # stage that failed (ERROR), or evidence (decided by the cues alone, not asked).
    stage: Stage
    error: str | None = None
    # Set when the claim came from gold annotations (claim-accuracy protocol).
    gold_category: Category | None = None
    probabilities: LabelProbabilities | None = None
    # The claim's evidence cues (``evidence.CUES``), computed with no LM call.
    cues: dict[str, float] | None = None
    # When a decision rule decided ``category``: what the judge's own labels said (VERIFIED or one of the four
    # categories), the rule's P(unsafe), and what decided: "rule" (the judge's answers and the cues) or "evidence"
    # (the cues alone: the cascade, or an endpoint without label probabilities).
    raw_label: str | None = None
    p_unsafe: float | None = None
    decided_by: Literal["rule", "evidence"] | None = None
    # "coverage": not one of Decompose's claims but a sentence of the turn that no claim covered, judged as a claim.
    added_by: Literal["coverage"] | None = None
    # Where the turn said it: character spans [start, end) of the turn's text, and how they were found (``spans``):
    # "exact" (the claim's text is in the turn), "words" (its content words are), "unaligned" (not found: no span
    # rather than a wrong one); None in a record written before spans existed.
    spans: list[tuple[int, int]] = Field(default_factory=list)
    alignment: Literal["exact", "words", "unaligned"] | None = None
    # The chain of decisions behind a rule's ``category`` (the explanation is one sentence; these are its steps):
    # the judge's own reason when the explanation is not it; the P(unsafe) from which the deciding model calls a
    # claim unsafe (beside ``p_unsafe``); what the rule decided for the claim alone; and, when the claim was made
    # unsafe as its turn's most doubtful claim (``decision.turn_flip``), the turn threshold its P(unsafe) reached or
    # the turn model's P(hallucinated) of its turn.
    judge_explanation: str | None = None
    threshold: float | None = None
    rule_label: str | None = None
    turn_threshold: float | None = None
    turn_p_hallucinated: float | None = None
    # What the claim was checked against (since schema version 2; None in older records and for a claim no judge read).
    checked_against: CheckedAgainst | None = None


class ContradictionVerdict(_Record):
    contradicts: bool | None
    explanation: str = ""
    error: str | None = None


class TurnVerdict(_Record):
    turn_index: int
    text: str
    grounding: Literal["document", "knowledge_only"]
    claims: list[ClaimVerdict]
    claims_source: Literal["decomposed", "given", "sentences", "clauses"]
    label: TurnLabel
    score: float | None
    # The numbered knowledge store exactly as the judge saw it for this turn.
    knowledge: list[str]
    # The reference the turn was judged against, as passages in the judge's numbering ([1] is the first): one for a
    # single document, none for a turn judged against the knowledge store alone.
    passages: list[str] = Field(default_factory=list)
    contradiction: ContradictionVerdict | None = None
    # A holistic judge's reason for the whole turn (LLM-as-Judge baseline), or which claim a rule's turn model made
    # unsafe in a turn with no unsafe claim (the turn's label still follows from its claims); empty otherwise.
    explanation: str | None = None
    duplicates_removed: int = 0
    # Decomposed claims that the turn and what precedes it do not contain: dropped, neither judged nor stored.
    ungrounded: list[str] = Field(default_factory=list)
    # Decompose found no claim in a turn with content words: a failed decomposition (``unknown``, with its error),
    # unless the judge reads it as the paper does (``empty_turns="faithful"``); flagged either way.
    empty_decomposition: bool = False
    # Background turns before this one whose decomposition failed: the knowledge store this turn was judged against
    # lacks their claims.
    knowledge_missing: list[int] = Field(default_factory=list)
    error: str | None = None
    gold_label: GoldLabel | None = None


class DialogueVerdict(_Record):
    schema_version: int = SCHEMA_VERSION
    dialogue_id: str
    turns: list[TurnVerdict]
    score: float | None
    usage: Usage = Field(default_factory=Usage)
    # Failures outside judged turns (e.g. a background turn that could not be decomposed).
    errors: list[str] = Field(default_factory=list)
    # Ungrounded claims dropped from background turns (never stored as common ground).
    ungrounded_background: list[str] = Field(default_factory=list)
    program: str | None = None
    model: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    source: dict[str, Any] = Field(default_factory=dict)

"""How a VISTA judge judges: one typed, validated record of every switch (the paper's variants, the judging modes,
the run modes), with one vocabulary. The constructor, a program file, the CLI, the study's search space, the
benchmark's ablations and a run's settings all speak it; the CLI's flag names map onto it here, in one place.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ClaimCalls = Literal["per-claim", "batched", "joint"]
CLAIM_CALLS: tuple[str, ...] = ("per-claim", "batched", "joint")
DecomposeCalls = Literal["per-turn", "per-dialogue"]
Units = Literal["claims", "sentences", "clauses"]
UNITS: tuple[str, ...] = ("claims", "sentences", "clauses")
DECOMPOSE_CALLS: tuple[str, ...] = ("per-turn", "per-dialogue")
# The paper's method. Batched judging costs about half the calls but, with the local model, found fewer
# hallucinated turns end to end (F1 0.574 vs 0.727 on the dev file, 95 % CI of the drop 0.054-0.267;
# benchmarks/RESULTS.md), so it is opt-in.
DEFAULT_CLAIM_CALLS: ClaimCalls = "per-claim"
DEFAULT_DECOMPOSE_CALLS: DecomposeCalls = "per-turn"  # the paper's method
REASONING_STAGES: tuple[str, ...] = ("decompose", "verify", "categorize")
# How a prompt reads the turn's sources (``evidence.reading``): "turn" -- each source whole when it fits its budget,
# else the passages ranked for the turn's units within it, the same for every unit of the turn (one prompt prefix per
# turn: a server's prefix cache serves every claim after the first); "unit" -- the same for each unit on its own
# (smaller prompts, a prefix per unit); "full" -- every source word, every earlier claim, the whole history (the
# paper's).
Evidence = Literal["turn", "unit", "full"]
EVIDENCE_READINGS: tuple[str, ...] = ("turn", "unit", "full")
# Budgets in tokens of 4 characters (``evidence.reading.tokens``). The reference's keeps every reference of the
# instrument whole (the longest is ~660 tokens; the quick start's ~60), so prompts and verdicts there are as before;
# 5,000 words of sources (~7,000 tokens) no longer overflow the embedded model's 8,192-token slot. The store's keeps
# the stores of the instrument's dialogues whole (at most 5 judged turns: ~340 tokens of the annotators' accepted
# claims at most) and bounds a long dialogue's, whose prompts then grow by less than half (benchmarks/growth.py); the
# history's keeps every history of the instrument whole (at most ~320 tokens).
DEFAULT_EVIDENCE_TOKENS = 1024
DEFAULT_KNOWLEDGE_TOKENS = 384
DEFAULT_HISTORY_TOKENS = 512


class JudgeOptions(BaseModel):
    """Every switch of a VISTA judge. Frozen: change one with ``replace``, which validates the result again.

    The paper's variants: ``use_context`` (VISTA+ctx: Verify and Categorize also see the dialogue history, needed to
    catch contradictions with earlier turns), ``accumulate`` (False = the -AC ablation: no knowledge store across
    turns; background facts are still used), ``history_in_decompose`` (False = the -history ablation),
    ``zero_shot`` (no demos in any stage), ``seed_background`` (start the store with ``Dialogue.background``),
    ``check_contradictions`` (one more call per judged turn: does it contradict an earlier turn? a yes makes the
    turn hallucinated).

    Judging modes: ``claim_calls`` -- "per-claim" (one Verify call per claim, one Categorize call per unverified
    claim; the paper's method), "batched" (one Verify call for the claims of a turn, one Categorize call for the
    unverified ones) or "joint" (one call deciding VERIFIED or the category); a claim a batched answer misses is
    asked on its own. ``decompose_calls`` -- "per-turn" (the paper's) or "per-dialogue" (one call for all the
    assistant turns of a dialogue; a turn the answer misses is asked on its own). ``reasoning``: stages run as chain
    of thought. ``explain_verified``: Verify writes an explanation before its label (default False: its label alone,
    a third of the tokens; an unverified claim still gets Categorize's explanation. Chosen with numbers: on the 229
    human claims of vista-human:train the 1.5B local model's decisions were no worse without it, benchmarks/
    RESULTS.md). Per-claim judging only: a batched answer always explains.
    ``empty_turns``: how a turn with content from which Decompose took no claim is labelled -- "unknown" (default:
    a failed decomposition, with its reason, counted as a failure by every gate) or "faithful" (the paper's reading:
    a turn with no claims is faithful).
    ``explain_unverified``: Categorize writes an explanation before its category (default True, the paper's method;
    False: its category alone, and the claim's explanation is a reading of its evidence cues -- where no one reads
    the explanation: a reward, a gate, a metric inside an optimizer, a compile probe). Per-claim judging only.
    ``units``: what is judged -- "claims" (Decompose's atomic claims: VISTA's method), "sentences" (each
    statement of the turn with a content word is a unit: no Decompose call; the store accumulates the accepted
    sentences, background turns' sentences seed it) or "clauses" (the same, each statement cut at its clause
    boundaries: ``grounding.clause_units``).
    ``check_grounding``: drop decomposed claims that the turn and what precedes it do not contain (listed as
    ``ungrounded``). ``coverage``: a sentence of the turn most of whose content words no claim carries is judged
    too, as a claim of its own marked ``added_by="coverage"`` (a turn with content then never ends with no claim;
    off in the seed program: the paper's method judges Decompose's claims only). ``adapter``: how DSPy formats the prompts and parses the answers ("json" or "chat"), when the
    program was chosen with one; None: the endpoint's own (JSON unless a command says otherwise).

    The endpoint's side (set by whoever knows the LM, never saved with a program): ``short_answer_tokens`` (a cap on
    Verify/Categorize/contradiction answers, so a small model that loops stops early; leave None for reasoning
    models) and ``label_probabilities`` (ask Verify and Categorize for token log-probabilities: each label's
    probability is recorded on the claim, and a calibrated program decides with them).

    How the sources are read (issue 63): ``evidence`` -- "turn" (default), "unit" or "full" (the paper's reading:
    every source word, every earlier claim, the whole history; for replication); ``evidence_tokens`` -- the reference
    a Verify, Categorize, IsSupported or LLM-as-Judge prompt carries: the whole document when it fits, else the
    windows (a sentence with its neighbours in its paragraph, ``evidence.TurnEvidence.local``) that share most of the
    units' words, best first, within it; ``knowledge_tokens`` -- the same for the knowledge store (the claims that bear
    on the units, with their store numbers); ``history_tokens`` -- the history Decompose, the contradiction check and
    the +ctx variant read: the last turns within it. Each claim records what it was checked against
    (``ClaimVerdict.checked_against``).

    Run modes (never saved with a program): ``given_claims`` (judge the human claims of annotated turns instead of
    decomposing: the claim-accuracy protocol) and ``categorize_all`` (also ask Categorize about verified claims,
    leaving their verdict unchanged: what fitting a calibration needs).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    use_context: bool = False
    accumulate: bool = True
    history_in_decompose: bool = True
    zero_shot: bool = False
    seed_background: bool = True
    check_contradictions: bool = False
    claim_calls: ClaimCalls = DEFAULT_CLAIM_CALLS
    decompose_calls: DecomposeCalls = DEFAULT_DECOMPOSE_CALLS
    reasoning: tuple[Literal["decompose", "verify", "categorize"], ...] = ()
    explain_verified: bool = False
    explain_unverified: bool = True
    units: Units = "claims"
    check_grounding: bool = True
    coverage: bool = False
    empty_turns: Literal["unknown", "faithful"] = "unknown"
    adapter: Literal["json", "chat"] | None = None
    short_answer_tokens: int | None = Field(default=None, ge=1)
    label_probabilities: bool = True
    evidence: Evidence = "turn"
    evidence_tokens: int = Field(default=DEFAULT_EVIDENCE_TOKENS, ge=1)
    knowledge_tokens: int = Field(default=DEFAULT_KNOWLEDGE_TOKENS, ge=1)
    history_tokens: int = Field(default=DEFAULT_HISTORY_TOKENS, ge=1)
    given_claims: bool = False
    categorize_all: bool = False

    @field_validator("reasoning", mode="before")
    @classmethod
    def _reasoning_in_stage_order(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip() not in ("", "none")]
        if isinstance(value, (list, tuple, set, frozenset)):
            unknown = sorted(set(value) - set(REASONING_STAGES))
            if unknown:
                raise ValueError(f"reasoning applies to {', '.join(REASONING_STAGES)}, not {', '.join(unknown)}")
            return tuple(stage for stage in REASONING_STAGES if stage in value)
        return value

    @model_validator(mode="after")
    def _compatible(self) -> JudgeOptions:
        if self.decompose_calls == "per-dialogue" and not self.history_in_decompose:
            raise ValueError("decompose_calls='per-dialogue' shows Decompose the whole dialogue: it cannot be "
                             "combined with history_in_decompose=False")
        return self

    def replace(self, **changes: Any) -> JudgeOptions:
        """A copy with ``changes`` (option names), validated as a whole; an unknown name is an error."""
        unknown = sorted(set(changes) - set(type(self).model_fields))
        if unknown:
            known = ", ".join(type(self).model_fields)
            raise ValueError(f"unknown judging option {', '.join(unknown)}; known: {known}")
        return type(self).model_validate({**self.model_dump(), **changes})

    def as_dict(self) -> dict[str, Any]:
        """JSON-able values, as verdicts and run.json record them."""
        return self.model_dump(mode="json")

    def saved(self) -> dict[str, Any]:
        """What a program file keeps: the judging options, without the endpoint's side and the run modes, and without
        an option added after programs were first saved while it has its default (``SAVED_WHEN_CHANGED``), so that
        the content hash of every program saved before it is unchanged."""
        return {k: v for k, v in self.as_dict().items()
                if k not in NOT_SAVED and not (k in SAVED_WHEN_CHANGED and v == SAVED_WHEN_CHANGED[k])}

    def changed(self) -> dict[str, Any]:
        """The options that differ from the defaults."""
        default = JudgeOptions().as_dict()
        return {k: v for k, v in self.as_dict().items() if v != default[k]}


# Options that describe the endpoint or the run, not the program: a program file never carries them.
NOT_SAVED = ("short_answer_tokens", "label_probabilities", "given_claims", "categorize_all")
# Options added after programs were first saved, with their defaults: a program file carries one only when it differs.
SAVED_WHEN_CHANGED: dict[str, Any] = {"coverage": False, "empty_turns": "unknown", "explain_unverified": True,
                                      "units": "claims", "evidence": "turn",
                                      "evidence_tokens": DEFAULT_EVIDENCE_TOKENS,
                                      "knowledge_tokens": DEFAULT_KNOWLEDGE_TOKENS,
                                      "history_tokens": DEFAULT_HISTORY_TOKENS}
OPTION_NAMES: tuple[str, ...] = tuple(JudgeOptions.model_fields)

# The CLI's flag names that differ from the option names (`vista evaluate --context` sets use_context, ...).
FLAG_NAMES: dict[str, str] = {
    "context": "use_context",
    "history": "history_in_decompose",
    "background": "seed_background",
    "contradiction_check": "check_contradictions",
    "judge_given_claims": "given_claims",
    "accumulate": "accumulate",
    "zero_shot": "zero_shot",
    "claim_calls": "claim_calls",
    "decompose_calls": "decompose_calls",
    "reasoning": "reasoning",
    "explain_verified": "explain_verified",
    "explain_unverified": "explain_unverified",
    "units": "units",
    "check_grounding": "check_grounding",
    "coverage": "coverage",
    "empty_turns": "empty_turns",
    "evidence": "evidence",
    "evidence_tokens": "evidence_tokens",
    "knowledge_tokens": "knowledge_tokens",
    "history_tokens": "history_tokens",
}


def from_flags(**flags: Any) -> dict[str, Any]:
    """The options that command-line flags set (CLI names, ``FLAG_NAMES``), leaving out those not given (None).
    Enum values become their strings."""
    changes: dict[str, Any] = {}
    for flag, value in flags.items():
        if flag not in FLAG_NAMES:
            raise ValueError(f"no judging option behind the flag {flag!r}")
        if value is not None:
            changes[FLAG_NAMES[flag]] = getattr(value, "value", value)
    return changes


"""VISTA as a DSPy module: the method, step by step as the paper gives it.

For each dialogue, turn by turn: (1) decompose each assistant turn into atomic claims, (2) verify each claim against
the turn's reference document and the knowledge store, (3) categorize each unverified claim, (4) add the verified
and out-of-scope claims to the store after the whole turn; the turn's label and score come from ``scoring``.

The turn loop is a generator that yields batches of stage calls (``stages`` runs them, blocking or concurrently);
all per-dialogue state -- knowledge store, history, usage -- lives in its locals, so one ``Vista`` instance can
judge many dialogues at once. How a record becomes a prompt is ``prompts``'; the modes that ask about several claims
in one call are ``batching``'s.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

import dspy

from . import batching, scoring
from .compiled import program_path
from .grounding import says_something, split_grounded
from .prompts import HISTORY_OMITTED, clean_claims, render_history, render_knowledge
from .schema import (
    Category,
    ClaimVerdict,
    ContradictionVerdict,
    Dialogue,
    DialogueVerdict,
    GoldClaim,
    Turn,
    TurnVerdict,
    Usage,
)
from .signatures import (
    NO_REFERENCE,
    Categorize,
    CategorizedClaim,
    CheckContradiction,
    Decompose,
    VerifiedClaim,
    Verify,
    label_only,
    with_history,
    with_reasoning,
)
from .stages import StageCall, StagedModule, StageResult, add_usage

ClaimCalls = Literal["per-claim", "batched", "joint"]
CLAIM_CALLS: tuple[str, ...] = ("per-claim", "batched", "joint")
DecomposeCalls = Literal["per-turn", "per-dialogue"]
DECOMPOSE_CALLS: tuple[str, ...] = ("per-turn", "per-dialogue")
# The paper's method. Batched judging costs about half the calls but, with the local model, found fewer
# hallucinated turns end to end (F1 0.574 vs 0.727 on the dev file, 95 % CI of the drop 0.054-0.267;
# benchmarks/RESULTS.md), so it is opt-in.
DEFAULT_CLAIM_CALLS: ClaimCalls = "per-claim"
DEFAULT_DECOMPOSE_CALLS: DecomposeCalls = "per-turn"  # the paper's method
REASONING_STAGES: tuple[str, ...] = ("decompose", "verify", "categorize")

Steps = Generator[list[StageCall], list[StageResult], Any]


class ClaimsOfTurn(NamedTuple):
    """The claims of one assistant turn, and where they came from."""

    claims: list[str | GoldClaim]
    source: str  # "decomposed" or "given"
    removed: int = 0  # repeated claims dropped from the decomposition
    error: str | None = None  # why there are none, when Decompose failed
    ungrounded: tuple[str, ...] = ()  # decomposed claims not found in the turn or what precedes it (dropped)

    @property
    def texts(self) -> list[str]:
        return [c.text if isinstance(c, GoldClaim) else c for c in self.claims]


class Vista(StagedModule):
    """The VISTA evaluator.

    Args:
        use_context: VISTA+ctx — also give the dialogue history to Verify and Categorize (needed to catch
            contradictions with earlier turns). Default False.
        accumulate: keep a knowledge store of accepted claims across turns. False = the paper's -AC ablation
            (Verify/Categorize see only the reference document; background facts are still used). Default True.
        history_in_decompose: give the dialogue history to Decompose (False = the -history ablation).
        zero_shot: ignore the program's demos in every stage (the zero-shot ablation).
        seed_background: start the knowledge store with ``Dialogue.background`` facts. Default True.
        check_contradictions: one extra call per judged turn asking whether it contradicts an earlier turn;
            a contradiction makes the turn hallucinated. Default False.
        claim_calls: how the claims of a turn are judged: "per-claim" (one Verify call per claim, one Categorize
            call per unverified claim; the paper's method), "batched" (one Verify call for all claims of the turn and
            one Categorize call for all unverified ones), or "joint" (one call deciding VERIFIED or the category).
            Batched answers are checked against the input claims; a claim missing from the answer falls back to
            per-claim calls. Batched prompts reuse the per-claim instructions and demos.
        decompose_calls: "per-turn" (one Decompose call per assistant turn; the paper's method) or "per-dialogue"
            (one call for all the assistant turns of a dialogue, marked and numbered in it; a turn missing from the
            answer falls back to its own call). Per-dialogue prompts reuse the per-turn instructions and demos.
        reasoning: stages run as chain of thought (a ``reasoning`` output before the answer, as
            ``dspy.ChainOfThought``): any of "decompose", "verify", "categorize". Default none.
        explain_verified: Verify writes a short explanation before its label (default True). False: the label
            alone, so a VERIFIED claim carries no explanation (an unverified claim still gets Categorize's). Per-claim
            judging only.
        check_grounding: drop decomposed claims that the turn, the dialogue before it and its background do not
            contain (``grounding.grounded``: a small model copies its demos' claims); they are neither judged nor
            stored, and are listed in ``TurnVerdict.ungrounded``. Default True.
        short_answer_tokens: a token cap for the short answers (verify, categorize, contradiction), so a small
            model that starts repeating itself stops early. None (default) keeps the LM's own limit; leave it None
            for reasoning models, whose hidden reasoning counts against the cap.

    Saved programs (``save``/``load``) hold demos and instructions of the four predictors, never an LM.
    """

    def __init__(
        self,
        *,
        use_context: bool = False,
        accumulate: bool = True,
        history_in_decompose: bool = True,
        zero_shot: bool = False,
        seed_background: bool = True,
        check_contradictions: bool = False,
        short_answer_tokens: int | None = None,
        claim_calls: ClaimCalls = DEFAULT_CLAIM_CALLS,
        decompose_calls: DecomposeCalls = DEFAULT_DECOMPOSE_CALLS,
        reasoning: Sequence[str] = (),
        explain_verified: bool = True,
        check_grounding: bool = True,
    ) -> None:
        super().__init__()
        if claim_calls not in CLAIM_CALLS:
            raise ValueError(f"claim_calls must be one of {', '.join(CLAIM_CALLS)}, not {claim_calls!r}")
        if decompose_calls not in DECOMPOSE_CALLS:
            raise ValueError(f"decompose_calls must be one of {', '.join(DECOMPOSE_CALLS)}, not {decompose_calls!r}")
        if decompose_calls == "per-dialogue" and not history_in_decompose:
            raise ValueError("decompose_calls='per-dialogue' shows Decompose the whole dialogue: it cannot be "
                             "combined with history_in_decompose=False")
        if not explain_verified and claim_calls != "per-claim":
            raise ValueError("explain_verified=False applies to per-claim judging only")
        self.decompose = dspy.Predict(Decompose)
        self.verify = dspy.Predict(Verify)
        self.categorize = dspy.Predict(Categorize)
        self.contradiction = dspy.Predict(CheckContradiction)
        self.use_context = use_context
        self.accumulate = accumulate
        self.history_in_decompose = history_in_decompose
        self.zero_shot = zero_shot
        self.seed_background = seed_background
        self.check_contradictions = check_contradictions
        self.short_answer_tokens = short_answer_tokens
        self.claim_calls = claim_calls
        self.decompose_calls = decompose_calls
        unknown = set(reasoning) - set(REASONING_STAGES)
        if unknown:
            raise ValueError(f"reasoning applies to {', '.join(REASONING_STAGES)}, not {', '.join(sorted(unknown))}")
        self.reasoning = tuple(s for s in REASONING_STAGES if s in reasoning)
        self.explain_verified = explain_verified
        self.check_grounding = check_grounding
        self.program_name = "unsaved"

    # ---- loading -------------------------------------------------------------------------------------------
    @classmethod
    def from_program(cls, program: str | Path | None = None, **options: Any) -> Vista:
        """A Vista with a saved program loaded: a path to a JSON file, a name in ``vista_dspy/compiled/``, or
        None for the shipped seed program."""
        name, path = program_path(program)
        module = cls(**options)
        module.load(str(path))
        module.program_name = name
        return module

    def options(self) -> dict[str, Any]:
        return {
            "use_context": self.use_context,
            "accumulate": self.accumulate,
            "history_in_decompose": self.history_in_decompose,
            "zero_shot": self.zero_shot,
            "seed_background": self.seed_background,
            "check_contradictions": self.check_contradictions,
            "short_answer_tokens": self.short_answer_tokens,
            "claim_calls": self.claim_calls,
            "decompose_calls": self.decompose_calls,
            "reasoning": list(self.reasoning),
            "explain_verified": self.explain_verified,
            "check_grounding": self.check_grounding,
        }

    # ---- public entry points (forward / aforward come from StagedModule) --------------------------------------
    def judge_claims(
        self, dialogue: Dialogue, claims_per_turn: Mapping[int, Sequence[str | GoldClaim]] | None = None
    ) -> DialogueVerdict:
        """Verify and categorize GIVEN claims instead of decomposing (the paper's claim-accuracy protocol).

        ``claims_per_turn`` maps a turn index to its claims; None takes the gold claims of every judged turn
        (then every judged turn must have them). Turns not in the mapping are decomposed as usual. Gold claims
        carry their category into ``ClaimVerdict.gold_category``.
        """
        return self._drive(self._judge(dialogue, given=self._given(dialogue, claims_per_turn)))

    async def ajudge_claims(
        self, dialogue: Dialogue, claims_per_turn: Mapping[int, Sequence[str | GoldClaim]] | None = None
    ) -> DialogueVerdict:
        return await self._adrive(self._judge(dialogue, given=self._given(dialogue, claims_per_turn)))

    @staticmethod
    def _given(
        dialogue: Dialogue, claims_per_turn: Mapping[int, Sequence[str | GoldClaim]] | None
    ) -> dict[int, list[str | GoldClaim]]:
        if claims_per_turn is not None:
            return {int(k): list(v) for k, v in claims_per_turn.items()}
        given: dict[int, list[str | GoldClaim]] = {}
        for index in dialogue.judged_turns:
            gold = dialogue.turns[index].gold
            if gold is None or gold.claims is None:
                raise ValueError(f"dialogue {dialogue.id!r}, turn {index}: no gold claims to judge")
            given[index] = list(gold.claims)
        return given

    def _signature(self, stage: str, signature: type[dspy.Signature], *, history: bool
                   ) -> type[dspy.Signature] | None:
        """The signature a stage is called with when it differs from the saved one (+ctx, chain of thought, a label
        without explanation)."""
        label_alone = stage == "verify" and not self.explain_verified
        if not history and stage not in self.reasoning and not label_alone:
            return None
        if label_alone:
            signature = label_only(signature)
        if history:
            signature = with_history(signature)
        return with_reasoning(signature) if stage in self.reasoning else signature

    def decompose_inputs(self, dialogue: Dialogue, index: int) -> dict[str, str]:
        """What Decompose sees for turn ``index`` (also used to build demos from human claims)."""
        history = render_history(dialogue.turns[:index]) if self.history_in_decompose else HISTORY_OMITTED
        return {"history": history, "turn": dialogue.turns[index].text}

    # ---- the method ----------------------------------------------------------------------------------------
    def _judge(self, dialogue: Dialogue, given: dict[int, list[str | GoldClaim]] | None = None) -> Steps:
        seed = list(dialogue.background) if self.seed_background else []
        knowledge: list[str] = list(seed)
        usage = Usage()
        errors: list[str] = []
        ungrounded_background: list[str] = []
        verdicts: list[TurnVerdict] = []
        signatures = {
            "decompose": self._signature("decompose", self.decompose.signature, history=False),
            "verify": self._signature("verify", self.verify.signature, history=self.use_context),
            "categorize": self._signature("categorize", self.categorize.signature, history=self.use_context),
        }

        # 1. Claims: given, or decomposed.
        to_decompose = [i for i, t in enumerate(dialogue.turns)
                        if t.role == "assistant" and not (given is not None and i in given)]
        decomposed = (yield from self._decompose(dialogue, to_decompose, signatures["decompose"], usage)
                      ) if to_decompose else {}

        for index, turn in enumerate(dialogue.turns):
            if turn.role == "user":
                continue
            if given is not None and index in given:
                claims = ClaimsOfTurn(given[index], "given")
            else:
                claims = self._decomposed_claims(decomposed[index], dialogue, index)
            if not turn.judged:
                # Background (VISTA's "N/A"): the turn's claims become common ground, unjudged.
                if claims.error is not None:
                    errors.append(f"turn {index} (background): {claims.error}")
                knowledge.extend(claims.texts)
                ungrounded_background.extend(claims.ungrounded)
                continue

            # 2-3. Judge the claims against the store as it stood BEFORE this turn (under -AC only the seeded
            # background is ever shown).
            snapshot = list(knowledge) if self.accumulate else seed
            verdict = yield from self._judge_turn(dialogue, index, claims, snapshot, signatures, usage)
            verdicts.append(verdict)
            # 4. Accumulate after the whole turn: claims of one turn never see each other.
            knowledge.extend(
                c.claim for c in verdict.claims if c.category in (Category.VERIFIED, Category.OUT_OF_SCOPE)
            )

        return self._verdict(dialogue, verdicts, usage, errors, ungrounded_background=ungrounded_background)

    def _decomposed_claims(self, result: StageResult, dialogue: Dialogue, index: int) -> ClaimsOfTurn:
        """Decompose's claims of turn ``index``, cleaned, and (``check_grounding``) without the claims that neither
        the turn nor what precedes it says."""
        if result.error is not None:
            return ClaimsOfTurn([], "decomposed", error=f"decompose failed: {result.error}")
        claims, removed = clean_claims(result.prediction.claims or [])
        if not self.check_grounding:
            return ClaimsOfTurn(claims, "decomposed", removed)
        sources = " ".join([*dialogue.background, *(t.text for t in dialogue.turns[: index + 1])])
        claims, ungrounded = split_grounded(claims, sources)
        return ClaimsOfTurn(claims, "decomposed", removed, ungrounded=tuple(ungrounded))

    def _judge_turn(self, dialogue: Dialogue, index: int, claims: ClaimsOfTurn, knowledge: list[str],
                    signatures: dict[str, type[dspy.Signature] | None], usage: Usage) -> Steps:
        """The verdict on one judged turn: (2) verify every claim against the reference and ``knowledge``, (3)
        categorize the claims that were not verified; the optional contradiction check is asked alongside."""
        turn: Turn = dialogue.turns[index]
        history = render_history(dialogue.turns[:index])
        texts = claims.texts
        evidence = {
            "reference": turn.grounding.document or NO_REFERENCE,
            "knowledge": render_knowledge(knowledge),
        }
        if self.use_context:
            evidence["history"] = history
        extra = ([StageCall("contradiction", self.contradiction, {"history": history, "turn": turn.text})]
                 if self.check_contradictions else [])
        if self.claim_calls == "joint" and texts:
            verified, categorized, extra_results = yield from batching.judge_jointly(
                self.verify, self.categorize, texts, evidence, extra, signatures["verify"],
                signatures["categorize"], usage)
        else:
            verified, extra_results = yield from self._verify(texts, evidence, extra, signatures["verify"], usage)
            pending = [i for i, r in enumerate(verified) if r.error is None and r.prediction.label != "VERIFIED"]
            categorized = yield from self._categorize(texts, pending, evidence, signatures["categorize"], usage)
        contradiction = self._contradiction(extra_results[0]) if self.check_contradictions else None

        claim_verdicts = [
            self._claim_verdict(claim, verified[i], categorized.get(i)) for i, claim in enumerate(claims.claims)
        ]
        categories = [c.category for c in claim_verdicts]
        return TurnVerdict(
            turn_index=index,
            text=turn.text,
            grounding=turn.grounding.kind,
            claims=claim_verdicts,
            claims_source=claims.source,
            label=scoring.turn_label(
                categories,
                failed=claims.error is not None or bool(contradiction and contradiction.error),
                contradiction=bool(contradiction and contradiction.contradicts),
            ),
            score=scoring.turn_score(categories),
            knowledge=knowledge,
            contradiction=contradiction,
            duplicates_removed=claims.removed,
            ungrounded=list(claims.ungrounded),
            empty_decomposition=(claims.source == "decomposed" and claims.error is None and not claims.claims
                                 and says_something(turn.text)),
            error=claims.error,
            gold_label=turn.gold.label if turn.gold else None,
        )

    def _decompose(self, dialogue: Dialogue, indices: list[int], signature: type[dspy.Signature] | None,
                   usage: Usage) -> Steps:
        """{turn index: Decompose result} for the assistant turns at ``indices``. Decompose reads only the dialogue's
        text, never the store, so all its calls go out at once (in parallel under the async driver): the chain of
        dependent calls is one Decompose round plus the judged turns' Verify/Categorize rounds. Per dialogue, one
        call answers for every turn; a turn it misses (or numbers twice) is asked on its own."""
        results: dict[int, StageResult] = {}
        if self.decompose_calls == "per-dialogue" and len(indices) > 1:
            results = yield from batching.decompose_dialogue(self.decompose, dialogue, indices, signature, usage)
        missing = [i for i in indices if i not in results]
        if missing:
            calls = [StageCall("decompose", self.decompose, self.decompose_inputs(dialogue, i), signature)
                     for i in missing]
            for i, result in zip(missing, (yield calls)):
                results[i] = add_usage(usage, "decompose", result)
        return results

    # ---- claims of one turn: per claim, or in one call with a per-claim fallback ------------------------------
    def _verify(self, texts: list[str], evidence: dict[str, str], extra: list[StageCall],
                signature: type[dspy.Signature] | None, usage: Usage) -> Steps:
        """(one verify result per claim, results of the ``extra`` calls asked alongside)."""
        single = [StageCall("verify", self.verify, {**evidence, "claim": t}, signature) for t in texts]
        if self.claim_calls == "per-claim" or not texts:
            results = [add_usage(usage, c.stage, r) for c, r in zip(single + extra, (yield single + extra))]
            return results[: len(texts)], results[len(texts):]
        call = batching.batch_call("verify", self.verify, VerifiedClaim, texts, evidence, signature)
        results = [add_usage(usage, c.stage, r) for c, r in zip([call] + extra, (yield [call] + extra))]
        verified = yield from batching.per_item(results[0], "label", single, usage)
        return verified, results[1:]

    def _categorize(self, texts: list[str], pending: list[int], evidence: dict[str, str],
                    signature: type[dspy.Signature] | None, usage: Usage) -> Steps:
        """{claim index: categorize result} for the ``pending`` (unverified) claims."""
        single = [StageCall("categorize", self.categorize, {**evidence, "claim": texts[i]}, signature) for i in pending]
        if not pending:
            return {}
        if self.claim_calls == "per-claim":
            results = [add_usage(usage, c.stage, r) for c, r in zip(single, (yield single))]
        else:
            call = batching.batch_call("categorize", self.categorize, CategorizedClaim, [texts[i] for i in pending],
                                       evidence, signature)
            [result] = yield [call]
            results = yield from batching.per_item(add_usage(usage, "categorize", result), "category", single, usage)
        return dict(zip(pending, results))

    @staticmethod
    def _claim_verdict(claim: str | GoldClaim, verified: StageResult, categorized: StageResult | None) -> ClaimVerdict:
        text, gold = (claim.text, claim.category) if isinstance(claim, GoldClaim) else (claim, None)
        if verified.error is not None:
            return ClaimVerdict(
                claim=text, category=Category.ERROR, stage="verify", error=verified.error, gold_category=gold
            )
        if verified.prediction.label == "VERIFIED":
            return ClaimVerdict(
                claim=text,
                category=Category.VERIFIED,
                explanation=verified.prediction.get("explanation") or "",
                stage="verify",
                gold_category=gold,
            )
        if categorized is None or categorized.error is not None:
            error = categorized.error if categorized else "no categorize result"
            return ClaimVerdict(claim=text, category=Category.ERROR, stage="categorize", error=error,
                                gold_category=gold)
        return ClaimVerdict(
            claim=text,
            category=Category(categorized.prediction.category),
            explanation=categorized.prediction.explanation or "",
            stage="categorize",
            gold_category=gold,
        )

    @staticmethod
    def _contradiction(result: StageResult) -> ContradictionVerdict:
        if result.error is not None:
            return ContradictionVerdict(contradicts=None, error=result.error)
        return ContradictionVerdict(
            contradicts=bool(result.prediction.contradicts), explanation=result.prediction.explanation or ""
        )

"""VISTA as a DSPy module: decompose each assistant turn, verify each claim, categorize the unverifiable ones,
accumulate a knowledge store across turns.

The turn loop is written once, as a generator that yields batches of stage calls; ``forward`` runs the batches
with blocking calls and ``aforward`` awaits them concurrently. All per-dialogue state (knowledge store, history,
usage) lives in that generator's locals, so one ``Vista`` instance can judge many dialogues at once.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import dspy
from dspy.utils.exceptions import (
    AdapterParseError,
    LMAuthError,
    LMBillingError,
    LMConfigurationError,
    LMUnsupportedFeatureError,
    LMUnsupportedModelError,
)

from . import scoring
from .models import request_slot
from .schema import (
    Category,
    ClaimVerdict,
    ContradictionVerdict,
    Dialogue,
    DialogueVerdict,
    GoldClaim,
    Stage,
    Turn,
    TurnVerdict,
    Usage,
    UsageCounts,
)
from .signatures import (
    EMPTY_KNOWLEDGE,
    NO_HISTORY,
    NO_REFERENCE,
    TURN_MARK,
    CategorizedClaim,
    Categorize,
    CheckContradiction,
    Decompose,
    JudgedClaim,
    Verify,
    TurnClaims,
    VerifiedClaim,
    batched,
    joint_instructions,
    number_claims,
    per_dialogue,
    with_history,
    with_reasoning,
)

SEED_PROGRAM = "seed"


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
# An answer that does not parse is asked once more (HTTP errors and timeouts are retried by the LM client).
PARSE_RETRIES = 1
# Errors that no retry or per-claim fallback can fix: stop the run instead of filling it with ERROR verdicts.
FATAL_LM_ERRORS = (
    LMConfigurationError, LMAuthError, LMBillingError, LMUnsupportedModelError, LMUnsupportedFeatureError
)
HISTORY_OMITTED = "(history not given)"


def compiled_dir() -> Path:
    return Path(str(resources.files("vista_dspy") / "compiled"))


def program_for_model(model: str | None) -> str:
    """The program `vista evaluate --model M` uses by default: compiled/<M>.json when it exists, else the seed."""
    from .models import program_name_for

    name = program_name_for(model)
    return name if (compiled_dir() / f"{name}.json").is_file() else SEED_PROGRAM


def render_line(role: str, text: str) -> str:
    """One turn as the prompts show it."""
    return f"{role}: {text}"


def render_history(turns: Sequence[Turn]) -> str:
    if not turns:
        return NO_HISTORY
    return "\n".join(render_line(turn.role, turn.text) for turn in turns)


def render_marked(turns: Sequence[Turn], marked: Sequence[int]) -> str:
    """The dialogue up to its last ``marked`` turn, the marked turns numbered [turn 1], [turn 2], ... (for one
    Decompose call over a whole dialogue)."""
    numbers = {index: n for n, index in enumerate(marked, start=1)}
    return "\n".join((TURN_MARK.format(n=numbers[i]) if i in numbers else "") + render_line(turn.role, turn.text)
                     for i, turn in enumerate(turns[: max(marked) + 1]))


def dialogue_demos(demos: Sequence[dspy.Example]) -> list[dspy.Example]:
    """Per-turn Decompose demos as one-call-per-dialogue demos: each demo's history and turn become a dialogue
    with one marked turn."""
    converted = []
    for demo in demos:
        history = demo.get("history")
        lines = [] if history in (None, NO_HISTORY) else [history]
        fields = {"dialogue": "\n".join([*lines, TURN_MARK.format(n=1) + render_line("assistant", demo["turn"])]),
                  "turns": [TurnClaims(turn=1, claims=list(demo["claims"] or []))]}
        if demo.get("reasoning") is not None:
            fields["reasoning"] = demo["reasoning"]
        converted.append(dspy.Example(**fields))
    return converted


def render_knowledge(knowledge: Sequence[str]) -> str:
    if not knowledge:
        return EMPTY_KNOWLEDGE
    return "\n".join(f"{number}. {claim}" for number, claim in enumerate(knowledge, start=1))


def clean_claims(claims: Sequence[Any]) -> tuple[list[str], int]:
    """Strip, drop empty strings, and remove repeated claims (small models loop). Returns (claims, removed)."""
    seen: set[str] = set()
    kept: list[str] = []
    removed = 0
    for claim in claims:
        text = " ".join(str(claim).split())
        if not text:
            continue
        key = re.sub(r"[^\w ]", "", text.lower())
        if key in seen:
            removed += 1
            continue
        seen.add(key)
        kept.append(text)
    return kept, removed


@dataclass
class StageCall:
    stage: Stage
    predictor: dspy.Predict
    inputs: dict[str, Any]
    signature: type[dspy.Signature] | None = None
    demos: list[dspy.Example] | None = None  # instead of the predictor's own (batched prompts)
    answers: int = 1  # claims answered in one call (scales the short-answer token cap)


@dataclass
class StageResult:
    prediction: dspy.Prediction | None
    error: str | None
    usage: dict[str, UsageCounts] = field(default_factory=dict)


def _usage_of(tracker: Any) -> dict[str, UsageCounts]:
    return {
        model: UsageCounts(
            calls=len(entries),
            prompt_tokens=sum(int(e.get("prompt_tokens") or 0) for e in entries),
            completion_tokens=sum(int(e.get("completion_tokens") or 0) for e in entries),
        )
        for model, entries in tracker.usage_data.items()
    }


def batch_demos(demos: Sequence[dspy.Example], item: type) -> list[dspy.Example]:
    """Per-claim demos regrouped for a batched prompt: demos that share their sources become one numbered list
    (the answer fields of ``item`` are taken from each demo)."""
    groups: dict[tuple, list[dspy.Example]] = {}
    for demo in demos:
        groups.setdefault(tuple(demo.get(k) for k in ("reference", "knowledge", "history")), []).append(demo)
    answer_fields = [name for name in item.model_fields if name != "claim"]
    converted = []
    for (reference, knowledge, history), group in groups.items():
        fields: dict[str, Any] = {"reference": reference, "knowledge": knowledge}
        if history is not None:
            fields["history"] = history
        fields["claims"] = number_claims([d["claim"] for d in group])
        fields["verdicts"] = [item(claim=i, **{f: d[f] for f in answer_fields}) for i, d in enumerate(group, 1)]
        converted.append(dspy.Example(**fields))
    return converted


def add_usage(usage: Usage, stage: str, result: StageResult) -> StageResult:
    """Book one stage call's usage; returns the result so calls can be accounted inline."""
    for model, counts in result.usage.items():
        usage.add(stage, model, counts)
    return result


def _describe(error: Exception) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:500]}"


class StagedModule(dspy.Module):
    """Shared machinery of VISTA and the baselines: a judging method is a generator that yields batches of stage
    calls; ``_drive`` runs them blocking, ``_adrive`` concurrently. Every call's usage is measured, and any failure
    except a fatal configuration error becomes an explicit error result (never an exception that loses a dialogue).
    """

    zero_shot: bool = False
    short_answer_tokens: int | None = None
    program_name: str = "unsaved"

    def options(self) -> dict[str, Any]:
        return {}

    def forward(self, dialogue: Dialogue) -> DialogueVerdict:
        return self._drive(self._judge(dialogue))

    async def aforward(self, dialogue: Dialogue) -> DialogueVerdict:
        return await self._adrive(self._judge(dialogue))

    def _judge(self, dialogue: Dialogue) -> Generator[list[StageCall], list[StageResult], DialogueVerdict]:
        raise NotImplementedError

    def _verdict(
        self, dialogue: Dialogue, turns: list[TurnVerdict], usage: Usage, errors: list[str]
    ) -> DialogueVerdict:
        return DialogueVerdict(
            dialogue_id=dialogue.id,
            turns=turns,
            score=scoring.micro_score(turns),
            usage=usage,
            errors=errors,
            program=self.program_name,
            model=_current_model(),
            options=self.options(),
            source=dialogue.source,
        )

    # ---- drivers -------------------------------------------------------------------------------------------
    def _drive(self, steps: Generator[list[StageCall], list[StageResult], DialogueVerdict]) -> DialogueVerdict:
        results: list[StageResult] | None = None
        while True:
            try:
                batch = steps.send(results)  # type: ignore[arg-type]
            except StopIteration as done:
                return done.value
            # Claims of one turn back to back: a local server reuses the cached prompt prefix.
            results = [self._call(call) for call in batch]

    async def _adrive(
        self, steps: Generator[list[StageCall], list[StageResult], DialogueVerdict]
    ) -> DialogueVerdict:
        results: list[StageResult] | None = None
        while True:
            try:
                batch = steps.send(results)  # type: ignore[arg-type]
            except StopIteration as done:
                return done.value
            results = list(await asyncio.gather(*(self._acall(call) for call in batch)))

    def _kwargs(self, call: StageCall, attempt: int = 0) -> dict[str, Any]:
        kwargs = dict(call.inputs)
        if call.signature is not None:
            kwargs["signature"] = call.signature
        if self.zero_shot:
            kwargs["demos"] = []
        elif call.demos is not None:
            kwargs["demos"] = call.demos
        config: dict[str, Any] = {}
        if self.short_answer_tokens and call.stage != "decompose":
            thinking = 3 if call.signature is not None and "reasoning" in call.signature.output_fields else 1
            config["max_tokens"] = self.short_answer_tokens * call.answers * thinking
        if attempt:
            # The unparseable answer sits in the cache: ask the model again past it.
            config["cache"] = False
        if config:
            kwargs["config"] = config
        return kwargs

    def _call(self, call: StageCall) -> StageResult:
        prediction, error = None, None
        with dspy.track_usage() as tracker:
            for attempt in range(1 + PARSE_RETRIES):
                try:
                    prediction, error = call.predictor(**self._kwargs(call, attempt)), None
                    break
                except FATAL_LM_ERRORS:
                    raise
                except Exception as exc:  # noqa: BLE001 — any other failure becomes an explicit ERROR verdict
                    error = _describe(exc)
                    if not isinstance(exc, AdapterParseError):
                        break
        return StageResult(prediction, error, _usage_of(tracker))

    async def _acall(self, call: StageCall) -> StageResult:
        prediction, error = None, None
        with dspy.track_usage() as tracker:
            for attempt in range(1 + PARSE_RETRIES):
                try:
                    async with request_slot(call.predictor.lm or dspy.settings.lm):
                        prediction = await call.predictor.acall(**self._kwargs(call, attempt))
                    error = None
                    break
                except FATAL_LM_ERRORS:
                    raise
                except Exception as exc:  # noqa: BLE001
                    error = _describe(exc)
                    if not isinstance(exc, AdapterParseError):
                        break
        return StageResult(prediction, error, _usage_of(tracker))



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
    ) -> None:
        super().__init__()
        if claim_calls not in CLAIM_CALLS:
            raise ValueError(f"claim_calls must be one of {', '.join(CLAIM_CALLS)}, not {claim_calls!r}")
        if decompose_calls not in DECOMPOSE_CALLS:
            raise ValueError(f"decompose_calls must be one of {', '.join(DECOMPOSE_CALLS)}, not {decompose_calls!r}")
        if decompose_calls == "per-dialogue" and not history_in_decompose:
            raise ValueError("decompose_calls='per-dialogue' shows Decompose the whole dialogue: it cannot be "
                             "combined with history_in_decompose=False")
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
        self.program_name = "unsaved"

    # ---- loading -------------------------------------------------------------------------------------------
    @classmethod
    def from_program(cls, program: str | Path | None = None, **options: Any) -> Vista:
        """A Vista with a saved program loaded: a path to a JSON file, a name in ``vista_dspy/compiled/``, or
        None for the shipped seed program."""
        name = str(program or SEED_PROGRAM)
        path = Path(name)
        if not path.is_file():
            shipped = compiled_dir() / f"{name}.json"
            if not shipped.is_file():
                raise FileNotFoundError(f"no saved program at {path} nor {shipped}")
            path = shipped
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
        """The signature a stage is called with when it differs from the saved one (+ctx, chain of thought)."""
        if not history and stage not in self.reasoning:
            return None
        if history:
            signature = with_history(signature)
        return with_reasoning(signature) if stage in self.reasoning else signature

    def decompose_inputs(self, dialogue: Dialogue, index: int) -> dict[str, str]:
        """What Decompose sees for turn ``index`` (also used to build demos from human claims)."""
        history = render_history(dialogue.turns[:index]) if self.history_in_decompose else HISTORY_OMITTED
        return {"history": history, "turn": dialogue.turns[index].text}

    # ---- the method ----------------------------------------------------------------------------------------
    def _judge(
        self, dialogue: Dialogue, given: dict[int, list[str | GoldClaim]] | None = None
    ) -> Generator[list[StageCall], list[StageResult], DialogueVerdict]:
        seed = list(dialogue.background) if self.seed_background else []
        knowledge: list[str] = list(seed)
        usage = Usage()
        errors: list[str] = []
        verdicts: list[TurnVerdict] = []
        decompose_signature = self._signature("decompose", self.decompose.signature, history=False)
        verify_signature = self._signature("verify", self.verify.signature, history=self.use_context)
        categorize_signature = self._signature("categorize", self.categorize.signature, history=self.use_context)

        # 1. Claims: given, or decomposed.
        to_decompose = [i for i, t in enumerate(dialogue.turns)
                        if t.role == "assistant" and not (given is not None and i in given)]
        decomposed = (yield from self._decompose(dialogue, to_decompose, decompose_signature, usage)
                      ) if to_decompose else {}

        for index, turn in enumerate(dialogue.turns):
            if turn.role == "user":
                continue
            history = render_history(dialogue.turns[:index])

            claims: list[str | GoldClaim]
            decompose_error: str | None = None
            removed = 0
            if given is not None and index in given:
                claims, source = given[index], "given"
            else:
                source = "decomposed"
                result = decomposed[index]
                if result.error is not None:
                    decompose_error, claims = f"decompose failed: {result.error}", []
                else:
                    claims, removed = clean_claims(result.prediction.claims or [])

            texts = [c.text if isinstance(c, GoldClaim) else c for c in claims]
            if not turn.judged:
                # Background (VISTA's "N/A"): the turn's claims become common ground, unjudged.
                if decompose_error is not None:
                    errors.append(f"turn {index} (background): {decompose_error}")
                knowledge.extend(texts)
                continue

            # 2. Verify every claim against the reference and the store as it stood BEFORE this turn.
            # Under -AC only the seeded background is ever shown.
            snapshot = list(knowledge) if self.accumulate else seed
            evidence = {
                "reference": turn.grounding.document or NO_REFERENCE,
                "knowledge": render_knowledge(snapshot),
            }
            if self.use_context:
                evidence["history"] = history
            extra = ([StageCall("contradiction", self.contradiction, {"history": history, "turn": turn.text})]
                     if self.check_contradictions else [])
            if self.claim_calls == "joint" and texts:
                verified, categorized, extra_results = yield from self._judge_jointly(
                    texts, evidence, extra, verify_signature, categorize_signature, usage)
            else:
                verified, extra_results = yield from self._verify(texts, evidence, extra, verify_signature, usage)
                # 3. Categorize the claims that were not verified.
                pending = [i for i, r in enumerate(verified) if r.error is None and r.prediction.label != "VERIFIED"]
                categorized = yield from self._categorize(texts, pending, evidence, categorize_signature, usage)
            contradiction = self._contradiction(extra_results[0]) if self.check_contradictions else None

            claim_verdicts = [
                self._claim_verdict(claim, verified[i], categorized.get(i)) for i, claim in enumerate(claims)
            ]
            categories = [c.category for c in claim_verdicts]
            verdicts.append(
                TurnVerdict(
                    turn_index=index,
                    text=turn.text,
                    grounding=turn.grounding.kind,
                    claims=claim_verdicts,
                    claims_source=source,
                    label=scoring.turn_label(
                        categories,
                        failed=decompose_error is not None or bool(contradiction and contradiction.error),
                        contradiction=bool(contradiction and contradiction.contradicts),
                    ),
                    score=scoring.turn_score(categories),
                    knowledge=snapshot,
                    contradiction=contradiction,
                    duplicates_removed=removed,
                    error=decompose_error,
                    gold_label=turn.gold.label if turn.gold else None,
                )
            )
            # 4. Accumulate after the whole turn: claims of one turn never see each other.
            knowledge.extend(
                c.claim for c in claim_verdicts if c.category in (Category.VERIFIED, Category.OUT_OF_SCOPE)
            )

        return self._verdict(dialogue, verdicts, usage, errors)

    def _decompose(self, dialogue: Dialogue, indices: list[int], signature: type[dspy.Signature] | None,
                   usage: Usage) -> Generator[list[StageCall], list[StageResult], dict[int, StageResult]]:
        """{turn index: Decompose result} for the assistant turns at ``indices``. Decompose reads only the dialogue's
        text, never the store, so all its calls go out at once (in parallel under the async driver): the chain of
        dependent calls is one Decompose round plus the judged turns' Verify/Categorize rounds. Per dialogue, one
        call answers for every turn; a turn it misses (or numbers twice) is asked on its own."""
        results: dict[int, StageResult] = {}
        if self.decompose_calls == "per-dialogue" and len(indices) > 1:
            call = StageCall("decompose", self.decompose, {"dialogue": render_marked(dialogue.turns, indices)},
                             per_dialogue(signature or self.decompose.signature),
                             demos=dialogue_demos(self.decompose.demos))
            [result] = yield [call]
            for n, item in self._answers(add_usage(usage, "decompose", result), len(indices), "turns", "turn").items():
                results[indices[n]] = StageResult(dspy.Prediction(claims=item.claims), None)
        missing = [i for i in indices if i not in results]
        if missing:
            calls = [StageCall("decompose", self.decompose, self.decompose_inputs(dialogue, i), signature)
                     for i in missing]
            for i, result in zip(missing, (yield calls)):
                results[i] = add_usage(usage, "decompose", result)
        return results

    # ---- claims of one turn: per claim, or in one call with a per-claim fallback ------------------------------
    def _verify(self, texts: list[str], evidence: dict[str, str], extra: list[StageCall],
                signature: type[dspy.Signature] | None, usage: Usage
                ) -> Generator[list[StageCall], list[StageResult], tuple[list[StageResult], list[StageResult]]]:
        """(one verify result per claim, results of the ``extra`` calls asked alongside)."""
        single = [StageCall("verify", self.verify, {**evidence, "claim": t}, signature) for t in texts]
        if self.claim_calls == "per-claim" or not texts:
            results = [add_usage(usage, c.stage, r) for c, r in zip(single + extra, (yield single + extra))]
            return results[: len(texts)], results[len(texts):]
        call = self._batch_call("verify", self.verify, VerifiedClaim, texts, evidence, signature)
        results = [add_usage(usage, c.stage, r) for c, r in zip([call] + extra, (yield [call] + extra))]
        verified = yield from self._per_claim(results[0], "label", single, usage)
        return verified, results[1:]

    def _categorize(self, texts: list[str], pending: list[int], evidence: dict[str, str],
                    signature: type[dspy.Signature] | None, usage: Usage
                    ) -> Generator[list[StageCall], list[StageResult], dict[int, StageResult]]:
        """{claim index: categorize result} for the ``pending`` (unverified) claims."""
        single = [StageCall("categorize", self.categorize, {**evidence, "claim": texts[i]}, signature) for i in pending]
        if not pending:
            return {}
        if self.claim_calls == "per-claim":
            results = [add_usage(usage, c.stage, r) for c, r in zip(single, (yield single))]
        else:
            call = self._batch_call("categorize", self.categorize, CategorizedClaim, [texts[i] for i in pending],
                                    evidence, signature)
            [result] = yield [call]
            results = yield from self._per_claim(add_usage(usage, "categorize", result), "category", single, usage)
        return dict(zip(pending, results))

    def _judge_jointly(self, texts: list[str], evidence: dict[str, str], extra: list[StageCall],
                       verify_signature: type[dspy.Signature] | None,
                       categorize_signature: type[dspy.Signature] | None, usage: Usage
                       ) -> Generator[list[StageCall], list[StageResult],
                                      tuple[list[StageResult], dict[int, StageResult], list[StageResult]]]:
        """One call decides VERIFIED or the category of every claim; claims it misses take the two-stage path."""
        call = self._batch_call("verify", self.verify, JudgedClaim, texts, evidence, verify_signature,
                                instructions=joint_instructions(self.verify.signature, self.categorize.signature),
                                demos=self._joint_demos())
        results = [add_usage(usage, c.stage, r) for c, r in zip([call] + extra, (yield [call] + extra))]
        answers = self._answers(results[0], len(texts))
        verified: list[StageResult | None] = [None] * len(texts)
        categorized: dict[int, StageResult] = {}
        for i, item in answers.items():
            verified[i] = StageResult(dspy.Prediction(label="VERIFIED" if item.category == "VERIFIED" else
                                                      "UNVERIFIABLE", explanation=item.explanation), None)
            if item.category != "VERIFIED":
                categorized[i] = StageResult(dspy.Prediction(category=item.category, explanation=item.explanation),
                                             None)
        missing = [i for i in range(len(texts)) if verified[i] is None]
        if missing:  # the two-stage path, claim by claim, for what the joint answer missed
            calls = [StageCall("verify", self.verify, {**evidence, "claim": texts[i]}, verify_signature)
                     for i in missing]
            for i, call, result in zip(missing, calls, (yield calls)):
                verified[i] = add_usage(usage, call.stage, result)
            pending = [i for i in missing if verified[i].error is None and verified[i].prediction.label != "VERIFIED"]
            calls = [StageCall("categorize", self.categorize, {**evidence, "claim": texts[i]}, categorize_signature)
                     for i in pending]
            if calls:
                for i, call, result in zip(pending, calls, (yield calls)):
                    categorized[i] = add_usage(usage, call.stage, result)
        return verified, categorized, results[1:]  # type: ignore[return-value]

    def _batch_call(self, stage: Stage, predictor: dspy.Predict, item: type, texts: list[str],
                    evidence: dict[str, str], signature: type[dspy.Signature] | None, *,
                    instructions: str | None = None, demos: list[dspy.Example] | None = None) -> StageCall:
        base = signature or predictor.signature
        return StageCall(stage, predictor, {**evidence, "claims": number_claims(texts)},
                         batched(base, item, instructions),
                         demos=batch_demos(predictor.demos, item) if demos is None else demos, answers=len(texts))

    def _joint_demos(self) -> list[dspy.Example]:
        verified = [d for d in self.verify.demos if d.get("label") == "VERIFIED"]
        as_joint = [{**dict(d), "category": "VERIFIED"} for d in verified] + [dict(d) for d in self.categorize.demos]
        return batch_demos(as_joint, JudgedClaim)

    @staticmethod
    def _answers(result: StageResult, n: int, field: str = "verdicts", key: str = "claim") -> dict[int, Any]:
        """{item index: answer item} from a batched answer (claims, or a dialogue's turns): numbers outside 1..n
        (invented items) and repeated numbers are ignored, so those items count as missing."""
        if result.error is not None:
            return {}
        answers: dict[int, Any] = {}
        repeated: set[int] = set()
        for item in getattr(result.prediction, field) or []:
            number = getattr(item, key)
            if not 1 <= number <= n:
                continue
            if number - 1 in answers:
                repeated.add(number - 1)
            answers[number - 1] = item
        return {i: a for i, a in answers.items() if i not in repeated}

    def _per_claim(self, result: StageResult, field: str, single: list[StageCall], usage: Usage
                   ) -> Generator[list[StageCall], list[StageResult], list[StageResult]]:
        """Per-claim results from one batched answer; claims it misses are asked one by one."""
        answers = self._answers(result, len(single))
        results: list[StageResult | None] = [
            StageResult(dspy.Prediction(**{field: getattr(a, field), "explanation": a.explanation}), None)
            if (a := answers.get(i)) is not None else None for i in range(len(single))
        ]
        missing = [i for i, r in enumerate(results) if r is None]
        if missing:
            calls = [single[i] for i in missing]
            for i, r in zip(missing, (yield calls)):
                results[i] = add_usage(usage, single[i].stage, r)
        return results  # type: ignore[return-value]

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
                explanation=verified.prediction.explanation or "",
                stage="verify",
                gold_category=gold,
            )
        if categorized is None or categorized.error is not None:
            error = categorized.error if categorized else "no categorize result"
            return ClaimVerdict(claim=text, category=Category.ERROR, stage="categorize", error=error, gold_category=gold)
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


def _current_model() -> str | None:
    lm = dspy.settings.lm
    return getattr(lm, "model", None) if lm is not None else None

"""VISTA as a DSPy module: the method, step by step as the paper gives it.

For each dialogue, turn by turn: (1) decompose each assistant turn into atomic claims, (2) verify each claim against
the turn's reference document and the knowledge store, (3) categorize each unverified claim, (4) add the verified
and out-of-scope claims to the store after the whole turn; the turn's label and score come from ``scoring``.

The turn loop is a generator that yields batches of stage calls (``stages`` runs them, blocking or concurrently);
all per-dialogue state -- knowledge store, history, usage -- lives in its locals, so one ``Vista`` instance can
judge many dialogues at once. How a record becomes a prompt is ``prompts``'; modes asking about several claims in
one call are ``batching``'s.

How a judge is loaded from a program file, saved and named by its content is ``compiled.saving``'s (``SavedProgram``).

(Over 400 lines on purpose: this file is the method read top to bottom, one step after another; its helpers already
live in ``stages``, ``batching``, ``prompts``, ``claim_verdicts`` and ``scoring``, and the steps left here share the
turn loop's locals.)
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from typing import Any, NamedTuple

import dspy

from . import batching, scoring
from .batching import Question
from .claim_verdicts import by_evidence_verdict, claim_verdict, turn_through_claims
from .compiled.saving import SavedProgram
from .decision import DecisionRule, by_evidence
from .evidence import evidence_of
from .evidence.reading import SourceReader, SourcesRead, bounded_history
from .grounding import TEXT_UNITS, content_words, says_something, split_grounded, uncovered_sentences
from .options import JudgeOptions
from .prompts import HISTORY_OMITTED, clean_claims
from .schema import (
    Category,
    ClaimVerdict,
    ContradictionVerdict,
    Dialogue,
    DialogueVerdict,
    GoldClaim,
    TurnVerdict,
    Usage,
)
from .signatures import (
    CATEGORY_LABEL,
    VERIFY_LABEL,
    Categorize,
    CategorizedClaim,
    CheckContradiction,
    Decompose,
    VerifiedClaim,
    Verify,
    decompose_bound,
    label_only,
    with_claims_bound,
    with_history,
    with_reasoning,
)
from .stages import StageCall, StagedModule, StageResult, add_usage

Steps = Generator[list[StageCall], list[StageResult], Any]


class ClaimsOfTurn(NamedTuple):
    """The claims of one assistant turn, and where they came from."""

    claims: list[str | GoldClaim]
    source: str  # "decomposed", "given", or the text units' name ("sentences", "clauses")
    removed: int = 0  # repeated claims dropped from the decomposition
    error: str | None = None  # why there are none, when Decompose failed
    ungrounded: tuple[str, ...] = ()  # decomposed claims not found in the turn or what precedes it (dropped)
    added: int = 0  # the last ``added`` claims are sentences of the turn that no claim covered (``coverage``)

    @property
    def texts(self) -> list[str]:
        return [c.text if isinstance(c, GoldClaim) else c for c in self.claims]


class Vista(StagedModule, SavedProgram):
    """The VISTA evaluator.

    Args:
        options: every switch of the judge (``JudgeOptions``: the paper's variants, the judging modes, the run
            modes); default: the paper's method.
        rule: how the model's label probabilities and each claim's evidence cues become decisions
            (``decision.DecisionRule``); None (default, the seed program's: the paper's method) keeps the model's
            own labels.
        **changes: options to change, by name (``Vista(use_context=True)``), validated with the rest.

    A saved program (``from_program`` / ``save_program``, ``SavedProgram``'s) holds the demos and instructions of the four predictors,
    the judging options and the decision rule, never an LM. One instance can judge many dialogues at once: all
    per-dialogue state lives in the call.
    """

    def __init__(self, options: JudgeOptions | None = None, *, rule: DecisionRule | None = None,
                 **changes: Any) -> None:
        super().__init__()
        self.decompose = dspy.Predict(Decompose)
        self.verify = dspy.Predict(Verify)
        self.categorize = dspy.Predict(Categorize)
        self.contradiction = dspy.Predict(CheckContradiction)
        options = options or JudgeOptions()
        self.options = options.replace(**changes) if changes else options
        self.rule = rule
        self.program_name = "unsaved"

    # What the stage drivers read per call (StagedModule).
    @property
    def zero_shot(self) -> bool:
        return self.options.zero_shot

    @property
    def short_answer_tokens(self) -> int | None:
        return self.options.short_answer_tokens

    @property
    def label_probabilities(self) -> bool:
        return self.options.label_probabilities

    # ---- which program, and what it needs (loading, saving and identity: SavedProgram) -------------------------
    @classmethod
    def for_model(cls, model: str | None, **changes: Any) -> Vista:
        """The program `vista evaluate --model M` judges with: <M>.json among the user's programs, else among the
        shipped ones, else the seed.
        (The one place the method meets the model registry: a model string names its program.)"""
        from .lm.models import program_for_model

        return cls.from_program(program_for_model(model), **changes)

    @property
    def needs_lm(self) -> bool:
        """Whether judging calls an LM at all: not when the turn's sentences (or clauses) are the units and the
        evidence cues decide every one of them (``rule.evidence_only``) -- the tier with no LM."""
        rule, options = self.rule, self.options
        evidence_decides_all = rule is not None and rule.cascade is not None and rule.cascade.low >= rule.cascade.high
        return not (options.units in TEXT_UNITS and evidence_decides_all and not options.check_contradictions
                    and not options.given_claims)

    def with_options(self, **changes: Any) -> Vista:
        """A copy judging with these options changed (validated)."""
        copy = self.deepcopy()
        copy.options = self.options.replace(**changes)
        return copy

    def option_values(self) -> dict[str, Any]:
        return self.options.as_dict()

    # ---- public entry points (forward / aforward come from StagedModule) --------------------------------------
    def judge_claims(
        self, dialogue: Dialogue, claims_per_turn: Mapping[int, Sequence[str | GoldClaim]] | None = None
    ) -> DialogueVerdict:
        """Verify and categorize GIVEN claims instead of decomposing (the paper's claim-accuracy protocol).

        ``claims_per_turn`` maps a turn index to its claims; None takes the gold claims of every judged turn
        (then every judged turn must have them). Turns not in the mapping are decomposed as usual. Gold claims
        carry their category into ``ClaimVerdict.gold_category``. (``options.given_claims`` makes ``forward`` do
        this with the gold claims.)
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
        explains = {"verify": self.options.explain_verified, "categorize": self.options.explain_unverified}
        label_alone = (stage in explains and not explains[stage]
                       and self.options.claim_calls == "per-claim")  # a batched answer always explains
        reasoning = stage in self.options.reasoning
        if not history and not reasoning and not label_alone:
            return None
        if label_alone:
            signature = label_only(signature)
        if history:
            signature = with_history(signature)
        return with_reasoning(signature) if reasoning else signature

    def decompose_turns(self, dialogue: Dialogue) -> tuple[dict[int, list[str]], Usage]:
        """Decompose alone (with the grounding check), as end to end: the claims of each judged turn, and the usage.
        A stage-wise reading for choosing Decompose's demos."""
        usage = Usage()
        claims = self._drive(self._claims_of_turns(dialogue, dialogue.judged_turns, usage))
        return {i: c.texts for i, c in claims.items()}, usage

    def common_ground(self, dialogue: Dialogue) -> tuple[dict[int, ClaimsOfTurn], Usage]:
        """The claims of the dialogue's unjudged assistant turns (VISTA's "N/A" grounding), decomposed and checked
        as judging the dialogue does (per turn; per dialogue, these turns alone, under that mode), and the usage.
        They depend on the dialogue up to each such turn only: a judge of many responses to one history computes
        them once and gives them to ``judge_claims``."""
        usage = Usage()
        return self._drive(self._claims_of_turns(dialogue, _unjudged_assistant_turns(dialogue), usage)), usage

    async def acommon_ground(self, dialogue: Dialogue) -> tuple[dict[int, ClaimsOfTurn], Usage]:
        usage = Usage()
        return await self._adrive(self._claims_of_turns(dialogue, _unjudged_assistant_turns(dialogue), usage)), usage

    def _claims_of_turns(self, dialogue: Dialogue, indices: list[int], usage: Usage) -> Steps:
        """{turn index: ClaimsOfTurn} for the assistant turns at ``indices``: decomposed and cleaned, or (``units``
        "sentences", "clauses") the turn's own text cut so, with no call."""
        if (cut := TEXT_UNITS.get(self.options.units)) is not None:
            return {i: ClaimsOfTurn(cut(dialogue.turns[i].text), self.options.units) for i in indices}
        signature = self._signature("decompose", self.decompose.signature, history=False)
        results = (yield from self._decompose(dialogue, indices, signature, usage)) if indices else {}
        return {i: self._decomposed_claims(results[i], dialogue, i) for i in indices}

    def decompose_inputs(self, dialogue: Dialogue, index: int) -> dict[str, str]:
        """What Decompose sees for turn ``index`` (also used to build demos from human claims)."""
        history = (self._history(dialogue, index) if self.options.history_in_decompose else HISTORY_OMITTED)
        return {"history": history, "turn": dialogue.turns[index].text}

    def _history(self, dialogue: Dialogue, index: int) -> str:
        """The dialogue before turn ``index`` as a prompt reads it: its last turns within ``history_tokens`` (all of
        them under the full reading). Coreference resolves from the turns just before; the claims of older turns reach
        Verify through the knowledge store, read for what bears on the claim. A history that grows with the dialogue
        would make every prompt of a long dialogue longer, and its cost grow with the square of its length."""
        options = self.options
        return bounded_history(dialogue.turns[:index], None if options.evidence == "full" else options.history_tokens)

    # ---- the method ----------------------------------------------------------------------------------------
    def _judge(self, dialogue: Dialogue, given: dict[int, list[str | GoldClaim]] | None = None) -> Steps:
        options = self.options
        if given is None and options.given_claims:
            given = self._given(dialogue, None)
        seed = list(dialogue.background) if options.seed_background else []
        knowledge: list[str] = list(seed)
        usage = Usage()
        errors: list[str] = []
        ungrounded_background: list[str] = []
        verdicts: list[TurnVerdict] = []
        questions: dict[str, Any] = {}  # how Verify and Categorize are asked: read on the first claim asked

        # 1. Claims: given, decomposed, or the turn's sentences.
        to_claim = [i for i, t in enumerate(dialogue.turns)
                    if t.role == "assistant" and not (given is not None and i in given)]
        claimed = (yield from self._claims_of_turns(dialogue, to_claim, usage)) if to_claim else {}

        for index, turn in enumerate(dialogue.turns):
            if turn.role == "user":
                continue
            if given is not None and index in given:
                claims = ClaimsOfTurn(given[index], "given")
            else:
                claims = claimed[index]
            if not turn.judged:
                # Background (VISTA's "N/A"): the turn's claims become common ground, unjudged.
                if claims.error is not None:
                    errors.append(scoring.background_failure(index, claims.error))
                knowledge.extend(claims.texts)
                ungrounded_background.extend(claims.ungrounded)
                continue

            # 2-3. Judge the claims against the store as it stood BEFORE this turn (under -AC only the seeded
            # background is ever shown).
            snapshot = list(knowledge) if options.accumulate else seed
            verdict = yield from self._judge_turn(dialogue, index, claims, snapshot, questions, usage)
            verdicts.append(verdict)
            # 4. Accumulate after the whole turn: claims of one turn never see each other.
            knowledge.extend(
                c.claim for c in verdict.claims if c.category in (Category.VERIFIED, Category.OUT_OF_SCOPE)
            )

        return self._verdict(dialogue, verdicts, usage, errors, ungrounded_background=ungrounded_background)

    def _questions(self) -> dict[str, Any]:
        """How Verify and Categorize are asked under the options (Decompose: ``_claims_of_turns``)."""
        use_context = self.options.use_context
        return {
            "verify": Question("verify", self.verify, self._signature("verify", self.verify.signature,
                                                                      history=use_context),
                               VerifiedClaim, "label", VERIFY_LABEL),
            "categorize": Question("categorize", self.categorize,
                                   self._signature("categorize", self.categorize.signature, history=use_context),
                                   CategorizedClaim, "category", CATEGORY_LABEL),
        }

    def judge_turn(self, dialogue: Dialogue, index: int, claims: Sequence[str], knowledge: Sequence[str], *,
                   added: int = 0) -> tuple[TurnVerdict, Usage]:
        """Steps 2-3 alone for one judged turn: ``claims`` verified (and categorized) against the turn's reference
        and ``knowledge`` as given, the last ``added`` of them marked as added by coverage; returns the verdict and
        the calls' usage. For probes that judge claims against a store recorded earlier; ``forward`` is the
        method."""
        usage = Usage()
        verdict = self._drive(self._judge_turn(dialogue, index, ClaimsOfTurn(list(claims), "decomposed", added=added),
                                               list(knowledge), self._questions(), usage))
        return verdict, usage

    def _decomposed_claims(self, result: StageResult, dialogue: Dialogue, index: int) -> ClaimsOfTurn:
        """Decompose's claims of turn ``index``, cleaned, (``check_grounding``) without the claims that neither the
        turn nor what precedes it says, and (``coverage``) followed by the turn's sentences that no claim covers."""
        if result.error is not None:
            return ClaimsOfTurn([], "decomposed", error=f"decompose failed: {result.error}")
        claims, removed = clean_claims(result.prediction.claims or [])
        ungrounded: list[str] = []
        if self.options.check_grounding:
            sources = " ".join([*dialogue.background, *(t.text for t in dialogue.turns[: index + 1])])
            claims, ungrounded = split_grounded(claims, sources)
        added = uncovered_sentences(dialogue.turns[index].text, claims) if self.options.coverage else []
        return ClaimsOfTurn(claims + added, "decomposed", removed, ungrounded=tuple(ungrounded), added=len(added))

    def _judge_turn(self, dialogue: Dialogue, index: int, claims: ClaimsOfTurn, knowledge: list[str],
                    questions: dict[str, Any], usage: Usage) -> Steps:
        """The verdict on one judged turn: (2) verify every claim against the reference and ``knowledge``, (3)
        categorize the claims that were not verified; the optional contradiction check is asked alongside. Each
        claim's evidence cues are computed here; with a rule whose cascade decides a claim by its evidence alone,
        that claim is not asked at all."""
        turn = dialogue.turns[index]
        turn_evidence = evidence_of(dialogue, index, knowledge)
        first_added = len(claims.claims) - claims.added
        cues = [turn_evidence.cues(text, added=i >= first_added) for i, text in enumerate(claims.texts)]
        rule = self.rule
        early = {i: d for i, c in enumerate(cues)
                 if rule is not None and (d := by_evidence(rule, c)) is not None}
        asked = [i for i in range(len(cues)) if i not in early]
        verified: list[StageResult] = []
        categorized: dict[int, StageResult] = {}
        extra_results: list[StageResult] = []
        extra: list[StageCall] = []
        reader = SourceReader(turn_evidence, turn.grounding.document, knowledge, reading=self.options.evidence,
                              reference_tokens=self.options.evidence_tokens,
                              knowledge_tokens=self.options.knowledge_tokens)
        read: list[SourcesRead] = []  # what each asked claim's prompts carry of the sources
        if asked or self.options.check_contradictions:  # (with no claim asked and no check: no prompt to render)
            history = self._history(dialogue, index)
            asked_texts = [claims.texts[i] for i in asked]
            # One evidence set for the turn (one prompt prefix for all its claims), or (reading "unit") one per claim.
            turn_read = reader.read(asked_texts)
            read = ([reader.read([text]) for text in asked_texts] if self.options.evidence == "unit"
                    else [turn_read] * len(asked_texts))
            context = {"history": history} if self.options.use_context else {}
            evidence = {**turn_read.fields(), **context}
            per_claim = [{**r.fields(), **context} for r in read] if self.options.evidence == "unit" else None
            extra = ([StageCall("contradiction", self.contradiction, {"history": history, "turn": turn.text})]
                     if self.options.check_contradictions else [])
            if not questions:
                questions.update(self._questions())
            verified, categorized, extra_results = yield from self._judge_claims_of_turn(
                asked_texts, evidence, extra, questions["verify"], questions["categorize"], usage,
                per_claim=per_claim)
        contradiction = self._contradiction(extra_results[0]) if extra else None
        verdicts: list[ClaimVerdict] = []
        for i, claim in enumerate(claims.claims):
            if i in early:
                verdict = by_evidence_verdict(rule, claim, early[i], cues[i], turn_evidence)
                checked = reader.windows(claims.texts[i])  # what its cues read
            else:
                j = asked.index(i)
                verdict = claim_verdict(rule, claim, verified[j], categorized.get(j), cues[i], turn_evidence)
                checked = read[j]
            update: dict[str, Any] = {"checked_against": checked.checked_against()}
            if i >= first_added:
                update["added_by"] = "coverage"
            verdicts.append(verdict.model_copy(update=update))
        # A rule's turn decision acts through the turn's most doubtful claim: the label follows from the claims.
        verdicts, turn_explanation = turn_through_claims(rule, verdicts, turn_evidence)
        return scoring.turn_verdict(
            index, turn, verdicts, explanation=turn_explanation,
            error=claims.error, contradiction=contradiction, claims_source=claims.source, knowledge=knowledge,
            duplicates_removed=claims.removed, ungrounded=list(claims.ungrounded),
            empty_decomposition=(claims.source == "decomposed" and claims.error is None and not claims.claims
                                 and says_something(turn.text)))

    def _judge_claims_of_turn(self, texts: list[str], evidence: dict[str, str], extra: list[StageCall],
                              verify: Question, categorize: Question, usage: Usage, *,
                              per_claim: Sequence[dict[str, str]] | None = None) -> Steps:
        """Steps 2-3 for the claims of one turn, one rule in every judging mode: Verify every claim; Categorize each
        claim Verify did not verify -- every claim under ``categorize_all``; a claim that a batched or joint answer
        misses is asked on its own. ``evidence``: the sources' fields of the turn; ``per_claim``: each claim's own
        (reading "unit"), for the calls about one claim. Returns (a Verify result per claim, {claim index: Categorize
        result}, the results of ``extra``, asked alongside the first call)."""
        mode = self.options.claim_calls
        categorized: dict[int, StageResult] = {}
        if mode == "joint" and texts:
            verified, categorized, extra_results = yield from batching.ask_jointly(verify, categorize, texts,
                                                                                   evidence, extra, usage)
            missing = [i for i in range(len(texts)) if i not in verified]
            asked, _ = yield from batching.ask(verify, texts, missing, evidence, usage, batch=False,
                                               per_claim=per_claim)
            verified.update(asked)
        else:
            verified, extra_results = yield from batching.ask(verify, texts, range(len(texts)), evidence, usage,
                                                              batch=mode == "batched", extra=extra,
                                                              per_claim=per_claim)
        pending = [i for i in range(len(texts)) if i not in categorized and verified[i].error is None
                   and (self.options.categorize_all or verified[i].prediction.label != "VERIFIED")]
        asked, _ = yield from batching.ask(categorize, texts, pending, evidence, usage, batch=mode == "batched",
                                           per_claim=per_claim)
        categorized.update(asked)
        return [verified[i] for i in range(len(texts))], categorized, extra_results

    def _decompose(self, dialogue: Dialogue, indices: list[int], signature: type[dspy.Signature] | None,
                   usage: Usage) -> Steps:
        """{turn index: Decompose result} for the assistant turns at ``indices``. Decompose reads only the dialogue's
        text, never the store, so all its calls go out at once (in parallel under the async driver): the chain of
        dependent calls is one Decompose round plus the judged turns' Verify/Categorize rounds. Per dialogue, one
        call answers for every turn; a turn it misses (or numbers twice) is asked on its own."""
        results: dict[int, StageResult] = {}
        if self.options.decompose_calls == "per-dialogue" and len(indices) > 1:
            results = yield from batching.decompose_dialogue(self.decompose, dialogue, indices, signature, usage)
        missing = [i for i in indices if i not in results]
        if missing:
            calls = [self._decompose_call(dialogue, i, signature) for i in missing]
            for i, result in zip(missing, (yield calls)):
                results[i] = add_usage(usage, "decompose", result)
        return results

    def _decompose_call(self, dialogue: Dialogue, index: int, signature: type[dspy.Signature] | None) -> StageCall:
        """Decompose's call for turn ``index``, its answer bounded by the turn's size (``decompose_bound``: a model
        that loops stops there), each retry with a tighter bound."""
        base = signature or self.decompose.signature
        text = dialogue.turns[index].text
        words = len(content_words(text))

        def bounded(retry: int = 0) -> type[dspy.Signature]:
            return with_claims_bound(base, decompose_bound(words, len(text), retry=retry))

        return StageCall("decompose", self.decompose, self.decompose_inputs(dialogue, index), bounded(),
                         retry_signature=bounded)

    @staticmethod
    def _contradiction(result: StageResult) -> ContradictionVerdict:
        if result.error is not None:
            return ContradictionVerdict(contradicts=None, error=result.error)
        return ContradictionVerdict(
            contradicts=bool(result.prediction.contradicts), explanation=result.prediction.explanation or ""
        )


def _unjudged_assistant_turns(dialogue: Dialogue) -> list[int]:
    return [i for i, t in enumerate(dialogue.turns) if t.role == "assistant" and not t.judged]


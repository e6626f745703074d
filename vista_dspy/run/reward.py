"""VISTA as a reward for training a dialogue model: a callable in the trainers' convention (TRL's GRPOTrainer,
OpenRLHF, verifiers), ``reward(prompts, completions, **columns) -> list[float | None]``.

Each completion is judged as VISTA judges an assistant turn, in the dialogue ``dialogues.response_dialogue`` builds
(as ``VistaMetric``'s: the prompt's earlier assistant turns are common ground, the completion is verified against the
row's passages). What VISTA derives from the prompt alone -- the claims of its earlier assistant turns -- is computed
once per prompt and given to every completion of it; the completions of a batch are judged concurrently through the
runner's backends (the same request slots as ``vista evaluate --concurrency``) and the judge's LM cache. ``acall`` is
the async twin (the same batch steps, driven on the caller's event loop). How the call's arguments are read is
``trainer_args``, how the judge and its LM are set up ``judge_setup``, how a verdict becomes a number
``reward_shapes``, what comes back ``reward_records``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

import dspy
from pydantic import ValidationError

from ..schema import Dialogue, DialogueVerdict, TurnVerdict, Usage
from ..stages import PARSE_RETRIES, STOP_AFTER, CallFailures, EndpointDown
from .dialogues import response_dialogue
from .judge_setup import JudgeSetup
from .reward_records import NOT_JUDGED, RewardStats, RewardVerdict, Unjudged
from .reward_shapes import DEFAULT_SHAPE, SHAPES, Tally, Weights
from .reward_steps import Job, PromptWork, Run, failure, prompt_key
from .trainer_args import BACKGROUND_COLUMNS, PASSAGE_COLUMNS, completion_text, message_text, trainer_rows

logger = logging.getLogger(__name__)


# ---- the reward --------------------------------------------------------------------------------------------------
class VistaReward:
    """VISTA as a reward function: ``reward(prompts, completions, **columns) -> list[float | None]``.

    Called as TRL's GRPOTrainer calls a reward function: ``prompts`` and ``completions`` as plain strings (a prompt
    may hold ``role: text`` lines) or as chat messages (a prompt a list of ``{"role", "content"}`` messages, a
    completion a list holding the assistant's message), and the dataset's columns as keyword arguments, one value
    per completion. The passages a completion is verified against come from the first column present of
    ``retrieved_context``, ``retrieved_contexts``, ``context``, ``document`` (a text, or a list of passages; empty:
    judged against the dialogue alone); background facts / a persona from ``background`` or ``persona``; other
    columns are ignored. A completion that could not be judged (a claim or the prompt's history failed after the
    parse retries, the endpoint went down) is ``None``, its reason logged and kept in ``last_batch``: never 0 or 1.

    Args:
        judge: the judge's LM, as ``VistaMetric``'s: "local" (the embedded model, started on the first call),
            a model short name or DSPy/litellm string, or a ``dspy.LM``.
        program: the VISTA program (default: the compiled program for ``judge`` when one ships, else the seed).
        shape: how a verdict becomes a number (``SHAPES``):
            "informative" (default): faithful completions in [0, 1] by their VERIFIED claims over
            max(judged claims, ``min_claims``), OUT-OF-SCOPE / ABSTENTION claims earning ``uninformative_credit``
            each; hallucinated ones in [-1, 0) by their unsafe claims over the same. Saying nothing earns 0,
            refusing or giving opinions at most ``uninformative_credit``, a faithful answer with one VERIFIED claim
            more, any hallucinated answer less than 0.
            "score": VISTA's score (safe / judged claims); "faithful": 1.0 / 0.0 by VISTA's turn label;
            "penalty": ``-unsafe_penalty`` per unsafe claim. These three give a completion without claims their
            best value: they can be gamed by saying nothing, and are for use beside another reward.
        system: "vista" (the program's full method) or "evidence" (claims decided by the evidence model: Decompose
            is the only LM call; high throughput, lower quality). ``system="evidence", units="sentences"``: the tier
            with no LM at all (the turn's sentences decided by the evidence cues; no model is started).
        concurrency: LM requests in flight while judging a batch (asyncio; on threads when the caller runs an
            event loop). Default 8.
        share_prompt_work: compute each prompt's common ground once per prompt (default); False judges every
            completion's whole dialogue (for comparison: same verdicts under per-turn decomposition, more calls).
        min_claims, uninformative_credit, unsafe_penalty: the shapes' numbers (``uninformative_credit * min_claims``
            must stay below 1, or the default's ordering breaks; refused).
        passage_column, background_column: read these columns instead of the names above.
        on_batch: called with each batch's ``RewardVerdict`` list (per-claim verdicts to log).
        cache_size: verdicts and prompts' common ground kept (least recently used dropped).
        parse_retries: an answer that does not parse is asked again this many times (as ``vista evaluate``'s).
        stop_after: the judge's endpoint is down after this many failed calls in a row: the rest of the batch is not
            sent and its completions are None. 0: never stop (a failed call is an ERROR claim, its completion None),
            as ``vista evaluate --stop-after 0``.
        port, **options: as ``VistaMetric``'s (judging options of the program).

    ``last_batch`` holds the last batch's ``RewardVerdict`` list, ``stats`` the counts (calls saved by sharing the
    prompt's work among them), ``usage`` every judge call per stage, ``program`` the VISTA program judging.
    """

    def __init__(self, judge: str | dspy.BaseLM = "local", program: str | Path | None = None, *,
                 shape: str = DEFAULT_SHAPE, system: str = "vista", concurrency: int = 8,
                 share_prompt_work: bool = True, min_claims: int = 3, uninformative_credit: float = 0.1,
                 unsafe_penalty: float = 1.0, passage_column: str | None = None,
                 background_column: str | None = None,
                 on_batch: Callable[[list[RewardVerdict]], None] | None = None, cache_size: int = 10_000,
                 adapter: dspy.Adapter | None = None, parse_retries: int = PARSE_RETRIES,
                 stop_after: int = STOP_AFTER,
                 port: int | None = None, **options: Any) -> None:
        if shape not in SHAPES:
            raise ValueError(f"unknown reward shape {shape!r}; shapes: {', '.join(SHAPES)}")
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, not {concurrency}")
        if not isinstance(stop_after, int) or stop_after < 0:
            raise ValueError(f"stop_after must be a whole number, 0 for never stopping, not {stop_after!r}")
        self.shape = shape
        self.weights = Weights(min_claims, uninformative_credit, unsafe_penalty)
        self.setup = JudgeSetup(judge, program, system=system, port=port, **options)
        if adapter is not None:
            self.setup.adapter = adapter
        self.program = self.setup.program
        self.concurrency = concurrency
        self.share_prompt_work = share_prompt_work
        self.passage_column, self.background_column = passage_column, background_column
        self.on_batch = on_batch
        self.cache_size = cache_size
        self.parse_retries, self.stop_after = parse_retries, stop_after
        self.__name__ = f"vista_{shape}"  # trainers name a reward function's logged column by it
        self.usage = Usage()
        self.stats = RewardStats()
        self.last_batch: list[RewardVerdict] = []
        self._verdicts: OrderedDict[str, TurnVerdict] = OrderedDict()
        self._prompts: OrderedDict[str, PromptWork] = OrderedDict()
        self._slots: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # event loop -> its request slots
        self._lock = threading.Lock()

    # ---- the trainers' call ----------------------------------------------------------------------------------
    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        batch = self.judge_batch(prompts, completions, **columns)
        return [verdict.reward for verdict in batch]

    async def acall(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
        """The call's async twin, on the caller's event loop: the same rewards, the same prompt work and caches,
        at most ``concurrency`` requests in flight across all of this reward's calls running on that loop."""
        batch = await self.ajudge_batch(prompts, completions, **columns)
        return [verdict.reward for verdict in batch]

    def as_async(self) -> Callable[..., Any]:
        """This reward as an ``async def`` function named as the reward, for a trainer that awaits coroutine
        reward functions (TRL's GRPOTrainer runs them concurrently with the other reward functions):
        ``GRPOTrainer(reward_funcs=[reward.as_async()], ...)``."""
        async def reward(prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float | None]:
            return await self.acall(prompts, completions, **columns)

        reward.__name__ = reward.__qualname__ = self.__name__
        return reward

    def judge_batch(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[RewardVerdict]:
        """The batch's verdicts (what ``__call__`` returns the rewards of)."""
        from .runner import heap_frozen

        steps = self._batch(prompts, completions, columns)
        with heap_frozen():
            try:
                run = next(steps)
                while True:
                    run = steps.send(self._run(*run))
            except StopIteration as done:
                return done.value

    async def ajudge_batch(self, prompts: Sequence[Any], completions: Sequence[Any], **columns: Any
                           ) -> list[RewardVerdict]:
        """``judge_batch`` on the caller's event loop (what ``acall`` returns the rewards of)."""
        steps = self._batch(prompts, completions, columns)
        try:
            run = next(steps)
            while True:
                run = steps.send(await self._arun(*run))
        except StopIteration as done:
            return done.value

    def _batch(self, prompts: Sequence[Any], completions: Sequence[Any], columns: dict[str, Any]
               ) -> Generator[Run, Unjudged | None, list[RewardVerdict]]:
        """A batch's judging as steps: it yields the runs it needs (dialogues, job, record), is sent back each
        run's outage (or None), and returns the verdicts. The sync and async calls drive it."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions: a reward function gets "
                             "one prompt per completion")
        dialogues = self._dialogues(prompts, completions, columns)
        keys = {i: prompt_key(d) for i, d in enumerate(dialogues) if isinstance(d, Dialogue)}
        work, failed = (yield from self._common_ground(dialogues, keys)) if self.share_prompt_work else ({}, {})
        verdicts = yield from self._judge_completions(dialogues, keys, work, failed)
        batch = [self._verdict(i, verdicts.get(i), d if isinstance(d, Unjudged) else failed.get(keys[i]))
                 for i, d in enumerate(dialogues)]
        self._book(batch, len(set(keys.values())))
        self.last_batch = batch
        if self.on_batch is not None:
            self.on_batch(batch)
        return batch

    def claim_rows(self) -> list[dict[str, Any]]:
        """The last batch's claims, one flat row each (index, reward, label, category, claim, explanation, spans in
        the completion): a table for a training log."""
        return [{"index": v.index, "reward": v.reward, "label": v.label, **claim}
                for v in self.last_batch for claim in v.to_dict()["claims"]]

    # ---- inputs ----------------------------------------------------------------------------------------------
    def _dialogues(self, prompts: Sequence[Any], completions: Sequence[Any], columns: dict[str, Any]
                   ) -> list[Dialogue | Unjudged]:
        """Each completion as a VISTA dialogue, or why it cannot be one (its text is not a turn)."""
        dialogues: list[Dialogue | Unjudged] = []
        for row in trainer_rows(prompts, completions, columns, passage_column=self.passage_column,
                                background_column=self.background_column):
            try:
                dialogues.append(response_dialogue(row.history, row.response, row.passages, row.background))
            except ValidationError as exc:  # e.g. a text beyond schema.MAX_TEXT: this completion is not judged
                dialogues.append(Unjudged(f"not a judgeable turn: {' '.join(str(exc).split())[:300]}"))
        return dialogues

    # ---- judging ---------------------------------------------------------------------------------------------
    def _common_ground(self, dialogues: list[Dialogue | Unjudged], keys: dict[int, str]
                       ) -> Generator[Run, Unjudged | None, tuple[dict[str, PromptWork], dict[str, Unjudged]]]:
        """Each prompt's common ground (kept, or computed once for all its completions), and the prompts whose
        history could not be decomposed, with why."""
        work: dict[str, PromptWork] = {}
        todo: dict[str, Dialogue] = {}
        with self._lock:
            for i, key in keys.items():
                dialogue = dialogues[i]
                if key in self._prompts:
                    self._prompts.move_to_end(key)
                    work[key] = self._prompts[key]
                elif not any(t.role == "assistant" for t in dialogue.turns[:-1]):
                    work[key] = PromptWork({}, 0)  # a history without assistant turns has no common ground
                else:
                    todo.setdefault(key, dialogue)
        if not todo:
            return work, {}
        by_id = {d.id: key for key, d in todo.items()}
        computed: dict[str, PromptWork] = {}

        def record(result: tuple[str, tuple[dict, Usage]]) -> None:
            dialogue_id, (claims, usage) = result
            errors = [f"the history's turn {i} could not be decomposed: {c.error}" for i, c in claims.items()
                      if c.error is not None]
            computed[by_id[dialogue_id]] = PromptWork({i: c.texts for i, c in claims.items()}, usage.total.calls,
                                                        Unjudged(errors[0]) if errors else None)
            with self._lock:
                self.usage.merge(usage)
                self.stats.prompt_calls += usage.total.calls

        job = Job(lambda d: (d.id, self.program.common_ground(d)), self._acommon_ground)
        outage = yield list(todo.values()), job, record
        failed: dict[str, Unjudged] = {}
        with self._lock:
            for key in todo:
                done = computed.get(key)
                if done is None or done.error is not None:
                    failed[key] = done.error if done is not None else outage or NOT_JUDGED
                    continue
                work[key] = done
                self.stats.prompt_work += 1
                self.stats.calls_saved -= done.calls  # its completions' share of it is added as they are judged
                self._prompts[key] = done
                while len(self._prompts) > self.cache_size:
                    self._prompts.popitem(last=False)
        return work, failed

    async def _acommon_ground(self, dialogue: Dialogue):
        return dialogue.id, await self.program.acommon_ground(dialogue)

    def _judge_completions(self, dialogues: list[Dialogue | Unjudged], keys: dict[int, str],
                           work: dict[str, PromptWork], failed: dict[str, Unjudged]
                           ) -> Generator[Run, Unjudged | None, dict[int, tuple[TurnVerdict | Unjudged, bool]]]:
        """{batch index: (its TurnVerdict, or why it has none; whether the verdict was reused)}: each distinct
        completion judged once, concurrently, with its prompt's common ground given."""
        key_of = {dialogues[i].id: key for i, key in keys.items()}
        todo: dict[str, Dialogue] = {}
        kept: dict[str, TurnVerdict] = {}
        with self._lock:
            for i, key in keys.items():
                dialogue = dialogues[i]
                if key in failed:
                    continue
                if dialogue.id in self._verdicts:
                    self._verdicts.move_to_end(dialogue.id)
                    kept[dialogue.id] = self._verdicts[dialogue.id]
                else:
                    todo.setdefault(dialogue.id, dialogue)
        finished: dict[str, TurnVerdict | Unjudged] = {}

        def record(verdict: DialogueVerdict) -> None:
            unjudged = failure(verdict)
            finished[verdict.dialogue_id] = unjudged if unjudged is not None else verdict.turns[-1]
            with self._lock:
                self.usage.merge(verdict.usage)
                self.stats.completion_calls += verdict.usage.total.calls
                if self.share_prompt_work:
                    self.stats.calls_saved += work[key_of[verdict.dialogue_id]].calls
                if unjudged is None:
                    self._verdicts[verdict.dialogue_id] = verdict.turns[-1]
                    while len(self._verdicts) > self.cache_size:
                        self._verdicts.popitem(last=False)

        if self.share_prompt_work:
            given = {d.id: work[key_of[d.id]].claims for d in todo.values()}
            job = Job(lambda d: self.program.judge_claims(d, given[d.id]),
                       lambda d: self.program.ajudge_claims(d, given[d.id]))
        else:
            job = Job(self.program, self.program.acall)
        outage = yield list(todo.values()), job, record
        with self._lock:
            self.stats.judged += len(todo)
        out: dict[int, tuple[TurnVerdict | Unjudged, bool]] = {}
        seen: set[str] = set()
        for i, key in keys.items():
            dialogue_id = dialogues[i].id
            if key in failed:
                continue
            if dialogue_id in kept:
                out[i] = (kept[dialogue_id], True)
            else:
                out[i] = (finished.get(dialogue_id, outage or NOT_JUDGED), dialogue_id in seen)
                seen.add(dialogue_id)
        return out

    def _run(self, dialogues: list[Dialogue], job: Job, record: Callable[[Any], None]) -> Unjudged | None:
        """Run ``job`` over ``dialogues`` concurrently on the runner's backends; ``Unjudged`` if the endpoint went
        down (what finished before is recorded)."""
        from .runner import local_backend

        if not dialogues:
            return None
        self.setup.start()
        try:
            asyncio.get_running_loop()
            backend = local_backend(self.setup.lm, self.setup.adapter, threads=self.concurrency)
        except RuntimeError:  # no event loop in this thread: asyncio, the requests bounded by request slots
            backend = local_backend(self.setup.lm, self.setup.adapter, concurrency=self.concurrency)
        try:
            backend.run(dialogues, job, record, CallFailures(self.parse_retries, self.stop_after))
        except EndpointDown as exc:
            return Unjudged(f"the judge's endpoint is down: {exc}")
        return None

    async def _arun(self, dialogues: list[Dialogue], job: Job, record: Callable[[Any], None]) -> Unjudged | None:
        """``_run`` on the caller's event loop, its requests in this reward's slots for that loop."""
        from ..lm.clients.slots import RequestSlots
        from .runner import Concurrent

        if not dialogues:
            return None
        if self.setup.waiting_to_start:
            await asyncio.to_thread(self.setup.start)  # the embedded server's start blocks: not on the loop
        loop = asyncio.get_running_loop()
        with self._lock:
            slots = self._slots.get(loop)
            if slots is None:
                slots = self._slots[loop] = RequestSlots(self.concurrency)
        backend = Concurrent(self.setup.lm, self.concurrency, self.setup.adapter)
        try:
            await backend.arun(dialogues, job, record, CallFailures(self.parse_retries, self.stop_after), slots)
        except EndpointDown as exc:
            return Unjudged(f"the judge's endpoint is down: {exc}")
        return None

    # ---- verdicts --------------------------------------------------------------------------------------------
    def _verdict(self, index: int, judged: tuple[TurnVerdict | Unjudged, bool] | None, unjudged: Unjudged | None
                 ) -> RewardVerdict:
        """The completion's reward under the shape, or None and why (``unjudged``: its prompt, or its text, failed)."""
        if judged is None:
            return RewardVerdict(index, None, None, (unjudged or NOT_JUDGED).reason)
        turn, cached = judged
        if isinstance(turn, Unjudged):
            return RewardVerdict(index, None, None, turn.reason, cached)
        shape = SHAPES[self.shape]
        if shape.silence_is_best and turn.empty_decomposition:
            return RewardVerdict(index, None, turn, "the completion says something but the decomposer found no "
                                                    f"claim in it; shape {self.shape!r} would score it as faultless",
                                 cached)
        return RewardVerdict(index, shape.reward(Tally.of(turn), self.weights), turn, None, cached)

    def _book(self, batch: list[RewardVerdict], prompts: int) -> None:
        unjudged = [v for v in batch if v.reward is None]
        with self._lock:
            self.stats.batches += 1
            self.stats.completions += len(batch)
            self.stats.prompts += prompts
            self.stats.cached += sum(v.cached for v in batch)
            self.stats.unjudged += len(unjudged)
        for reason, count in Counter(v.reason for v in unjudged).items():
            logger.warning("VISTA could not judge %d of %d completions (reward None): %s", count, len(batch), reason)

    # ---- the embedded server ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the embedded server this reward started (if any)."""
        self.setup.close()

    def __enter__(self) -> VistaReward:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["BACKGROUND_COLUMNS", "DEFAULT_SHAPE", "PASSAGE_COLUMNS", "SHAPES", "RewardStats", "RewardVerdict",
           "Tally", "Unjudged", "VistaReward", "Weights", "completion_text", "message_text"]

"""Batch evaluation: dialogues in parallel threads, each verdict appended to a JSONL file the moment it is done,
resume on rerun (judging again the dialogues whose verdict holds a failure), and a summary at the end.

Output directory layout:
    run.json        the settings of the run (a rerun with other settings is refused)
    verdicts.jsonl  one DialogueVerdict per line, in completion order. A repaired dialogue's new verdict is appended
                    and wins over the old line; when the run finishes the file is rewritten (atomically) with one
                    line per dialogue.
    summary.json    scoring.summarize() over the input's dialogues, in input order
    run.lock, verdicts.damaged.jsonl   one run at a time; damaged lines set aside (``outdir``)

An endpoint that keeps failing stops the run (``stages.CallFailures``): finished dialogues are kept, the ones in
progress are not written, and ``EndpointDown`` says so; rerunning resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dspy

from .. import scoring
from ..lm.clients.adapters import build_adapter
from ..lm.clients.engines import aclose_client
from ..lm.clients.slots import IN_FLIGHT, PRIORITY, RequestSlots, request_slot
from ..options import DEFAULT_EVIDENCE_TOKENS, DEFAULT_HISTORY_TOKENS, DEFAULT_KNOWLEDGE_TOKENS
from ..schema import Category, Dialogue, DialogueVerdict
from ..stages import CALL_GUARD, FAILURES, CallFailures, EndpointDown, StagedModule
from .outdir import DAMAGED, VERDICTS, OutputFolder, read_verdicts, write_verdicts  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from .distributed import RayBackend

SUMMARY = "summary.json"
RUN = "run.json"


class RunConflict(Exception):
    """The output directory holds a run made with different settings."""


@dataclass
class RunResult:
    verdicts: list[DialogueVerdict]
    summary: dict[str, Any]
    resumed: int = 0
    out_dir: Path | None = None
    interrupted: bool = False
    pending: list[str] = field(default_factory=list)
    repaired: int = 0  # dialogues judged again because their earlier verdict held a failure
    set_aside: int = 0  # damaged lines of verdicts.jsonl moved to verdicts.damaged.jsonl (outdir.DAMAGED)


def has_failures(verdict: DialogueVerdict) -> bool:
    """Whether some part of the verdict failed (an ERROR claim, a failed stage, an ``unknown`` turn): a resumed run
    judges such a dialogue again (``retry_errors``)."""
    return bool(verdict.errors) or any(
        turn.error is not None or turn.label == "unknown" or any(c.category is Category.ERROR for c in turn.claims)
        for turn in verdict.turns)


def program_identity(judge: StagedModule) -> dict[str, Any]:
    """The judge's program by name and, for a VISTA judge, by content (demos, instructions, options, calibration)."""
    identity = {"program": judge.program_name}
    if hasattr(judge, "content_hash"):
        identity["program_sha256"] = judge.content_hash()
    return identity


def run_settings(judge: StagedModule, **extra: Any) -> dict[str, Any]:
    """The settings stored in run.json: the judge's program (name and content hash) and options, plus ``extra``
    (input, LM, ...)."""
    return {**program_identity(judge), **judge.option_values(), **extra}


# Settings recorded only since a later version, with the value every run before it had (the option did not
# exist): a run.json without them still resumes under those values. A run.json without a program hash resumes
# whatever the program's content (it was not recorded).
LATER_SETTINGS: dict[str, Any] = {"claim_calls": "per-claim", "decompose_calls": "per-turn", "reasoning": [],
                                  "explain_verified": True, "check_grounding": False, "label_probabilities": False,
                                  "categorize_all": False,
                                  # Before issue 63 every prompt read the whole sources: the full reading.
                                  "evidence": "full", "evidence_tokens": DEFAULT_EVIDENCE_TOKENS,
                                  "knowledge_tokens": DEFAULT_KNOWLEDGE_TOKENS,
                                  "history_tokens": DEFAULT_HISTORY_TOKENS}
# Settings recorded under another name before.
RENAMED_SETTINGS: dict[str, str] = {"judge_given_claims": "given_claims"}


def _check_run(folder: OutputFolder, settings: dict[str, Any]) -> None:
    out_dir = folder.path
    path = out_dir / RUN
    if path.exists():
        try:
            previous = json.loads(path.read_text())
        except ValueError as exc:  # damaged (not JSON, not UTF-8): which run it was is unknown
            raise RunConflict(f"{path}: not a run's settings ({exc}); its verdicts cannot be matched to this run. "
                              "Use another --out, or --overwrite.") from None
        for old, new in RENAMED_SETTINGS.items():
            if old in previous and new not in previous:
                previous[new] = previous.pop(old)
        previous.update({k: v for k, v in LATER_SETTINGS.items() if k not in previous and k in settings})
        # A run.json from before runs recorded their program's identity resumes whatever the program.
        settings = {k: v for k, v in settings.items() if k in previous or k not in ("program", "program_sha256")}
        changed = [k for k in sorted(set(settings) | set(previous)) if settings.get(k) != previous.get(k)]
        if "program_sha256" in changed:
            raise RunConflict(
                f"{out_dir} holds a run judged by a program {previous.get('program')!r} of other content (sha256 "
                f"{str(previous['program_sha256'])[:12]}..., now {str(settings['program_sha256'])[:12]}...): it was "
                "recompiled or edited since, and its verdicts would mix two programs. Use another --out, or "
                "--overwrite.")
        if changed:
            details = "; ".join(f"{k}: {previous.get(k)!r} -> {settings.get(k)!r}" for k in changed)
            raise RunConflict(
                f"{out_dir} holds a run with other settings ({details}). Use another --out, or --overwrite."
            )
    else:
        folder.write_text(RUN, json.dumps(settings, indent=2, sort_keys=True) + "\n")


def dialogues_for(concurrency: int) -> int:
    """Dialogues at a time for ``concurrency`` request slots: twice as many. A dialogue holds a slot only while one
    of its requests is on the wire (``clients.request_slot``), and between requests it formats, parses and waits
    for its turn's other claims: with one dialogue per slot, some slots stand idle."""
    return 2 * concurrency


Record = Callable[[DialogueVerdict], None]


@dataclass(frozen=True)
class Threads:
    """Judge in this process, ``threads`` dialogues at a time, each on its own thread (blocking LM calls)."""

    lm: dspy.BaseLM
    adapter: dspy.Adapter | None = None
    threads: int = 1

    def run(self, todo: Sequence[Dialogue], judge: StagedModule, record: Record, failures: CallFailures) -> None:
        adapter = self.adapter or build_adapter("json")

        def judge_one(dialogue: Dialogue) -> DialogueVerdict:
            # No DSPy trace: nothing reads a judged dialogue's predictor calls, and the global one keeps 10,000.
            with dspy.context(lm=self.lm, adapter=adapter, trace=None), failures.active():
                return judge(dialogue)

        try:
            _judge_threaded(todo, judge_one, self.threads, record)
        except KeyboardInterrupt:
            failures.stop()  # the dialogues still running stop at their next LM call, unrecorded
            raise


@dataclass(frozen=True)
class Concurrent:
    """Judge in this process on asyncio: ``dialogues`` at a time (longest first), the claims of a turn in
    parallel, at most ``requests`` LM requests in flight overall (default: ``dialogues_for`` says how many
    dialogues keep that many requests busy)."""

    lm: dspy.BaseLM
    requests: int
    adapter: dspy.Adapter | None = None
    dialogues: int | None = None

    def run(self, todo: Sequence[Dialogue], judge: StagedModule, record: Record, failures: CallFailures) -> None:
        adapter = self.adapter or build_adapter("json")
        with failures.active():  # the run's tasks inherit it
            asyncio.run(_judge_async(todo, judge, self.lm, adapter, self.dialogues or dialogues_for(self.requests),
                                     RequestSlots(self.requests), record))

    async def arun(self, todo: Sequence[Dialogue], judge: StagedModule, record: Record, failures: CallFailures,
                   slots: RequestSlots | None = None) -> None:
        """``run`` on the caller's event loop; ``slots``: request slots shared with the caller's other runs on this
        loop (default: ``requests`` of this run's own)."""
        adapter = self.adapter or build_adapter("json")
        with failures.active():  # a task of its own, so that the run's context variables stay out of the caller's
            await asyncio.ensure_future(_judge_async(
                todo, judge, self.lm, adapter, self.dialogues or dialogues_for(self.requests),
                slots or RequestSlots(self.requests), record, close_connections=False))


def local_backend(lm: dspy.BaseLM, adapter: dspy.Adapter | None = None, *, threads: int | None = None,
                  concurrency: int | None = None) -> Threads | Concurrent:
    """Threads (``threads`` dialogues at a time, default 1), or asyncio when ``concurrency`` bounds the requests in
    flight (``threads`` dialogues at a time, default ``dialogues_for(concurrency)``)."""
    if concurrency is not None:
        return Concurrent(lm, concurrency, adapter, dialogues=threads)
    return Threads(lm, adapter, threads or 1)


# Over 80 lines for its docstring, the run's durability contract in one place (18 lines); the body is 57.
def evaluate(
    dialogues: Sequence[Dialogue],
    program: StagedModule,
    backend: Threads | Concurrent | RayBackend | dspy.BaseLM,
    *,
    out_dir: Path | None = None,
    settings: dict[str, Any] | None = None,
    on_done: Record | None = None,
    retry_errors: bool = True,
    failures: CallFailures | None = None,
    overwrite: bool = False,
) -> RunResult:
    """Judge ``dialogues`` with ``program`` on ``backend`` (``Threads``, ``Concurrent``, a Ray backend, or an LM:
    one thread); write and resume under ``out_dir`` when given.

    ``settings`` (any JSON-able dict describing the run) is stored in run.json with the program's identity (name
    and content hash); a rerun into the same directory must have the same settings and program, and re-asks only
    the dialogues without a verdict, and (``retry_errors``) those whose verdict holds a failure (``has_failures``;
    their calls that succeeded come from the LM cache).
    KeyboardInterrupt stops submitting work, keeps everything finished, and returns with ``interrupted=True``.
    ``overwrite`` discards an earlier run in ``out_dir`` instead of resuming it.

    One run holds ``out_dir`` at a time (``outdir.FolderBusy`` for another); lines of verdicts.jsonl that are not a
    verdict are set aside in verdicts.damaged.jsonl and their dialogues judged again (``RunResult.set_aside``); a
    folder that takes no more bytes stops the run with ``outdir.OutputUnwritable``, the file intact.

    ``failures``: how failed calls are treated (default: the caller's active ``CallFailures`` if it may stop, else
    one with the defaults). When it declares the endpoint down, everything finished is kept and ``EndpointDown`` is
    raised, its message saying how many dialogues are kept where.
    """
    if isinstance(backend, dspy.BaseLM):
        backend = Threads(backend)
    if failures is None:
        failures = FAILURES.get() if FAILURES.get().stop_after else CallFailures()
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(OutputFolder(out_dir)) if out_dir is not None else None
        done: dict[str, DialogueVerdict] = {}
        if folder is not None:
            if overwrite:
                folder.discard(VERDICTS, SUMMARY, RUN)
            _check_run(folder, {**program_identity(program), **(settings or {})})
            wanted = {d.id for d in dialogues}
            done = {i: v for i, v in folder.read().items() if i in wanted}
        repair = {i for i, v in done.items() if has_failures(v)} if retry_errors else set()
        resumed = len(done) - len(repair)
        # Longest dialogues first: their chains of dependent calls set the wall time of a parallel run, and a long
        # one started last would run alone at the end (longest-processing-time-first scheduling). Stable for equal
        # lengths.
        todo = sorted((d for d in dialogues if d.id not in done or d.id in repair), key=lambda d: len(d.turns),
                      reverse=True)

        def record(verdict: DialogueVerdict) -> None:
            if folder is not None:
                folder.append(verdict)  # a verdict that could not be written is not done
            done[verdict.dialogue_id] = verdict
            if on_done is not None:
                on_done(verdict)

        interrupted = False
        outage: EndpointDown | None = None
        try:
            with heap_frozen():
                backend.run(todo, program, record, failures)
                if folder is not None:
                    # A repair left a dialogue on two lines. (A stopped run leaves them: the later line wins until
                    # the next run that finishes compacts; a Ctrl-C during the compaction waits until it is done.)
                    folder.compact()
        except KeyboardInterrupt:
            interrupted = True
        except EndpointDown as exc:
            outage = exc
        if outage is not None:
            if out_dir is not None:
                raise EndpointDown(f"{outage}. Stopped: {len(done)} of {len(dialogues)} dialogues are finished and "
                                   f"kept in {out_dir}; rerun the same command to resume.") from outage
            raise EndpointDown(f"{outage}. Stopped after {len(done)} of {len(dialogues)} dialogues; the answers "
                               "received are in the LM cache (unless it is off), so rerunning the same command does "
                               "not pay for them again.") from outage
        return _result(dialogues, done, folder, resumed, interrupted, len(repair))


@contextlib.contextmanager
def heap_frozen():
    """The objects alive before the block are left out of garbage collections during it. A full collection walks
    every live object -- about 0.2 s with DSPy and litellm loaded -- and stalls every request in flight meanwhile (and
    a batch of rewards with no LM call spent a third of its time in them). A caller that froze objects itself keeps
    its freeze as it is."""
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()


def _judge_threaded(todo: Sequence[Dialogue], judge: Callable[[Dialogue], DialogueVerdict], threads: int,
                    record: Record) -> None:
    executor = ThreadPoolExecutor(max_workers=max(1, threads), thread_name_prefix="vista")
    interrupted = False
    try:
        queue = iter(todo)
        running: dict[Future, str] = {}
        # Submit lazily, at most `threads` at a time, so an interrupt leaves nothing queued.
        for dialogue in queue:
            running[executor.submit(judge, dialogue)] = dialogue.id
            if len(running) >= max(1, threads):
                break
        outage: EndpointDown | None = None
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                running.pop(future)
                try:
                    record(future.result())
                except EndpointDown as exc:
                    outage = outage or exc  # submit nothing more; the dialogues still running end soon
                nxt = None if outage else next(queue, None)
                if nxt is not None:
                    running[executor.submit(judge, nxt)] = nxt.id
        if outage is not None:
            raise outage
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        executor.shutdown(wait=not interrupted, cancel_futures=True)


async def _judge_async(todo: Sequence[Dialogue], program: StagedModule, lm: dspy.BaseLM, adapter: dspy.Adapter,
                       dialogues_at_once: int, slots: RequestSlots, record: Record, *,
                       close_connections: bool = True) -> None:
    IN_FLIGHT.set(slots)
    CALL_GUARD.set(request_slot)  # the judge holds a slot around each predictor call (see request_slot)
    queue = iter(todo)

    async def worker() -> None:
        for dialogue in queue:  # shared iterator: each dialogue is taken by exactly one worker
            PRIORITY.set(-len(dialogue.turns))  # the longest dialogues' requests first (their chains set wall time)
            with dspy.context(lm=lm, adapter=adapter, trace=None):
                verdict = await program.acall(dialogue)
            record(verdict)

    workers = [asyncio.ensure_future(worker()) for _ in range(max(1, dialogues_at_once))]
    try:
        await asyncio.gather(*workers)
    finally:
        # The first dialogue that fails (a down endpoint, a fatal configuration error) stops the others: they are
        # unfinished, so not recorded.
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if close_connections:  # not on a caller's loop: its other runs may be using them, and it goes on
            await aclose_client(lm)


def _result(dialogues: Sequence[Dialogue], done: dict[str, DialogueVerdict], folder: OutputFolder | None,
            resumed: int, interrupted: bool, repaired: int) -> RunResult:
    verdicts = [done[d.id] for d in dialogues if d.id in done]
    summary = scoring.summarize(verdicts)
    if folder is not None and not interrupted:
        folder.write_text(SUMMARY, json.dumps(summary, indent=2) + "\n")
    return RunResult(
        verdicts=verdicts,
        summary=summary,
        resumed=resumed,
        out_dir=folder.path if folder is not None else None,
        interrupted=interrupted,
        pending=[d.id for d in dialogues if d.id not in done],
        repaired=repaired,
        set_aside=folder.set_aside if folder is not None else 0,
    )

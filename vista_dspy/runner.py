"""Batch evaluation: dialogues in parallel threads, each verdict appended to a JSONL file the moment it is done,
resume on rerun, and a summary at the end.

Output directory layout:
    run.json        the settings of the run (a rerun with other settings is refused)
    verdicts.jsonl  one DialogueVerdict per line, in completion order
    summary.json    scoring.summarize() over the input's dialogues, in input order
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dspy
from pydantic import ValidationError

from . import scoring
from .clients import IN_FLIGHT, PRIORITY, RequestSlots, aclose_client, build_adapter, request_slot
from .schema import Dialogue, DialogueVerdict
from .stages import CALL_GUARD, StagedModule

if TYPE_CHECKING:
    from .distributed import RayBackend

VERDICTS = "verdicts.jsonl"
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


def read_verdicts(path: Path) -> list[DialogueVerdict]:
    """Verdicts already written. A torn last line (the process died mid-write) is cut off the file."""
    if not path.exists():
        return []
    verdicts: list[DialogueVerdict] = []
    good_bytes = 0
    with path.open("rb") as handle:
        for raw in handle:
            try:
                verdicts.append(DialogueVerdict.model_validate_json(raw))
            except ValidationError:
                if raw.endswith(b"\n"):
                    raise RunConflict(f"{path}: line {len(verdicts) + 1} is not a dialogue verdict") from None
                break  # torn tail
            good_bytes += len(raw)
    if good_bytes != path.stat().st_size:
        with path.open("r+b") as handle:
            handle.truncate(good_bytes)
    return verdicts


def run_settings(judge: StagedModule, **extra: Any) -> dict[str, Any]:
    """The settings stored in run.json: the judge's program and options, plus ``extra`` (input, LM, ...)."""
    return {"program": judge.program_name, **judge.options(), **extra}


# Settings recorded only since a later version, with the value every run before it had (the option did not
# exist): a run.json without them still resumes under those values.
LATER_SETTINGS: dict[str, Any] = {"claim_calls": "per-claim", "decompose_calls": "per-turn", "reasoning": [],
                                   "explain_verified": True}


def _check_run(out_dir: Path, settings: dict[str, Any]) -> None:
    path = out_dir / RUN
    if path.exists():
        previous = json.loads(path.read_text())
        previous.update({k: v for k, v in LATER_SETTINGS.items() if k not in previous and k in settings})
        changed = [k for k in sorted(set(settings) | set(previous)) if settings.get(k) != previous.get(k)]
        if changed:
            details = "; ".join(f"{k}: {previous.get(k)!r} -> {settings.get(k)!r}" for k in changed)
            raise RunConflict(
                f"{out_dir} holds a run with other settings ({details}). Use another --out, or --overwrite."
            )
    else:
        path.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")


def dialogues_for(concurrency: int) -> int:
    """Dialogues at a time for ``concurrency`` request slots: twice as many. A dialogue holds a slot only while one
    of its requests is on the wire (``clients.request_slot``), and between requests it formats, parses and waits
    for its turn's other claims: with one dialogue per slot, some slots stand idle."""
    return 2 * concurrency


def evaluate(
    dialogues: Sequence[Dialogue],
    program: StagedModule,
    lm: dspy.BaseLM,
    *,
    adapter: dspy.Adapter | None = None,
    out_dir: Path | None = None,
    settings: dict[str, Any] | None = None,
    threads: int = 1,
    judge_given_claims: bool = False,
    on_done: Callable[[DialogueVerdict], None] | None = None,
    concurrency: int | None = None,
    remote: RayBackend | None = None,
) -> RunResult:
    """Judge ``dialogues`` with ``program`` and ``lm``; write and resume under ``out_dir`` when given.

    ``settings`` (any JSON-able dict describing the run) is stored in run.json; a rerun into the same directory
    must have the same settings and re-asks only the dialogues without a verdict. KeyboardInterrupt stops
    submitting work, keeps everything finished, and returns with ``interrupted=True``.

    ``concurrency``: run on asyncio instead of threads: ``threads`` dialogues at a time, the claims of a turn
    in parallel, and at most ``concurrency`` LM requests in flight overall.
    ``remote``: run on a Ray cluster instead (``lm`` is then rebuilt by every worker from the backend's model
    configuration, and ``program`` from its spec).
    """
    adapter = adapter or build_adapter("json")
    done: dict[str, DialogueVerdict] = {}
    handle = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        _check_run(out_dir, settings or {})
        wanted = {d.id for d in dialogues}
        done = {v.dialogue_id: v for v in read_verdicts(out_dir / VERDICTS) if v.dialogue_id in wanted}
        handle = (out_dir / VERDICTS).open("a", encoding="utf-8")
    resumed = len(done)
    # Longest dialogues first: their chains of dependent calls set the wall time of a parallel run, and a long one
    # started last would run alone at the end (longest-processing-time-first scheduling). Stable for equal lengths.
    todo = sorted((d for d in dialogues if d.id not in done), key=lambda d: len(d.turns), reverse=True)

    def judge(dialogue: Dialogue) -> DialogueVerdict:
        with dspy.context(lm=lm, adapter=adapter):
            return program.judge_claims(dialogue) if judge_given_claims else program(dialogue)

    def record(verdict: DialogueVerdict) -> None:
        done[verdict.dialogue_id] = verdict
        if handle is not None:
            handle.write(verdict.model_dump_json() + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        if on_done is not None:
            on_done(verdict)

    if remote is not None:
        from .baselines import judge_spec

        def drive() -> None:
            remote.run(todo, judge_spec(program), judge_given_claims, record)
    elif concurrency is not None:
        def drive() -> None:
            asyncio.run(_judge_async(todo, program, lm, adapter, judge_given_claims, threads, concurrency, record))
    else:
        def drive() -> None:
            _judge_threaded(todo, judge, threads, record)
    interrupted = False
    # A full garbage collection walks every live object -- about 0.2 s with DSPy and litellm loaded -- and stalls
    # every request in flight meanwhile. The objects alive before the run are left out of collections during it
    # (unless the caller froze objects itself: its freeze is left as it is).
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        drive()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if freeze:
            gc.unfreeze()
        if handle is not None:
            handle.close()
    return _result(dialogues, done, out_dir, resumed, interrupted)


def _judge_threaded(todo: Sequence[Dialogue], judge: Callable[[Dialogue], DialogueVerdict], threads: int,
                    record: Callable[[DialogueVerdict], None]) -> None:
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
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                running.pop(future)
                record(future.result())
                nxt = next(queue, None)
                if nxt is not None:
                    running[executor.submit(judge, nxt)] = nxt.id
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        executor.shutdown(wait=not interrupted, cancel_futures=True)


async def _judge_async(todo: Sequence[Dialogue], program: StagedModule, lm: dspy.BaseLM, adapter: dspy.Adapter,
                       judge_given_claims: bool, dialogues_at_once: int, concurrency: int,
                       record: Callable[[DialogueVerdict], None]) -> None:
    IN_FLIGHT.set(RequestSlots(concurrency))
    CALL_GUARD.set(request_slot)  # the judge holds a slot around each predictor call (see request_slot)
    queue = iter(todo)

    async def worker() -> None:
        for dialogue in queue:  # shared iterator: each dialogue is taken by exactly one worker
            PRIORITY.set(-len(dialogue.turns))  # the longest dialogues' requests first (their chains set wall time)
            with dspy.context(lm=lm, adapter=adapter):
                verdict = await (program.ajudge_claims(dialogue) if judge_given_claims else program.acall(dialogue))
            record(verdict)

    try:
        await asyncio.gather(*(worker() for _ in range(max(1, dialogues_at_once))))
    finally:
        await aclose_client(lm)


def _result(dialogues: Sequence[Dialogue], done: dict[str, DialogueVerdict], out_dir: Path | None, resumed: int,
            interrupted: bool) -> RunResult:
    verdicts = [done[d.id] for d in dialogues if d.id in done]
    summary = scoring.summarize(verdicts)
    if out_dir is not None and not interrupted:
        (out_dir / SUMMARY).write_text(json.dumps(summary, indent=2) + "\n")
    return RunResult(
        verdicts=verdicts,
        summary=summary,
        resumed=resumed,
        out_dir=out_dir,
        interrupted=interrupted,
        pending=[d.id for d in dialogues if d.id not in done],
    )

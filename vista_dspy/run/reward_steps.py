"""The pieces ``VistaReward``'s batch steps pass around: a job over dialogues in the form the runner's backends call
a judge (``Job``), the run a step asks its driver for (``Run``), a prompt's shared work (``PromptWork``), the key
completions of one prompt share, and why a verdict gives no reward."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..schema import Dialogue, DialogueVerdict
from .judge_metric import unjudged_parts
from .reward_records import Unjudged


@dataclass
class PromptWork:
    claims: dict[int, list[str]]  # unjudged assistant turn -> its claims
    calls: int  # LM calls it took
    error: Unjudged | None = None


class Job:
    """Work over dialogues in the form the runner's backends call a judge: ``job(d)`` on a thread, ``await
    job.acall(d)`` on asyncio. The result goes to ``record`` as it comes."""

    def __init__(self, run: Callable[[Dialogue], Any], arun: Callable[[Dialogue], Any]) -> None:
        self._run, self._arun = run, arun

    def __call__(self, dialogue: Dialogue) -> Any:
        return self._run(dialogue)

    async def acall(self, dialogue: Dialogue) -> Any:
        return await self._arun(dialogue)


Run = tuple[list[Dialogue], Job, Callable[[Any], None]]  # a run a batch's steps ask for: dialogues, job, record


def failure(verdict: DialogueVerdict) -> Unjudged | None:
    """Why a completion's verdict gives no reward: a part of it could not be judged (a failure is never a pass).
    The prompt's history fails first, since the rest was judged without its common ground."""
    if not verdict.turns:
        return Unjudged("no verdict on the completion")
    failed = verdict.errors + unjudged_parts(verdict)
    if failed:
        return Unjudged(failed[0])
    return Unjudged("the turn's label is unknown") if verdict.turns[-1].label == "unknown" else None


def prompt_key(dialogue: Dialogue) -> str:
    """What a completion's judging shares with the other completions of its prompt: the background and the turns
    before it."""
    said = [dialogue.background, [(t.role, t.text, t.grounding.kind if t.grounding else None)
                                  for t in dialogue.turns[:-1]]]
    return hashlib.sha256(json.dumps(said).encode()).hexdigest()[:24]

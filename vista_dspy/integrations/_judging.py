"""The one judging path under the platforms' scorers: a prompt, a response and its passages in, VISTA's verdict out
as a value, a rationale naming the unsafe claims and per-claim metadata (``ResponseVerdict``). It is a
``VistaReward`` judging one response per call, sync or async (its caches, prompt work and request bound shared
by every call; the response, its prompt and its passages made one dialogue by ``run.dialogues``, as the metric's
and the reward's are), and readers for the shapes platforms hand a scorer (texts, chat messages, dicts of fields)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..run.reward import VistaReward
from ..run.reward_records import RewardVerdict
from ..run.trainer_args import BACKGROUND_COLUMNS, PASSAGE_COLUMNS, completion_text, describe, prompt_history, texts
from ..schema import Category

UNSAFE = (Category.CONTRADICTED, Category.LACKING_EVIDENCE)
# Where a row's prompt and response are, when a platform hands a dict of fields (the first key present is read).
PROMPT_KEYS = ("messages", "history", "prompt", "question", "query", "input", "inputs", "request")
RESPONSE_KEYS = ("response", "output", "outputs", "answer", "completion", "content", "text")


@dataclass(frozen=True)
class ResponseVerdict:
    """VISTA's verdict on one response, as a platform shows it."""

    value: float | None  # the reward under the judge's shape (default: VISTA's score); None: not judged
    label: str  # faithful, hallucinated or unknown
    rationale: str  # one paragraph: the decision, and each unsafe claim with its category and reason
    claims: list[dict[str, Any]] = field(default_factory=list)  # per claim: reward_records.claim_record
    score: float | None = None  # VISTA's score (safe / judged claims), whatever the shape
    reason: str | None = None  # why it was not judged

    def metadata(self) -> dict[str, Any]:
        """The verdict's structured part: label, VISTA's score, every claim, and why it was not judged."""
        return {"label": self.label, "score": self.score, "claims": self.claims, "reason": self.reason}


class ResponseJudge:
    """VISTA on one response at a time: ``judge(prompt, response, passages)`` or ``await ajudge(...)``.

    Args:
        judge, **options: as ``VistaReward``'s (the judge's LM: "local", a model name, a litellm string or a
            ``dspy.LM``; ``program=``, ``system=``, ``concurrency=``, judging options).
        shape: the value's shape (``VistaReward``'s shapes); default "score", VISTA's score: the share of the
            response's claims that are safe (1.0 for a response without claims).
    """

    def __init__(self, judge: Any = "local", *, shape: str = "score", **options: Any) -> None:
        self.reward = VistaReward(judge, shape=shape, **options)

    def judge(self, prompt: Any, response: Any, passages: Sequence[str], background: Sequence[str] = ()
              ) -> ResponseVerdict:
        [verdict] = self.reward.judge_batch([prompt_of(prompt)], [response_text(response)],
                                            document=[list(passages)], background=[list(background)])
        return response_verdict(verdict)

    async def ajudge(self, prompt: Any, response: Any, passages: Sequence[str], background: Sequence[str] = ()
                     ) -> ResponseVerdict:
        [verdict] = await self.reward.ajudge_batch([prompt_of(prompt)], [response_text(response)],
                                                   document=[list(passages)], background=[list(background)])
        return response_verdict(verdict)

    def close(self) -> None:
        self.reward.close()


def response_verdict(verdict: RewardVerdict) -> ResponseVerdict:
    """A reward's verdict on one completion as a platform's verdict (value, rationale, per-claim metadata)."""
    record = verdict.to_dict()
    if verdict.reward is None:
        return ResponseVerdict(None, "unknown", f"VISTA could not judge this response: {verdict.reason}",
                               record["claims"], record["score"], verdict.reason)
    return ResponseVerdict(verdict.reward, verdict.label, rationale(verdict), record["claims"], record["score"])


def rationale(verdict: RewardVerdict) -> str:
    """The decision in a sentence, then each unsafe claim with its category and the judge's reason."""
    from ..run.judge_metric import claim_line

    claims = verdict.turn.claims if verdict.turn is not None else []
    if not claims:
        return "The response makes no claim: there is nothing in it to check against the passages."
    unsafe = [c for c in claims if c.category in UNSAFE]
    counts = ", ".join(f"{category.value} {n}" for category in Category
                       if (n := sum(c.category is category for c in claims)))
    if not unsafe:
        return (f"Faithful: none of its {len(claims)} claims is contradicted or lacks evidence in the passages or "
                f"the dialogue so far ({counts}).")
    head = (f"Hallucinated: {len(unsafe)} of its {len(claims)} claims "
            f"{'is' if len(unsafe) == 1 else 'are'} not supported by the passages or the dialogue so far ({counts}).")
    return "\n".join([head, *(f"- {claim_line(c)}" for c in unsafe)])


# ---- what platforms hand a scorer ------------------------------------------------------------------------------
def prompt_of(value: Any) -> str | list[dict[str, str]]:
    """The dialogue before the response: a text (``role: text`` lines, or one user message), chat messages, or a
    dict holding one of them under a ``PROMPT_KEYS`` name. None: no history."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        key = next((k for k in PROMPT_KEYS if k in value), None)
        if key is None:
            raise ValueError(f"no prompt in {describe(dict(value))}: expected a text, chat messages, or one of the "
                             f"keys {', '.join(PROMPT_KEYS)}")
        return prompt_of(value[key])
    if isinstance(value, Sequence):
        return prompt_history(list(value), 0)
    raise ValueError(f"expected the prompt as a text or chat messages, not {describe(value)}")


def response_text(value: Any) -> str:
    """The judged response's text: a text, a message, a list of messages (the assistant's), an OpenAI chat
    completion, or a dict holding one of them under a ``RESPONSE_KEYS`` name."""
    if isinstance(value, Mapping):
        if value.get("choices"):  # an OpenAI chat completion
            return response_text(value["choices"][0].get("message", {}))
        if "role" in value and "content" in value:
            return completion_text(dict(value), 0)
        key = next((k for k in RESPONSE_KEYS if k in value), None)
        if key is None:
            raise ValueError(f"no response in {describe(dict(value))}: expected a text, chat messages, or one of the "
                             f"keys {', '.join(RESPONSE_KEYS)}")
        return response_text(value[key])
    return completion_text(value, 0)


def row_context(*sources: Any, passage_key: str | None = None, background_key: str | None = None
                ) -> tuple[list[str], list[str]]:
    """(passages, background) from the first of ``sources`` (dicts: a sample's metadata, a row's inputs) holding
    them: ``passage_key`` or the first of ``PASSAGE_COLUMNS``; ``background_key`` or ``BACKGROUND_COLUMNS``. No
    passages anywhere raises ``ValueError`` naming the keys read (an empty list is allowed: judged against the
    dialogue alone)."""
    dicts = [s for s in sources if isinstance(s, Mapping)]
    passage_keys = (passage_key,) if passage_key else PASSAGE_COLUMNS
    background_keys = (background_key,) if background_key else BACKGROUND_COLUMNS
    found = next(((d, k) for d in dicts for k in passage_keys if k in d), None)
    if found is None:
        raise ValueError(f"no passages to judge the response against: expected one of the keys "
                         f"{', '.join(passage_keys)} (a text or a list of texts) in the row's metadata or inputs")
    background = next((d[k] for d in dicts for k in background_keys if k in d), None)
    return texts(found[0][found[1]]), texts(background)


__all__ = ["PROMPT_KEYS", "RESPONSE_KEYS", "ResponseJudge", "ResponseVerdict", "prompt_of", "rationale",
           "response_text", "response_verdict", "row_context"]

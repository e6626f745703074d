"""VISTA as a RAGAS multi-turn metric: ``ragas.evaluate(EvaluationDataset([MultiTurnSample(...)]),
metrics=[VistaMultiTurn("gpt-4o")])``, or ``await VistaMultiTurn(...).ascore(user_input=sample.user_input)``.

A ``MultiTurnSample``'s messages are read in order: each ``AIMessage`` is judged against its passages and the claims
of the turns before it. Its passages are its ``metadata["retrieved_contexts"]`` (RAGAS's name for retrieved
passages) when it has them, else the ``ToolMessage`` results since the last ``HumanMessage`` (what a retrieval tool
returned before the answer; the ``AIMessage`` that only calls the tool is not judged); with neither it is judged
against the conversation alone. Two RAGAS conventions:

- the legacy ``MultiTurnMetric`` one, which ``ragas.evaluate`` runs: a float per sample, VISTA's score (the share of
  the conversation's claims that are safe; 1.0 when no AI message makes a claim);
- the collections one (``ascore`` / ``score``): a ``MetricResult`` whose ``value`` is that score and whose
  ``reason`` names each unsafe claim with its message's index in ``user_input``, its category and the judge's
  reason; its ``traces["output"]`` holds the per-message verdicts.

A conversation none of whose claims could be judged raises ``ConversationNotJudged`` (``ragas.evaluate`` records
NaN for it, or raises with ``raise_exceptions=True``). Needs ``pip install 'vista-dspy[ragas]'``; RAGAS's usage
tracking is switched off by its ``RAGAS_DO_NOT_TRACK=true``.
"""

from __future__ import annotations

import asyncio
import typing as t

from ._conversation import ConversationVerdict, ajudge_conversation, conversation

try:
    from ragas.dataset_schema import MultiTurnSample
    from ragas.messages import AIMessage, HumanMessage, ToolMessage
    from ragas.metrics.base import MetricType, MultiTurnMetric
    from ragas.metrics.result import MetricResult
except ImportError as exc:
    raise ImportError("the RAGAS metric needs RAGAS: pip install 'vista-dspy[ragas]'") from exc

PASSAGES = "retrieved_contexts"  # an AIMessage's metadata key for its passages


class VistaMultiTurn(MultiTurnMetric):
    """VISTA's factuality of a whole conversation, as a RAGAS multi-turn metric.

    Args:
        judge: the judge's LM ("local", a model short name, a litellm string or a ``dspy.LM``), or a
            ``VistaMetric`` to share (one judge, one embedded server, one cache).
        program, system: as ``VistaMetric``'s (the VISTA program; "vista" or "evidence").
        name: the metric's column in ``ragas.evaluate``'s results.
    """

    # Not a generated dataclass __init__: RAGAS's own fields (_required_columns, name) would come first, and a judge
    # given by position would land in them.
    def __init__(self, judge: t.Any = "local", *, program: str | None = None, system: str = "vista",
                 name: str = "vista") -> None:
        from ..run.judge_metric import VistaMetric

        super().__init__(_required_columns={MetricType.MULTI_TURN: {"user_input"}}, name=name)
        self.judge = judge if isinstance(judge, VistaMetric) else VistaMetric(judge, program, system=system)
        self.program, self.system = program, system

    def init(self, run_config: t.Any) -> None:
        """RAGAS's per-run set-up: VISTA's judge needs none (it was built with the metric)."""

    async def _multi_turn_ascore(self, sample: MultiTurnSample, callbacks: t.Any = None) -> float:
        return (await self.judge_messages(sample.user_input)).score

    async def ascore(self, user_input: list[t.Any] | MultiTurnSample, **_: t.Any) -> MetricResult:
        """The collections convention: VISTA's score as ``value``, the unsafe claims as ``reason``."""
        messages = user_input.user_input if isinstance(user_input, MultiTurnSample) else user_input
        verdict = await self.judge_messages(messages)
        return MetricResult(value=verdict.score, reason=verdict.reason, traces={"output": verdict.turns})

    def score(self, user_input: list[t.Any] | MultiTurnSample, **kwargs: t.Any) -> MetricResult:
        """``ascore`` from code that runs no event loop."""
        return asyncio.run(self.ascore(user_input, **kwargs))

    async def judge_messages(self, messages: list[t.Any]) -> ConversationVerdict:
        """The conversation's verdict (``ConversationVerdict``): score, reason, a verdict per AI message."""
        turns, positions = _turns(messages)
        return await ajudge_conversation(self.judge, conversation(turns, where="multi-turn sample"), positions)

    def close(self) -> None:
        """Stop the embedded server the judge started (if any)."""
        self.judge.close()


def _turns(messages: list[t.Any]) -> tuple[list[tuple[str, str, list[str] | None]], list[int]]:
    """RAGAS messages as (role, text, passages) turns and each turn's message index: tool calls (an AI message with
    tool calls and no text) and tool results are not turns; the results are the passages of the AI message that
    answers after them (unless it names its own under ``metadata["retrieved_contexts"]``)."""
    turns: list[tuple[str, str, list[str] | None]] = []
    positions: list[int] = []
    tool_results: list[str] = []
    for index, message in enumerate(messages):
        if isinstance(message, HumanMessage):
            turns.append(("user", message.content, None))
            positions.append(index)
            tool_results = []
        elif isinstance(message, ToolMessage):
            tool_results.append(message.content)
        elif isinstance(message, AIMessage) and message.tool_calls and not message.content.strip():
            continue  # a call to a tool (a retrieval, say), not an answer: its results are the next answer's passages
        elif isinstance(message, AIMessage):
            given = (message.metadata or {}).get(PASSAGES)
            if given is not None and not (isinstance(given, list) and all(isinstance(p, str) for p in given)):
                raise ValueError(f"multi-turn sample, message {index}: metadata[{PASSAGES!r}] is "
                                 f"{type(given).__name__}, not a list of texts")
            passages = list(given) if given is not None else list(tool_results)
            turns.append(("assistant", message.content, passages))
            positions.append(index)
            tool_results = []
        else:
            raise ValueError(f"multi-turn sample, message {index}: {type(message).__name__} is not a RAGAS message")
    return turns, positions


__all__ = ["VistaMultiTurn"]

"""VISTA as a DeepEval conversational metric: ``evaluate(test_cases=[...], metrics=[VistaConversationalMetric(
"gpt-4o")])``, or ``assert_test(test_case, [metric])`` in a pytest test.

A ``ConversationalTestCase``'s turns are read in order: each ``assistant`` turn is judged against its own
``retrieval_context`` (texts, or DeepEval's retrieved-context records: their ``context``) and the claims of the turns
before it; a turn without retrieval context is judged against the conversation alone. The test case's ``context``
(facts true for the whole conversation) seeds VISTA's knowledge store. After ``measure`` the metric holds, as
DeepEval's metrics do: ``score`` (the share of the conversation's claims that are safe; 1.0 when no turn makes a
claim), ``reason`` (each unsafe claim with its turn, category and the judge's reason), ``success`` (the score
reaches ``threshold``) and ``score_breakdown`` (each assistant turn's score); and, beyond them, ``verdicts`` (per
assistant turn: its index, label, score and every claim with its category and reason) and ``label``. A conversation
none of whose claims could be judged raises ``ConversationNotJudged`` (DeepEval records it as the metric's error).
Needs ``pip install 'vista-dspy[deepeval]'``; DeepEval's own telemetry is switched off by its
``DEEPEVAL_TELEMETRY_OPT_OUT=1``.
"""

from __future__ import annotations

from typing import Any

from ._conversation import ConversationVerdict, ajudge_conversation, conversation, judge_conversation

try:
    from deepeval.metrics import BaseConversationalMetric
    from deepeval.test_case import ConversationalTestCase
except ImportError as exc:
    raise ImportError("the DeepEval metric needs DeepEval: pip install 'vista-dspy[deepeval]'") from exc


class VistaConversationalMetric(BaseConversationalMetric):
    """VISTA's factuality of a whole conversation, as a DeepEval conversational metric.

    Args:
        judge: the judge's LM ("local", a model short name, a litellm string or a ``dspy.LM``), or a
            ``VistaMetric`` to share (one judge, one embedded server, one cache across metrics and test cases).
            DeepEval copies a metric for each test case; the copies share this judge.
        threshold: ``success`` when the score reaches it (default 1.0: every claim safe); ``strict_mode`` makes it 1.0.
        program, system: as ``VistaMetric``'s (the VISTA program; "vista" or "evidence").
        async_mode: ``a_measure`` (DeepEval's default) judges off the event loop; False judges in ``measure``.
    """

    def __init__(self, judge: Any = "local", threshold: float = 1.0, *, program: str | None = None,
                 system: str = "vista", include_reason: bool = True, async_mode: bool = True,
                 strict_mode: bool = False, verbose_mode: bool = False) -> None:
        from ..run.judge_metric import VistaMetric

        self.judge = judge if isinstance(judge, VistaMetric) else VistaMetric(judge, program, system=system)
        self.program, self.system = program, system
        self.threshold = 1.0 if strict_mode else threshold
        self.include_reason, self.async_mode = include_reason, async_mode
        self.strict_mode, self.verbose_mode = strict_mode, verbose_mode
        self.evaluation_model = f"vista:{self.judge.model}"
        self.verdicts: list[dict[str, Any]] = []
        self.label: str | None = None

    def measure(self, test_case: ConversationalTestCase, *args: Any, **kwargs: Any) -> float:
        return self._keep(judge_conversation(self.judge, self._dialogue(test_case)))

    async def a_measure(self, test_case: ConversationalTestCase, *args: Any, **kwargs: Any) -> float:
        return self._keep(await ajudge_conversation(self.judge, self._dialogue(test_case)))

    def is_successful(self) -> bool:
        score, threshold = self.score, self.threshold
        self.success = self.error is None and score is not None and threshold is not None and score >= threshold
        return bool(self.success)

    @property
    def __name__(self) -> str:  # DeepEval names a metric's results by this
        return "VISTA"

    def close(self) -> None:
        """Stop the embedded server the judge started (if any)."""
        self.judge.close()

    def _dialogue(self, test_case: ConversationalTestCase) -> Any:
        name = getattr(test_case, "name", None) or "conversational test case"
        turns = [(turn.role, turn.content, _contexts(turn.retrieval_context)) for turn in test_case.turns]
        return conversation(turns, background=list(getattr(test_case, "context", None) or []), where=name)

    def _keep(self, verdict: ConversationVerdict) -> float:
        self.score, self.label, self.verdicts = verdict.score, verdict.label, verdict.turns
        self.reason = verdict.reason if self.include_reason else None
        self.score_breakdown = {f"turn {t['turn']}": t["score"] for t in verdict.turns}
        self.is_successful()
        if self.verbose_mode:
            self.verbose_logs = verdict.reason
        return verdict.score


def _contexts(given: Any) -> list[str]:
    """A turn's retrieval context as texts: DeepEval gives texts, or records holding the text in ``context``."""
    return [item if isinstance(item, str) else str(getattr(item, "context", item)) for item in given or []]


__all__ = ["VistaConversationalMetric"]

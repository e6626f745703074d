"""VISTA as a Langfuse evaluator: ``langfuse.run_experiment(name=..., data=..., task=..., evaluators=[
vista_evaluator("gpt-4o")])``.

The experiment runner calls an evaluator with keyword arguments ``input``, ``output``, ``expected_output`` and
``metadata``; this one judges ``output`` as an assistant turn after ``input`` (a text, chat messages, or a dict
holding them under ``messages``, ``question``, ``query``, ...), against the passages in the item's ``metadata``
(or ``input``) under ``document``, ``context``, ``retrieved_context`` or ``retrieved_contexts``. It returns
Langfuse's ``Evaluation``: the value (VISTA's score by default), a comment naming the unsafe claims, and metadata
with the label, VISTA's score and every claim with its category and reason. A response VISTA could not judge gets
an ``Evaluation`` named ``<name>_unjudged`` (categorical, value ``unjudged``, the reason in its comment) instead of
a number. It is an ``async`` function: the runner awaits it, the items' judging concurrent up to
``concurrency`` requests. Needs ``pip install 'vista-dspy[langfuse]'``.
"""

from __future__ import annotations

from typing import Any

from ._judging import ResponseJudge, row_context


def vista_evaluator(judge: Any = "local", *, name: str = "vista", passage_key: str | None = None,
                    background_key: str | None = None, **options: Any) -> Any:
    """An evaluator function for Langfuse's experiment runner (``run_experiment(evaluators=[...])``), named
    ``name``. ``judge`` and ``options``: as ``ResponseJudge``'s (a model name, a litellm string or a ``dspy.LM``;
    ``shape=``, ``program=``, ``system=``, ``concurrency=``). ``passage_key`` / ``background_key``: read these keys
    instead of the usual names.
    """
    try:
        from langfuse import Evaluation
    except ImportError as exc:
        raise ImportError("the Langfuse evaluator needs Langfuse: pip install 'vista-dspy[langfuse]'") from exc

    vista = ResponseJudge(judge, **options)

    async def evaluator(*, input: Any, output: Any, expected_output: Any = None,
                        metadata: dict[str, Any] | None = None, **kwargs: Any) -> Evaluation:
        passages, background = row_context(metadata, input, passage_key=passage_key, background_key=background_key)
        verdict = await vista.ajudge(input, output, passages, background)
        if verdict.value is None:
            return Evaluation(name=f"{name}_unjudged", value="unjudged", comment=verdict.rationale,
                              metadata=verdict.metadata(), data_type="CATEGORICAL")
        return Evaluation(name=name, value=verdict.value, comment=verdict.rationale, metadata=verdict.metadata(),
                          data_type="NUMERIC")

    evaluator.__name__ = evaluator.__qualname__ = name
    return evaluator


__all__ = ["vista_evaluator"]

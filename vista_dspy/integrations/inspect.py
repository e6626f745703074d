"""VISTA as an Inspect AI scorer: ``Task(dataset=..., solver=generate(), scorer=vista_scorer("gpt-4o"))``.

Each sample's output (``state.output.completion``) is judged as an assistant turn after the sample's input (a text
or chat messages), against the passages in the sample's metadata (``document``, ``context``, ``retrieved_context``
or ``retrieved_contexts``; background facts under ``background`` or ``persona``). The scorer returns a ``Score``:
the value (VISTA's score by default; ``mean`` and ``stderr`` over samples), the answer judged, an explanation naming
the unsafe claims, and metadata with the label, VISTA's score and every claim with its category and reason. A
response VISTA could not judge is ``Score.unscored`` (reason ``grader_failed``; metrics skip it). The judge runs
on Inspect's event loop, its requests bounded by ``concurrency`` across samples. Needs
``pip install 'vista-dspy[inspect]'``.
"""

from __future__ import annotations

from typing import Any

from ._judging import ResponseJudge, row_context


def vista_scorer(judge: Any = "local", *, name: str = "vista", passage_key: str | None = None,
                 background_key: str | None = None, **options: Any) -> Any:
    """An Inspect ``Scorer`` (registered with ``@scorer`` as ``name``, metrics ``mean`` and ``stderr``).

    ``judge`` and ``options``: as ``ResponseJudge``'s (a model name, a litellm string or a ``dspy.LM``;
    ``shape=``, ``program=``, ``system=``, ``concurrency=``). ``passage_key`` / ``background_key``: read these
    metadata keys instead of the usual names.
    """
    try:
        from inspect_ai.scorer import Score, Target, mean, scorer, stderr
        from inspect_ai.solver import TaskState
    except ImportError as exc:
        raise ImportError("the Inspect scorer needs Inspect AI: pip install 'vista-dspy[inspect]'") from exc

    vista = ResponseJudge(judge, **options)

    @scorer(metrics=[mean(), stderr()], name=name)
    def vista_faithfulness() -> Any:
        async def score(state: TaskState, target: Target) -> Score:
            passages, background = row_context(state.metadata, passage_key=passage_key,
                                               background_key=background_key)
            answer = state.output.completion
            verdict = await vista.ajudge(_messages(state.input), answer, passages, background)
            if verdict.value is None:
                return Score.unscored(reason="grader_failed", answer=answer, explanation=verdict.rationale,
                                      metadata=verdict.metadata())
            return Score(value=verdict.value, answer=answer, explanation=verdict.rationale,
                         metadata=verdict.metadata())

        return score

    return vista_faithfulness()


def _messages(given: Any) -> Any:
    """A sample's input as VISTA reads a prompt: a text as it is, Inspect's chat messages as role/content dicts."""
    if isinstance(given, str):
        return given
    return [{"role": message.role, "content": message.text} for message in given]


__all__ = ["vista_scorer"]

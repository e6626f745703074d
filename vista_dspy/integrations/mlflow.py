"""VISTA as an MLflow scorer: ``mlflow.genai.evaluate(data=..., scorers=[vista_scorer("gpt-4o")])``.

Each row's response (``outputs``) is judged against its passages, read from ``inputs`` or ``expectations`` under
``context``, ``document``, ``retrieved_context`` or ``retrieved_contexts``; the dialogue before it is ``inputs``
(a question, chat messages, or a dict holding them under ``messages``, ``question``, ``query``, ...). The scorer
returns a ``Feedback``: the value (VISTA's score by default), a rationale naming the unsafe claims, and metadata
``vista.label``, ``vista.score`` and ``vista.claims`` (every claim with its category and reason, as JSON: MLflow
keeps assessment metadata as strings). A response VISTA could not judge gets no value and an error saying why.
Needs ``pip install 'vista-dspy[mlflow]'``.
"""

from __future__ import annotations

import json
from typing import Any

from ._judging import ResponseJudge, row_context


def vista_scorer(judge: Any = "local", *, name: str = "vista", passage_key: str | None = None,
                 background_key: str | None = None, **options: Any) -> Any:
    """A scorer for ``mlflow.genai.evaluate`` (made with ``mlflow.genai.scorers.scorer``), named ``name``.

    ``judge`` and ``options``: as ``ResponseJudge``'s (a model name, a litellm string or a ``dspy.LM``;
    ``shape=``, ``program=``, ``system=``, ``concurrency=``). ``passage_key`` / ``background_key``: read these
    keys instead of the usual names.
    """
    try:
        from mlflow.entities import AssessmentSource, Feedback
        from mlflow.genai.scorers import scorer
    except ImportError as exc:
        raise ImportError("the MLflow scorer needs MLflow: pip install 'vista-dspy[mlflow]'") from exc

    vista = ResponseJudge(judge, **options)
    model = judge if isinstance(judge, str) else getattr(judge, "model", type(judge).__name__)
    source = AssessmentSource(source_type="LLM_JUDGE", source_id=f"vista:{model}")

    def score(inputs: Any = None, outputs: Any = None, expectations: Any = None) -> Feedback:
        passages, background = row_context(inputs, expectations, passage_key=passage_key,
                                           background_key=background_key)
        verdict = vista.judge(inputs, outputs, passages, background)
        metadata = {"vista.label": verdict.label, "vista.score": json.dumps(verdict.score),
                    "vista.claims": json.dumps(verdict.claims, ensure_ascii=False)}
        if verdict.value is None:
            return Feedback(name=name, error=verdict.rationale, rationale=verdict.rationale, source=source,
                            metadata=metadata)
        return Feedback(name=name, value=verdict.value, rationale=verdict.rationale, source=source,
                        metadata=metadata)

    return scorer(score, name=name)


__all__ = ["vista_scorer"]

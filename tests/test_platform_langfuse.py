"""VISTA as a Langfuse evaluator (``vista_dspy.integrations.langfuse``): called as Langfuse's experiment runner
calls an evaluator (its own ``_run_evaluator``, keyword arguments only), it returns Langfuse's ``Evaluation``. What
needs a Langfuse server (the scores uploaded and shown on a dataset run) is not tested here. CI installs the
``[langfuse]`` extra, so this runs there; without it it is skipped with the reason."""

import asyncio

import pytest

pytest.importorskip("langfuse", reason="the [langfuse] extra is not installed")

from langfuse import Evaluation
from langfuse.experiment import _run_evaluator

from vista_dspy.integrations.langfuse import vista_evaluator
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."


def run(evaluator, **item):
    return asyncio.run(_run_evaluator(evaluator, _raise_on_error=True, expected_output=None, **item))


def test_the_runner_gets_langfuse_s_evaluation_with_value_comment_and_claims():
    with FakeOpenAIServer() as server:
        judge = ModelConfig(model="hosted_vllm/judge", api_base=server.url, num_retries=0, cache=False).build()
        evaluator = vista_evaluator(judge, name="faithfulness")
        [faithful] = run(evaluator, input={"question": "Tell me about Lisbon."}, metadata={"document": DOC},
                         output="Lisbon is the capital of Portugal. Lisbon has seven hills.")
        [hallucinated] = run(evaluator, input=[{"role": "user", "content": "How many hills?"}],
                             metadata={"retrieved_contexts": [DOC]},
                             output={"role": "assistant", "content": "Lisbon has ten hills."})
        [unjudged] = run(evaluator, input="Hi", metadata={"document": DOC}, output="Lisbon has <<BAD-VERIFY>> hills.")
    assert evaluator.__name__ == "faithfulness"
    assert all(isinstance(e, Evaluation) for e in (faithful, hallucinated, unjudged))
    assert (faithful.name, faithful.value, faithful.data_type) == ("faithfulness", 1.0, "NUMERIC")
    assert (hallucinated.value, hallucinated.metadata["label"]) == (0.0, "hallucinated")
    assert 'LACKING EVIDENCE: "Lisbon has ten hills."' in hallucinated.comment
    assert hallucinated.metadata["claims"] == [{"claim": "Lisbon has ten hills.", "category": "LACKING EVIDENCE",
                                                "explanation": hallucinated.metadata["claims"][0]["explanation"],
                                                "spans": [[0, 20]]}]  # the whole response said it
    assert (unjudged.name, unjudged.value, unjudged.data_type) == ("faithfulness_unjudged", "unjudged", "CATEGORICAL")
    assert "could not be judged" in unjudged.comment


def test_an_item_without_passages_is_refused_naming_the_keys_read():
    evaluator = vista_evaluator("hosted_vllm/judge")
    with pytest.raises(ValueError, match="expected one of the keys retrieved_context"):
        run(evaluator, input="Hi", output="Lisbon has seven hills.", metadata={})

"""VISTA as a RAGAS multi-turn metric (``vista_dspy.integrations.ragas``) under the real ``ragas``: its ``evaluate``
over an ``EvaluationDataset`` of ``MultiTurnSample``s (the quick-start dialogue and a faithful one), and the
collections convention (``ascore`` -> ``MetricResult`` with the unsafe claims as its reason), the fake OpenAI server
as VISTA's judge, RAGAS's usage tracking off and every socket held to this machine. CI installs the ``[ragas]``
extra; without it this is skipped with the reason."""

import asyncio
import json
import os
from pathlib import Path

import pytest

os.environ["RAGAS_DO_NOT_TRACK"] = "true"  # before RAGAS is imported: it reads it once
os.environ.setdefault("DO_NOT_TRACK", "1")

pytest.importorskip("ragas", reason="the [ragas] extra is not installed")

from helpers import LoopbackOnly
from ragas import EvaluationDataset, evaluate
from ragas.dataset_schema import MultiTurnSample
from ragas.messages import AIMessage, HumanMessage, ToolCall, ToolMessage
from ragas.metrics.result import MetricResult

from vista_dspy.integrations.ragas import VistaMultiTurn
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig
from vista_dspy.run.judge_metric import VistaMetric

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.json"
DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."


def quickstart_sample() -> MultiTurnSample:
    """The quick-start dialogue: its first answer's passage as a retrieval tool's result (messages 1-2, the answer
    message 3), its second answer's in the AI message's own metadata (message 5)."""
    [(ask1, answer1, ask2, answer2)] = json.loads(QUICKSTART.read_text())
    return MultiTurnSample(user_input=[
        HumanMessage(content=ask1["utterance"]),
        AIMessage(content="", tool_calls=[ToolCall(name="search", args={"query": "northern lights"})]),
        ToolMessage(content=answer1["retrieved_document"]),
        AIMessage(content=answer1["utterance"]),
        HumanMessage(content=ask2["utterance"]),
        AIMessage(content=answer2["utterance"], metadata={"retrieved_contexts": [answer2["retrieved_document"]]})])


def lisbon_sample() -> MultiTurnSample:
    return MultiTurnSample(user_input=[
        HumanMessage(content="Tell me about Lisbon."),
        AIMessage(content="Lisbon is the capital of Portugal. Lisbon has seven hills.",
                  metadata={"retrieved_contexts": [DOC]})])


@pytest.fixture
def judge(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    guard = LoopbackOnly(monkeypatch)
    with FakeOpenAIServer(logprobs=True) as server:
        lm = ModelConfig(model="hosted_vllm/judge", api_base=server.url, num_retries=0, cache=False).build()
        with VistaMetric(lm, "local") as metric:
            yield metric
    assert guard.refused == []


# Under the "local" program (as in test_platform_deepeval): message 3 holds an opinion (safe) and a claim LACKING
# EVIDENCE by its cues; message 5 invents 200 days of snow and minus 30 degrees. 1 safe claim of 3.
QUICKSTART_SCORE = 1 / 3


def test_ragas_evaluate_gives_each_sample_vista_s_score(judge):
    result = evaluate(dataset=EvaluationDataset(samples=[quickstart_sample(), lisbon_sample()]),
                      metrics=[VistaMultiTurn(judge)], show_progress=False, raise_exceptions=True)
    assert [row["vista"] for row in result.scores] == [pytest.approx(QUICKSTART_SCORE), 1.0]


def test_ascore_gives_the_score_with_the_unsafe_claims_as_the_reason(judge):
    metric = VistaMultiTurn(judge, name="faithfulness")
    result = asyncio.run(metric.ascore(user_input=quickstart_sample().user_input))
    assert isinstance(result, MetricResult)
    assert result.value == pytest.approx(QUICKSTART_SCORE)
    assert result.reason.startswith("Hallucinated: 2 of the 3 claims in its 2 assistant turn(s)")
    assert '- turn 5: LACKING EVIDENCE: "Tromsø is milder' in result.reason
    [invented] = [line for line in result.reason.splitlines() if line.startswith("- turn 5:")]
    assert "200" in invented and "minus 30" in invented  # the judge's reason names the invented figures
    assert '- turn 3: LACKING EVIDENCE: "It sits inside the auroral oval' in result.reason
    assert [(t["turn"], t["score"]) for t in result.traces["output"]] == [(3, 0.5), (5, 0.0)]
    faithful = metric.score(lisbon_sample())
    assert (faithful.value, faithful.reason.split(":")[0]) == (1.0, "Faithful")


def test_an_ai_message_s_passages_that_are_not_texts_are_refused_naming_the_message(judge):
    sample = [HumanMessage(content="Hi"), AIMessage(content="Lisbon has seven hills.",
                                                    metadata={"retrieved_contexts": DOC})]
    with pytest.raises(ValueError, match=r"message 1: metadata\['retrieved_contexts'\] is str, not a list of texts"):
        VistaMultiTurn(judge).score(sample)

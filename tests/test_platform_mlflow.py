"""VISTA as an MLflow scorer (``vista_dspy.integrations.mlflow``) under the real ``mlflow.genai.evaluate``, the fake
OpenAI server as VISTA's judge, a tracking store in a temporary SQLite file (no network). CI installs the
``[mlflow]`` extra, so this runs there; without it (a bare checkout) it is skipped with the reason."""

import json

import pytest

mlflow = pytest.importorskip("mlflow", reason="the [mlflow] extra is not installed")

from vista_dspy.integrations.mlflow import vista_scorer  # noqa: E402
from vista_dspy.lm.fake import FakeOpenAIServer  # noqa: E402
from vista_dspy.lm.models import ModelConfig  # noqa: E402

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."
ROWS = [("Tell me about Lisbon.", "Lisbon is the capital of Portugal. Lisbon has seven hills."),
        ("How many hills?", "Lisbon is the capital of Portugal. Lisbon has ten hills."),
        ("Is it nice?", "I don't know.")]


@pytest.fixture
def tracking(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("DO_NOT_TRACK", "true")
    monkeypatch.chdir(tmp_path)  # MLflow writes trace artifacts under ./mlruns
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_experiment("vista")
    yield
    mlflow.set_tracking_uri(None)


def test_mlflow_genai_evaluate_gives_each_row_vista_s_value_rationale_and_claims(tracking):
    data = [{"inputs": {"question": question, "context": DOC}, "outputs": answer} for question, answer in ROWS]
    with FakeOpenAIServer() as server:
        judge = ModelConfig(model="hosted_vllm/judge", api_base=server.url, num_retries=0, cache=False).build()
        result = mlflow.genai.evaluate(data=data, scorers=[vista_scorer(judge)])
    rows = {row["response"]: row for row in result.result_df.to_dict("records")}
    faithful, hallucinated, refusal = (rows[answer] for _, answer in ROWS)
    # VISTA's score per row: 2 of 2 claims safe; 1 of 2 (ten hills: LACKING EVIDENCE); an abstention is safe.
    assert [r["vista/value"] for r in (faithful, hallucinated, refusal)] == [1.0, 0.5, 1.0]
    assert result.metrics["vista/mean"] == pytest.approx(2.5 / 3)
    assert hallucinated["vista/rationale"].startswith("Hallucinated: 1 of its 2 claims is not supported")
    assert 'LACKING EVIDENCE: "Lisbon has ten hills."' in hallucinated["vista/rationale"]
    assert faithful["vista/rationale"].startswith("Faithful: none of its 2 claims")
    [assessment] = [a for a in hallucinated["assessments"] if a["assessment_name"] == "vista"]
    claims = json.loads(assessment["metadata"]["vista.claims"])
    assert [(c["claim"], c["category"]) for c in claims] == [("Lisbon is the capital of Portugal.", "VERIFIED"),
                                                           ("Lisbon has ten hills.", "LACKING EVIDENCE")]
    assert assessment["metadata"]["vista.label"] == "hallucinated"
    assert assessment["source"] == {"source_type": "LLM_JUDGE", "source_id": "vista:hosted_vllm/judge"}


def test_a_row_vista_cannot_judge_gets_an_error_saying_why_not_a_value(tracking):
    data = [{"inputs": {"question": "Hi", "context": DOC}, "outputs": "Lisbon has <<BAD-VERIFY>> hills."}]
    with FakeOpenAIServer() as server:
        judge = ModelConfig(model="hosted_vllm/judge", api_base=server.url, num_retries=0, cache=False).build()
        result = mlflow.genai.evaluate(data=data, scorers=[vista_scorer(judge, name="faithfulness")])
    [row] = result.result_df.to_dict("records")
    [assessment] = [a for a in row["assessments"] if a["assessment_name"] == "faithfulness"]
    assert assessment["feedback"].get("value") is None
    assert "could not be judged" in assessment["feedback"]["error"]["error_message"]


def test_a_row_without_passages_is_refused_naming_the_keys_read():
    scorer = vista_scorer("hosted_vllm/judge")
    with pytest.raises(ValueError, match="expected one of the keys retrieved_context, retrieved_contexts, context"):
        scorer(inputs={"question": "Hi"}, outputs="Lisbon has seven hills.")

"""VISTA as an Inspect AI scorer (``vista_dspy.integrations.inspect``) in a real Inspect ``eval`` of a tiny task: the
``mockllm`` model answers, the fake OpenAI server is VISTA's judge, the passages are in each sample's metadata. CI
installs the ``[inspect]`` extra, so this runs there; without it it is skipped with the reason."""

import pytest

pytest.importorskip("inspect_ai", reason="the [inspect] extra is not installed")

from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.solver import generate

from vista_dspy.integrations.inspect import vista_scorer
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."
# The model's answer -> VISTA's score (safe claims / claims) and label.
ANSWERS = {"Lisbon is the capital of Portugal. Lisbon has seven hills.": (1.0, "faithful"),
           "Lisbon is the capital of Portugal. Lisbon has ten hills.": (0.5, "hallucinated"),
           "Lisbon has <<BAD-VERIFY>> hills.": (None, "unknown")}


def test_an_inspect_eval_records_a_vista_score_per_sample(tmp_path):
    answers = list(ANSWERS)
    outputs = [ModelOutput.from_content(model="mockllm/model", content=answer) for answer in answers]
    for output in outputs:  # given usage, mockllm counts no tokens (its tiktoken encoding is a download)
        output.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
    model = get_model("mockllm/model", custom_outputs=outputs)
    samples = [Sample(id=i, input="Tell me about Lisbon.", metadata={"document": DOC}) for i in range(len(answers))]
    with FakeOpenAIServer() as server:
        judge = ModelConfig(model="hosted_vllm/judge", api_base=server.url, num_retries=0, cache=False).build()
        task = Task(dataset=samples, solver=generate(), scorer=vista_scorer(judge))
        [log] = inspect_eval(task, model=model, log_dir=str(tmp_path), display="none", max_samples=1)
    assert log.status == "success", log.error
    scores = [sample.scores["vista"] for sample in log.samples]
    assert sorted(score.answer for score in scores) == sorted(answers)
    for score in scores:
        value, label = ANSWERS[score.answer]
        assert score.metadata["label"] == label
        if value is None:  # not judged: unscored (NaN, skipped by the metrics), the reason in the explanation
            assert score.value != score.value and "could not be judged" in score.explanation
        else:
            assert score.value == value
    hallucinated = next(s for s in scores if s.metadata["label"] == "hallucinated")
    assert 'LACKING EVIDENCE: "Lisbon has ten hills."' in hallucinated.explanation
    assert [c["category"] for c in hallucinated.metadata["claims"]] == ["VERIFIED", "LACKING EVIDENCE"]
    [metrics] = [s.metrics for s in log.results.scores if s.name == "vista"]
    assert metrics["mean"].value == pytest.approx(0.75)  # the unjudged sample is left out, not counted as 0

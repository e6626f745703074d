"""VISTA as a DeepEval conversational metric (``vista_dspy.integrations.deepeval``) under the real ``deepeval``:
its ``evaluate`` and ``assert_test`` on the quick-start dialogue as a ``ConversationalTestCase``, the fake OpenAI
server as VISTA's judge (the shipped "local" program, which decides with its evidence cues and the judge's label
probabilities), DeepEval's telemetry, update check and .env reading off, and every socket held to this machine.
CI installs the ``[deepeval]`` extra in a venv of its own (.ci/run: DeepEval's pins cannot resolve beside the
lock's datasets); without it this is skipped with the reason."""

import json
import os
from pathlib import Path

import pytest

# Before DeepEval is imported: it reads its settings (and a .env file) at import.
os.environ["DEEPEVAL_TELEMETRY_OPT_OUT"] = "1"
os.environ["DEEPEVAL_UPDATE_WARNING_OPT_IN"] = "0"
os.environ["DEEPEVAL_DISABLE_DOTENV"] = "1"
os.environ.setdefault("DO_NOT_TRACK", "1")

pytest.importorskip("deepeval", reason="the [deepeval] extra is not installed")

from deepeval import assert_test, evaluate
from deepeval.test_case import ConversationalTestCase, Turn
from helpers import LoopbackOnly

from vista_dspy.integrations.deepeval import VistaConversationalMetric
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig
from vista_dspy.run.judge_metric import VistaMetric

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.json"
DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."


def quickstart_case() -> ConversationalTestCase:
    [dialogue] = json.loads(QUICKSTART.read_text())
    return ConversationalTestCase(name="quickstart", turns=[
        Turn(role=t["role"], content=t["utterance"],
             retrieval_context=[t["retrieved_document"]] if "retrieved_document" in t else None) for t in dialogue])


def lisbon_case() -> ConversationalTestCase:
    # Each assistant sentence is the passage's own: VERIFIED, whatever the program.
    return ConversationalTestCase(name="lisbon", turns=[
        Turn(role="user", content="Tell me about Lisbon."),
        Turn(role="assistant", content="Lisbon is the capital of Portugal.", retrieval_context=[DOC]),
        Turn(role="user", content="Anything about its hills?"),
        Turn(role="assistant", content="Lisbon has seven hills.", retrieval_context=[DOC])])


@pytest.fixture
def judge(tmp_path, monkeypatch):
    """A shared VISTA judge on the fake server; DeepEval's home and results under tmp_path; no outside socket."""
    monkeypatch.chdir(tmp_path)  # DeepEval writes .deepeval/ into the working folder
    monkeypatch.setenv("DEEPEVAL_HOME", str(tmp_path / "deepeval-home"))
    guard = LoopbackOnly(monkeypatch)
    with FakeOpenAIServer(logprobs=True) as server:
        lm = ModelConfig(model="hosted_vllm/judge", api_base=server.url, num_retries=0, cache=False).build()
        with VistaMetric(lm, "local") as metric:
            yield metric
    assert guard.refused == []


# The quick-start dialogue under the "local" program: turn 1 has 2 claims, an opinion (OUT-OF-SCOPE: safe) and one
# LACKING EVIDENCE by its cues (the passage says "lies within", "frequently"); turn 3's one claim invents 200 days of
# snow and minus 30 degrees. 1 safe claim of 3.
QUICKSTART_SCORE = 1 / 3
QUICKSTART_TURNS = {"turn 1": 0.5, "turn 3": 0.0}


def test_measure_gives_score_reason_and_a_verdict_per_assistant_turn(judge):
    metric = VistaConversationalMetric(judge)
    assert metric.measure(quickstart_case()) == pytest.approx(QUICKSTART_SCORE)
    assert metric.score == pytest.approx(QUICKSTART_SCORE)
    assert metric.score_breakdown == QUICKSTART_TURNS
    assert metric.reason.startswith("Hallucinated: 2 of the 3 claims in its 2 assistant turn(s) are not supported")
    assert '- turn 3: LACKING EVIDENCE: "Tromsø is milder' in metric.reason
    [invented] = [line for line in metric.reason.splitlines() if line.startswith("- turn 3:")]
    assert "200" in invented and "minus 30" in invented  # the judge's reason names the invented figures
    assert (metric.label, metric.is_successful(), metric.success) == ("hallucinated", False, False)
    assert [(v["turn"], v["label"], [c["category"] for c in v["claims"]]) for v in metric.verdicts] == [
        (1, "hallucinated", ["OUT-OF-SCOPE", "LACKING EVIDENCE"]), (3, "hallucinated", ["LACKING EVIDENCE"])]


def test_a_lower_threshold_passes_the_same_conversation(judge):
    metric = VistaConversationalMetric(judge, threshold=0.3)
    metric.measure(quickstart_case())
    assert (metric.score, metric.is_successful()) == (pytest.approx(QUICKSTART_SCORE), True)


def test_deepeval_evaluate_records_vista_s_score_reason_and_success_per_test_case(judge):
    result = evaluate(test_cases=[quickstart_case(), lisbon_case()], metrics=[VistaConversationalMetric(judge)])
    by_name = {test.name: test for test in result.test_results}
    [quick] = by_name["quickstart"].metrics_data
    [lisbon] = by_name["lisbon"].metrics_data
    assert (quick.name, quick.score, quick.success) == ("VISTA", pytest.approx(QUICKSTART_SCORE), False)
    assert quick.reason.startswith("Hallucinated: 2 of the 3 claims")
    assert (lisbon.score, lisbon.success) == (1.0, True)
    assert lisbon.reason.startswith("Faithful: none of the 2 claims in its 2 assistant turn(s)")
    assert quick.evaluation_model == "vista:hosted_vllm/judge"


def test_assert_test_passes_a_faithful_conversation_and_fails_the_quickstart_naming_its_claims(judge):
    assert_test(lisbon_case(), [VistaConversationalMetric(judge)])
    with pytest.raises(AssertionError) as failed:
        assert_test(quickstart_case(), [VistaConversationalMetric(judge)])
    assert "VISTA" in str(failed.value) and "200 days of snow" in str(failed.value)


def test_a_conversation_without_an_assistant_turn_is_refused_naming_it(judge):
    case = ConversationalTestCase(name="greeting", turns=[Turn(role="user", content="Hello?")])
    with pytest.raises(ValueError, match="greeting has no assistant turn"):
        VistaConversationalMetric(judge).measure(case)

"""The tier with no LM (the evidence cues over the turn's sentences: ``--system evidence --units sentences``) builds its
judge before any model is set up, and never looks for the embedded model's weights: without the ``[local]`` extra it
judges, in the CLI, ``VistaMetric`` and ``VistaReward``. Here the weight lookup always fails as it does without the
extra (``ModelNotFound``), so each test fails if weights are resolved; the tiers that do ask an LM show the lookup
failing."""

import json
from pathlib import Path

import dspy
import pytest
from typer.testing import CliRunner

from vista_dspy import VistaMetric, VistaReward
from vista_dspy.cli import app
from vista_dspy.lm.weights import ModelNotFound
from vista_dspy.run.runner import RUN, VERDICTS, read_verdicts

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.json"
DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."
NO_LM = {"system": "evidence", "units": "sentences"}


@pytest.fixture(autouse=True)
def no_weights(monkeypatch, tmp_path):
    """A machine without the [local] extra: every lookup of the embedded model's weights fails."""
    def absent(*args, **kwargs):
        raise ModelNotFound("no local model found (this test's machine has no [local] extra)")

    monkeypatch.setattr("vista_dspy.lm.weights.resolve_gguf", absent)
    monkeypatch.setattr("vista_dspy.lm.server.resolve_gguf", absent)
    monkeypatch.chdir(tmp_path)


def test_vista_evaluate_judges_the_quick_start_file_with_no_lm_and_no_weights(tmp_path):
    result = CliRunner().invoke(app, ["evaluate", str(QUICKSTART), "--system", "evidence", "--units", "sentences",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert "with no LM" in result.output and "embedded local model" not in result.output
    [verdict] = read_verdicts(tmp_path / "out" / VERDICTS)
    assert verdict.usage.total.calls == 0 and len(verdict.turns) == 2
    assert all(c.decided_by == "evidence" for t in verdict.turns for c in t.claims)
    assert json.loads((tmp_path / "out" / RUN).read_text())["model"] == "none"


def test_vista_evaluate_with_an_lm_tier_looks_for_the_weights_and_exits_2_without_them(tmp_path):
    result = CliRunner().invoke(app, ["evaluate", str(QUICKSTART), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "no local model found" in result.output


def test_the_metric_judges_with_no_lm_and_no_weights():
    metric = VistaMetric("local", **NO_LM)
    example = dspy.Example(history="user: Tell me about Lisbon.", document=DOC).with_inputs("history", "document")
    judged = metric(example, dspy.Prediction(response="Lisbon is the capital of Portugal. Lisbon has ten hills."))
    assert metric.lm is None and metric.usage.total.calls == 0
    assert judged.score == 0.5  # the second sentence: none of "ten" is in the reference
    with pytest.raises(ModelNotFound):
        VistaMetric("local")  # the shipped program asks Verify and Categorize: the weights are looked for


def test_the_reward_judges_with_no_lm_and_no_weights():
    reward = VistaReward("local", shape="score", **NO_LM)
    rewards = reward(["user: Tell me about Lisbon."] * 2,
                     ["Lisbon is the capital of Portugal.", "Lisbon is the capital of Portugal. Lisbon has ten hills."],
                     document=[DOC, DOC])
    assert rewards == [1.0, 0.5] and reward.usage.total.calls == 0
    with pytest.raises(ModelNotFound):
        VistaReward("local")

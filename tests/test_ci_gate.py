"""VISTA as a CI gate: `vista evaluate --fail-under / --fail-under-faithful` and the pytest helper assert_faithful,
on data whose verdicts the fake judge makes known."""

import json

import pytest
from typer.testing import CliRunner

from fakes import FakeOpenAIServer
from vista_dspy.cli import app
from vista_dspy.lm.models import ModelConfig
from vista_dspy.run.judge_metric import VistaMetric
from vista_dspy.run.testing import assert_faithful, shortfalls

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."
# Two judged turns: two VERIFIED claims (faithful), then one VERIFIED and one LACKING EVIDENCE (hallucinated):
# VISTA score 3/4 = 0.75, faithful turns 1/2.
MESSAGES = [
    {"role": "user", "content": "Tell me about Lisbon."},
    {"role": "assistant", "content": "Lisbon is the capital of Portugal. Lisbon has seven hills.", "context": DOC},
    {"role": "user", "content": "And bridges?"},
    {"role": "assistant", "content": "Lisbon has seven hills. Lisbon has ten bridges.", "context": DOC},
]


def lm(server):
    return ModelConfig(model="hosted_vllm/judge", api_base=server.url, num_retries=0, cache=False).build()


@pytest.mark.parametrize("flags, code, line", [
    (["--fail-under", "0.8"], 1, "failed: VISTA score 0.750 is below 0.8 (--fail-under)"),
    (["--fail-under", "0.75"], 0, None),
    (["--fail-under-faithful", "0.6"], 1, "failed: faithful turns 1/2 (0.500) are below 0.6 (--fail-under-faithful)"),
    (["--fail-under-faithful", "0.5", "--fail-under", "0.7"], 0, None),
    (["--fail-under", "0.9", "--fail-under-faithful", "0.9"], 1,
     "failed: VISTA score 0.750 is below 0.9 (--fail-under); faithful turns 1/2 (0.500) are below 0.9 "
     "(--fail-under-faithful)"),
])
def test_fail_under_exits_1_below_the_threshold_and_0_at_or_above_it(tmp_path, flags, code, line):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"messages": MESSAGES}) + "\n")
    with FakeOpenAIServer() as server:
        result = CliRunner().invoke(app, ["evaluate", str(path), "--model", "hosted_vllm/fake", "--api-base",
                                          server.url, "--out", str(tmp_path / "out"), *flags])
    assert result.exit_code == code, result.output
    failed = [text for text in result.output.splitlines() if text.startswith("failed:")]
    assert failed == ([line] if line else [])


def test_a_threshold_outside_0_to_1_is_a_usage_error(tmp_path):
    result = CliRunner().invoke(app, ["evaluate", str(tmp_path / "x.jsonl"), "--model", "openai/x",
                                      "--fail-under", "80"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_no_judged_claim_misses_a_score_threshold():
    summary = {"vista_score": None, "judged_turns": 0, "turn_labels": {"faithful": 0}}
    assert shortfalls(summary, min_score=0.0, min_faithful=0.0) == {
        "min_score": "VISTA score n/a is below 0", "min_faithful": "faithful turns 0/0 are below 0"}


def test_assert_faithful_names_the_unsupported_claim_with_its_category_and_reason():
    with FakeOpenAIServer() as server:
        judge = VistaMetric(lm(server))
        with pytest.raises(AssertionError) as failure:
            assert_faithful(MESSAGES, judge=judge)
        verdict = assert_faithful(MESSAGES[:2], judge=judge)  # the first answer alone: every claim VERIFIED
        assert_faithful({"messages": MESSAGES}, judge=judge, min_score=0.75, min_faithful=0.5)
    assert str(failure.value).splitlines() == [
        "VISTA: dialogue <dialogue>-0: VISTA score 0.750 is below 1",
        '  turn 3: LACKING EVIDENCE: "Lisbon has ten bridges." -- rule for LACKING EVIDENCE']
    assert verdict.score == 1.0 and [t.label for t in verdict.turns] == ["faithful"]


def test_assert_faithful_fails_on_a_claim_it_could_not_judge():
    with FakeOpenAIServer() as server:
        judge = VistaMetric(lm(server), parse_retries=0)
        unjudgeable = [MESSAGES[0], {**MESSAGES[1], "content": "Lisbon has seven hills. <<BAD-VERIFY>> It is old."}]
        with pytest.raises(AssertionError, match=r"VISTA: dialogue .*: 1 claims or turns not judged\n"
                                                 r"  not judged: ERROR: \"<<BAD-VERIFY>> It is old.\" -- "):
            assert_faithful(unjudgeable, judge=judge)

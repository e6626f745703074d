"""VISTA as a CI gate: `vista evaluate --fail-under / --fail-under-faithful` and the pytest helper assert_faithful,
on data whose verdicts the fake judge makes known."""

import json

import pytest
from typer.testing import CliRunner

from vista_dspy.cli import app
from vista_dspy.lm.fake import FakeOpenAIServer
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


def test_every_kind_of_failure_counts_against_max_unjudged_once():
    summary = {"errors": {"claims": 2, "turns_failed": 1, "contradiction_checks": 1, "dialogue_errors": 1,
                          "turns_missing_background": 3}}
    assert shortfalls(summary, max_unjudged=4) == {"max_unjudged": (
        "5 not judged (2 ERROR claims, 1 turns without claims (failed or empty decomposition), 1 failed "
        "contradiction checks, 1 failed background turns) is more than 4 allowed")}
    assert shortfalls(summary, max_unjudged=5) == {}


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
        with pytest.raises(AssertionError, match=r"VISTA: dialogue .*: 1 not judged \(1 ERROR claims\) is more than 0 "
                                                 r"allowed\n  not judged: ERROR: \"<<BAD-VERIFY>> It is old.\" -- "):
            assert_faithful(unjudgeable, judge=judge)
        verdict = assert_faithful(unjudgeable, judge=judge, max_unjudged=1)  # allowed, said so: it passes
    assert verdict.score == 1.0 and [c.category.value for c in verdict.turns[0].claims] == ["VERIFIED", "ERROR"]


def test_a_turn_with_content_but_no_claim_fails_assert_faithful_unless_read_as_the_paper_does():
    silent = [*MESSAGES[:3], {**MESSAGES[3], "content": "<<SILENT>> Lisbon has seven hills."}]
    with FakeOpenAIServer() as server:
        with pytest.raises(AssertionError, match=r"1 not judged \(1 turns without claims .*\n"
                                                 r"  not judged: turn 3: Decompose found no claim"):
            assert_faithful(silent, judge=VistaMetric(lm(server)))
        verdict = assert_faithful(silent, judge=VistaMetric(lm(server), empty_turns="faithful"))
    assert [(t.label, t.empty_decomposition, t.error) for t in verdict.turns] == [("faithful", False, None),
                                                                                ("faithful", True, None)]


def write_log(tmp_path, messages):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"messages": messages}) + "\n")
    return path


# The second answer's first claim cannot be parsed: VISTA score 3/3 = 1.0 on the judged claims, and one ERROR claim.
ERRORS = [*MESSAGES[:3], {**MESSAGES[3], "content": "<<BAD-VERIFY>> Lisbon has seven hills. Lisbon is the capital "
                                                    "of Portugal."}]


@pytest.mark.parametrize("flags, code, line", [
    (["--fail-under", "1.0"], 1, "failed: 1 not judged (1 ERROR claims) is more than 0 allowed (--max-unjudged)"),
    (["--fail-under-faithful", "0.5"], 1,
     "failed: 1 not judged (1 ERROR claims) is more than 0 allowed (--max-unjudged)"),
    (["--fail-under", "1.0", "--max-unjudged", "1"], 0, None),
    (["--max-unjudged", "0"], 1, "failed: 1 not judged (1 ERROR claims) is more than 0 allowed (--max-unjudged)"),
    ([], 0, None),
])
def test_an_error_claim_fails_the_score_gate_unless_allowed(tmp_path, flags, code, line):
    with FakeOpenAIServer() as server:
        result = CliRunner().invoke(app, ["evaluate", str(write_log(tmp_path, ERRORS)), "--model", "hosted_vllm/fake",
                                          "--api-base", server.url, "--parse-retries", "0",
                                          "--out", str(tmp_path / "out"), *flags])
    assert result.exit_code == code, result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (summary["vista_score"], summary["errors"]["claims"]) == (1.0, 1)
    assert [text for text in result.output.splitlines() if text.startswith("failed:")] == ([line] if line else [])


def test_an_empty_decomposition_fails_the_faithful_gate_unless_the_paper_s_reading_is_asked(tmp_path):
    silent = [*MESSAGES[:1], {**MESSAGES[1], "content": "<<SILENT>> Lisbon is the capital of Portugal."}]
    path = write_log(tmp_path, silent)
    codes = {}
    with FakeOpenAIServer() as server:
        for reading in ("unknown", "faithful"):
            out = tmp_path / reading
            result = CliRunner().invoke(app, ["evaluate", str(path), "--model", "hosted_vllm/fake", "--api-base",
                                              server.url, "--out", str(out), "--empty-turns", reading,
                                              "--fail-under-faithful", "1.0"])
            codes[reading] = (result.exit_code, json.loads((out / "summary.json").read_text())["turn_labels"])
    assert codes == {"unknown": (1, {"faithful": 0, "hallucinated": 0, "unknown": 1}),
                     "faithful": (0, {"faithful": 1, "hallucinated": 0, "unknown": 0})}

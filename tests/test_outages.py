"""Outages and failed answers: an endpoint that goes down stops the run without writing unfinished dialogues, a
rerun repairs every verdict that holds a failure (one line per dialogue), and unparseable answers are asked again."""

import json
import subprocess
import sys

import pytest

from vista_dspy import Category
from vista_dspy.data import load_dialogues
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig
from vista_dspy.program import Vista
from vista_dspy.run.runner import VERDICTS, Threads, evaluate, has_failures, local_backend, read_verdicts
from vista_dspy.stages import CallFailures, EndpointDown

DRIVERS = {"threads": {"threads": 4}, "asyncio": {"threads": 4, "concurrency": 4}}


def lm_for(server, model="hosted_vllm/fake"):
    return ModelConfig(model=model, api_base=server.url, num_retries=0, cache=False).build()


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def failures_in(verdicts):
    turns = [t for v in verdicts for t in v.turns]
    return (sum(t.label == "unknown" for t in turns),
            sum(c.category is Category.ERROR for t in turns for c in t.claims))


def test_call_failures_stop_after_endpoint_failures_in_a_row():
    from dspy.utils.exceptions import LMServerError

    failures = CallFailures(stop_after=3)
    for _ in range(5):  # an answer in between starts the count again, an unparseable one too
        failures.endpoint_failed(LMServerError("503"))
        failures.endpoint_failed(LMServerError("503"))
        failures.answered()
    assert failures.down is None
    failures.endpoint_failed(LMServerError("503"))
    failures.endpoint_failed(LMServerError("503"))
    with pytest.raises(EndpointDown, match="failed 3 calls in a row; the last: ConnectionRefusedError: refused"):
        failures.endpoint_failed(ConnectionRefusedError("refused"))
    with pytest.raises(EndpointDown):  # every later call stops at once
        failures.before_call()
    never = CallFailures(stop_after=0)
    for _ in range(10):
        never.endpoint_failed(LMServerError("503"))
    never.before_call()


@pytest.mark.parametrize("driver", DRIVERS)
def test_an_outage_stops_the_run_and_the_rerun_completes_it(tmp_path, dev_file, driver):
    dialogues = load_dialogues(dev_file)[:12]
    program = Vista.from_program(None)
    with FakeOpenAIServer() as server:
        reference = evaluate(dialogues, program, Threads(lm_for(server), threads=4))
    out = tmp_path / "out"
    with FakeOpenAIServer(down_after=60) as server:
        with pytest.raises(EndpointDown, match="rerun the same command to resume") as stopped:
            evaluate(dialogues, program, local_backend(lm_for(server), **DRIVERS[driver]), out_dir=out)
        port = server.port
    kept = read_verdicts(out / VERDICTS)
    assert f"{len(kept)} of 12 dialogues are finished and kept in {out}" in str(stopped.value)
    assert 0 < len(kept) < 12
    with FakeOpenAIServer(port=port) as server:  # back on the same address
        result = evaluate(dialogues, program, local_backend(lm_for(server), **DRIVERS[driver]), out_dir=out)
    assert failures_in(result.verdicts) == (0, 0)
    assert result.resumed + result.repaired == len(kept) and len(result.verdicts) == 12
    ids = [line["dialogue_id"] for line in lines(out / VERDICTS)]
    assert sorted(ids) == sorted(d.id for d in dialogues)  # one line per dialogue
    assert comparable(result.verdicts) == comparable(reference.verdicts)


def comparable(verdicts):
    return sorted((v.dialogue_id, [(t.label, [(c.claim, c.category) for c in t.claims]) for t in v.turns])
                  for v in verdicts)


def test_a_rerun_repairs_failed_verdicts_in_place_and_keeps_the_others(tmp_path, dev_file):
    dialogues = load_dialogues(dev_file)[:10]
    program = Vista.from_program(None)
    out = tmp_path / "out"
    with FakeOpenAIServer(faults={"malformed": 0.25}, seed=2) as server, CallFailures(parse_retries=0).active():
        first = evaluate(dialogues, program, Threads(lm_for(server)), out_dir=out)
    failed = {v.dialogue_id for v in first.verdicts if has_failures(v)}
    assert failed and failures_in(first.verdicts) != (0, 0)
    before = {line["dialogue_id"]: line for line in lines(out / VERDICTS)}

    with FakeOpenAIServer() as server:
        kept = evaluate(dialogues, program, Threads(lm_for(server)), out_dir=out, retry_errors=False)
        assert server.requests == 0 and kept.resumed == 10 and kept.repaired == 0
        repaired = evaluate(dialogues, program, Threads(lm_for(server)), out_dir=out)
    assert repaired.repaired == len(failed) and repaired.resumed == 10 - len(failed)
    assert failures_in(repaired.verdicts) == (0, 0)
    after = lines(out / VERDICTS)
    assert len(after) == 10 and not (out / (VERDICTS + ".partial")).exists()
    for line in after:  # the verdicts without failures are kept byte for byte
        if line["dialogue_id"] not in failed:
            assert line == before[line["dialogue_id"]]


def test_a_repair_killed_before_it_compacts_loses_nothing(tmp_path, dev_file):
    """A kill -9 after a repaired verdict was appended: the file holds the dialogue twice, the later line wins, and
    the next run writes one line per dialogue."""
    dialogues = load_dialogues(dev_file)[:3]
    out = tmp_path / "out"
    with FakeOpenAIServer() as server:
        result = evaluate(dialogues, Vista.from_program(None), lm_for(server), out_dir=out)
        old = result.verdicts[0].model_copy(update={"errors": ["turn 1: decompose failed: LMTransportError"]})
        text = (out / VERDICTS).read_text()
        (out / VERDICTS).write_text(old.model_dump_json() + "\n" + text)  # the failed line first, repaired after
        assert [v.errors for v in read_verdicts(out / VERDICTS)] == [[], [], []]
        again = evaluate(dialogues, Vista.from_program(None), lm_for(server), out_dir=out)
        assert server.requests > 0 and again.repaired == 0 and again.resumed == 3
    assert len(lines(out / VERDICTS)) == 3


def test_malformed_answers_are_asked_again_and_errors_stay_only_when_every_attempt_failed(tmp_path, dev_file):
    dialogues = load_dialogues(dev_file)[:12]
    program = Vista.from_program(None)
    with FakeOpenAIServer(faults={"malformed": 0.3}, seed=5) as server:
        once = evaluate(dialogues, program, Threads(lm_for(server)), failures=CallFailures(parse_retries=0))
    with FakeOpenAIServer(faults={"malformed": 0.3}, seed=5) as server:
        thrice = evaluate(dialogues, program, Threads(lm_for(server)), failures=CallFailures(parse_retries=2))
    errors_once, errors_thrice = (failures_in(r.verdicts)[1] for r in (once, thrice))
    assert errors_once > 5 and errors_thrice < errors_once / 3
    for verdict in thrice.verdicts:  # an ERROR left names the parse failure: all three attempts failed
        for claim in (c for t in verdict.turns for c in t.claims if c.category is Category.ERROR):
            assert "AdapterParseError" in claim.error


def test_the_cli_exits_1_on_an_outage_and_resumes(tmp_path, dev_file):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "vista_dspy.cli", "evaluate", str(dev_file), "--model", "hosted_vllm/fake",
               "--limit", "6", "--threads", "1", "--out", str(out), "--no-cache", "--stop-after", "1"]
    with FakeOpenAIServer(down_after=25) as server:
        stopped = subprocess.run([*command, "--api-base", server.url], capture_output=True, text=True, timeout=180)
        port = server.port
    assert stopped.returncode == 1, stopped.stderr
    message = " ".join(stopped.stderr.split())
    assert "the model endpoint failed 1 calls in a row" in message and "rerun the same command" in message
    assert "Traceback" not in stopped.stderr
    kept = read_verdicts(out / VERDICTS)
    assert len(kept) < 6 and not any(has_failures(v) for v in kept)
    with FakeOpenAIServer(port=port) as server:
        done = subprocess.run([*command, "--api-base", server.url], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    assert f"resumed: {len(kept)} dialogues were already judged" in " ".join(done.stdout.split())
    assert len(lines(out / VERDICTS)) == 6


def test_an_embedded_server_that_dies_mid_run_is_named(tmp_path):
    from vista_dspy.lm.server import LocalServer, LocalServerError, ServerSettings

    server = LocalServer(ServerSettings(gguf=tmp_path / "model.gguf"), log=tmp_path / "server.log")
    server.process = subprocess.Popen([sys.executable, "-c", "raise SystemExit(9)"])
    server.process.wait()
    outage = EndpointDown("the model endpoint failed 3 calls in a row")
    with pytest.raises(LocalServerError, match=r"exited with code 9 during the run .*server\.log.*failed 3 calls"):
        server.__exit__(EndpointDown, outage, None)
    server.__exit__(None, None, None)  # a run that ended well says nothing

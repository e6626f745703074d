"""Fault tolerance on the real HTTP path: injected server faults, kill -9 mid-run and resume, fuzzed input files."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from vista_dspy import Category
from vista_dspy.data import load_dialogues
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig
from vista_dspy.program import Vista
from vista_dspy.run.runner import VERDICTS, Threads, evaluate, read_verdicts


@pytest.mark.parametrize("model", ["openai/fake", "hosted_vllm/fake"], ids=["litellm", "native"])
def test_a_50_dialogue_run_survives_server_faults(tmp_path, dev_file, model):
    dialogues = load_dialogues(dev_file)[:50]
    faults = {"500": 0.10, "timeout": 0.05, "malformed": 0.05, "429": 0.02}
    with FakeOpenAIServer(faults=faults, hang=2.0, seed=3) as server:
        config = ModelConfig(model=model, api_base=server.url, num_retries=3, timeout=0.5, cache=False)
        result = evaluate(dialogues, Vista.from_program(None), Threads(config.build(), threads=8), out_dir=tmp_path)
    assert not result.interrupted and len(result.verdicts) == 50
    assert server.injected["500"] > 10 and server.injected["timeout"] > 5 and server.injected["malformed"] > 5
    assert server.injected["429"] > 2
    claims = [c for v in result.verdicts for t in v.turns for c in t.claims]
    errors = [c for c in claims if c.category == Category.ERROR]
    assert all(c.error for c in errors) and all(c.error is None for c in claims if c.category != Category.ERROR)
    # HTTP errors and timeouts are retried by the client (3 times), an unparseable answer once by the program:
    # what is left (faults in a row) is rare and names its cause.
    causes = ("AdapterParseError", "injected 500", "injected 429", "LMTimeoutError", "Timeout")
    assert all(any(cause in c.error for cause in causes) for c in errors), {c.error for c in errors}
    assert len(errors) <= 0.05 * len(claims)
    assert_summary_counts_errors(tmp_path, result.verdicts)


def test_answers_that_never_parse_become_explicit_errors_counted_in_the_summary(tmp_path, dev_file):
    dialogues = load_dialogues(dev_file)[:6]
    with FakeOpenAIServer(faults={"malformed": 0.5, "truncated": 0.2, "empty": 0.1}, seed=1) as server:
        config = ModelConfig(model="openai/fake", api_base=server.url, num_retries=0, cache=False)
        # One request at a time: the seeded faults fall on the same requests in every run.
        result = evaluate(dialogues, Vista.from_program(None), Threads(config.build()), out_dir=tmp_path)
    assert len(result.verdicts) == 6
    claims = [c for v in result.verdicts for t in v.turns for c in t.claims]
    errors = [c for c in claims if c.category == Category.ERROR]
    failed = [t for v in result.verdicts for t in v.turns if t.error]
    assert errors and failed and all(c.error for c in errors) and all("decompose failed" in t.error for t in failed)
    assert all(t.label == "unknown" for t in failed if not any(c.category in (Category.CONTRADICTED,
               Category.LACKING_EVIDENCE) for c in t.claims))
    assert_summary_counts_errors(tmp_path, result.verdicts)


def assert_summary_counts_errors(out, verdicts):
    turns = [t for v in verdicts for t in v.turns]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["errors"]["claims"] == sum(c.category == Category.ERROR for t in turns for c in t.claims)
    assert summary["errors"]["turns_failed"] == sum(t.error is not None for t in turns)
    assert summary["turn_labels"]["unknown"] == sum(t.label == "unknown" for t in turns)


def test_kill_9_mid_run_loses_only_dialogues_in_flight(tmp_path, dev_file):
    out = tmp_path / "out"
    env = {**os.environ, "VISTA_CACHE_DIR": str(tmp_path / "cache")}
    with FakeOpenAIServer(latency=0.05) as server:
        command = [sys.executable, "-m", "vista_dspy.cli", "evaluate", str(dev_file), "--model", "openai/fake",
                   "--api-base", server.url, "--limit", "30", "--threads", "4", "--out", str(out), "--no-cache"]
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline and len(read_lines(out / VERDICTS)) < 8:
            time.sleep(0.05)
        process.send_signal(signal.SIGKILL)
        process.wait()
        before = read_lines(out / VERDICTS)
        assert 8 <= len(before) < 30
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    ids = [v.dialogue_id for v in read_verdicts(out / VERDICTS)]
    assert len(ids) == len(set(ids)) == 30  # every dialogue exactly once
    assert ids[: len(before)] == [json.loads(line)["dialogue_id"] for line in before if line.endswith("\n")]


def read_lines(path):
    if not path.exists():
        return []
    with path.open() as handle:
        return [line for line in handle if line.endswith("\n")]

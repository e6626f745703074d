"""A user's machine: no data directory, an empty working directory. After `vista data get vista-human` (here from a
synthetic full file, --from DIR) `vista compile`, `vista benchmark` and the examples find the development half in the
cache; with an empty HOME and nothing fetched, `vista compile --model local` stops at once, naming the fix."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest
from helpers import pin_synthetic_vista, vista_conversation
from typer.testing import CliRunner

from vista_dspy.cli import app
from vista_dspy.data import fetch
from vista_dspy.data.sources import DEV_HALF
from vista_dspy.lm.fake import FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture
def fetched(tmp_path, monkeypatch):
    """vista-human fetched into the test's cache from a synthetic full file (two sources, odd counts: A 1-9, B 1-7;
    the development half A 1,3,5,7,9 + B 1,3,5,7); the working directory empty, no data directory set."""
    full = [vista_conversation("A", i) for i in range(1, 10)] + [vista_conversation("B", i) for i in range(1, 8)]
    mirror = tmp_path / "mirror"
    halves = pin_synthetic_vista(monkeypatch, full, mirror)
    monkeypatch.delenv("VISTA_DATA_DIR", raising=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    result = runner.invoke(app, ["data", "get", "vista-human", "--from", str(mirror)])
    assert result.exit_code == 0, result.output
    assert (fetch.data_cache_dir() / DEV_HALF.path).read_bytes() == halves[DEV_HALF.path]
    return fetch.data_cache_dir() / DEV_HALF.path


def test_vista_compile_reads_the_fetched_development_half_from_the_cache(tmp_path, fetched):
    with FakeOpenAIServer() as server:
        result = runner.invoke(app, ["compile", "--model", "openai/fake", "--api-base", server.url, "--compile-data",
                                     "vista-human:select", "--test-data", "vista-human:pool", "--pool-data", "none",
                                     "--n-dev", "2", "--n-test", "2", "--trials", "1", "--out-dir",
                                     str(tmp_path / "programs"), "--storage", f"sqlite:///{tmp_path / 's.db'}",
                                     "--no-cache"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "programs" / "openai_fake.card.md").is_file()
    assert "2 dialogues (vista-human:select" in " ".join(result.output.split())  # read by name, from the cache


def test_vista_benchmark_reads_the_fetched_development_half_from_the_cache(tmp_path, fetched):
    out = tmp_path / "bench"
    with FakeOpenAIServer() as server:
        result = runner.invoke(app, ["benchmark", "--datasets", "vista-human", "--systems", "vista", "--n", "3",
                                     "--model", "openai/fake", "--api-base", server.url, "--out", str(out),
                                     "--no-cache"])
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "benchmark.json").read_text())["plans"][0]
    assert plan["datasets"] == {"vista-human": str(fetched)}


def test_the_examples_read_the_fetched_development_half_from_the_cache(capsys, fetched):
    grpo = runpy.run_path(str(ROOT / "examples" / "grpo_reward.py"))
    chatbot = runpy.run_path(str(ROOT / "examples" / "optimize_chatbot.py"))
    assert grpo["annotated_file"](None) == chatbot["annotated_file"](None) == fetched
    with FakeOpenAIServer() as server:
        code = grpo["main"](["--judge", "hosted_vllm/judge", "--api-base", server.url])
    out = capsys.readouterr().out
    assert code == 0 and "8 completions of 2 prompts" in out


def test_with_an_empty_home_and_no_data_compile_stops_before_any_model_naming_vista_data_get(tmp_path, monkeypatch):
    import vista_dspy.cli.common as common

    def no_model(*args, **kwargs):
        raise AssertionError("a model was set up")

    monkeypatch.setattr(common, "model_setup", no_model)
    monkeypatch.setattr("vista_dspy.cli.compile.model_setup", no_model)
    for name in ("VISTA_DATA_DIR", "VISTA_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    home, empty = tmp_path / "home", tmp_path / "empty"
    home.mkdir()
    empty.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(empty)
    listed = runner.invoke(app, ["data", "list"])
    assert listed.exit_code == 0 and "missing" in listed.output
    result = runner.invoke(app, ["compile", "--model", "local"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    # The suite's compile part is read first: its first dataset is named.
    assert "run `vista data get begin`" in text and "Traceback" not in result.output
    assert not result.exception or isinstance(result.exception, SystemExit)

"""`vista compile --model M`: the one compile, end to end over HTTP with the fake OpenAI server on synthetic
dialogues whose outcome is known (the rule engine is right on every turn of them): the estimate before any call
(--dry-run makes none), the priced study, the pick, the gate against the seed, the test part read once, the program,
its meta and its card written into the user's programs folder, never into the package, and found by name."""

from __future__ import annotations

import json

import pytest
from helpers import vista_conversation
from typer.testing import CliRunner

from vista_dspy.cli import app
from vista_dspy.compiled.files import compiled_dir
from vista_dspy.lm.fake import FakeOpenAIServer


@pytest.fixture
def parts(tmp_path):
    """Six compile dialogues and four test dialogues, half hallucinated, each with its human claims."""
    compile_file, test_file = tmp_path / "compile.json", tmp_path / "test.json"
    compile_file.write_text(json.dumps([vista_conversation("wow", i) for i in range(6)]))
    test_file.write_text(json.dumps([vista_conversation("cmu", 100 + i) for i in range(4)]))
    return (["--compile-data", f"vista-human={compile_file}:all", "--test-data", f"vista-human={test_file}:all",
             "--pool-data", "none"])


def shipped_files() -> dict[str, float]:
    return {p.name: p.stat().st_mtime for p in compiled_dir().iterdir()}


def test_dry_run_prints_the_estimate_and_makes_no_lm_call(parts):
    with FakeOpenAIServer() as server:
        done = CliRunner().invoke(app, ["compile", "--model", "openai/fake", "--api-base", server.url, "--trials", "3",
                                        "--dry-run", *parts])
        requests = server.requests
    assert done.exit_code == 0, done.output
    assert requests == 0
    # 3 trials x 6 compile turns + 2 x 4 test turns
    assert done.stdout.startswith("estimate: 26 judged turns, ") and "server's time per judged turn is unknown" in \
        done.stdout


def test_a_hosted_model_s_estimate_is_in_dollars_from_litellm_s_price_map(parts):
    done = CliRunner().invoke(app, ["compile", "--model", "openai/gpt-4o-mini", "--trials", "2", "--dry-run", *parts])
    assert done.exit_code == 0, done.output
    assert "; $" in done.stdout.splitlines()[0] and "litellm's price map for openai/gpt-4o-mini" in done.stdout


@pytest.mark.parametrize("logprobs", [True, False])
def test_compile_writes_program_meta_and_card_to_the_users_folder_and_it_is_found_by_name(parts, tmp_path,
                                                                                         monkeypatch, logprobs):
    monkeypatch.setenv("VISTA_PROGRAMS", str(tmp_path / "mine"))
    before = shipped_files()
    with FakeOpenAIServer(logprobs=logprobs) as server:
        done = CliRunner().invoke(app, ["compile", "--model", "openai/fake", "--api-base", server.url, "--trials",
                                        "3", "--storage", f"sqlite:///{tmp_path / 's.db'}", "--no-cache", *parts])
    assert done.exit_code == 0, done.output
    assert done.stdout == f"{tmp_path / 'mine' / 'openai_fake.json'}\n"
    meta = json.loads((tmp_path / "mine" / "openai_fake.meta.json").read_text())
    # The rule engine is right on every turn: every trial ties with the seed, the cheapest of them is picked, passes.
    assert meta["gate"]["passed"] is True and meta["settings"]["trial"] != 0
    pooled = meta["test_part"]["datasets"]["pooled"]
    assert pooled["turns"] == 4 and pooled["seed"]["balanced_accuracy"] == pooled["compiled"]["balanced_accuracy"] == 1
    assert meta["fitted_on"] == {} and meta["settings"]["label_probabilities"] is logprobs
    card = (tmp_path / "mine" / "openai_fake.card.md").read_text()
    assert "## The test part, read once" in card and "| pooled | 4 | 1.000 | 1.000 |" in card
    assert "vista compile --model openai/fake" in card and (tmp_path / "mine" / "openai_fake.card.html").is_file()
    # Without log-probabilities the program compiles all the same, and its card says what it decides by.
    assert ("gives no label probabilities (token log-probabilities): this program decides by the judge's labels"
            in card) is not logprobs
    assert shipped_files() == before  # nothing written under the package
    found = CliRunner().invoke(app, ["models"])
    assert found.exit_code == 0
    from vista_dspy import Vista

    assert Vista.for_model("openai/fake").program_name == "openai_fake"

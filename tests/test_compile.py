"""Compiling per model with a rule-based fake LM: per-predictor demo budgets, complete demos and the demo pool, the
model registry, the automatic choice of a compiled program, the shipped programs, an outage. (The one compile, end to
end: test_one_compile.py.)"""

import json
import re

import dspy
import pytest

from vista_dspy.compiled import files as compiled_module
from vista_dspy.data import load_dialogues
from vista_dspy.lm.fake import RuleEngine, rule_lm
from vista_dspy.lm.models import MODELS, program_for_model, program_name_for
from vista_dspy.optimize.demos import DEFAULT_DEMOS, agreement, incomplete_demos, labeled_pool, parse_demos
from vista_dspy.program import Vista


@pytest.fixture(scope="module")
def dialogues(dev_file_module):
    return load_dialogues(dev_file_module)


@pytest.fixture(scope="module")
def dev_file_module():
    from conftest import DEV_FILE

    if not DEV_FILE.exists():
        pytest.skip(f"benchmark data not found at {DEV_FILE}")
    return DEV_FILE


def test_parse_demos():
    assert parse_demos(None) == DEFAULT_DEMOS == {"decompose": 6, "verify": 6, "categorize": 9}
    assert parse_demos("verify=2") == {"decompose": 6, "verify": 2, "categorize": 9}
    with pytest.raises(ValueError, match="bad demo budget 'judge=1'"):
        parse_demos("judge=1")


def test_labeled_pool_keeps_only_complete_demos_that_agree_with_the_annotators(dialogues):
    base = Vista.from_program(None)
    with dspy.context(lm=rule_lm(RuleEngine()), adapter=dspy.JSONAdapter()):
        pool = labeled_pool(base, dialogues[:12])
    sizes = pool.sizes()
    assert sizes["decompose"] >= 12 and sizes["verify"] > 0 and sizes["categorize"] > 0
    for stratum, demo in pool.demos["verify"]:
        assert demo.label == stratum and demo.explanation and demo.claim and demo.reference
    for stratum, demo in pool.demos["categorize"]:
        assert demo.category == stratum and demo.explanation
    for _, demo in pool.demos["decompose"]:
        assert isinstance(demo.claims, list) and demo.claims and "turn" in demo and "history" in demo


def test_agreement_metric(dialogues):
    with dspy.context(lm=rule_lm(RuleEngine()), adapter=dspy.JSONAdapter()):
        verdict = Vista.from_program(None).judge_claims(dialogues[0])
    turns = [t for t in verdict.turns if t.gold_label]
    claims = [c for t in verdict.turns for c in t.claims]
    expected = (sum(t.label == t.gold_label for t in turns) / len(turns)
                + sum(c.category == c.gold_category for c in claims) / len(claims)) / 2
    assert agreement(None, verdict) == pytest.approx(expected)
    assert agreement(None, verdict, trace=[]) is (expected == 1.0)


def test_model_short_names_resolve(monkeypatch):
    monkeypatch.delenv("VISTA_API_BASE", raising=False)
    assert set(MODELS) == {"gpt-4o", "gpt-5", "deepseek-v3", "llama-3.1-8b", "llama-3.1-70b", "mistral-7b",
                           "qwen3-8b", "qwen3-32b"}
    gpt5 = MODELS["gpt-5"].config()
    assert gpt5.model == "openai/gpt-5" and gpt5.temperature == 1.0 and gpt5.max_tokens >= 16000
    assert dict(gpt5.extra) == {"reasoning_effort": "low"} and gpt5.build().kwargs["reasoning_effort"] == "low"
    assert MODELS["deepseek-v3"].config().model == "deepseek/deepseek-chat"
    with pytest.raises(ValueError, match="VISTA_API_BASE"):
        MODELS["qwen3-8b"].config()
    monkeypatch.setenv("VISTA_API_BASE", "http://gpu:8000/v1")
    qwen = MODELS["qwen3-8b"].config()
    assert qwen.api_base == "http://gpu:8000/v1"
    assert dict(qwen.extra)["extra_body"] == {"chat_template_kwargs": {"enable_thinking": False}}
    assert program_name_for("openai/gpt-4o") == program_name_for("gpt-4o") == "gpt-4o"
    assert program_name_for(None) == "local" and program_name_for("ollama_chat/x:7b") == "ollama_chat_x_7b"


def test_a_compiled_program_is_used_automatically(tmp_path, monkeypatch, dialogues):
    monkeypatch.setattr(compiled_module, "compiled_dir", lambda: tmp_path)
    (tmp_path / "seed.json").write_text((compiled_module.Path(compiled_module.__file__).parent /
                                         "seed.json").read_text())
    assert program_for_model("gpt-4o") == "seed"
    program = Vista.from_program(None)
    program.verify.demos = program.verify.demos[:1]
    program.save_program(tmp_path / "gpt-4o.json")
    assert program_for_model("gpt-4o") == program_for_model("openai/gpt-4o") == "gpt-4o"
    loaded = Vista.from_program(program_for_model("gpt-4o"))
    assert loaded.program_name == "gpt-4o" and len(loaded.verify.demos) == 1


def test_a_thin_pool_is_topped_up_with_the_seed_demos(dialogues):
    from vista_dspy.optimize.demos import Pool, install

    base = Vista.from_program(None)
    pool = Pool()
    pool.add("verify", "VERIFIED", dspy.Example(reference="r", knowledge="k", claim="c", explanation="e",
                                                label="VERIFIED"))
    program = install(base, pool.pick({"verify": 3, "categorize": 2}, 0), {"verify": 3, "categorize": 2},
                      top_up=base)
    assert len(program.verify.demos) == 3 and program.verify.demos[0].claim == "c"
    assert program.verify.demos[1:] == base.verify.demos[:2]
    assert program.categorize.demos == base.categorize.demos[:2]


def test_every_shipped_program_loads_complete_and_carries_no_lm_or_key():
    from vista_dspy.compiled.files import compiled_dir

    programs = [path for path in sorted(compiled_dir().glob("*.json")) if not path.name.endswith(".meta.json")]
    assert "seed" in {path.stem for path in programs}
    for path in programs:
        text = path.read_text()
        assert "api_key" not in text and not re.search(r"\bsk-[A-Za-z0-9_-]{16,}", text), path
        states = [state for state in json.loads(text).values() if isinstance(state, dict)]
        assert states and all(state.get("lm") is None for state in states), path
        program = Vista.from_program(path.stem)
        assert incomplete_demos(program) == [], path
        meta = path.with_name(f"{path.stem}.meta.json")
        if path.stem != "seed":  # a compiled program documents how it was made
            info = json.loads(meta.read_text())
            assert info["program"] == path.stem and info["scores"]["compiled"]["turn_accuracy"] is not None


def test_an_outage_stops_compile_and_study_with_a_message(tmp_path, dev_file_module):
    """No candidate is scored on an outage's ERROR verdicts: the command stops, exits 1, and writes no program (and
    the study no result)."""
    from typer.testing import CliRunner

    from vista_dspy.cli import app
    from vista_dspy.lm.fake import FakeOpenAIServer

    common = ["--model", "hosted_vllm/fake", "--data-dir", str(dev_file_module.parent.parent), "--n-dev", "2",
              "--no-cache", "--stop-after", "1", "--trials", "2"]
    data = ["--dev", "vista-human:select"]
    compile_data = ["--compile-data", "vista-human:select", "--test-data", "vista-human:dev", "--pool-data", "none"]
    for command in (["compile", "--out-dir", str(tmp_path), "--storage", f"sqlite:///{tmp_path / 'c.db'}",
                     *compile_data],
                    ["study", "--storage", f"sqlite:///{tmp_path / 'study.db'}", *data]):
        with FakeOpenAIServer(down_after=20) as server:
            result = CliRunner().invoke(app, [*command, *common, "--api-base", server.url])
        message = " ".join(result.output.split())
        assert result.exit_code == 1, result.output
        assert "the model endpoint failed 1 calls in a row" in message and "Traceback" not in result.output
    assert list(tmp_path.glob("*.json")) == []



"""Compiling per model with a rule-based fake LM: per-predictor demo budgets, complete demos, save/load, metadata,
no secrets, optimizers, the model registry and the automatic choice of a compiled program."""

import json
import re

import dspy
import pytest

from vista_dspy.compiled import files as compiled_module
from vista_dspy.data import load_dialogues
from vista_dspy.lm.fake import RuleEngine, rule_lm
from vista_dspy.lm.models import MODELS, program_for_model, program_name_for
from vista_dspy.optimize.compile import compile_program, save_compiled
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


def compile_with_rules(train, dev, **kwargs):
    engine = RuleEngine()
    with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
        return compile_program(train, dev, **kwargs), engine


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


def test_labeled_compile_gives_exactly_the_requested_demos_and_round_trips(tmp_path, dialogues, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-value")
    budgets = {"decompose": 4, "verify": 3, "categorize": 2}
    result, _ = compile_with_rules(dialogues[:20], dialogues[20:24], optimizer="labeled", budgets=budgets,
                                   describe={"model": "fake/rules", "train": {"dataset": "vista-human"}})
    program = result.program
    assert {name: len(getattr(program, name).demos) for name in budgets} == budgets
    assert incomplete_demos(program) == []
    seed = Vista.from_program(None)
    assert len(program.contradiction.demos) == len(seed.contradiction.demos)  # not optimized, kept

    path = save_compiled(result, "fake", tmp_path)
    text = path.read_text()
    assert "sk-test-secret-value" not in text and "api_key" not in text
    states = [state for state in json.loads(text).values() if isinstance(state, dict)]
    assert states and all(state.get("lm") is None for state in states)
    restored = Vista.from_program(path)
    for name in budgets:
        assert [dict(d) for d in getattr(restored, name).demos] == [dict(d) for d in getattr(program, name).demos]

    meta = json.loads((tmp_path / "fake.meta.json").read_text())
    assert meta["meta_version"] == 1 and meta["program"] == "fake"
    assert meta["program_sha256"] == restored.content_hash()  # what the gate's numbers describe
    for key in ("model", "optimizer", "settings", "train", "dev", "scores", "gate", "cost", "dspy_version", "date",
                "demos", "choice", "options"):
        assert key in meta, key
    assert meta["train"]["dataset"] == "vista-human" and len(meta["train"]["sha256"]) == 64
    assert meta["demos"]["verify"] == 3 and meta["cost"]["calls"] > 0
    assert meta["gate"]["turns"]["items"] == sum(len(d.judged_turns) for d in dialogues[20:24])
    assert meta["gate"]["claims"]["items"] > 0 and meta["gate"]["passed"] == result.passed
    # The rule engine judges the same with or without these demos: both sides score alike, and the gate refuses.
    for side in ("base", "compiled"):
        assert (meta["scores"][side]["agreement"], meta["scores"][side]["turn_accuracy"]) == (0.5, 0.5)
    assert meta["gate"]["passed"] is False


def test_bootstrap_and_random_search(dialogues):
    budgets = {"decompose": 2, "verify": 2, "categorize": 1}
    result, _ = compile_with_rules(dialogues[:10], dialogues[10:13], optimizer="bootstrap", budgets=budgets,
                                   budget=3)
    got = {name: len(getattr(result.program, name).demos) for name in budgets}
    assert got == budgets and incomplete_demos(result.program) == []  # every budget filled
    assert all(d.get("augmented") for d in result.program.verify.demos)  # model traces, not raw examples

    result, _ = compile_with_rules(dialogues[:10], dialogues[10:13], optimizer="random-search", budgets=budgets,
                                   budget=2, seed=5)
    candidates = result.meta.choice["candidates"]
    assert [c["seed"] for c in candidates] == [5, 6]
    # The rule engine's answers do not depend on the demos: every candidate ties with the base at 2/3.
    assert [c["agreement"] for c in candidates] == pytest.approx([2 / 3, 2 / 3])
    assert result.meta.scores["base"]["agreement"] == result.meta.scores["compiled"]["agreement"] == pytest.approx(2 / 3)


def test_labeled_needs_human_claims(dialogues):
    stripped = [d.model_copy(update={"turns": [t.model_copy(update={"gold": None}) for t in d.turns]})
                for d in dialogues[:3]]
    with pytest.raises(ValueError, match="needs training dialogues with human claims"):
        compile_with_rules(stripped, dialogues[3:4], optimizer="labeled")


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
    result, _ = compile_with_rules(dialogues[:6], dialogues[6:7], optimizer="labeled",
                                   budgets={"decompose": 1, "verify": 1, "categorize": 1})
    save_compiled(result, "gpt-4o", tmp_path)
    assert program_for_model("gpt-4o") == program_for_model("openai/gpt-4o") == "gpt-4o"
    loaded = Vista.from_program(program_for_model("gpt-4o"))
    assert loaded.program_name == "gpt-4o" and len(loaded.verify.demos) == 1


def test_cli_compile_and_study_over_http(tmp_path, dev_file_module):
    from typer.testing import CliRunner

    from vista_dspy.cli import app
    from vista_dspy.lm.fake import FakeOpenAIServer

    runner = CliRunner()
    data_dir = dev_file_module.parent.parent
    common = ["--model", "openai/fake", "--data-dir", str(data_dir), "--n-train", "6", "--n-dev", "2",
              "--out-dir", str(tmp_path), "--no-cache"]
    with FakeOpenAIServer() as server:
        gated = runner.invoke(app, ["compile", *common, "--api-base", server.url, "--demos",
                                    "decompose=2,verify=2,categorize=1", "--optimizer", "labeled"])
        assert gated.exit_code == 0, gated.output
        output = " ".join(gated.output.split())
        assert "turns: compiled program" in output and "claim decisions: compiled program" in output
        # The rule engine answers alike with any demos: no better claim decision, so the gate refuses.
        assert "claim decisions: compiled program 3/10 right, seed program 3/10" in output
        assert "nothing saved for openai_fake: the seed program stays" in output
        assert not (tmp_path / "openai_fake.json").exists() and gated.stdout.strip() == ""
        result = runner.invoke(app, ["compile", *common, "--api-base", server.url, "--demos",
                                     "decompose=2,verify=2,categorize=1", "--optimizer", "claims", "--always-save"])
        assert result.exit_code == 0, result.output
        meta = json.loads((tmp_path / "openai_fake.meta.json").read_text())
        assert meta["optimizer"] == "claims" and meta["gate"]["turns"]["items"] > 0
        assert meta["model"] == "openai/fake" and meta["train"]["part"] == "train" and meta["dev"]["part"] == "dev"
        assert set(meta["choice"]["variants"]) == {"base", "pool"}
        # No pool demo does better than the seed's on the rule engine: the base is chosen, its demos kept.
        assert meta["choice"]["chosen"] == "base"
        assert meta["demos"]["verify"] == len(Vista.from_program(None).verify.demos) == 6
        study = ["study", *common[:-3], "--api-base", server.url, "--trials", "2", "--dev", "vista-human:select",
                 "--train", "none", "--no-cache", "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--export",
                 str(tmp_path / "study.json"), "--report", str(tmp_path / "study.html")]
        result = runner.invoke(app, study)
        assert result.exit_code == 0, result.output
        assert "Pareto front of vista-openai_fake (2 trials completed" in " ".join(result.stdout.split())
        exported = json.loads((tmp_path / "study.json").read_text())
        assert exported["data"]["name"] == "vista-human:select" and len(exported["data"]["dialogues"]) == 2
        assert (tmp_path / "study.html").read_text().count("<svg") == 1
    result = runner.invoke(app, ["compile", "--model", "openai/x", "--optimizer", "magic"])
    assert result.exit_code == 2 and "unknown optimizer 'magic'" in result.output
    result = runner.invoke(app, ["compile", "--model", "openai/x", "--train", "vista-human:all", "--dev",
                                 "vista-human:all", "--data-dir", str(data_dir)])
    assert result.exit_code == 2 and "share" in result.output


def test_a_dev_set_without_turn_labels_is_refused_before_any_lm_call(dialogues):
    from vista_dspy.cli.train_dev import _require_turn_labels

    _require_turn_labels(dialogues[:2], "vista-human:select")
    unlabelled = [d.model_copy(update={"turns": [t.model_copy(update={"gold": None}) for t in d.turns]})
                  for d in dialogues[:2]]
    with pytest.raises(ValueError, match="--dev coconot: no judged turn has a gold label"):
        _require_turn_labels(unlabelled, "coconot")


def test_mipro_wrapped_with_per_predictor_budgets(dialogues):
    budgets = {"decompose": 2, "verify": 1, "categorize": 1}
    result, engine = compile_with_rules(dialogues[:8], dialogues[8:10], optimizer="mipro", budgets=budgets,
                                        budget=2)
    program = result.program
    assert all(len(getattr(program, name).demos) <= k for name, k in budgets.items())
    assert incomplete_demos(program) == []
    assert any(stage == "generic" for stage, _ in engine.requests)  # instructions were proposed by the LM
    assert len(program.contradiction.demos) == len(Vista.from_program(None).contradiction.demos)


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

    common = ["--model", "hosted_vllm/fake", "--data-dir", str(dev_file_module.parent.parent), "--n-train", "6",
              "--n-dev", "2", "--no-cache", "--stop-after", "1"]
    study = ["study", "--trials", "2", "--dev", "vista-human:select", "--storage",
             f"sqlite:///{tmp_path / 'study.db'}"]
    for command in (["compile", "--demos", "decompose=2,verify=2,categorize=1", "--out-dir", str(tmp_path)], study):
        with FakeOpenAIServer(down_after=20) as server:
            result = CliRunner().invoke(app, [*command, *common, "--api-base", server.url])
        message = " ".join(result.output.split())
        assert result.exit_code == 1, result.output
        assert "the model endpoint failed 1 calls in a row" in message and "Traceback" not in result.output
    assert list(tmp_path.glob("*.json")) == []


def test_compile_all_configured_compiles_every_reachable_paper_model(tmp_path, dev_file_module, monkeypatch):
    """Two fake endpoints stand in for two open-weights models of the paper; the six others are skipped, each with a
    line saying what it lacks, and nothing is written for them."""
    from typer.testing import CliRunner

    from vista_dspy.cli import app
    from vista_dspy.lm.fake import FakeOpenAIServer
    from vista_dspy.lm.models import MODELS

    for spec in MODELS.values():
        for variable in (*spec.needs, spec.endpoint_variable):
            monkeypatch.delenv(variable, raising=False)
    with FakeOpenAIServer() as llama, FakeOpenAIServer() as qwen:
        monkeypatch.setenv("VISTA_API_BASE_LLAMA_3_1_8B", llama.url)
        monkeypatch.setenv("VISTA_API_BASE_QWEN3_8B", qwen.url)
        result = CliRunner().invoke(app, [
            "compile", "--model", "all-configured", "--data-dir", str(dev_file_module.parent.parent), "--n-train",
            "6", "--n-dev", "2", "--out-dir", str(tmp_path), "--no-cache", "--demos",
            "decompose=2,verify=2,categorize=1", "--always-save"])
        assert result.exit_code == 0, result.output
        assert llama.requests > 0 and qwen.requests > 0
    output = " ".join(result.output.split())
    for skipped in ("gpt-4o: set OPENAI_API_KEY", "gpt-5: set OPENAI_API_KEY", "deepseek-v3: set DEEPSEEK_API_KEY",
                    "llama-3.1-70b: set VISTA_API_BASE_LLAMA_3_1_70B", "mistral-7b: set VISTA_API_BASE_MISTRAL_7B",
                    "qwen3-32b: set VISTA_API_BASE_QWEN3_32B"):
        assert f"skip {skipped}" in output
    assert sorted(p.name for p in tmp_path.glob("*.json")) == [
        "llama-3.1-8b.json", "llama-3.1-8b.meta.json", "qwen3-8b.json", "qwen3-8b.meta.json"]
    meta = json.loads((tmp_path / "qwen3-8b.meta.json").read_text())
    assert meta["model"] == MODELS["qwen3-8b"].model and meta["model_name"] == "qwen3-8b"
    monkeypatch.delenv("VISTA_API_BASE_LLAMA_3_1_8B")
    monkeypatch.delenv("VISTA_API_BASE_QWEN3_8B")
    nothing = CliRunner().invoke(app, ["compile", "--model", "all-configured", "--data-dir",
                                       str(dev_file_module.parent.parent)])
    assert nothing.exit_code == 2 and "none of the paper's models is configured" in nothing.output

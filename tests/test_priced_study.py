"""The priced study with fake LMs whose costs and accuracies are known: both objectives per trial, the Pareto front,
the export and the page from it, and `vista compile --budget` picking a front trial and gating it against the seed.

The fake judge (``PricedEngine``) is the rule engine with two habits of a real server: it reports its own time for
every call (1 ms per prompt token it reads, demos included, 10 per token it writes), so a prompt with more demos costs
more; and Verify shown no demo calls every claim VERIFIED (a small model zero-shot), so those trials find no
hallucination. On the synthetic dialogues below the rule engine is right on every turn otherwise."""

from __future__ import annotations

import json
import threading

import dspy
import optuna
import pytest
from helpers import vista_conversation
from typer.testing import CliRunner

from vista_dspy.cli import app
from vista_dspy.data import load_dialogues
from vista_dspy.lm.clients.timings import TimedLM
from vista_dspy.lm.fake import RuleEngine
from vista_dspy.optimize import study as studies
from vista_dspy.optimize.metrics import (
    DOLLARS,
    SERVER_TIME,
    PriceError,
    balanced_accuracy,
    balanced_accuracy_difference,
    balanced_accuracy_interval,
)
from vista_dspy.optimize.study.plan import trial_params
from vista_dspy.optimize.study.result import StudyResult, export, restore
from vista_dspy.program import Vista
from vista_dspy.schema import Usage, UsageCounts

DESIGNS = [({"demos_verify": 2}, "two Verify demos"), ({"demos_verify": 0}, "no Verify demos")]


class PricedEngine(RuleEngine):
    """The rule engine, timed by its prompt's length and blind without Verify demos (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.local = threading.local()

    def answer_with_distributions(self, system, prompt, n_messages=1):
        self.local.demos = (n_messages - 1) // 2  # a demo is a user / assistant pair before the question
        return super().answer_with_distributions(system, prompt, n_messages)

    def verify(self, inputs):
        answer = super().verify(inputs)
        if self.local.demos == 0 and isinstance(answer, dict):
            return {**answer, "label": "VERIFIED", "_p": {"VERIFIED": 0.9, "UNVERIFIABLE": 0.1}}
        return answer

    def complete(self, request):
        from dspy.lm15 import Response

        response = super().complete(request)
        read = sum(len(m.text or "") for m in request.messages) // 4
        written = response.usage.output_tokens
        return Response(id=response.id, model=response.model, message=response.message,
                        finish_reason=response.finish_reason, usage=response.usage,
                        provider_data={"timings": {"prompt_n": read, "prompt_ms": float(read),
                                                   "predicted_n": written, "predicted_ms": 10.0 * written}})


def priced_lm(engine: PricedEngine) -> dspy.LM:
    return TimedLM("fake/priced", engine=engine, cache=False, num_retries=0)


@pytest.fixture
def data(tmp_path):
    """Eight labelled dialogues, half hallucinated (an invented sentence), each with its human claims."""
    path = tmp_path / "synthetic.json"
    path.write_text(json.dumps([vista_conversation("wow", i) for i in range(8)]))
    return studies.ObjectiveData.of(f"vista-human={path}:all", {"vista-human": load_dialogues(path, "vista")}), path


def seed_study(data, *, trials=3, storage=None, engine=None, designs=DESIGNS):
    bases = {"seed": Vista.from_program(None)}
    space = studies.search_space(bases)
    engine = engine or PricedEngine()
    with dspy.context(lm=priced_lm(engine), adapter=dspy.JSONAdapter()):
        study = studies.run_study(studies.program_judge(bases, None), data, SERVER_TIME, space=space,
                                  starts={"seed": studies.base_params("seed", bases["seed"], space)}, trials=trials,
                                  storage=storage, study_name="s", designs=designs, bases=bases,
                                  record={"programs": {"seed": bases["seed"].content_hash()}})
    return study, engine


def test_balanced_accuracy_weighs_both_classes_and_counts_unknown_wrong():
    gold = ["h", "f", "f", "f"]
    assert balanced_accuracy(gold, ["f", "f", "f", "f"]) == 0.5  # the majority class alone
    assert balanced_accuracy(gold, ["u", "f", "f", "h"]) == pytest.approx((0 + 2 / 3) / 2)
    assert balanced_accuracy(gold, gold) == 1.0
    better = balanced_accuracy_difference(gold, gold, ["f"] * 4, ["a", "b", "c", "d"])
    assert better["difference"] == 0.5 and better["low"] <= better["difference"]
    with pytest.raises(ValueError):
        balanced_accuracy(gold, ["h"])


def test_each_starting_program_is_its_own_trial():
    bases = {"seed": Vista.from_program(None), "local": Vista.from_program("local")}
    space = studies.search_space(bases)
    assert {c.name for c in space} >= {"program", "demos_verify", "units", "explain_unverified", "cascade"}
    for name, base in bases.items():
        params = studies.base_params(name, base, space)
        assert studies.candidate(bases, None, params).content_hash() == base.content_hash()
    shipped = studies.base_params("local", bases["local"], space)
    wider = studies.candidate(bases, None, {**shipped, "cascade": "0.10-0.90", "demos_verify": 1})
    assert (wider.rule.cascade.low, wider.rule.cascade.high) == (0.1, 0.9) and len(wider.verify.demos) == 1
    assert studies.candidate(bases, None, {**shipped, "cascade": "none"}).rule.cascade is None


def test_a_priced_study_measures_accuracy_and_model_time_and_resumes(tmp_path, data):
    data, _ = data
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study, engine = seed_study(data, storage=storage)
    result = export(study)
    seed, two, none = result.trials
    assert seed.marks == ["seed"] and (two.params["demos_verify"], none.params["demos_verify"]) == (2, 0)
    # Known accuracies: the rule engine is right on every turn; without Verify demos no turn is hallucinated.
    assert (seed.accuracy, two.accuracy, none.accuracy) == (1.0, 1.0, 0.5)
    assert none.outcome.labels == "f" * 8 and seed.outcome.claim_decisions == 1.0
    # Known costs: fewer demos, fewer tokens read, less server time.
    assert seed.cost > two.cost > none.cost > 0
    assert seed.outcome.cost_interval[0] <= seed.cost <= seed.outcome.cost_interval[1]
    assert [t.number for t in result.front()] == [none.number, two.number]  # the seed: as accurate, dearer
    calls = len(engine.requests)
    again, _ = seed_study(data, storage=storage, engine=engine)
    assert len(engine.requests) == calls and len(again.trials) == 3  # resumed: nothing left to run
    more, _ = seed_study(data, trials=4, storage=storage, engine=engine)
    assert sum(t.state == optuna.trial.TrialState.COMPLETE for t in more.trials) == 4


def test_a_resumed_study_reruns_the_trial_an_interruption_left_running(tmp_path, data):
    data, _ = data
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study, _ = seed_study(data, trials=1, storage=storage)
    interrupted = study.ask()  # trial 1, the first design, left RUNNING as by a kill
    planned = dict(study.trials[1].system_attrs["fixed_params"])
    study, _ = seed_study(data, trials=2, storage=storage)
    State = optuna.trial.TrialState
    assert study.trials[interrupted.number].state == State.FAIL
    [again] = [t for t in study.trials if t.state != State.FAIL and trial_params(t) == planned]  # queued again
    assert again.user_attrs["design"] == study.trials[interrupted.number].user_attrs["design"]
    with pytest.raises(ValueError, match="priced its trials by time, not dollars"):
        studies.run_study(lambda params, data: [], data, DOLLARS, space=(), starts={"seed": {}}, trials=1,
                          storage=storage, study_name="s")
    with pytest.raises(ValueError, match="other dialogues or turns"):
        other = studies.ObjectiveData.of("other", {"wow": data.dialogues[:4]})
        studies.run_study(lambda params, data: [], other, SERVER_TIME, space=(), starts={"seed": {}}, trials=1,
                          storage=storage, study_name="s")


def test_compile_budget_picks_the_most_accurate_front_trial_and_refuses_one_losing_to_the_seed(tmp_path, data):
    data, _ = data
    result = export(seed_study(data)[0])
    path = result.save(tmp_path / "result.json")
    seed, two, none = result.trials
    runner = CliRunner()

    def compile_within(budget: float):
        return runner.invoke(app, ["compile", "--study", str(path), "--budget", str(budget), "--name", "picked",
                                   "--out-dir", str(tmp_path / "out")])

    picked = compile_within((two.cost + seed.cost) / 2)
    assert picked.exit_code == 0, picked.output
    assert f"trial {two.number}" in picked.output and "gate against the seed (trial 0)" in picked.output
    program = Vista.from_program(tmp_path / "out" / "picked.json")
    assert len(program.verify.demos) == 2 and len(program.categorize.demos) == 9
    meta = json.loads((tmp_path / "out" / "picked.meta.json").read_text())
    assert meta["gate"]["passed"] and meta["settings"]["trial"] == two.number
    assert meta["scores"]["compiled"]["cost"] == two.cost and meta["scores"]["base"]["trial"] == seed.number
    assert picked.stdout.strip().endswith("picked.json")

    (tmp_path / "out" / "picked.json").unlink()
    cheap = compile_within((none.cost + two.cost) / 2)  # only the blind trial is within: it loses to the seed
    assert cheap.exit_code == 0, cheap.output
    assert f"trial {none.number}" in cheap.output and "failed" in cheap.output and "refused" in cheap.output
    assert not (tmp_path / "out" / "picked.json").exists()

    rich = compile_within(seed.cost * 2)  # the seed is dominated: the cheaper, as accurate trial is picked
    assert f"trial {two.number}" in rich.output and rich.exit_code == 0

    keep = runner.invoke(app, ["compile", "--study", str(path), "--budget", str((none.cost + two.cost) / 2),
                               "--always-save", "--out-dir", str(tmp_path / "out")])
    assert keep.exit_code == 2 and "kept only as a named program" in keep.output  # never the model's default

    nothing = compile_within(none.cost / 2)
    assert nothing.exit_code == 2 and "no front trial" in nothing.output
    alone = runner.invoke(app, ["compile", "--trial", "1"])
    assert alone.exit_code == 2 and "--trial takes --study" in alone.output
    both = runner.invoke(app, ["compile", "--study", str(path), "--trial", "1", "--budget", "1"])
    assert both.exit_code == 2 and "--study takes one of --budget" in both.output


def test_compile_trial_builds_the_trial_asked_for_on_the_front_or_off_it_and_gates_it_likewise(tmp_path, data):
    data, _ = data
    path = export(seed_study(data)[0]).save(tmp_path / "result.json")
    seed, two, none = StudyResult.load(path).trials
    runner = CliRunner()

    def compile_trial(*args: str):
        return runner.invoke(app, ["compile", "--study", str(path), *args, "--name", "asked",
                                   "--out-dir", str(tmp_path / "out")])

    built = compile_trial("--trial", str(two.number))
    assert built.exit_code == 0, built.output
    assert f"asked for: trial {two.number}" in built.output and "(on the front)" in built.output
    meta = json.loads((tmp_path / "out" / "asked.meta.json").read_text())
    assert meta["settings"]["trial"] == two.number and meta["settings"]["budget"] is None and meta["gate"]["passed"]
    assert len(Vista.from_program(tmp_path / "out" / "asked.json").verify.demos) == 2
    assert "that trial is the seed itself" in compile_trial("--trial", str(seed.number)).output
    losing = compile_trial("--trial", str(none.number))  # the blind trial loses to the seed: refused
    assert losing.exit_code == 0 and "refused" in losing.output
    assert compile_trial("--trial", "99").exit_code == 2
    both = compile_trial("--trial", "1", "--budget", "1")
    assert both.exit_code == 2 and "--study takes one of --budget" in both.output


def test_the_study_page_is_reproduced_from_committed_results(tmp_path, data):
    data, _ = data
    result = export(seed_study(data)[0])
    first = result.save(tmp_path / "a.json")
    second = result.model_copy(update={"study": "sibling", "model_name": "sibling"}).save(tmp_path / "b.json")
    out = tmp_path / "page.html"
    made = CliRunner().invoke(app, ["study-page", str(first), str(second), "--out", str(out)])
    assert made.exit_code == 0, made.output
    page = out.read_text()
    assert page.count("<svg") == 3  # each study's front, and the two side by side
    assert page.count("<h3>The front</h3>") == 2 and "a third of the demos" not in page
    assert "seed, but two Verify demos" in page and "no Verify demos" in page
    for trial in result.front():
        assert f"<tr><td>{trial.number}</td>" in page
    ladder = result.budgets()  # the pick changes at each front trial's cost, and stays within its range
    assert [t.number for t, *_ in ladder] == [t.number for t in result.front()] and ladder[-1][2] is None
    for trial, low, high in ladder:
        assert result.pick(low).number == trial.number and f"{low:.4g} {'and over' if high is None else 'to'}" in page
        if high is not None:
            assert result.pick((low + high) / 2).number == trial.number and result.pick(high).number != trial.number
    assert made.stdout.count("picked within budgets") == 2 * len(ladder)
    broken = tmp_path / "broken.json"
    broken.write_text("{}")
    refused = CliRunner().invoke(app, ["study-page", str(broken), "--out", str(out)])
    assert refused.exit_code == 2 and "not a study result" in refused.output


def test_prices_read_the_server_time_or_litellm_s_cost_map():
    from vista_dspy.lm.offline import offline_litellm

    offline_litellm()
    import litellm

    timed = Usage()
    timed.add("verify", "hosted_vllm/x", UsageCounts(calls=2, prompt_tokens=10, completion_tokens=3,
                                                     prompt_ms=1500.0, generation_ms=500.0))
    assert SERVER_TIME.of(timed) == 2.0
    untimed = Usage()
    untimed.add("verify", "openai/gpt-4o", UsageCounts(calls=2, prompt_tokens=1000, completion_tokens=100))
    with pytest.raises(PriceError, match="without the server's timings"):
        SERVER_TIME.of(untimed)
    assert DOLLARS.of(untimed) == pytest.approx(sum(litellm.cost_per_token(model="openai/gpt-4o", prompt_tokens=1000,
                                                                           completion_tokens=100)))
    assert DOLLARS.per_turn(DOLLARS.of(untimed), 2) == pytest.approx(500 * DOLLARS.of(untimed))
    unknown = Usage()
    unknown.add("verify", "nowhere/no-such-model", UsageCounts(calls=1, prompt_tokens=1, completion_tokens=1))
    with pytest.raises(PriceError, match="no price"):
        DOLLARS.of(unknown)


def test_cli_study_over_http_exports_its_result_and_page(tmp_path, data):
    from vista_dspy.lm.fake import FakeOpenAIServer

    _, path = data
    with FakeOpenAIServer() as server:
        result = CliRunner().invoke(app, [
            "study", "--model", "openai/fake", "--api-base", server.url, "--dev", f"vista-human={path}:all",
            "--train", "none", "--trials", "2", "--storage", f"sqlite:///{tmp_path / 's.db'}", "--no-cache",
            "--export", str(tmp_path / "r.json"), "--report", str(tmp_path / "r.html")])
    assert result.exit_code == 0, result.output
    exported = StudyResult.load(tmp_path / "r.json")
    assert exported.price["name"] == "time" and len(exported.completed()) == 2
    # No compiled program ships for this model: what `vista evaluate` runs for it is the seed, marked as both.
    assert exported.trials[0].marks == ["seed", "shipped"] and exported.model == "openai/fake"
    assert exported.command.startswith("vista study --model openai/fake") and "--trials 2" in exported.command
    assert "Pareto front" in result.stdout and (tmp_path / "r.html").read_text().count("<svg") == 1
    text = (tmp_path / "r.json").read_text()
    assert "opens at nine" not in text  # ids, letters, hashes and the starting programs: no dataset text
    assert exported.starting_programs()["seed"].content_hash() == exported.programs["seed"]


def test_a_study_on_a_sample_of_the_suite_keeps_each_dataset_s_share_and_is_seeded():
    """`--n-dev` with `suite:compile`: a trial judged on all 341 compile turns takes hours with the seed on 2 cores;
    a seeded sample keeps each dataset's share of the part, and the same seed draws the same dialogues."""
    from helpers import shared_data

    from vista_dspy.cli.train_dev import objective_data

    data_dir = shared_data()
    whole = objective_data("suite:compile", data_dir, 0, None)
    sample = objective_data("suite:compile", data_dir, 0, 60)
    assert len(sample.dialogues) == 60 and sample.name == "suite:compile[60 dialogues, seed 0]"
    assert {d.id for d in sample.dialogues} < {d.id for d in whole.dialogues}
    for dataset in set(whole.datasets):  # each dataset's share of the 60, within one dialogue
        share = whole.datasets.count(dataset) / len(whole.datasets) * 60
        assert abs(sample.datasets.count(dataset) - share) < 1
    assert [d.id for d in objective_data("suite:compile", data_dir, 0, 60).dialogues] == [d.id for d in sample.dialogues]
    assert [d.id for d in objective_data("suite:compile", data_dir, 1, 60).dialogues] != [d.id for d in sample.dialogues]


def test_a_study_on_a_suite_sample_builds_its_demo_pool_from_the_compile_dialogues_the_sample_left_out():
    """`--dev suite:compile --n-dev N`: vista-human:pool overlaps the suite's compile part, so the default pool is
    the compile part's own annotated dialogues outside the sample -- never a --dev dialogue, never a test one."""
    from helpers import shared_data

    from vista_dspy.cli.train_dev import objective_data, pool_dialogues, pool_spec
    from vista_dspy.optimize.demos import annotated

    data_dir = shared_data()
    sample = objective_data("suite:compile", data_dir, 0, 60)
    dev = frozenset(d.id for d in sample.dialogues)
    pool, info = pool_dialogues("suite:compile", data_dir, 0, None, dev)
    compile_ids = {d.id for d in objective_data("suite:compile", data_dir, 0, None).dialogues}
    assert {d.id for d in pool} == compile_ids - dev and info["part"] == "compile"
    assert annotated(pool)  # vista-human dialogues the sample did not draw
    assert not {d.id for d in pool} & {d.id for d in objective_data("suite:test", data_dir, 0, None).dialogues}
    again, _ = pool_dialogues(pool_spec(info), data_dir, 0, None, dev)  # what `vista compile --budget` rebuilds
    assert [d.id for d in again] == [d.id for d in pool]
    other, other_info = pool_dialogues("vista-human:pool", data_dir, 0, None)
    assert [d.id for d in pool_dialogues(pool_spec(other_info), data_dir, 0, None)[0]] == [d.id for d in other]


def test_a_new_study_prices_the_shipped_program_with_no_lm_and_fewer_demos_right_after_the_starts(data):
    """Right after the starts, before the seed's one-factor designs, a new study prices the shipped program with no
    LM call at all (an empty cascade band) and without its few-shot demos (most of what it reads), and then with a
    third of them: what its LM buys and what its prompts cost are on the page after the first trials."""
    data, _ = data
    seed, local = Vista.from_program(None), Vista.from_program("local")
    for stage in studies.STAGES:  # the local program with all the seed's demos (the one that ships reads a third)
        getattr(local, stage).demos = list(getattr(seed, stage).demos)
    # ... and no cascade: its rule asks the LM about every unit, whatever its evidence weights make of these turns
    local.rule = local.rule.model_copy(update={"cascade": None})
    bases = {"seed": seed, "local": local}
    space = studies.search_space(bases)
    starts = {name: studies.base_params(name, base, space) for name, base in bases.items()}
    with dspy.context(lm=priced_lm(PricedEngine()), adapter=dspy.JSONAdapter()):
        study = studies.run_study(studies.program_judge(bases, None), data, SERVER_TIME, space=space,
                                  starts={"seed": starts["seed"], "shipped": starts["local"]}, trials=4,
                                  study_name="s", designs=DESIGNS, bases=bases)
    seed, shipped, no_lm, bare = study.trials[:4]
    assert shipped.user_attrs["marks"] == ["shipped"] and bare.user_attrs["design"] == "shipped, but no demos"
    assert no_lm.params == {**starts["local"], "cascade": studies.NO_LM_BAND}
    assert bare.params == {**starts["local"], "demos_decompose": 0, "demos_verify": 0, "demos_categorize": 0}
    waiting = [t.user_attrs["design"] for t in study.trials[4:]]
    assert waiting == ["shipped, but a third of the demos", "shipped, but one demo per stage",
                       "shipped, but terse instructions", "shipped, but terse instructions and one demo per stage",
                       "shipped, but terse instructions and no demos",
                       "seed, but two Verify demos", "seed, but no Verify demos"]
    outcomes = [t.user_attrs["outcome"] for t in (shipped, no_lm, bare)]
    assert outcomes[1]["calls_per_turn"] == 0 and outcomes[1]["cost"] == 0 < outcomes[0]["cost"]
    assert outcomes[2]["prompt_tokens_per_turn"] < outcomes[0]["prompt_tokens_per_turn"]


def test_an_interrupted_study_says_how_to_resume_exits_130_and_the_rerun_completes_it(tmp_path, data, monkeypatch):
    from vista_dspy.lm.fake import FakeOpenAIServer

    _, path = data
    real_judge, calls = studies.program_judge, []

    def judge_interrupted_once(*args, **kwargs):
        judge = real_judge(*args, **kwargs)

        def judged(params, data):
            calls.append(params)
            if len(calls) == 2:  # Ctrl-C during the second trial
                raise KeyboardInterrupt
            return judge(params, data)
        return judged

    monkeypatch.setattr(studies, "program_judge", judge_interrupted_once)
    command = ["study", "--model", "openai/fake", "--dev", f"vista-human={path}:all", "--train", "none",
               "--trials", "2", "--storage", f"sqlite:///{tmp_path / 's.db'}", "--study-name", "s", "--no-cache",
               "--export", str(tmp_path / "r.json")]
    with FakeOpenAIServer() as server:
        stopped = CliRunner().invoke(app, [*command, "--api-base", server.url])
        assert stopped.exit_code == 130 and "Traceback" not in stopped.output
        assert "interrupted: 1 trials complete" in stopped.output and "rerun the same command" in stopped.output
        so_far = StudyResult.load(tmp_path / "r.json")  # the result so far, committed data a lost store is rebuilt from
        assert [t.state for t in so_far.trials] == ["COMPLETE", "FAIL"] and so_far.trials[1].params == calls[1]
        resumed = CliRunner().invoke(app, [*command, "--api-base", server.url])
    assert resumed.exit_code == 0, resumed.output
    import optuna

    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path / 's.db'}")
    done = [t.params for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    waiting = [t.system_attrs.get("fixed_params") for t in study.trials if t.state == optuna.trial.TrialState.WAITING]
    assert len(calls) == 3 and calls[0] in done and calls[2] in done  # the first trial was not judged again
    assert calls[1] not in done and calls[1] in waiting  # the trial in flight is queued to run again


def test_the_seed_gate_compares_claims_only_over_two_dialogues_or_more():
    """A sentences program shares few claim keys with the seed's decomposed claims: one dialogue's worth cannot be
    resampled, so the claims are not compared (and the gate stands on the turns), where it used to crash."""
    from vista_dspy.optimize.gate import seed_gate

    turns = [("a", "h"), ("b", "f"), ("c", "h"), ("d", "f")]
    one = seed_gate(turns, "hfhf", "hhhf", candidate_claims={"a#0#x": "uu", "a#0#y": "ss"},
                    seed_claims={"a#0#x": "us", "a#0#y": "ss"})
    assert one.claims is None and one.passed and "not compared" in one.describe()[1]
    two = seed_gate(turns, "hfhf", "hhhf", candidate_claims={"a#0#x": "uu", "b#0#y": "ss"},
                    seed_claims={"a#0#x": "us", "b#0#y": "ss"})
    assert two.claims is not None and two.claims["claims"] == 2


def test_claims_from_one_dialogue_are_measured_without_an_interval_not_a_crash(data):
    """One dialogue's claims cannot be resampled over dialogues: the trial keeps its claim decisions with no
    interval (and the page says so), where the bootstrap used to fail the whole trial after it had been judged."""
    from vista_dspy.experiments.study_page import _claims_cell

    data, _ = data
    bases = {"seed": Vista.from_program(None)}
    with dspy.context(lm=priced_lm(PricedEngine()), adapter=dspy.JSONAdapter()):
        verdicts = studies.program_judge(bases, None)(studies.base_params("seed", bases["seed"],
                                                                          studies.search_space(bases)), data)
    for verdict in verdicts[1:]:  # only the first dialogue keeps its claims
        for turn in verdict.turns:
            turn.claims = []
    outcome = studies.measure(data, verdicts, SERVER_TIME)
    assert outcome.claim_decisions == 1.0 and outcome.claim_decisions_interval is None
    assert _claims_cell(outcome) == "1.000 (one dialogue: no interval)"
    with pytest.raises(ValueError, match="two or more"):  # the mechanism says why, for any caller
        balanced_accuracy_interval(["h", "f"], ["h", "f"], ["d1", "d1"])


def test_a_resumed_study_queues_the_designs_added_since_it_began(tmp_path, data):
    data, _ = data
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    study, _ = seed_study(data, trials=2, storage=storage, designs=DESIGNS[:1])
    assert [t.user_attrs.get("design") for t in study.trials] == [None, "seed, but two Verify demos"]
    study, _ = seed_study(data, trials=3, storage=storage, designs=DESIGNS)
    assert [t.user_attrs.get("design") for t in study.trials] == [None, "seed, but two Verify demos",
                                                                  "seed, but no Verify demos"]
    assert study.trials[2].state == optuna.trial.TrialState.COMPLETE and study.trials[2].params["demos_verify"] == 0


def test_compile_budget_rebuilds_a_trial_from_the_program_the_study_kept_not_from_today_s_default(tmp_path, data):
    """A study of a shipped program that has since changed (a new default with fewer demos shipped under its name):
    the trial is rebuilt from the program file the study kept; a study that kept only the hash is refused."""
    data, _ = data
    seed, local = Vista.from_program(None), Vista.from_program("local")
    for stage in studies.STAGES:  # what "local" was when the study ran: all the seed's demos (today's has a third)
        getattr(local, stage).demos = list(getattr(seed, stage).demos)
    bases = {"seed": seed, "local": local}
    space = studies.search_space(bases)
    starts = {"seed": studies.base_params("seed", seed, space), "shipped": studies.base_params("local", local, space)}
    kept = {"programs": {k: b.content_hash() for k, b in bases.items()},
            "program_files": {k: b.program_file().to_json() for k, b in bases.items()}}
    with dspy.context(lm=priced_lm(PricedEngine()), adapter=dspy.JSONAdapter()):
        study = studies.run_study(studies.program_judge(bases, None), data, SERVER_TIME, space=space,
                                  starts=starts, trials=2, study_name="s", designs=(), start_designs=(),
                                  bases=bases, record=kept)
    result = export(study)
    shipped = result.marked("shipped")
    assert shipped.params["demos_verify"] == 6 and len(Vista.from_program("local").verify.demos) < 6
    path = result.save(tmp_path / "result.json")
    made = CliRunner().invoke(app, ["compile", "--study", str(path), "--budget", str(shipped.cost * 2), "--name",
                                    "picked", "--out-dir", str(tmp_path / "out")])
    assert made.exit_code == 0 and f"trial {shipped.number}" in made.output, made.output
    assert Vista.from_program(tmp_path / "out" / "picked.json").content_hash() == local.content_hash()

    legacy = result.model_copy(update={"program_files": {"seed": result.program_files["seed"]}})
    refused = CliRunner().invoke(app, ["compile", "--study", str(legacy.save(tmp_path / "legacy.json")), "--budget",
                                       str(shipped.cost * 2), "--out-dir", str(tmp_path / "out")])
    assert refused.exit_code == 2 and "program local is not the one study s measured" in refused.output
    assert "did not keep that program" in refused.output


def test_a_resumed_study_starts_from_the_programs_it_kept_and_refuses_one_it_cannot_rebuild(tmp_path, data):
    from vista_dspy.lm.fake import FakeOpenAIServer

    _, path = data
    storage = f"sqlite:///{tmp_path / 's.db'}"
    study_command = ["study", "--model", "openai/fake", "--dev", f"vista-human={path}:all", "--train", "none",
                     "--storage", storage, "--study-name", "s", "--no-cache"]
    with FakeOpenAIServer() as server:
        first = CliRunner().invoke(app, [*study_command, "--api-base", server.url, "--trials", "1"])
        assert first.exit_code == 0, first.output
        stored = optuna.load_study(study_name="s", storage=storage)
        assert set(stored.user_attrs["program_files"]) == {"seed"}
        assert stored.user_attrs["instructions"] == studies.INSTRUCTIONS  # the texts its terse trials measure
        stored.set_user_attr("programs", {"seed": "0" * 64})  # the kept file no longer has the hash measured
        refused = CliRunner().invoke(app, [*study_command, "--api-base", server.url, "--trials", "2"])
    assert refused.exit_code == 2 and "program seed is not the one study s measured" in refused.output
    states = [t.state for t in optuna.load_study(study_name="s", storage=storage).trials]
    assert states.count(optuna.trial.TrialState.COMPLETE) == 1 and optuna.trial.TrialState.RUNNING not in states


def test_the_committed_front_rebuilds_the_shipped_program_at_its_recorded_budget(tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    compiled = root / "vista_dspy" / "compiled"
    settings = json.loads((compiled / "local.meta.json").read_text())["settings"]
    result = CliRunner().invoke(app, ["compile", "--study", str(root / "benchmarks" / "fronts" / "local-1.5b.json"),
                                      "--budget", str(settings["budget"]), "--out-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert f"trial {settings['trial']}" in result.output
    # The trial's design, as the study measured it; the shipped rule is its refit on the compile part (issue 60).
    rebuilt, shipped = (json.loads(path.read_text()) for path in (tmp_path / "local.json", compiled / "local.json"))
    assert rebuilt["vista"]["options"] == shipped["vista"]["options"]
    assert {k: v for k, v in rebuilt.items() if k != "vista"} == {k: v for k, v in shipped.items() if k != "vista"}
    assert rebuilt["vista"]["rule"]["cascade"] == shipped["vista"]["rule"]["cascade"]
    assert settings["rule_compiled"]["command"] == "python benchmarks/refit_compile_part.py --write"


def test_terse_instructions_change_verify_and_categorize_only_and_stay_in_the_saved_program(tmp_path):
    from vista_dspy.signatures import TERSE_INSTRUCTIONS

    bases = {"seed": Vista.from_program(None)}
    params = studies.base_params("seed", bases["seed"], studies.search_space(bases))
    assert params["instructions"] == "base"
    terse = studies.candidate(bases, None, {**params, "instructions": "terse"})
    saved = Vista.from_program(terse.save_program(tmp_path / "terse.json"))
    for stage in studies.STAGES:
        expected = TERSE_INSTRUCTIONS.get(stage, getattr(bases["seed"], stage).signature.instructions)
        assert getattr(saved, stage).signature.instructions == expected
    assert terse.content_hash() != studies.candidate(bases, None, params).content_hash() == bases["seed"].content_hash()
    kept = {"terse": {"verify": "The wording a study measured."}}  # a study's record wins over today's texts
    rebuilt = studies.candidate(bases, None, {**params, "instructions": "terse"}, kept)
    assert rebuilt.verify.signature.instructions == "The wording a study measured."
    assert rebuilt.categorize.signature.instructions == bases["seed"].categorize.signature.instructions


def test_a_study_begun_before_a_choice_existed_is_resumed_without_measuring_its_trials_again(tmp_path, data):
    """Trials recorded without the instructions choice did what 'base' does: the resumed study does not queue the
    seed again, and queues the design that changes it."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    data, _ = data
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    bases = {"seed": Vista.from_program(None)}
    space = studies.search_space(bases)
    old = {k: v for k, v in studies.base_params("seed", bases["seed"], space).items() if k != "instructions"}
    kinds = {c.name: IntDistribution(c.values[0], c.values[-1]) if c.integer else CategoricalDistribution(c.values)
             for c in space}
    begun = optuna.create_study(study_name="s", storage=storage, directions=["maximize", "minimize"])
    begun.add_trial(optuna.trial.create_trial(params=old, distributions={k: kinds[k] for k in old},
                                              values=[0.5, 1.0], user_attrs={"marks": ["seed"]}))
    begun.set_user_attr("data", data.describe())
    begun.set_user_attr("price", SERVER_TIME.as_dict())
    study, _ = seed_study(data, trials=2, storage=storage, designs=[({"instructions": "terse"}, "terse instructions")])
    assert [t.user_attrs.get("design") for t in study.trials] == [None, "seed, but terse instructions"]
    assert study.trials[1].state == optuna.trial.TrialState.COMPLETE
    assert study.trials[1].params["instructions"] == "terse"


def test_a_study_whose_store_was_lost_resumes_from_its_committed_result_as_from_its_store(tmp_path, data):
    """The store lives outside the repository; on a new machine the committed result rebuilds it: the resumed study
    measures the trials the kept store would have measured, and none it had measured."""
    data, _ = data
    kept, lost = (f"sqlite:///{tmp_path / name}" for name in ("kept.db", "lost.db"))
    study, _ = seed_study(data, trials=1, storage=kept)
    study.ask()  # trial 1, the first design, left RUNNING by a kill
    result = export(optuna.load_study(study_name="s", storage=kept))
    assert [t.state for t in result.trials] == ["COMPLETE", "RUNNING"]
    assert restore(result, lost) == 2 and restore(result, lost) == 0  # a store that holds the study is left alone
    from_store, store_engine = seed_study(data, trials=3, storage=kept)
    from_result, result_engine = seed_study(data, trials=3, storage=lost)
    assert len(result_engine.requests) == len(store_engine.requests) > 0
    view = [[(t.state.name, trial_params(t), t.values, t.user_attrs.get("design"), t.user_attrs.get("marks"))
             for t in s.trials] for s in (from_store, from_result)]
    # The trials it had keep their numbers; the queue (not exported) is planned again, in its own order.
    assert view[0][:2] == view[1][:2] and sorted(map(str, view[0][2:])) == sorted(map(str, view[1][2:]))
    assert [t[0] for t in view[1]] == ["COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]


def test_cli_study_from_result_rebuilds_a_lost_store_and_refuses_another_study_s_result(tmp_path, data):
    from vista_dspy.lm.fake import FakeOpenAIServer

    _, path = data
    common = ["study", "--model", "openai/fake", "--dev", f"vista-human={path}:all", "--train", "none", "--no-cache",
              "--no-designs", "--study-name", "s", "--from-result", str(tmp_path / "r.json")]
    with FakeOpenAIServer() as server:
        first = CliRunner().invoke(app, [*common[:-2], "--api-base", server.url, "--trials", "2", "--storage",
                                         f"sqlite:///{tmp_path / 'a.db'}", "--export", str(tmp_path / "r.json")])
        assert first.exit_code == 0, first.output
        resumed = CliRunner().invoke(app, [*common, "--api-base", server.url, "--trials", "3", "--storage",
                                           f"sqlite:///{tmp_path / 'b.db'}", "--export", str(tmp_path / "r3.json"),
                                           "--queue", "0:demos_verify=1"])
        wrong = [CliRunner().invoke(app, [*common, "--api-base", server.url, "--storage",
                                          f"sqlite:///{tmp_path / 'b.db'}", "--queue", text])
                 for text in ("7:demos_verify=1", "0:demos_verify=99", "0:cascade=0.40-0.60", "0:")]
        other = CliRunner().invoke(app, [*common, "--api-base", server.url, "--study-name", "t", "--storage",
                                         f"sqlite:///{tmp_path / 'c.db'}"])
    assert resumed.exit_code == 0, resumed.output
    assert "rebuilt 2 trials" in resumed.output
    before, after = StudyResult.load(tmp_path / "r.json"), StudyResult.load(tmp_path / "r3.json")
    assert len(after.completed()) == 3 and after.trials[:2] == before.trials
    queued = after.trials[2]  # trial 0 with the change asked for, before any TPE sample
    assert queued.design == "trial 0, but demos_verify=1"
    assert " --queue 0:demos_verify=1 " in f"{after.command} "  # a repeatable option recorded as typed
    assert queued.params == {**before.trials[0].params, "demos_verify": 1}
    assert [w.exit_code for w in wrong] == [2] * 4
    assert "no recorded trial '7'" in wrong[0].output and "takes 0 to 6" in wrong[1].output
    assert "no choice 'cascade'" in wrong[2].output  # the seed has no rule: its study has no cascade choice
    assert "at least one CHOICE=VALUE" in wrong[3].output
    assert other.exit_code == 2 and "not of 't'" in other.output


def test_a_study_whose_choices_gained_values_is_rebuilt_under_them_and_resumes(tmp_path, data):
    """Optuna fixes a categorical choice's values per study: a study begun before a value was added (a new cascade
    band) is rebuilt under today's choices with its trials kept, and then samples and queues the new value."""
    from vista_dspy.optimize.study.result import widen_space

    data, _ = data
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    bases = {"seed": Vista.from_program(None)}
    space = studies.search_space(bases)
    seed_study(data, trials=2, storage=storage)
    before = export(optuna.load_study(study_name="s", storage=storage))
    narrower = [{**c, "values": [3, 6]} if c["name"] == "demos_verify" else c for c in (x.as_dict() for x in space)]
    with pytest.raises(ValueError, match="trial 1 took demos_verify=2, which the study's choices no longer offer"):
        widen_space(storage, "s", narrower)
    assert export(optuna.load_study(study_name="s", storage=storage)).trials == before.trials  # nothing written
    wider = [{**c, "values": [*c["values"], "plain"]} if c["name"] == "instructions" else c
             for c in (choice.as_dict() for choice in space)]
    assert widen_space(storage, "s", wider) and not widen_space(storage, "s", wider)
    after = optuna.load_study(study_name="s", storage=storage)
    assert export(after).trials == before.trials
    assert after.trials[0].distributions["instructions"].choices == ("base", "terse", "plain")
    after.enqueue_trial({**after.trials[0].params, "instructions": "plain"})
    trial = after.ask()  # the new value is one a trial can take now
    assert trial.suggest_categorical("instructions", ["base", "terse", "plain"]) == "plain"


def test_a_trial_that_failed_while_suggesting_is_queued_again_with_all_it_was_queued_with():
    """A trial can fail halfway through its choices (optuna refusing one); it is queued again with the choices it
    was queued with, not only those it had suggested, and keeps its design."""
    from vista_dspy.optimize.study.plan import requeue_unfinished

    study = optuna.create_study(directions=["maximize", "minimize"])
    study.enqueue_trial({"units": "claims", "cascade": "0.40-0.60"}, user_attrs={"design": "a narrower band"})
    trial = study.ask()
    trial.suggest_categorical("units", ["claims", "sentences"])  # then failed before suggesting its cascade
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    requeue_unfinished(study, {"units", "cascade"})
    [queued] = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert trial_params(queued) == {"units": "claims", "cascade": "0.40-0.60"}
    assert queued.user_attrs["design"] == "a narrower band"


def test_a_trial_that_failed_before_a_choice_existed_is_queued_again_at_its_old_value_not_sampled():
    """A failed trial from before the instructions choice did what 'base' does: requeued, it is fixed at 'base',
    not left for the sampler to draw (which once measured a 'sentences' design with terse instructions)."""
    from vista_dspy.optimize.study.plan import requeue_unfinished

    study = optuna.create_study(directions=["maximize", "minimize"])
    study.enqueue_trial({"units": "sentences"}, user_attrs={"design": "seed, but sentences"})
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    requeue_unfinished(study, {"units", "instructions"})
    [queued] = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert trial_params(queued) == {"units": "sentences", "instructions": "base"}
    requeue_unfinished(study, {"units", "instructions"})  # once: a second resume queues nothing more
    assert len(study.get_trials(states=(optuna.trial.TrialState.WAITING,))) == 1
    # A trial queued before the choice existed, still waiting (the 0.5B's label-only design drew terse instructions):
    # queued again at the old value, its design kept, nothing else run.
    study.enqueue_trial({"units": "claims"}, user_attrs={"design": "seed, but claims"})
    requeue_unfinished(study, {"units", "instructions"})
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert [(trial_params(t), t.user_attrs["design"]) for t in waiting] == [
        ({"units": "sentences", "instructions": "base"}, "seed, but sentences"),
        ({"units": "claims", "instructions": "base"}, "seed, but claims")]
    assert not study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))


def test_a_failed_trial_whose_requeue_completed_is_not_queued_again_on_the_next_resume():
    """A failed trial rebuilt from a result keeps only the choices it had suggested; once its requeue (same design,
    those choices and more) has completed, a later resume queues nothing (the 1.5B's trial 18 was queued a second
    time so, and the sampler drew the band it lacked)."""
    from vista_dspy.optimize.study.plan import requeue_unfinished

    study = optuna.create_study(directions=["maximize", "minimize"])
    units = optuna.distributions.CategoricalDistribution(["claims", "sentences"])
    band = optuna.distributions.CategoricalDistribution(["0.30-0.70", "0.50-0.50"])
    design = {"design": "trial 15, but cascade=0.30-0.70"}
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params={"units": "sentences"},
                                              distributions={"units": units}, user_attrs=design))
    study.add_trial(optuna.trial.create_trial(values=[0.7, 1.8], params={"units": "sentences", "cascade": "0.30-0.70"},
                                              distributions={"units": units, "cascade": band}, user_attrs=design))
    requeue_unfinished(study, {"units", "cascade"})
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    # another design's completed trial with the same choices is no requeue of it: the failed trial is queued
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params={"units": "claims"},
                                              distributions={"units": units}, user_attrs={"design": "claims"}))
    study.add_trial(optuna.trial.create_trial(values=[0.6, 1.0], params={"units": "claims", "cascade": "0.50-0.50"},
                                              distributions={"units": units, "cascade": band},
                                              user_attrs={"design": "something else"}))
    requeue_unfinished(study, {"units", "cascade"})
    [queued] = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert trial_params(queued) == {"units": "claims"} and queued.user_attrs["design"] == "claims"
    # a requeue from before a choice existed counts at that choice's old value: still the failed trial's requeue
    waiting = len(study.get_trials(states=(optuna.trial.TrialState.WAITING,)))
    requeue_unfinished(study, {"units", "cascade", "instructions"})
    assert len(study.get_trials(states=(optuna.trial.TrialState.WAITING,))) == waiting

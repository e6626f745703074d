"""The study's selection protocol without an LM: the named parts of the annotated file, trial parameters that
describe the base program, the gate between the best trial and the base trial, and the stage-wise reading of
end-to-end verdicts."""

from collections import Counter

import optuna
import pytest

from vista_dspy.data import load_dialogues, part_of
from vista_dspy.optimize.demos import Pool
from vista_dspy.optimize.metrics import decomposition_agreement
from vista_dspy.optimize.study import base_params, gate, program_from_params
from vista_dspy.program import Vista
from vista_dspy.schema import Category, ClaimVerdict, DialogueVerdict, TurnVerdict


@pytest.fixture(scope="module")
def dialogues():
    from conftest import DEV_FILE

    if not DEV_FILE.exists():
        pytest.skip(f"benchmark data not found at {DEV_FILE}")
    return load_dialogues(DEV_FILE)


def test_parts_are_disjoint_halves_and_pool_select_halve_train_within_each_source(dialogues):
    ids = {part: [d.id for d in part_of(dialogues, part, 0)] for part in ("train", "dev", "pool", "select", "all")}
    assert not set(ids["train"]) & set(ids["dev"]) and set(ids["train"]) | set(ids["dev"]) == set(ids["all"])
    assert not set(ids["pool"]) & set(ids["select"]) and set(ids["pool"]) | set(ids["select"]) == set(ids["train"])
    source = {d.id: d.source["dataset"] for d in dialogues}
    pool, select = Counter(source[i] for i in ids["pool"]), Counter(source[i] for i in ids["select"])
    assert len(pool | select) > 1  # the dev file mixes source datasets
    assert all(abs(pool[k] - select[k]) <= 1 for k in pool | select)  # stratified by source dataset
    assert ids["pool"] == [i for i in ids["train"] if i in set(ids["pool"])]  # file order kept
    assert [d.id for d in part_of(dialogues, "dev", 1)] != ids["dev"]  # the seed moves the split
    with pytest.raises(ValueError, match="unknown part 'test'"):
        part_of(dialogues, "test")


def test_base_params_describe_the_base_program_itself():
    base = Vista.from_program(None)
    params = base_params(base)
    program, adapter = program_from_params(base, Pool(), params)
    assert adapter == "json" and program.options == base.options
    for name in ("decompose", "verify", "categorize"):
        assert getattr(program, name).demos == getattr(base, name).demos
    fewer, _ = program_from_params(base, Pool(), {**params, "demos_verify": 2, "reasoning_verify": True,
                                                  "claim_calls": "batched"})
    assert fewer.verify.demos == base.verify.demos[:2] and fewer.options.reasoning == ("verify",)
    assert fewer.options.claim_calls == "batched"
    # A study recorded before the parameters spoke the options' vocabulary.
    legacy, _ = program_from_params(base, Pool(), {**params, "context": True, "cot_categorize": True})
    assert legacy.options.use_context and legacy.options.reasoning == ("categorize",)


def _study(rights: list[str], values: list[float]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    distribution = optuna.distributions.IntDistribution(0, 9)
    for number, (right, value) in enumerate(zip(rights, values)):
        attrs = {"turns_right": right, **({"base": "seed"} if number == 0 else {})}
        study.add_trial(optuna.trial.create_trial(params={"x": number}, distributions={"x": distribution},
                                                  value=value, user_attrs=attrs))
    return study


def test_the_gate_passes_only_a_significantly_better_best_trial():
    base = "0" * 12 + "1" * 8
    clearly = "1" * 20
    assert gate(_study([base, clearly], [0.4, 1.0])).passed  # 12 turns won, none lost: p < 0.001
    slightly = "11" + "0" * 10 + "1" * 8
    narrow = gate(_study([base, slightly], [0.4, 0.5]))
    assert not narrow.passed and narrow.gate.turns.candidate_only == 2 and "failed" in narrow.describe()
    assert gate(_study([base, slightly], [0.4, 0.5]), alpha=1).passed  # alpha 1: any best that wins a turn
    itself = gate(_study([clearly, base], [1.0, 0.4]))
    assert not itself.passed and "base program's own" in itself.describe()
    with pytest.raises(ValueError, match="same dev turns"):
        gate(_study([base, "1" * 19], [0.4, 1.0]))


def test_decomposition_agreement_matches_claims_and_compares_their_categories(dialogues):
    dialogue = next(d for d in dialogues if d.judged_turns and d.turns[d.judged_turns[0]].gold.claims)
    index = dialogue.judged_turns[0]
    human = dialogue.turns[index].gold.claims
    wrong = next(c for c in Category if c not in (human[0].category, Category.ERROR))
    claims = [ClaimVerdict(claim=human[0].text, category=wrong, stage="categorize"),
              ClaimVerdict(claim="Completely unrelated words here.", category=Category.VERIFIED, stage="verify")]
    claims += [ClaimVerdict(claim=c.text, category=c.category, stage="verify") for c in human[1:]]
    turn = TurnVerdict(turn_index=index, text="", grounding="document", claims=claims, claims_source="decomposed",
                       label="faithful", score=None, knowledge=[])
    result = decomposition_agreement([dialogue], [DialogueVerdict(dialogue_id=dialogue.id, turns=[turn], score=None)])
    assert result.matched == len(human) and result.same_category == len(human) - 1
    assert result.f1 == pytest.approx(2 * len(human) / (2 * len(human) + 1))


def test_a_new_study_starts_with_the_base_then_one_choice_changed_at_a_time(dialogues):
    import dspy

    from vista_dspy.lm.fake import RuleEngine, rule_lm
    from vista_dspy.optimize.study import ONE_FACTOR, run_study

    with dspy.context(lm=rule_lm(RuleEngine()), adapter=dspy.JSONAdapter()):
        study, _, base = run_study(dialogues[:6], dialogues[6:8], trials=3)
    start = base_params(base, "json")
    assert study.trials[0].params == start and study.trials[0].user_attrs["base"] == "seed"
    completed = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(completed) == 3
    for trial, (change, what) in zip(completed[1:], ONE_FACTOR):
        assert trial.params == {**start, **change} and what in trial.user_attrs["design"]
    assert len(study.trials[0].user_attrs["turns_right"]) == sum(len(d.judged_turns) for d in dialogues[6:8])


def test_the_changes_that_beat_the_base_alone_are_tried_together():
    from vista_dspy.optimize.study import _combine_one_factor_winners

    State = optuna.trial.TrialState
    study = optuna.create_study(direction="maximize")
    choice = optuna.distributions.CategoricalDistribution([False, True])
    start = {"a": False, "b": False, "c": False, "d": False}
    for params, value, attrs in ((start, 0.5, {"base": "seed"}),
                                 ({**start, "a": True}, 0.6, {"design": "base, but A"}),
                                 ({**start, "b": True}, None, {"design": "base, but B"}),  # failed, queued again
                                 ({**start, "c": True}, 0.7, {"design": "base, but C"}),
                                 ({**start, "d": True}, 0.5 + 1e-16, {"design": "base, but D"})):  # a float tie
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dict.fromkeys(params, choice),
                                                  value=value, user_attrs=attrs,
                                                  state=State.COMPLETE if value is not None else State.FAIL))
    study.enqueue_trial({**start, "b": True}, user_attrs={"design": "base, but B"})
    _combine_one_factor_winners(study, None)
    assert len(study.get_trials(states=(State.WAITING,))) == 1  # B's rerun is still to come: nothing combined yet
    rerun = study.ask()
    study.tell(rerun, 0.4)
    _combine_one_factor_winners(study, None)
    _combine_one_factor_winners(study, None)  # once only
    [queued] = study.get_trials(states=(State.WAITING,))
    assert queued.system_attrs["fixed_params"] == {"a": True, "b": False, "c": True, "d": False}
    assert queued.user_attrs["design"] == "combined: the base with every change that beat it alone (A; C)"


def test_a_resumed_study_reruns_the_trial_an_interruption_left_running(tmp_path, dialogues):
    import dspy

    from vista_dspy.lm.fake import RuleEngine, rule_lm
    from vista_dspy.optimize.study import run_study

    storage = f"sqlite:///{tmp_path / 's.db'}"
    with dspy.context(lm=rule_lm(RuleEngine()), adapter=dspy.JSONAdapter()):
        study, _, _ = run_study(dialogues[:6], dialogues[6:8], trials=1, storage=storage, study_name="s")
        interrupted = study.ask()  # trial 1, the first one-factor variant, left RUNNING as by a kill
        planned = dict(study.trials[1].system_attrs["fixed_params"])
        study, _, _ = run_study(dialogues[:6], dialogues[6:8], trials=2, storage=storage, study_name="s")
    State = optuna.trial.TrialState
    assert study.trials[interrupted.number].state == State.FAIL
    [again] = [t for t in study.get_trials(states=(State.WAITING,)) if t.system_attrs["fixed_params"] == planned]
    assert again.user_attrs["design"] == study.trials[interrupted.number].user_attrs["design"]
    assert sum(t.state == State.COMPLETE for t in study.trials) == 2


def test_an_interrupted_scoring_is_not_a_score(dialogues):
    import dspy

    from vista_dspy.lm.fake import RuleEngine, rule_lm
    from vista_dspy.optimize.dev_score import score

    def interrupt(message):
        raise KeyboardInterrupt  # Ctrl-C after the first dev dialogue

    with dspy.context(lm=rule_lm(RuleEngine()), adapter=dspy.JSONAdapter()), pytest.raises(KeyboardInterrupt):
        score(Vista.from_program(None), dialogues[:3], log=interrupt)

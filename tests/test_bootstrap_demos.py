"""Verify and Categorize demos chosen by ``dspy.BootstrapFewShot`` from the demo pool's labelled claims (the priced
study's ``source_verify`` / ``source_categorize`` = ``bootstrap``), with the rule engine as the model: it answers the
pool's claims right, except the ones below that the annotators judge otherwise, so exactly which answers the metric
keeps is known. Built once per (stage, count, seed): a second build, and a resumed study, ask the model nothing."""

from __future__ import annotations

import json
from collections import Counter

import dspy
import optuna
import pytest
from helpers import vista_conversation
from test_priced_study import PricedEngine, priced_lm

from vista_dspy.data import load_dialogues
from vista_dspy.lm.fake import RuleEngine, rule_lm
from vista_dspy.optimize import study as studies
from vista_dspy.optimize.demos import LazyPool, labeled_pool
from vista_dspy.optimize.metrics import SERVER_TIME
from vista_dspy.optimize.study.result import StudyStore, export, widen_space
from vista_dspy.program import Vista

# The rule engine verifies a sentence its reference holds, which the annotators call lacking evidence here ...
WRONG_VERIFY = {f"The museum of pool number {i} opens at nine." for i in (2, 4)}
# ... and calls a claim with "not" in it CONTRADICTED, which they call lacking evidence.
WRONG_CATEGORY = "The cafe is not open on Sundays."


def _pool_dialogues(tmp_path):
    conversations = [vista_conversation("pool", i, tricky=i in (2, 4)) for i in range(8)]
    turn = conversations[1][1]  # one more unverifiable claim in a hallucinated turn, miscategorized by the engine
    turn["human_claims"].append({"claim_text": WRONG_CATEGORY, "human_judgement": "lacking evidence"})
    turn["utterance"] += " " + WRONG_CATEGORY
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(conversations))
    return load_dialogues(path, "vista")


@pytest.fixture
def compiles(monkeypatch):
    """Every call of ``dspy.BootstrapFewShot.compile`` (it still runs)."""
    calls = []
    real = dspy.BootstrapFewShot.compile

    def spy(self, student, **kwargs):
        calls.append((self.max_bootstrapped_demos, self.max_labeled_demos, len(kwargs["trainset"])))
        return real(self, student, **kwargs)

    monkeypatch.setattr(dspy.BootstrapFewShot, "compile", spy)
    return calls


def test_bootstrap_keeps_the_answers_that_agree_with_the_annotators_and_tops_up_with_the_labelled_rest(
        tmp_path, compiles):
    seed, engine = Vista.from_program(None), RuleEngine()
    with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
        pool = labeled_pool(seed, _pool_dialogues(tmp_path))
        labelled = {stage: [e for _, e in pool.labelled.demos[stage]] for stage in ("verify", "categorize")}
        assert len(labelled["verify"]) == 13 and len(labelled["categorize"]) == 7  # every claim; the unverifiable
        asked = len(engine.requests)
        verify = pool.bootstrap("verify", 13, 0)
        teacher_prompts = engine.message_counts[asked:]
        categorize = pool.bootstrap("categorize", 7, 0)
    assert compiles == [(13, 13, 13), (7, 7, 7)]  # DSPy's teleprompter, budgets tied to the demo count
    # The teacher is the seed's Verify, reading its own demos (a user / assistant pair each), one claim per call.
    assert set(teacher_prompts) == {2 * len(seed.verify.demos) + 1} and len(teacher_prompts) == 13
    kept = [d for d in verify if d.get("augmented")]
    assert Counter(d.claim for d in kept) == Counter(e.claim for e in labelled["verify"]
                                                     if e.claim not in WRONG_VERIFY)
    assert all(d.label == ("VERIFIED" if "museum" in d.claim else "UNVERIFIABLE") and d.explanation for d in kept)
    rest = [d for d in verify if not d.get("augmented")]  # the annotators' answer, no explanation
    assert sorted(d.claim for d in rest) == sorted(WRONG_VERIFY)
    assert {(d.label, d.explanation) for d in rest} == {("UNVERIFIABLE", "")}
    kept = [d for d in categorize if d.get("augmented")]
    assert len(kept) == 6 and WRONG_CATEGORY not in {d.claim for d in kept}
    assert {d.category for d in kept} == {"LACKING EVIDENCE"}
    assert [(d.claim, d.category) for d in categorize if not d.get("augmented")] == [(WRONG_CATEGORY,
                                                                                      "LACKING EVIDENCE")]
    # A budget below what the teacher gets right: the first k right answers in the seeded order, nothing labelled.
    with dspy.context(lm=rule_lm(RuleEngine()), adapter=dspy.JSONAdapter()):
        two = pool.bootstrap("verify", 2, 3)
    assert len(two) == 2 and all(d.get("augmented") and d.claim not in WRONG_VERIFY for d in two)
    assert pool.bootstrap("verify", 0, 0) == []  # no demo asked for, no teleprompter run
    assert len(compiles) == 3


def test_bootstrapped_demos_are_built_once_per_stage_count_and_seed_and_kept_in_the_store(tmp_path, compiles):
    engine, builds, store = RuleEngine(), [], {}
    dialogues = _pool_dialogues(tmp_path)

    def build():
        builds.append(True)
        return labeled_pool(Vista.from_program(None), dialogues)

    with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
        lazy = LazyPool(build, store)
        first = lazy.bootstrap("verify", 3, 0)
        asked = len(engine.requests)
        assert lazy.bootstrap("verify", 3, 0) == first and len(engine.requests) == asked  # no LM call
        assert list(store) == ["verify/3/0"] and len(store["verify/3/0"]) == 3
        again = LazyPool(build, store)  # a resumed session: the store holds it, no pool is built
        assert [d.toDict() for d in again.bootstrap("verify", 3, 0)] == [d.toDict() for d in first]
    assert len(engine.requests) == asked and builds == [True] and len(compiles) == 1
    program = studies.candidate({"seed": Vista.from_program(None)}, again,
                                {"demos_verify": 3, "source_verify": "bootstrap", "demos_categorize": 2})
    assert [d.claim for d in program.verify.demos] == [d.claim for d in first] and len(program.categorize.demos) == 2


def test_a_study_measures_bootstrapped_demos_and_a_resumed_study_does_not_build_them_again(tmp_path, compiles):
    objective_path = tmp_path / "objective.json"
    objective_path.write_text(json.dumps([vista_conversation("wow", i) for i in range(4)]))
    data = studies.ObjectiveData.of("objective", {"vista-human": load_dialogues(objective_path, "vista")})
    dialogues, storage, builds = _pool_dialogues(tmp_path), f"sqlite:///{tmp_path / 'study.db'}", []
    bases = {"seed": Vista.from_program(None)}

    def session(trials, designs):
        def build():
            builds.append(True)
            return labeled_pool(bases["seed"], dialogues)

        pool = LazyPool(build, StudyStore(storage, "s"))
        space = studies.search_space(bases, pool)
        assert "bootstrap" in next(c for c in space if c.name == "source_categorize").values
        assert "bootstrap" not in next(c for c in space if c.name == "source_decompose").values
        with dspy.context(lm=priced_lm(PricedEngine()), adapter=dspy.JSONAdapter()):  # it reports its server time
            return studies.run_study(studies.program_judge(bases, pool), data, SERVER_TIME, space=space,
                                     starts={"seed": studies.base_params("seed", bases["seed"], space)},
                                     trials=trials, storage=storage, study_name="s", designs=designs, bases=bases)

    bootstrapped = {"source_verify": "bootstrap", "demos_verify": 2}
    study = session(2, [(bootstrapped, "Verify demos by BootstrapFewShot")])
    assert builds == [True] and len(compiles) == 1
    trial = study.trials[1]
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.params["source_verify"] == "bootstrap"
    assert len(study.user_attrs["bootstrap:verify/2/0"]) == 2
    assert "bootstrap:" not in json.dumps(export(study).model_dump(mode="json"))  # no demo text in a result
    more = session(3, [(bootstrapped, "Verify demos by BootstrapFewShot"),
                       ({**bootstrapped, "explain_unverified": False}, "... and label-only Categorize answers")])
    assert more.trials[2].state == optuna.trial.TrialState.COMPLETE
    assert builds == [True] and len(compiles) == 1  # resumed: the stored demos, no pool, no teleprompter
    stored = more.user_attrs["bootstrap:verify/2/0"]
    wider = [{**c, "values": [*c["values"], "plain"]} if c["name"] == "instructions" else c
             for c in more.user_attrs["space"]]
    assert widen_space(storage, "s", wider)  # a study rebuilt under new choice values keeps its stored demos
    assert optuna.load_study(study_name="s", storage=storage).user_attrs["bootstrap:verify/2/0"] == stored


def test_the_study_plan_measures_bootstrapped_verify_and_categorize_demos():
    assert ({"source_verify": "bootstrap", "source_categorize": "bootstrap"},
            "Verify / Categorize demos by BootstrapFewShot") in studies.DESIGNS

"""Decisions that see the evidence: cue values of constructed claims, a rule fitted on synthetic data, a rule in a
program (saved, loaded, judging over HTTP), the cascade and cross-fitting by dialogue."""

import json
import math
import random

import dspy
import pytest
from helpers import assistant, dialogue, user
from typer.testing import CliRunner

from vista_dspy import Category, DecisionRule, Vista
from vista_dspy.cli import app
from vista_dspy.compiled.files import compiled_dir
from vista_dspy.decision import CLASSES, Band, LinearModel, decide
from vista_dspy.evidence import CHECKS, CUES, TurnEvidence
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig
from vista_dspy.optimize.rules.judged_turns import ClaimRow, TurnRows
from vista_dspy.optimize.rules.rule_fitting import cross_fitted, fit_model, fit_rule, replay, turn_scores

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."


# ---- cues ------------------------------------------------------------------------------------------------------------
def test_cues_of_constructed_claims_have_known_values():
    evidence = TurnEvidence.of("The museum reopened in 1998 after a long restoration.",
                               knowledge=["The museum stands in Porto."],
                               history=["Have you been to the Porto museum?"])
    stated = evidence.cues("The museum reopened in 1998.")
    # content stems: muse, reop, 1998 -> all in the reference
    assert stated["uncovered_reference"] == 0.0 and stated["uncovered_all"] == 0.0
    assert stated["speaker"] == stated["opinion"] == stated["hedge"] == stated["question"] == 0.0
    half = evidence.cues("The museum sells tickets.")  # muse (covered), sell, tick (not)
    assert half["uncovered_reference"] == pytest.approx(2 / 3) and half["uncovered_knowledge"] == pytest.approx(2 / 3)
    porto = evidence.cues("Porto has a museum.")  # port: store and history, not the reference
    assert porto["uncovered_reference"] == pytest.approx(1 / 2) and porto["uncovered_all"] == 0.0
    assert porto["uncovered_history"] == 0.0
    # The same self-description, however the speaker is named.
    for claim in ("I love the beach.", "The assistant loves the beach.", "The wizard loves the beach."):
        cues = evidence.cues(claim)
        assert cues["speaker"] == cues["opinion"] == cues["speaker_opinion"] == 1.0, claim
    assert evidence.cues("I'm not sure when it opened.")["hedge"] == 1.0
    assert evidence.cues("Do you like museums?")["question"] == 1.0
    framed = evidence.cues("The assistant thinks that the museum reopened in 1998.")
    assert framed["attributed"] == 1.0 and framed["uncovered_reference"] == 0.0
    assert evidence.cues("I think so.")["attributed"] == 0.0  # no clause of its own
    assert set(stated) == set(CUES) | set(CHECKS) and all(0.0 <= v <= 1.0 for v in stated.values())


def test_a_turn_without_a_reference_leaves_every_content_word_uncovered():
    evidence = TurnEvidence.of(None, knowledge=[], history=[])
    assert evidence.cues("Glaciers move slowly.")["uncovered_reference"] == 1.0


# ---- fitting -----------------------------------------------------------------------------------------------------------
def row(cues, gold, *, verify=None, judge="VERIFIED"):
    return ClaimRow("c", {**dict.fromkeys(CUES, 0.0), **cues}, verify, None, judge, gold)


def test_a_rule_fitted_on_synthetic_data_recovers_known_weights():
    """Unsafe with log-odds 4 * uncovered_reference - 2 (and never otherwise): the fitted unsafe-vs-verified weight
    of that cue is near 4, every cue that carries no signal near 0."""
    rng = random.Random(0)
    rows = []
    for _ in range(4000):
        x = rng.random()
        noise = rng.random()
        p = 1 / (1 + math.exp(-(4 * x - 2)))
        rows.append(row({"uncovered_reference": x, "length": noise},
                        "LACKING EVIDENCE" if rng.random() < p else "VERIFIED"))
    model = fit_model(rows, ("uncovered_reference", "length"), C=1000.0)
    weights = model.weights()
    slope = weights["LACKING EVIDENCE"]["uncovered_reference"] - weights["VERIFIED"]["uncovered_reference"]
    noise = weights["LACKING EVIDENCE"]["length"] - weights["VERIFIED"]["length"]
    assert slope == pytest.approx(4.0, abs=0.5) and abs(noise) < 0.4
    # The classes the data lacked never win.
    assert model.probabilities({"uncovered_reference": 0.5, "length": 0.5})["ABSTENTION"] < 1e-9


def test_the_threshold_is_chosen_for_turn_labels():
    """Two-claim turns, hallucinated iff their second claim is uncovered; fitted on them, the rule gets every turn."""
    turns = []
    for i in range(40):
        unsafe = i % 2 == 0
        rows = [row({"uncovered_reference": 0.0}, "VERIFIED"),
                row({"uncovered_reference": 1.0 if unsafe else 0.1}, "LACKING EVIDENCE" if unsafe else "VERIFIED")]
        turns.append(TurnRows(f"d{i}", 1, "hallucinated" if unsafe else "faithful", rows))
    rule = fit_rule(turns, CUES)
    assert rule.judged is None and turn_scores(replay(turns, rule))["accuracy"] == 1.0


def test_cross_fitting_never_decides_a_claim_with_a_rule_fitted_on_its_own_dialogue():
    turns = [TurnRows(f"d{i}", 1, "faithful", [row({"uncovered_reference": i / 10}, "VERIFIED"),
                                               row({"uncovered_reference": 1.0}, "LACKING EVIDENCE")])
             for i in range(10)]
    fold_of = {t.dialogue_id: i % 3 for i, t in enumerate(turns)}
    seen: list[set[str]] = []

    def fit(part):
        seen.append({t.dialogue_id for t in part})
        return fit_rule(part, CUES)

    decided, rules = cross_fitted(turns, fold_of, fit)
    assert len(rules) == len(seen) == 3 and len(decided) == len(turns)
    for fold, fitted_on in enumerate(seen):
        assert fitted_on == {d for d, f in fold_of.items() if f != fold}


# ---- deciding ----------------------------------------------------------------------------------------------------------
def linear(features, unsafe_weights, unsafe_bias, threshold=0.5):
    """A two-class model over ``features``: LACKING EVIDENCE against VERIFIED (the other classes never win)."""
    coef = tuple(tuple(unsafe_weights) if c == "LACKING EVIDENCE" else (0.0,) * len(features) for c in CLASSES)
    intercept = tuple(unsafe_bias if c == "LACKING EVIDENCE" else 0.0 if c == "VERIFIED" else -50.0
                      for c in CLASSES)
    return LinearModel(features=tuple(features), coef=coef, intercept=intercept, threshold=threshold)


# Unsafe by evidence when most of the claim is not in the reference; by the judged model when Verify doubts it.
EVIDENCE = linear(("uncovered_reference",), (10.0,), -5.0)
JUDGED = linear(("uncovered_reference", "verify_logit"), (0.0, -10.0), 0.0)


def test_the_category_of_an_unsafe_claim_is_contradicted_only_where_the_judge_said_so():
    rule = DecisionRule(judged=JUDGED, evidence=EVIDENCE)
    cues = dict.fromkeys(CUES, 0.0)
    doubted = {"VERIFIED": 0.1, "UNVERIFIABLE": 0.9}
    assert decide(rule, cues, doubted, None, "CONTRADICTED").category is Category.CONTRADICTED
    assert decide(rule, cues, doubted, None, "OUT-OF-SCOPE").category is Category.LACKING_EVIDENCE
    sure = {"VERIFIED": 0.99, "UNVERIFIABLE": 0.01}
    assert decide(rule, cues, sure, None, "LACKING EVIDENCE").category is Category.VERIFIED
    # Without probabilities the evidence model decides.
    assert decide(rule, {**cues, "uncovered_reference": 1.0}).category is Category.LACKING_EVIDENCE


MARKED = dialogue(user("Tell me about Lisbon."),
                  assistant("Lisbon is the capital of Portugal. Lisbon has ten hills <<PV=35>>.", DOC))


# The judge doubts a claim its reference says (the marker's letters and figure are in the reference too).
DOUBTED = dialogue(user("Tell me about Lisbon."),
                   assistant("Lisbon is the capital of Portugal. Lisbon has seven hills <<PV=35>>.",
                             f"{DOC} <<PV=35>>"))


def judge(program, logprobs=True, dlg=MARKED, **options):
    with FakeOpenAIServer(logprobs=logprobs) as server:
        lm = ModelConfig(model="hosted_vllm/fake", api_base=server.url, num_retries=0, cache=False).build()
        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            return program.with_options(**options)(dlg), server


def test_a_rule_decides_against_the_judge_and_says_so():
    raw, _ = judge(Vista.from_program(None), dlg=DOUBTED)
    assert [c.category for c in raw.turns[0].claims] == [Category.VERIFIED, Category.LACKING_EVIDENCE]
    program = Vista.from_program(None)
    # Unsafe only below P(VERIFIED) = 0.2: the marked claim (0.35) is now verified, against the judge's label.
    program.rule = DecisionRule(judged=linear(("verify_logit",), (-8.0,), math.log(0.2 / 0.8)),
                                evidence=EVIDENCE)
    verdict, _ = judge(program, dlg=DOUBTED)
    supported, marked = verdict.turns[0].claims
    assert marked.category is Category.VERIFIED and marked.raw_label == "LACKING EVIDENCE"
    # The sentence cites the shortest span of the window that supports it (lisb, seve, hill, pv, 35: the fake
    # judge's marker is a sentence of the document too).
    assert marked.decided_by == "rule" and marked.explanation == (
        "VERIFIED rather than the judge's LACKING EVIDENCE: the reference says \"Lisbon has seven hills. <<PV=35>>\" "
        "(all of its 5 content words).")
    # The chain behind the sentence, in fields: the judge's label and reason, the rule's P(unsafe) and threshold.
    assert (marked.judge_explanation, marked.rule_label, marked.threshold) == ("rule for LACKING EVIDENCE",
                                                                               "VERIFIED", 0.5)
    assert marked.p_unsafe == pytest.approx(0.317, abs=0.001)  # sigmoid(log(0.2 / 0.8) - logit(0.35))
    assert supported.category is Category.VERIFIED and supported.cues["uncovered_reference"] == 0.0
    assert verdict.turns[0].label == "faithful"


def test_a_saved_rule_loads_and_judges_identically(tmp_path):
    program = Vista.from_program(None)
    program.rule = DecisionRule(judged=JUDGED, evidence=EVIDENCE, cascade=Band(low=0.01, high=0.99))
    path = program.save_program(tmp_path / "ruled.json")
    section = json.loads(path.read_text())["vista"]
    assert section["format"] == 2 and section["rule"]["judged"]["features"] == ["uncovered_reference", "verify_logit"]
    loaded = Vista.from_program(path)
    assert loaded.rule == program.rule and loaded.content_hash() == program.content_hash()
    assert program.content_hash() != Vista.from_program(None).content_hash()
    before, after = judge(program)[0], judge(loaded)[0]
    assert after.model_dump(exclude={"program"}) == before.model_dump(exclude={"program"})


def test_no_program_file_holds_anything_but_json():
    # The folder's code (__init__.py, files.py) aside; the seed program is always among the rest.
    files = [path for path in compiled_dir().iterdir() if path.is_file() and path.suffix != ".py"]
    assert "seed.json" in {path.name for path in files}
    for path in files:
        assert path.suffix == ".json", path
        content = json.loads(path.read_text(encoding="utf-8"))
        content.pop("metadata", None)  # dependency versions ("cloudpickle": "3.1")
        # A pickled object in JSON is a base64 string: protocol 2-5 pickles start with 0x80, "gA" in base64.
        text = json.dumps(content)
        assert '"gA' not in text and "pickle" not in text, path


def test_the_cascade_skips_exactly_the_claims_in_its_band():
    """The evidence model is sure of the supported claim (none of it uncovered: P(unsafe) 0.007) and unsure of
    the marked one (3 of its 5 content words are not in the reference: P(unsafe) 0.73): only the marked claim is
    asked, of Verify and then of Categorize."""
    program = Vista.from_program(None)
    program.rule = DecisionRule(judged=JUDGED, evidence=EVIDENCE, cascade=Band(low=0.05, high=0.95))
    verdict, server = judge(program)
    supported, marked = verdict.turns[0].claims
    assert supported.stage == "evidence" and supported.decided_by == "evidence"
    assert supported.explanation == ("VERIFIED by its evidence alone (the judge was not asked): the reference says "
                                     "\"Lisbon is the capital of Portugal.\" (all of its 3 content words).")
    assert supported.category is Category.VERIFIED and supported.threshold == 0.5 and supported.raw_label is None
    assert marked.stage == "categorize" and marked.decided_by == "rule"  # Verify did not verify it
    assert verdict.usage.by_stage["verify"].calls == 1 and verdict.usage.by_stage["categorize"].calls == 1


def test_an_endpoint_without_probabilities_gets_the_evidence_rule_and_the_cli_says_so(tmp_path, dev_file):
    program = Vista.from_program(None)
    program.rule = DecisionRule(judged=JUDGED, evidence=EVIDENCE)
    verdict, _ = judge(program, logprobs=False)
    marked = verdict.turns[0].claims[1]
    expected = 1 / (1 + math.exp(-(10 * marked.cues["uncovered_reference"] - 5)))
    assert marked.probabilities is None and marked.p_unsafe == pytest.approx(expected, abs=1e-4)
    assert marked.decided_by == "evidence" and marked.stage == "categorize"  # asked, but decided by the cues
    path = program.save_program(tmp_path / "ruled.json")
    with FakeOpenAIServer(logprobs=False) as server:
        result = CliRunner().invoke(app, ["evaluate", str(dev_file), "--model", "hosted_vllm/fake", "--api-base",
                                          server.url, "--program", str(path), "--limit", "3", "--no-cache",
                                          "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    output = " ".join(result.output.split())
    assert "decision rule over label probabilities and evidence cues" in output
    assert output.count("the program's evidence-only rule decides") == 1

"""Verdicts coherent with VISTA's definition in every program: a turn is hallucinated iff one of its claims is
CONTRADICTED or LACKING EVIDENCE, and its score agrees; categories mean VISTA's (an opinion or a speaker's own remark
is never VERIFIED; a factual unit with a figure or a name that no source holds is unsafe whatever the weights say);
each explanation a rule writes names evidence a reader can check. The quick start's dialogue runs through every
shipped program (and the tier with no LM call) with the fake judge, as `vista evaluate` runs it."""

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vista_dspy import Category, DecisionRule
from vista_dspy.cli import app
from vista_dspy.compiled.files import compiled_dir
from vista_dspy.decision import CLASSES, CUES, FEATURES, LinearModel, decide
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.run.runner import VERDICTS, read_verdicts
from vista_dspy.schema import SAFE_CATEGORIES, UNSAFE_CATEGORIES

REPO = Path(__file__).resolve().parents[1]


def _model(features, unsafe_bias, *, verified=0.0, out_of_scope=-50.0, weights=None, threshold=0.5):
    """LACKING EVIDENCE against VERIFIED and OUT-OF-SCOPE by their intercepts (ABSTENTION never wins)."""
    coef = tuple(tuple((weights or {}).get((c, f), 0.0) for f in features) for c in CLASSES)
    intercept = {"VERIFIED": verified, "OUT-OF-SCOPE": out_of_scope, "ABSTENTION": -50.0,
                 "LACKING EVIDENCE": unsafe_bias}
    return LinearModel(features=tuple(features), coef=coef, intercept=tuple(intercept[c] for c in CLASSES),
                       threshold=threshold)


# A rule sure that every claim is VERIFIED (P(unsafe) ~ e^-10), judged or not.
SURE = DecisionRule(judged=_model(FEATURES, -10.0), evidence=_model(CUES, -10.0))
CUES_0 = dict.fromkeys(CUES, 0.0)
DOUBTED = {"VERIFIED": 0.3, "UNVERIFIABLE": 0.7}


def test_a_factual_claim_whose_figure_no_source_holds_is_unsafe_whatever_the_rule_and_the_judge_say():
    lacking = {**CUES_0, "figure_lacking": 1.0}
    for judge in ("VERIFIED", "LACKING EVIDENCE", "OUT-OF-SCOPE", None):
        decision = decide(SURE, lacking, DOUBTED if judge else None, None, judge)
        assert decision.category is Category.LACKING_EVIDENCE and decision.check == "lacking", judge
        assert decision.p_unsafe < 1e-3  # the rule's own number is kept: the check, not the weights, decided
    assert decide(SURE, {**CUES_0, "name_lacking": 1.0}, DOUBTED, None, "CONTRADICTED").category is \
        Category.CONTRADICTED
    # the same rule on the claim without a lacking figure: VERIFIED
    assert decide(SURE, CUES_0, DOUBTED, None, "LACKING EVIDENCE").category is Category.VERIFIED


def test_an_opinion_or_a_remark_is_never_verified_and_one_with_a_lacking_figure_only_kept_off_it():
    # a rule that reads OUT-OF-SCOPE second after VERIFIED
    rule = DecisionRule(evidence=_model(CUES, -10.0, out_of_scope=-1.0))
    for check in ("evaluative", "own_remark", "speaker_opinion"):
        decision = decide(rule, {**CUES_0, check: 1.0})
        assert decision.category is Category.OUT_OF_SCOPE and decision.check == "remark", check
    # a remark whose figure no source holds ("I ran 40 km") is a remark: kept off VERIFIED, not made unsafe
    decision = decide(rule, {**CUES_0, "own_remark": 1.0, "figure_lacking": 1.0})
    assert decision.category is Category.OUT_OF_SCOPE and decision.check == "lacking"
    # a hedge with a lacking figure: not unsafe by the check either
    assert decide(rule, {**CUES_0, "hedge": 1.0, "figure_lacking": 1.0}).category is Category.OUT_OF_SCOPE
    # an unsafe decision of the weights stands for a remark too
    assert decide(DecisionRule(evidence=_model(CUES, 5.0)), {**CUES_0, "own_remark": 1.0}).category is \
        Category.LACKING_EVIDENCE


# ---- the quick start, through every shipped program ----------------------------------------------------------------
OPINION = "Tromsø in Norway is a great choice."
INVENTED = ("200 days of snow", "minus 30")
CHECKABLE = ('says "', "its passages hold no", "its passages name no", "closest passage", "gives an opinion", "own remark",
             "hedges")
SHIPPED = sorted(p.stem for p in compiled_dir().glob("*.json") if not p.name.endswith(".meta.json"))
RUNS = [(name, ["--program", name]) for name in SHIPPED] + [
    ("no LM (local)", ["--program", "local", "--system", "evidence", "--units", "sentences"]),
    ("no LM (default rule)", ["--system", "evidence", "--units", "sentences"])]


@pytest.fixture(scope="module")
def fake_judge():
    with FakeOpenAIServer(logprobs=True) as server:
        yield server


@pytest.mark.parametrize("name, flags", RUNS, ids=[r[0] for r in RUNS])
def test_the_quickstart_is_coherent_in_every_shipped_program(name, flags, fake_judge, tmp_path):
    assert {"seed", "local", "evidence"} <= set(SHIPPED)
    result = CliRunner().invoke(app, ["evaluate", str(REPO / "examples" / "quickstart.json"), "--model",
                                      "hosted_vllm/fake", "--api-base", fake_judge.url, "--out",
                                      str(tmp_path / "out"), "--no-cache", *flags])
    assert result.exit_code == 0, result.output
    [verdict] = read_verdicts(tmp_path / "out" / VERDICTS)
    ruled = verdict.program != "seed"
    assert len(verdict.turns) == 2
    safe = judged = 0
    for turn in verdict.turns:
        categories = [c.category for c in turn.claims]
        assert categories and Category.ERROR not in categories, turn  # every claim judged: nothing passes by failing
        unsafe = [c for c in categories if c in UNSAFE_CATEGORIES]
        assert turn.label == ("hallucinated" if unsafe else "faithful"), (name, turn.turn_index)
        assert math.isclose(turn.score, sum(c in SAFE_CATEGORIES for c in categories) / len(categories))
        safe, judged = safe + len(categories) - len(unsafe), judged + len(categories)
        for claim in turn.claims:
            if claim.claim == OPINION:
                assert claim.category is not Category.VERIFIED, (name, claim.explanation)
            if any(words in claim.claim for words in INVENTED):
                assert claim.category in UNSAFE_CATEGORIES, (name, claim.category, claim.explanation)
                if ruled:  # the rule's sentence names the figures its sources lack, beside the reference's
                    assert "200" in claim.explanation and "minus 30" in claim.explanation, claim.explanation
                    assert "the reference's passage gives minus 4" in claim.explanation, claim.explanation
            if ruled:  # a reason a reader can check, not a cue's weight
                assert any(said in claim.explanation for said in CHECKABLE), (name, claim.explanation)
                assert "%" not in claim.explanation and "because" not in claim.explanation, claim.explanation
    assert math.isclose(verdict.score, safe / judged)
    assert verdict.turns[1].label == "hallucinated"  # the invented figures, in every program

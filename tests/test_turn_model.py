"""Turn decisions that know how many claims a turn has (``decision.TurnModel``) and act through the turn's most
doubtful claim (``decision.turn_flip``), labels that mean what they say (a rule never makes VERIFIED a claim the judge
found CONTRADICTED), and the numbers the gate reports beside its tests (the bootstrap interval of the turn
difference, turns per claim count)."""

import dspy
import pytest
from helpers import assistant, dialogue, user

from vista_dspy import Category, DecisionRule, Vista
from vista_dspy.decision import CUES, FEATURES, LinearModel, TurnFlip, TurnModel, decide, turn_call, turn_flip
from vista_dspy.lm.clients.adapters import JSONAdapter
from vista_dspy.lm.fake import FakeOpenAIServer, RuleEngine, rule_lm
from vista_dspy.lm.models import ModelConfig
from vista_dspy.optimize.rules.recipes import by_claim_count, turn_difference_interval
from vista_dspy.optimize.rules.rule_fitting import ClaimRow, TurnDecision, TurnRows, replay
from vista_dspy.optimize.rules.turn_fitting import TurnExample, choose_turn_model, cross_fitted_log_likelihood

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."
# One turn model for the tests: P(hallucinated) = sigmoid(logit(max P(unsafe)) - 2 log(number of claims)).
COUNTING = TurnModel(features=("max_logit", "log_count"), coef=(1.0, -2.0), intercept=0.0)


def _evidence(slope: float = 0.0, threshold: float = 0.5) -> LinearModel:
    """An evidence model whose P(unsafe) grows with the share of content words no source holds."""
    coef = [[0.0] * len(CUES) for _ in range(4)]
    coef[3][CUES.index("uncovered_all")] = slope
    return LinearModel(features=CUES, coef=tuple(map(tuple, coef)), intercept=(0.0,) * 4, threshold=threshold)


def test_the_same_doubt_flags_a_one_claim_turn_but_not_a_six_claim_one():
    one = turn_call(COUNTING, [0.6], ["VERIFIED"])
    six = turn_call(COUNTING, [0.6, 0.1, 0.1, 0.1, 0.1, 0.1], ["VERIFIED"] * 6)
    assert one.hallucinated and one.p_hallucinated == pytest.approx(0.6)
    assert not six.hallucinated and six.p_hallucinated == pytest.approx(0.6 / 0.4 / 36 / (1 + 0.6 / 0.4 / 36))


def test_the_turn_model_acts_through_the_most_doubtful_claim_that_may_be_unsafe():
    lenient = TurnModel(features=("noisy_or_logit",), coef=(1.0,), intercept=0.0)
    rule = DecisionRule(evidence=_evidence(), turn=lenient)
    # noisy-OR of 0.4, 0.3, 0.2 is 0.664: hallucinated, through the claim at 0.4 (the ERROR claim has no P(unsafe))
    flip = turn_flip(rule, [0.2, 0.4, None, 0.3], ["VERIFIED", "VERIFIED", "ERROR", "OUT-OF-SCOPE"])
    assert flip == TurnFlip(1, pytest.approx(0.664))
    # the claim at 0.4 is an opinion (it may not be unsafe): the next most doubtful carries the turn
    assert turn_flip(rule, [0.2, 0.4, None, 0.3], ["VERIFIED", "OUT-OF-SCOPE", "ERROR", "OUT-OF-SCOPE"],
                     [True, False, False, True]).index == 3
    # a turn whose every claim is an opinion or a remark has none to act through: it stays with its claims
    assert turn_flip(rule, [0.9], ["OUT-OF-SCOPE"], [False]) is None
    # a turn with an unsafe claim follows it; a turn model that finds the turn faithful changes nothing
    assert turn_flip(rule, [0.9, 0.1], ["LACKING EVIDENCE", "VERIFIED"]) is None
    assert turn_flip(rule, [0.1, None], ["VERIFIED", "ERROR"]) is None
    assert turn_call(lenient, [None], ["ERROR"]) is None  # nothing decided with a probability
    assert turn_flip(None, [0.9], ["VERIFIED"]) is None and turn_call(None, [0.9], ["VERIFIED"]) is None


def test_a_rule_with_a_turn_model_is_written_with_it_and_one_without_as_before():
    rule = DecisionRule(evidence=_evidence(), turn=COUNTING)
    assert DecisionRule.model_validate(rule.model_dump()) == rule
    assert "turn" not in DecisionRule(evidence=_evidence()).model_dump()
    with pytest.raises(ValueError, match="not both"):
        DecisionRule(evidence=_evidence(), turn=COUNTING, turn_threshold=0.3)
    with pytest.raises(ValueError, match="unknown turn features"):
        TurnModel(features=("median",), coef=(1.0,), intercept=0.0)


def test_the_rule_never_makes_verified_a_claim_the_judge_found_contradicted():
    # A judged model that is sure every claim Verify half-believes is VERIFIED (P(unsafe) tiny).
    coef = [[0.0] * len(FEATURES) for _ in range(4)]
    coef[0][FEATURES.index("verify_logit")] = 40.0
    judged = LinearModel(features=FEATURES, coef=tuple(map(tuple, coef)), intercept=(5.0, 1.0, 0.0, -5.0))
    rule = DecisionRule(judged=judged, evidence=_evidence())
    cues = dict.fromkeys(CUES, 0.0)
    verify = {"VERIFIED": 0.4, "UNVERIFIABLE": 0.6}
    categorize = {"CONTRADICTED": 0.7, "LACKING EVIDENCE": 0.1, "OUT-OF-SCOPE": 0.1, "ABSTENTION": 0.1}
    overruled = decide(rule, cues, verify, categorize, "CONTRADICTED")
    assert overruled.category == Category.OUT_OF_SCOPE and overruled.p_unsafe < 0.01
    # the same answers with the judge's LACKING EVIDENCE: the rule may call the claim supported
    assert decide(rule, cues, verify, categorize, "LACKING EVIDENCE").category == Category.VERIFIED


def test_the_deployed_judge_keeps_a_claim_the_judge_contradicted_off_verified():
    # The fake Verify gives "<<PV=40>>" claims P(VERIFIED) 0.4 (UNVERIFIABLE), its Categorize calls a claim with
    # "not" CONTRADICTED; the rule below overrules every such claim to safe.
    coef = [[0.0] * len(FEATURES) for _ in range(4)]
    coef[0][FEATURES.index("verify_logit")] = 40.0
    judged = LinearModel(features=FEATURES, coef=tuple(map(tuple, coef)), intercept=(5.0, 1.0, 0.0, -5.0))
    program = Vista.from_program()
    program.rule = DecisionRule(judged=judged, evidence=_evidence())
    turn = "Lisbon is not the capital of Portugal <<PV=40>>."
    document = f"{DOC} <<PV=40>>"  # the marker's letters and figure are in a source: no figure or name is lacking
    with FakeOpenAIServer(logprobs=True) as server:
        lm = ModelConfig(model="hosted_vllm/fake", api_base=server.url, num_retries=0, cache=False).build()
        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            verdict = program(dialogue(user("Tell me about Lisbon."), assistant(turn, document))).turns[0]
    claim = verdict.claims[0]
    assert claim.raw_label == "CONTRADICTED" and claim.category == Category.OUT_OF_SCOPE


def test_the_deployed_judge_and_the_replay_label_a_turn_by_its_turn_model_through_its_most_doubtful_claim():
    # Claims decided by evidence alone (P(unsafe) from the share of uncovered words), none unsafe at 0.99; the turn
    # model flags a one-claim turn from P 0.5 on, and that claim takes the unsafe decision: label, claim and score agree.
    rule = DecisionRule(evidence=_evidence(slope=4.0, threshold=0.99), turn=COUNTING).evidence_only()
    program = Vista.from_program()
    program.rule = rule
    turn = "Lisbon has a famous blue tram."
    with dspy.context(lm=rule_lm(RuleEngine()), adapter=JSONAdapter()):
        verdict = program(dialogue(user("Tell me about Lisbon."), assistant(turn, DOC))).turns[0]
    [claim] = verdict.claims
    assert claim.category == Category.LACKING_EVIDENCE and claim.rule_label == "VERIFIED"
    assert verdict.label == "hallucinated" and verdict.score == 0.0
    assert claim.turn_p_hallucinated == pytest.approx(COUNTING.probability([claim.p_unsafe]), abs=1e-4)
    # its explanation says what decided it and names the words no source holds
    assert claim.explanation.startswith("LACKING EVIDENCE as the only claim of a turn the turn model finds "
                                        "hallucinated")
    assert "its passages hold no 'famous', 'blue' and 'tram'" in claim.explanation
    assert verdict.explanation.startswith("Hallucinated through claim 1")
    rows = [ClaimRow(c.claim, c.cues, None, None, "VERIFIED", None) for c in verdict.claims]
    replayed = replay([TurnRows("d", 1, "hallucinated", rows)], rule, judge=False)[0]
    assert replayed.categories == ["LACKING EVIDENCE"] and replayed.label == "hallucinated"


def test_the_turn_model_is_chosen_by_held_out_likelihood_and_sees_the_count_when_the_count_matters():
    # Turns of one claim with P(unsafe) 0.3 are hallucinated 3 times in 4; turns of six claims whose largest
    # P(unsafe) is 0.3 are faithful 3 times in 4: only a model that knows the count tells them apart.
    data = []
    for i in range(40):
        data.append(TurnExample((0.3,), i % 4 != 0, f"one{i}"))
        data.append(TurnExample((0.3, 0.05, 0.05, 0.05, 0.05, 0.05), i % 4 == 0, f"six{i}"))
    model, record = choose_turn_model(data)
    assert "log_count" in model.features and record["chosen"] == " + ".join(model.features)
    assert model.probability([0.3]) > 0.5 > model.probability([0.3, 0.05, 0.05, 0.05, 0.05, 0.05])
    assert choose_turn_model([TurnExample((0.2,), False)] * 5)[0] is None  # one label: nothing to fit


def test_the_turn_models_choice_keeps_one_copy_of_a_turn_and_splits_by_dialogue():
    from vista_dspy.optimize.rules.turn_fitting import one_per_turn

    pooled = [TurnExample((0.1,), True, "a", 1), TurnExample((0.2,), True, "a", 1), TurnExample((0.3,), False, "a", 3)]
    assert one_per_turn(pooled) == [pooled[0], pooled[2]]
    # Turns without a dialogue id all hash to one side: the other half is empty, so no candidate can be scored.
    assert cross_fitted_log_likelihood([TurnExample((0.3,), i % 2 == 0) for i in range(20)], ("max_logit",)) is None


def _decided(label: str, gold: str, dialogue_id: str, claims: int = 1) -> TurnDecision:
    rows = [ClaimRow(f"c{i}", {}, None, None, "VERIFIED", None) for i in range(claims)]
    turn = TurnRows(dialogue_id, 1, gold, rows)
    return TurnDecision(turn, ["VERIFIED"] * claims, [None] * claims, [False] * claims, label)


def test_the_turn_difference_and_its_interval_resample_dialogues():
    # 20 dialogues of one turn: the candidate right on all, the base wrong on 5: +25 points, never below 0
    candidate = [_decided("faithful", "faithful", f"d{i}") for i in range(20)]
    base = [_decided("hallucinated" if i < 5 else "faithful", "faithful", f"d{i}") for i in range(20)]
    interval = turn_difference_interval(candidate, base, resamples=2000)
    assert interval["difference"] == 0.25 and interval["dialogues"] == 20 and interval["turns"] == 20
    assert 0.0 < interval["low"] < 0.25 < interval["high"] <= 0.5


def test_turns_are_counted_per_claim_count_group():
    decided = [_decided("hallucinated", "faithful", "a", 1), _decided("faithful", "faithful", "b", 3),
               _decided("faithful", "hallucinated", "c", 5), _decided("hallucinated", "hallucinated", "d", 4)]
    assert by_claim_count(decided) == {
        "0-1": {"turns": 1, "right": 0, "false_alarms": 1, "misses": 0},
        "2-3": {"turns": 1, "right": 1, "false_alarms": 0, "misses": 0},
        "4+": {"turns": 2, "right": 1, "false_alarms": 0, "misses": 1}}

import pytest

from vista_dspy import scoring
from vista_dspy.schema import Category, ClaimVerdict, DialogueVerdict, TurnVerdict, UsageCounts

V, O, A, C, L, E = (  # noqa: E741 (one letter per category)
    Category.VERIFIED, Category.OUT_OF_SCOPE, Category.ABSTENTION, Category.CONTRADICTED, Category.LACKING_EVIDENCE,
    Category.ERROR)


@pytest.mark.parametrize(
    "categories, kwargs, expected",
    [
        ([V, O, A], {}, "faithful"),
        ([], {}, "faithful"),
        ([V, L], {}, "hallucinated"),
        ([C], {}, "hallucinated"),
        ([V, E], {}, "unknown"),
        ([L, E], {}, "hallucinated"),  # an unsafe claim decides even when another failed
        ([], {"failed": True}, "unknown"),
        ([V], {"contradiction": True}, "hallucinated"),
    ],
)
def test_turn_label(categories, kwargs, expected):
    assert scoring.turn_label(categories, **kwargs) == expected


def test_scores_ignore_errors_and_handle_empty_turns():
    assert scoring.turn_score([V, O, L, C]) == 0.5
    assert scoring.turn_score([V, E]) == 1.0
    assert scoring.turn_score([E]) is None
    assert scoring.turn_score([]) is None


def _turn(categories, label=None, gold=None):
    claims = [ClaimVerdict(claim=f"c{i}", category=c, stage="verify") for i, c in enumerate(categories)]
    return TurnVerdict(turn_index=0, text="t", grounding="document", claims=claims, claims_source="decomposed",
                       label=label or scoring.turn_label(categories), score=scoring.turn_score(categories),
                       knowledge=[], gold_label=gold)


def test_micro_score_weighs_every_claim_equally():
    turns = [_turn([V]), _turn([L, L, L])]
    assert scoring.micro_score(turns) == 0.25  # macro over turns would be 0.5


def test_turn_metrics_reports_unknown_both_ways():
    predicted = ["hallucinated", "faithful", "unknown", "unknown"]
    gold = ["hallucinated", "hallucinated", "faithful", "hallucinated"]
    m = scoring.turn_metrics(predicted, gold)
    assert m["turns"] == 4 and m["unknown"] == 2
    assert m["accuracy"] == 0.25  # unknowns are wrong
    assert m["accuracy_excluding_unknown"] == 0.5
    # unknown counted as the opposite of gold: predictions = [h, f, h, f]; TP=1, FP=1, FN=2
    assert m["precision_hallucinated"] == 0.5
    assert m["recall_hallucinated"] == pytest.approx(1 / 3)
    assert m["f1_hallucinated"] == pytest.approx(0.4)
    assert m["always_hallucinated_accuracy"] == 0.75


def test_claim_metrics_counts_errors_wrong():
    m = scoring.claim_metrics([V, L, E, O], [V, L, A, O])
    assert m["accuracy"] == 0.75 and m["errors"] == 1
    assert m["per_category"]["ABSTENTION"]["recall"] == 0.0
    # F1 per category: V 1, O 1, L 1, A 0, C 0 (no support, no prediction) -> macro over five = 0.6
    assert m["macro_f1"] == pytest.approx(0.6)


def test_summarize_collects_labels_usage_and_gold():
    v = DialogueVerdict(dialogue_id="a", turns=[_turn([V], gold="faithful"), _turn([L], gold="faithful")],
                        score=0.5)
    v.usage.add("verify", "m", UsageCounts(calls=2, prompt_tokens=10, completion_tokens=3))
    s = scoring.summarize([v])
    assert s["turn_labels"] == {"faithful": 1, "hallucinated": 1, "unknown": 0}
    assert s["vista_score"] == 0.5
    assert s["turn_metrics"]["accuracy"] == 0.5
    assert s["categories"]["VERIFIED"] == 1
    assert s["usage"]["total"] == {"calls": 2, "prompt_tokens": 10, "completion_tokens": 3, "cached_prompt_tokens": 0,
                                   "prompt_ms": 0.0, "generation_ms": 0.0, "cache_hits": 0}

import pytest

from vista_dspy.optimize.metrics import krippendorff_alpha, match_claims, mcnemar_exact, paired_f1_difference, token_f1


def test_mcnemar_exact_counts_discordant_pairs():
    gold = ["h"] * 12
    a = ["h"] * 10 + ["f"] * 2  # right on the first 10
    b = ["f"] * 10 + ["h"] * 2  # right on the last 2
    result = mcnemar_exact(gold, a, b)
    assert (result["a_only"], result["b_only"], result["both_right"], result["both_wrong"]) == (10, 2, 0, 0)
    assert result["pvalue"] == pytest.approx(0.0386, abs=1e-3)  # 2 * P(X <= 2), X ~ Bin(12, 0.5)
    same = mcnemar_exact(gold, a, a)
    assert same["pvalue"] == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact(gold, a, b[:-1])


def test_paired_f1_difference_matches_sklearn_with_a_bootstrap_interval():
    from sklearn.metrics import f1_score

    gold = ["h", "h", "f", "h", "f", "f", "h", "h", "f", "h"] * 10
    a = ["h", "h", "f", "h", "f", "h", "h", "f", "f", "h"] * 10
    b = ["h", "f", "f", "f", "h", "f", "f", "h", "f", "h"] * 10
    result = paired_f1_difference(gold, a, b, "h", resamples=999)
    expected = f1_score(gold, a, pos_label="h") - f1_score(gold, b, pos_label="h")
    assert result["difference"] == pytest.approx(expected)
    assert 0 < result["low"] < expected < result["high"]  # A is better, and the interval excludes no difference
    same = paired_f1_difference(gold, a, a, "h", resamples=999)
    assert same["difference"] == 0 and same["low"] <= 0 <= same["high"]


def test_krippendorff_alpha_nominal():
    perfect = [["a", "b", "a", "c"], ["a", "b", "a", "c"]]
    assert krippendorff_alpha(perfect) == pytest.approx(1.0)
    # One disagreement among 4 items of 2 raters, by hand: pairable values a 3, b 5 (n = 8); observed
    # disagreement 2/8; expected 2 * 3 * 5 / (8 * 7) = 30/56; alpha = 1 - (2/8) / (30/56) = 8/15.
    some = [["a", "b", "a", "b"], ["a", "b", "b", "b"]]
    assert krippendorff_alpha(some) == pytest.approx(8 / 15)
    with_missing = [["a", None, "b"], ["a", "b", "b"]]
    assert krippendorff_alpha(with_missing) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        krippendorff_alpha([["a", "a"], ["a", "a"]])


def test_claim_matching_is_one_to_one_and_normalises_speakers():
    # Constructed claims (no dataset text), shaped like a human claim set and a decomposer's.
    gold = ["The wizard likes quiet harbours.", "Harbour cranes are man-made structures.",
            "Quiet harbours are far from cities."]
    extracted = ["The assistant likes quiet harbours.", "Harbour cranes are structures made by people.",
                 "The assistant likes quiet harbours a lot."]
    match = match_claims(extracted, gold)
    assert [(e, g) for e, g, _ in match.pairs] == [(0, 0), (1, 1)]  # extracted 2 cannot reuse gold 0
    assert match.jaccard == pytest.approx(2 / 4) and match.f1 == pytest.approx(4 / 6)
    assert token_f1("The wizard likes dogs", "the assistant likes dogs") == 1.0
    assert match_claims([], []).f1 == 1.0 and match_claims(["x"], []).jaccard == 0.0

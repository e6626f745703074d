"""Statistics for comparing judges: balanced accuracy and its bootstrap over dialogues, McNemar's exact test,
Krippendorff's alpha, and claim-set matching; and what a judged turn costs (``Price``: the model's own time for a
local server, the milliseconds llama.cpp says it spent reading and writing per call, or the tokens priced by
litellm's cost map for a hosted model; both read ``Usage``, only calls that reached the model count), the second
objective of a priced study and the unit of ``vista compile --budget``.

Turn- and claim-level agreement with gold lives in ``scoring`` (accuracy, P/R/F1, macro-F1); this module adds what
the paper's comparisons need, on top of statsmodels, krippendorff and scipy rather than hand-rolled formulas. It sits
with the optimizers because a program is chosen by these numbers (the gate's paired test, the claims protocol's
matching against human claims); ``experiments`` and the benchmark scripts compare judges with the same functions.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from scipy.optimize import linear_sum_assignment
from statsmodels.stats.contingency_tables import mcnemar as _mcnemar

from ..data.vista import normalize_speakers
from ..schema import Usage


def mcnemar_exact(gold: Sequence[Any], system_a: Sequence[Any], system_b: Sequence[Any]) -> dict[str, Any]:
    """Exact (binomial) McNemar test of two systems' correctness on the same items.

    Returns the discordant counts (``a_only``: A right and B wrong; ``b_only``: the reverse) and the two-sided
    p-value. With no discordant pair the systems are indistinguishable: p = 1.
    """
    if not len(gold) == len(system_a) == len(system_b):
        raise ValueError("gold and both systems must cover the same items")
    right_a = [a == g for a, g in zip(system_a, gold)]
    right_b = [b == g for b, g in zip(system_b, gold)]
    table = [
        [sum(a and b for a, b in zip(right_a, right_b)), sum(a and not b for a, b in zip(right_a, right_b))],
        [sum(b and not a for a, b in zip(right_a, right_b)), sum(not a and not b for a, b in zip(right_a, right_b))],
    ]
    a_only, b_only = table[0][1], table[1][0]
    pvalue = 1.0 if a_only + b_only == 0 else float(_mcnemar(table, exact=True).pvalue)
    return {"items": len(gold), "both_right": table[0][0], "a_only": a_only, "b_only": b_only,
            "both_wrong": table[1][1], "pvalue": pvalue}


def paired_f1_difference(gold: Sequence[Any], system_a: Sequence[Any], system_b: Sequence[Any], positive: Any, *,
                         confidence: float = 0.95, resamples: int = 9999, seed: int = 0) -> dict[str, float]:
    """F1 of the ``positive`` class for system A minus system B on the same items, with a paired bootstrap
    confidence interval (scipy.stats.bootstrap, BCa, items resampled together)."""
    from scipy.stats import bootstrap

    if not len(gold) == len(system_a) == len(system_b):
        raise ValueError("gold and both systems must cover the same items")
    codes = {label: i for i, label in enumerate(dict.fromkeys([*gold, *system_a, *system_b, positive]))}
    g, a, b = (np.array([codes[x] for x in xs]) for xs in (gold, system_a, system_b))
    label = codes[positive]

    def f1(g, predicted):  # 2TP / (2TP + FP + FN); sklearn's f1_score costs ~1 ms a call, 20,000 calls here
        tp = np.sum((predicted == label) & (g == label))
        wrong = np.sum((predicted == label) != (g == label))
        return 2 * tp / (2 * tp + wrong) if tp or wrong else 0.0

    def difference(g, a, b):
        return f1(g, a) - f1(g, b)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate distribution (e.g. identical systems) is handled below
        result = bootstrap((g, a, b), difference, paired=True, vectorized=False, confidence_level=confidence,
                           n_resamples=resamples, random_state=seed)
    low, high = result.confidence_interval
    if np.isnan(low) or np.isnan(high):  # BCa is undefined there: the percentile interval
        low, high = np.percentile(result.bootstrap_distribution, [50 * (1 - confidence), 50 * (1 + confidence)])
    return {"difference": float(difference(g, a, b)), "low": float(low), "high": float(high)}


def balanced_accuracy(gold: Sequence[Any], pred: Sequence[Any]) -> float:
    """The mean over the gold classes of the share of each class's items predicted as that class (its recall): the
    headline on skewed data, where always answering the majority class scores 0.5. A prediction outside the gold
    classes (``unknown``, an error) is wrong. scikit-learn's macro recall over the gold labels."""
    from sklearn.metrics import recall_score

    if not gold or len(gold) != len(pred):
        raise ValueError("balanced accuracy needs one prediction per gold item, and at least one item")
    classes = sorted(set(gold), key=str)
    return float(recall_score([str(g) for g in gold], [str(p) for p in pred], labels=[str(c) for c in classes],
                              average="macro", zero_division=0))


def recall_mean(counts: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``balanced_accuracy`` from sums: ``counts[..., c]`` items of gold class c, ``right[..., c]`` of them predicted
    right; a class with no item is left out (NaN where no class has one). Vectorised over leading axes."""
    with np.errstate(divide="ignore", invalid="ignore"):
        recalls = np.where(counts > 0, right / np.where(counts > 0, counts, 1), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample holding no class at all: NaN
        return np.nanmean(recalls, axis=-1)


def grouped_interval(statistic, columns: Sequence[Sequence[float]], *, confidence: float = 0.95,
                     alternative: str = "two-sided", resamples: int = 4000, seed: int = 0) -> tuple[float, float]:
    """A percentile bootstrap interval of ``statistic(*sums)``, where ``columns`` hold one row per group (a dialogue:
    its turns share a document and a store, so they are not independent draws) and ``sums`` are the columns summed
    over a resample of groups (``scipy.stats.bootstrap``, paired, vectorised). ``alternative`` "greater": the
    one-sided lower bound (the upper is inf); "less": the one-sided upper bound."""
    from scipy.stats import bootstrap

    data = tuple(np.asarray(c, dtype=float) for c in columns)
    if len(data[0]) < 2:
        raise ValueError(f"{len(data[0])} group(s): a bootstrap over groups needs two or more")

    def resampled(*cols, axis=-1):
        return statistic(*(c.sum(axis=axis) for c in cols))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate distribution (e.g. identical programs) has its bounds anyway
        result = bootstrap(data, resampled, paired=True, vectorized=True, n_resamples=resamples,
                           confidence_level=confidence, method="percentile", alternative=alternative,
                           rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    return float(low), float(high)


def _class_columns(gold: Sequence[Any], predictions: Sequence[Sequence[Any]], groups: Sequence[Any]
                   ) -> tuple[list[Any], list[np.ndarray]]:
    """Per group (rows, in first-seen order) and gold class: the items, then for each prediction the items right."""
    if not gold or any(len(p) != len(gold) for p in predictions) or len(groups) != len(gold):
        raise ValueError("one prediction and one group per gold item, and at least one item")
    classes = sorted(set(gold), key=str)
    rows = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    columns = [np.zeros(len(rows)) for _ in range(len(classes) * (1 + len(predictions)))]
    for item, (g, group) in enumerate(zip(gold, groups)):
        c, row = classes.index(g), rows[group]
        columns[c][row] += 1
        for k, predicted in enumerate(predictions, start=1):
            columns[k * len(classes) + c][row] += predicted[item] == g
    return classes, columns


def balanced_accuracy_interval(gold: Sequence[Any], pred: Sequence[Any], groups: Sequence[Any], *,
                               confidence: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """A bootstrap interval of ``balanced_accuracy(gold, pred)`` resampling ``groups`` (``grouped_interval``)."""
    classes, columns = _class_columns(gold, [pred], groups)
    k = len(classes)
    return grouped_interval(lambda *sums: recall_mean(np.stack(sums[:k], -1), np.stack(sums[k:], -1)), columns,
                            confidence=confidence, seed=seed)


def balanced_accuracy_difference(gold: Sequence[Any], candidate: Sequence[Any], base: Sequence[Any],
                                 groups: Sequence[Any], *, confidence: float = 0.95, alternative: str = "greater",
                                 seed: int = 0) -> dict[str, float]:
    """Balanced accuracy of ``candidate`` minus that of ``base`` on the same items, with a paired bootstrap bound
    resampling ``groups``: {"difference", "low", "high"}; ``alternative`` "greater" (default): the one-sided lower
    bound at ``confidence`` (high is inf), "less": the one-sided upper bound, "two-sided": both."""
    classes, columns = _class_columns(gold, [candidate, base], groups)
    k = len(classes)

    def difference(*sums):
        counts = np.stack(sums[:k], -1)
        return recall_mean(counts, np.stack(sums[k:2 * k], -1)) - recall_mean(counts, np.stack(sums[2 * k:], -1))

    low, high = grouped_interval(difference, columns, confidence=confidence, alternative=alternative, seed=seed)
    return {"difference": balanced_accuracy(gold, candidate) - balanced_accuracy(gold, base), "low": low,
            "high": high}


def krippendorff_alpha(ratings: Sequence[Sequence[Any]]) -> float:
    """Nominal Krippendorff's alpha. ``ratings``: one row per rater, one column per item; None = not rated."""
    import krippendorff

    values = sorted({v for row in ratings for v in row if v is not None}, key=str)
    if len(values) < 2:
        raise ValueError("alpha needs at least two distinct labels among the ratings")
    code = {v: i for i, v in enumerate(values)}
    matrix = np.array([[np.nan if v is None else code[v] for v in row] for row in ratings], dtype=float)
    return float(krippendorff.alpha(reliability_data=matrix, level_of_measurement="nominal"))


# ---- claim-set matching -----------------------------------------------------------------------------------------
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of to is are was were be and or in on at for with that this it its as by".split())


def claim_tokens(claim: str) -> Counter:
    """Bag of content words of a claim after speaker normalisation (wizard -> assistant, apprentice -> user)."""
    return Counter(w for w in _WORD.findall(normalize_speakers(claim).lower()) if w not in _STOP)


def token_f1(a: str, b: str) -> float:
    ta, tb = claim_tokens(a), claim_tokens(b)
    common = sum((ta & tb).values())
    if common == 0:
        return 0.0
    precision, recall = common / sum(ta.values()), common / sum(tb.values())
    return 2 * precision * recall / (precision + recall)


@dataclass
class ClaimMatch:
    pairs: list[tuple[int, int, float]]  # (index in extracted, index in gold, similarity)
    extracted: int
    gold: int

    @property
    def jaccard(self) -> float:
        union = self.extracted + self.gold - len(self.pairs)
        return len(self.pairs) / union if union else 1.0

    @property
    def f1(self) -> float:
        total = self.extracted + self.gold
        return 2 * len(self.pairs) / total if total else 1.0


def match_claims(extracted: Sequence[str], gold: Sequence[str], threshold: float = 0.5) -> ClaimMatch:
    """One-to-one matching of extracted claims to gold claims.

    Matcher: similarity = F1 of content-word bags (lower-cased, stop words removed, speaker names normalised);
    the assignment maximising total similarity is found with the Hungarian algorithm (scipy), and a pair counts
    as a match when its similarity is at least ``threshold`` (default 0.5). Jaccard = matches / (|E| + |G| -
    matches); F1 = 2 matches / (|E| + |G|). Two empty sets agree perfectly.
    """
    if not extracted or not gold:
        return ClaimMatch(pairs=[], extracted=len(extracted), gold=len(gold))
    similarity = np.array([[token_f1(e, g) for g in gold] for e in extracted])
    rows, cols = linear_sum_assignment(similarity, maximize=True)
    pairs = [(int(r), int(c), float(similarity[r, c])) for r, c in zip(rows, cols) if similarity[r, c] >= threshold]
    return ClaimMatch(pairs=pairs, extracted=len(extracted), gold=len(gold))


@dataclass
class Decomposition:
    """Agreement of decomposed claims with the human claims of the same turns (``decomposition_agreement``)."""

    f1: float | None  # micro claim-set F1: 2 matches / (extracted + human claims)
    matched: int  # decomposed claims matched one-to-one to a human claim
    same_category: int  # of those, how many got the human claim's category


def decomposition_agreement(dialogues: Sequence[Any], verdicts: Sequence[Any]) -> Decomposition:
    """Claim-set agreement of end-to-end verdicts with the human claims of annotated turns (``match_claims`` per
    turn, micro-averaged), and, on the matched pairs, agreement of the judged category with the human one: a
    stage-wise reading of an end-to-end run that costs no LM call."""
    gold = {(d.id, i): d.turns[i].gold.claims for d in dialogues for i in d.judged_turns
            if d.turns[i].gold is not None and d.turns[i].gold.claims is not None}
    matched = total = same = 0
    for verdict in verdicts:
        for turn in verdict.turns:
            human = gold.get((verdict.dialogue_id, turn.turn_index))
            if turn.claims_source != "decomposed" or human is None:
                continue
            match = match_claims([c.claim for c in turn.claims], [c.text for c in human])
            matched += len(match.pairs)
            total += match.extracted + match.gold
            same += sum(turn.claims[e].category == human[g].category for e, g, _ in match.pairs)
    return Decomposition(f1=2 * matched / total if total else None, matched=matched, same_category=same)


# ---- what a judged turn costs -------------------------------------------------------------------------------------
PriceName = Literal["time", "dollars"]
PRICES: tuple[str, ...] = ("time", "dollars")


class PriceError(ValueError):
    """A usage this price cannot read (no server timings, a model litellm has no price for)."""


@dataclass(frozen=True)
class Price:
    """How usage becomes cost. ``of`` gives a dialogue's raw cost (seconds, or dollars); the objective is the raw
    cost of all dialogues over their judged turns, times ``scale`` (dollars are quoted per 1,000 judged turns)."""

    name: PriceName
    unit: str
    scale: float = 1.0

    def of(self, usage: Usage) -> float:
        if self.name == "time":
            return _server_seconds(usage)
        return _dollars(usage)

    def per_turn(self, raw: float, turns: int) -> float:
        """The objective's value for ``raw`` cost over ``turns`` judged turns."""
        return self.scale * raw / turns if turns else 0.0

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "unit": self.unit, "scale": self.scale}

    @classmethod
    def from_dict(cls, data: dict) -> Price:
        return cls(name=data["name"], unit=data["unit"], scale=float(data.get("scale", 1.0)))


SERVER_TIME = Price("time", "s per judged turn (the server's own time)")
DOLLARS = Price("dollars", "$ per 1,000 judged turns (litellm's cost map)", scale=1000.0)


def price_named(name: str) -> Price:
    if name not in PRICES:
        raise ValueError(f"unknown price {name!r}; choose one of {', '.join(PRICES)}")
    return SERVER_TIME if name == "time" else DOLLARS


def price_for(model: str | None, api_base: str | None) -> Price:
    """Time for the embedded model and for any self-hosted endpoint (an --api-base: llama.cpp, vLLM); dollars for a
    hosted provider's model."""
    from ..lm.weights import EMBEDDED

    return SERVER_TIME if model is None or model in EMBEDDED or api_base else DOLLARS


def _server_seconds(usage: Usage) -> float:
    total = usage.total
    if total.calls and not total.model_ms:
        raise PriceError(f"{total.calls} LM calls came back without the server's timings (llama.cpp's `timings`): "
                         "price this endpoint's tokens instead (--price dollars) or serve the model with llama.cpp")
    return total.model_ms / 1000.0


def _dollars(usage: Usage) -> float:
    from ..lm.offline import offline_litellm

    offline_litellm()  # litellm's own price table, never fetched
    import litellm

    cost = 0.0
    for model, counts in usage.by_model.items():
        if not counts.calls:
            continue
        try:
            prompt, completion = litellm.cost_per_token(model=model, prompt_tokens=counts.prompt_tokens,
                                                        completion_tokens=counts.completion_tokens)
        except Exception as exc:  # litellm raises a bare Exception for a model its map lacks
            raise PriceError(f"litellm's cost map has no price for {model!r} ({' '.join(str(exc).split())[:200]}): "
                             "price its server time instead (--price time)") from None
        cost += prompt + completion
    return cost

"""The instrument's arithmetic: balanced accuracy with bootstrap intervals over dialogues, and the gate anchored to the
seed (no LM call; it reads the verdicts of programs that ran on the same suite turns).

- ``balanced_accuracy``: the mean of the recall of each gold class; an ``unknown`` turn counts wrong. The suite's
  datasets are skewed (FADE 66-70 % hallucinated, the benchmarks' own labels elsewhere), so plain accuracy rewards
  a judge that leans to the majority; turn accuracy and P/R/F1 of the hallucinated class are reported beside it.
- Intervals resample *dialogues* (a dialogue's turns share its document and store) within each dataset (stratified,
  so every resample keeps the suite's composition), the same resamples for every system: a paired difference is
  read off the same draws.
- ``anchored_gate``: a candidate against the fixed anchor (the seed program, the paper's method) on the same turns.
  It passes when its balanced accuracy is not below the anchor's by more than ``margin`` (1 point) with one-sided
  confidence ``1 - alpha`` (the ``alpha`` quantile of the paired difference is above ``-margin``); it *wins* only
  when that quantile is above zero. Never against the previous default: margins must not chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

GATE_MARGIN = 0.01
GATE_ALPHA = 0.05
RESAMPLES = 4000
LABELS = ("hallucinated", "faithful")


def balanced_accuracy(gold: Sequence[str], predicted: Sequence[str]) -> float | None:
    """Mean recall of the gold classes present (``unknown`` or any other prediction of a turn counts wrong)."""
    recalls = []
    for label in LABELS:
        mine = [p == g for g, p in zip(gold, predicted) if g == label]
        if mine:
            recalls.append(sum(mine) / len(mine))
    return float(np.mean(recalls)) if recalls else None


def turn_scores(frame: pd.DataFrame) -> dict[str, Any]:
    """Balanced accuracy, accuracy, unknown turns, P/R/F1 of the hallucinated class of one system's turns
    (columns ``gold``, ``label``)."""
    gold, label = list(frame["gold"]), list(frame["label"])
    said = [p == "hallucinated" for p in label]
    true = [g == "hallucinated" for g in gold]
    tp = sum(s and t for s, t in zip(said, true))
    precision = tp / sum(said) if sum(said) else 0.0
    recall = tp / sum(true) if sum(true) else 0.0
    return {"turns": len(frame), "balanced_accuracy": balanced_accuracy(gold, label),
            "accuracy": float(np.mean([g == p for g, p in zip(gold, label)])) if len(frame) else None,
            "unknown": int(sum(p == "unknown" for p in label)), "precision_h": precision, "recall_h": recall,
            "f1_h": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
            "hallucinated_share": float(np.mean(true)) if len(frame) else None}


class Resampler:
    """The same stratified bootstrap draws of dialogues for every system scored on one set of turns.

    ``frame`` holds one row per turn with ``dataset`` and ``dialogue_id``; ``weights`` is a (resamples x dialogues)
    matrix of how often each dialogue is drawn, dialogues drawn with replacement within their dataset."""

    def __init__(self, frame: pd.DataFrame, resamples: int = RESAMPLES, seed: int = 0) -> None:
        keys = frame[["dataset", "dialogue_id"]].drop_duplicates().reset_index(drop=True)
        self.index = {(d, i): n for n, (d, i) in enumerate(zip(keys["dataset"], keys["dialogue_id"]))}
        rng = np.random.default_rng(seed)
        self.weights = np.zeros((resamples, len(keys)))
        for _, members in keys.groupby("dataset", sort=True).groups.items():
            members = np.asarray(members)
            draws = rng.integers(0, len(members), size=(resamples, len(members)))
            for column in range(len(members)):
                np.add.at(self.weights, (np.arange(resamples), members[draws[:, column]]), 1.0)

    def balanced_accuracies(self, frame: pd.DataFrame) -> np.ndarray:
        """One balanced accuracy per resample for one system's turns (the turns this resampler was built on)."""
        rows = np.array([self.index[d, i] for d, i in zip(frame["dataset"], frame["dialogue_id"])])
        right = (frame["label"].to_numpy() == frame["gold"].to_numpy()).astype(float)
        recalls = []
        for label in LABELS:
            mine = (frame["gold"].to_numpy() == label).astype(float)
            if not mine.any():
                continue
            count = np.zeros(len(self.index))
            hits = np.zeros(len(self.index))
            np.add.at(count, rows, mine)
            np.add.at(hits, rows, mine * right)
            drawn = self.weights @ count
            recalls.append(np.divide(self.weights @ hits, drawn, out=np.full(len(drawn), np.nan), where=drawn > 0))
        return np.nanmean(np.vstack(recalls), axis=0)


def interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    tail = (1 - confidence) / 2
    return float(np.quantile(values, tail)), float(np.quantile(values, 1 - tail))


def paired_frame(turns: pd.DataFrame, systems: Sequence[str]) -> pd.DataFrame:
    """The turns every one of ``systems`` judged (inner join on dataset, dialogue and turn), long form again."""
    keys = ["dataset", "dialogue_id", "turn_index"]
    common = None
    for system in systems:
        mine = turns.loc[turns["system"] == system, keys]
        common = mine if common is None else common.merge(mine, on=keys)
    if common is None or common.empty:
        return turns.iloc[0:0]
    return turns[turns["system"].isin(systems)].merge(common, on=keys)


def system_table(turns: pd.DataFrame, systems: Sequence[str], *, by_dataset: bool = True, seed: int = 0
                 ) -> pd.DataFrame:
    """Rows (dataset or 'pooled') x system on the turns all ``systems`` judged: the scores of ``turn_scores`` and
    a 95 % interval of balanced accuracy (dialogues resampled within datasets)."""
    paired = paired_frame(turns, systems)
    rows = []
    groups = [("pooled", paired)] + (list(paired.groupby("dataset", sort=False)) if by_dataset else [])
    for name, group in groups:
        resampler = Resampler(group[group["system"] == systems[0]], seed=seed)
        for system in systems:
            mine = group[group["system"] == system]
            low, high = interval(resampler.balanced_accuracies(mine))
            rows.append({"dataset": name, "system": system, **turn_scores(mine), "ba_low": low, "ba_high": high})
    return pd.DataFrame(rows)


def anchored_gate(turns: pd.DataFrame, candidate: str, anchor: str = "seed", *, margin: float = GATE_MARGIN,
                  alpha: float = GATE_ALPHA, no_lm: str | None = None, seed: int = 0) -> dict[str, Any]:
    """The candidate against the anchor on the turns both judged (pooled over the suite's datasets, and per dataset
    for reading): the paired difference of balanced accuracy, its one-sided ``1 - alpha`` lower bound, whether it
    passes (lower bound > -margin) and whether it wins (lower bound > 0); turn accuracy's exact McNemar test; and,
    with ``no_lm`` (the tier with no LM call on the same turns), the turn labels the candidate's LM flipped against
    it: how many, and how many of those it got right."""
    from .metrics import mcnemar_exact

    systems = [candidate, anchor] + ([no_lm] if no_lm else [])
    paired = paired_frame(turns, systems)
    if paired.empty:
        raise ValueError(f"no turn judged by all of {', '.join(systems)}")
    datasets: dict[str, Any] = {}
    for name, group in [("pooled", paired)] + list(paired.groupby("dataset", sort=False)):
        mine, theirs = (group[group["system"] == s].sort_values(["dataset", "dialogue_id", "turn_index"])
                        for s in (candidate, anchor))
        resampler = Resampler(mine, seed=seed)
        difference = resampler.balanced_accuracies(mine) - resampler.balanced_accuracies(theirs)
        a, b = turn_scores(mine), turn_scores(theirs)
        test = mcnemar_exact(list(mine["gold"]), list(mine["label"]), list(theirs["label"]))
        datasets[name] = {
            "turns": a["turns"], "candidate": a, "anchor": b,
            "difference": a["balanced_accuracy"] - b["balanced_accuracy"],
            "lower_bound": float(np.quantile(difference, alpha)),
            "interval_95": interval(difference),
            "turns_only_candidate_right": test["a_only"], "turns_only_anchor_right": test["b_only"],
            "mcnemar_p": float(test["pvalue"]),
        }
    pooled = datasets["pooled"]
    record: dict[str, Any] = {
        "candidate": candidate, "anchor": anchor, "margin": margin, "alpha": alpha, "resamples": RESAMPLES,
        "passes": pooled["lower_bound"] > -margin, "wins": pooled["lower_bound"] > 0, "datasets": datasets,
        "rule": f"passes: the {alpha:.0%} quantile of the paired bootstrap difference of balanced accuracy "
                f"(candidate - {anchor}, dialogues resampled within datasets) is above -{margin:.2f}; wins: above 0",
    }
    if no_lm:
        mine, tier = (paired[paired["system"] == s].sort_values(["dataset", "dialogue_id", "turn_index"])
                      for s in (candidate, no_lm))
        flipped = mine["label"].to_numpy() != tier["label"].to_numpy()
        right = mine["label"].to_numpy() == mine["gold"].to_numpy()
        record["lm_flips"] = {"against": no_lm, "turns": int(flipped.sum()),
                              "now_right": int((flipped & right).sum()), "now_wrong": int((flipped & ~right).sum())}
    return record


def gate_markdown(record: dict[str, Any]) -> list[str]:
    """The anchored gate's table: a row per dataset and pooled."""
    anchor, candidate = record["anchor"], record["candidate"]
    lines = [f"| turns of | turns | {anchor} bal. acc. | {candidate} bal. acc. | difference "
             f"(95 % interval) | one-sided {1 - record['alpha']:.0%} lower bound | turn acc. {anchor} / "
             f"{candidate} | only {candidate} / only {anchor} right (McNemar p) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, d in record["datasets"].items():
        c, a = d["candidate"], d["anchor"]
        lines.append(f"| {name} | {d['turns']} | {a['balanced_accuracy']:.3f} | {c['balanced_accuracy']:.3f} | "
                     f"{d['difference']:+.3f} ({d['interval_95'][0]:+.3f} to {d['interval_95'][1]:+.3f}) | "
                     f"{d['lower_bound']:+.3f} | {a['accuracy']:.3f} / {c['accuracy']:.3f} | "
                     f"{d['turns_only_candidate_right']} / {d['turns_only_anchor_right']} ({d['mcnemar_p']:.3f}) |")
    verdict = ("wins against" if record["wins"] else "passes against" if record["passes"] else "fails against")
    lines.append("")
    lines.append(f"{candidate} {verdict} {anchor} ({record['rule']}).")
    if "lm_flips" in record:
        f = record["lm_flips"]
        lines.append(f"Turn labels its LM changed against `{f['against']}` (no LM call) on the same turns: "
                     f"{f['turns']} ({f['now_right']} now right, {f['now_wrong']} now wrong).")
    return lines

"""The instrument's arithmetic: balanced accuracy with bootstrap intervals over dialogues, and the gate anchored to the
seed (no LM call; it reads the verdicts of programs that ran on the same suite turns).

- ``balanced_accuracy``: the mean of the recall of each gold class; an ``unknown`` turn counts wrong. The suite's
  datasets are skewed (FADE 66-70 % hallucinated, the benchmarks' own labels elsewhere), so plain accuracy rewards
  a judge that leans to the majority; turn accuracy and P/R/F1 of the hallucinated class are reported beside it.
- Intervals resample *dialogues* (a dialogue's turns share its document and store; ``metrics.grouped_interval``), the
  same draws for the two systems of a paired difference (``metrics.balanced_accuracy_difference``).
- ``anchored_gate``: a candidate against the fixed anchor (the seed program, the paper's method) on the same turns.
  It passes when its balanced accuracy is not below the anchor's by more than ``margin`` (1 point) with one-sided
  confidence ``1 - alpha`` (the ``alpha`` quantile of the paired difference is at least ``-margin``); it *wins* only
  when that quantile is above zero. Never against the previous default: margins must not chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from .metrics import balanced_accuracy, balanced_accuracy_difference, balanced_accuracy_interval, mcnemar_exact
from .seed_gate import GATE_ALPHA, GATE_MARGIN


def turn_scores(frame: pd.DataFrame) -> dict[str, Any]:
    """Balanced accuracy beside ``scoring.turn_metrics`` (accuracy, unknown turns, P/R/F1 of the hallucinated class,
    an unknown counted wrong) of one system's turns (columns ``gold``, ``label``)."""
    from ..scoring import turn_metrics

    gold, label = list(frame["gold"]), list(frame["label"])
    if not gold:
        return {"turns": 0, "balanced_accuracy": None}
    m = turn_metrics(label, gold)
    return {"turns": m["turns"], "balanced_accuracy": balanced_accuracy(gold, label), "accuracy": m["accuracy"],
            "unknown": m["unknown"], "precision_h": m["precision_hallucinated"], "recall_h": m["recall_hallucinated"],
            "f1_h": m["f1_hallucinated"], "hallucinated_share": m["always_hallucinated_accuracy"]}


def _groups(frame: pd.DataFrame) -> list[str]:
    return [f"{d}:{i}" for d, i in zip(frame["dataset"], frame["dialogue_id"])]


def _ordered(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["dataset", "dialogue_id", "turn_index"])


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


def system_table(turns: pd.DataFrame, systems: Sequence[str], *, by_dataset: bool = True) -> pd.DataFrame:
    """Rows (dataset or 'pooled') x system on the turns all ``systems`` judged: the scores of ``turn_scores`` and
    a 95 % interval of balanced accuracy (dialogues resampled)."""
    paired = paired_frame(turns, systems)
    rows = []
    groups = [("pooled", paired)] + (list(paired.groupby("dataset", sort=False)) if by_dataset else [])
    for name, group in groups:
        for system in systems:
            mine = _ordered(group[group["system"] == system])
            low, high = balanced_accuracy_interval(list(mine["gold"]), list(mine["label"]), _groups(mine))
            rows.append({"dataset": name, "system": system, **turn_scores(mine), "ba_low": low, "ba_high": high})
    return pd.DataFrame(rows)


def anchored_gate(turns: pd.DataFrame, candidate: str, anchor: str = "seed", *, margin: float = GATE_MARGIN,
                  alpha: float = GATE_ALPHA, no_lm: str | None = None) -> dict[str, Any]:
    """The candidate against the anchor on the turns both judged (pooled over the suite's datasets, and per dataset
    for reading): the paired difference of balanced accuracy, its one-sided ``1 - alpha`` lower bound, whether it
    passes (lower bound > -margin) and whether it wins (lower bound > 0); turn accuracy's exact McNemar test; and,
    with ``no_lm`` (the tier with no LM call on the same turns), the turn labels the candidate's LM flipped against
    it: how many, and how many of those it got right."""
    systems = [candidate, anchor] + ([no_lm] if no_lm else [])
    paired = paired_frame(turns, systems)
    if paired.empty:
        raise ValueError(f"no turn judged by all of {', '.join(systems)}")
    datasets: dict[str, Any] = {}
    for name, group in [("pooled", paired)] + list(paired.groupby("dataset", sort=False)):
        mine, theirs = (_ordered(group[group["system"] == s]) for s in (candidate, anchor))
        gold, groups = list(mine["gold"]), _groups(mine)
        one_sided = balanced_accuracy_difference(gold, list(mine["label"]), list(theirs["label"]), groups,
                                                 confidence=1 - alpha, alternative="greater")
        two_sided = balanced_accuracy_difference(gold, list(mine["label"]), list(theirs["label"]), groups,
                                                 alternative="two-sided")
        a, b = turn_scores(mine), turn_scores(theirs)
        test = mcnemar_exact(gold, list(mine["label"]), list(theirs["label"]))
        datasets[name] = {
            "turns": a["turns"], "candidate": a, "anchor": b, "difference": one_sided["difference"],
            "lower_bound": one_sided["low"], "interval_95": (two_sided["low"], two_sided["high"]),
            "turns_only_candidate_right": test["a_only"], "turns_only_anchor_right": test["b_only"],
            "mcnemar_p": float(test["pvalue"]),
        }
    pooled = datasets["pooled"]
    record: dict[str, Any] = {
        "candidate": candidate, "anchor": anchor, "margin": margin, "alpha": alpha,
        "passes": pooled["lower_bound"] >= -margin, "wins": pooled["lower_bound"] > 0, "datasets": datasets,
        "rule": f"passes: the {alpha:.0%} quantile of the paired bootstrap difference of balanced accuracy "
                f"(candidate - {anchor}, dialogues resampled) is at least -{margin:.2f}; wins: above 0",
    }
    if no_lm:
        mine, tier = (_ordered(paired[paired["system"] == s]) for s in (candidate, no_lm))
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

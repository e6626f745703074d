"""The instrument's tables from a `vista benchmark --suite PART` directory: one turn frame over every run (its part,
gold, label, coherence and model time), balanced accuracy per dataset and pooled with bootstrap intervals, the
trivial baselines beside them, McNemar against VISTA, and the gate anchored to the seed (``optimize.instrument``).

A run's turns are also what a probe records as data (``probe_rows``): ids, labels, the claims' categories, stages,
probabilities and cues, usage — no dataset text, so the records can be committed and the tables rebuilt from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..data.records import read_jsonl_records
from ..data.suite import group_id_of, part_of_group
from ..optimize.instrument import anchored_gate, gate_markdown, paired_frame, system_table
from ..optimize.metrics import mcnemar_exact
from ..schema import DialogueVerdict
from ..scoring import UNSAFE_CATEGORIES
from .tables import REFERENCE_SYSTEM, run_dirs

BASELINES = ("always-hallucinated", "coin-flip")
UNSAFE = {c.value for c in UNSAFE_CATEGORIES}


def probe_rows(verdict: DialogueVerdict) -> list[dict[str, Any]]:
    """One record per judged turn of a verdict, without any text: what the instrument's tables and a refit need."""
    turns = [t for t in verdict.turns if t.gold_label is not None]
    share = max(1, len(verdict.turns))
    usage = verdict.usage.total
    rows = []
    for turn in turns:
        rows.append({
            "dialogue_id": verdict.dialogue_id, "turn_index": turn.turn_index,
            "part": part_of_group(group_id_of(verdict.dialogue_id, verdict.source)),
            "gold": turn.gold_label, "label": turn.label, "score": turn.score, "error": bool(turn.error),
            "claims": [{"category": c.category.value, "stage": c.stage, "decided_by": c.decided_by,
                        "raw_label": c.raw_label, "p_unsafe": c.p_unsafe, "added_by": c.added_by,
                        "probabilities": c.probabilities.model_dump() if c.probabilities else None,
                        "cues": c.cues} for c in turn.claims],
            "usage": {"calls": usage.calls / share, "cache_hits": usage.cache_hits / share,
                      "prompt_tokens": usage.prompt_tokens / share,
                      "completion_tokens": usage.completion_tokens / share,
                      "cached_prompt_tokens": usage.cached_prompt_tokens / share,
                      "model_ms": usage.model_ms / share},
        })
    return rows


def frame_of(rows: Sequence[dict[str, Any]], **columns: Any) -> pd.DataFrame:
    """The turn frame of probe rows: one row per turn with the columns the tables read."""
    return pd.DataFrame([{
        "dataset": r.get("dataset"), "system": r.get("system"), **columns,
        "dialogue_id": r["dialogue_id"], "turn_index": r["turn_index"], "part": r["part"],
        "gold": r["gold"], "label": r["label"], "score": r["score"], "claims": len(r["claims"]),
        "unsafe_claims": sum(c["category"] in UNSAFE for c in r["claims"]),
        "calls": r["usage"]["calls"], "cache_hits": r["usage"].get("cache_hits", 0.0),
        "model_ms": r["usage"]["model_ms"],
        "prompt_tokens": r["usage"]["prompt_tokens"], "completion_tokens": r["usage"]["completion_tokens"],
    } for r in rows])


def run_turns(out_dir: Path) -> pd.DataFrame:
    """The turn frame of every run of a benchmark directory (dataset and system columns)."""
    from ..run.runner import VERDICTS, read_verdicts

    frames = [frame_of([row for v in read_verdicts(path / VERDICTS) for row in probe_rows(v)], dataset=d, system=s)
              for d, s, path in run_dirs(out_dir)]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def probe_turns(directory: Path) -> pd.DataFrame:
    """The turn frame of a committed suite probe (``benchmarks/probes/suite-*/turns.jsonl``, or ``turns.jsonl.gz``)."""
    return frame_of(read_jsonl_records(Path(directory) / "turns.jsonl"))


def incoherent(turns: pd.DataFrame) -> pd.DataFrame:
    """Turns whose label does not follow from their claims (hallucinated iff an unsafe claim; unknown aside)."""
    known = turns[turns["label"] != "unknown"]
    return known[(known["label"] == "hallucinated") != (known["unsafe_claims"] > 0)]


def with_baselines(turns: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """``turns`` plus the trivial judges on the same turns: always-hallucinated, and a seeded fair coin."""
    first = turns[turns["system"] == turns["system"].iloc[0]]
    rng = np.random.default_rng(seed)
    free = {"model_ms": 0.0, "calls": 0.0, "cache_hits": 0.0}
    always = first.assign(system="always-hallucinated", label="hallucinated", **free)
    coin = first.assign(system="coin-flip", label=np.where(rng.random(len(first)) < 0.5, "hallucinated", "faithful"),
                        **free)
    return pd.concat([turns, always, coin], ignore_index=True)


def instrument_table(turns: pd.DataFrame, systems: Sequence[str], reference: str = REFERENCE_SYSTEM
                     ) -> pd.DataFrame:
    """``system_table`` on the turns all ``systems`` judged, with the baselines on the same turns, model seconds per
    judged turn, incoherent turns, and the exact McNemar p of turn accuracy against ``reference``."""
    paired = with_baselines(paired_frame(turns, systems))
    names = list(systems) + list(BASELINES)
    table = system_table(paired, names)
    keys = ["dialogue_id", "turn_index"]
    extra = []
    for _, row in table.iterrows():
        group = paired if row["dataset"] == "pooled" else paired[paired["dataset"] == row["dataset"]]
        mine = group[group["system"] == row["system"]].sort_values(["dataset", *keys])
        p = None
        if reference in names and row["system"] != reference:
            ref = group[group["system"] == reference].sort_values(["dataset", *keys])
            p = float(mcnemar_exact(list(mine["gold"]), list(mine["label"]), list(ref["label"]))["pvalue"])
        # Model time from the turns no cache answered: a cached answer costs nothing here and says nothing of cost.
        live = mine[mine["cache_hits"] == 0]
        answers = (mine["calls"] + mine["cache_hits"]).sum()
        extra.append({"model_s_per_turn": live["model_ms"].mean() / 1000 if len(live) else None,
                      "calls_per_turn": mine["calls"].mean(),
                      "cached_share": mine["cache_hits"].sum() / answers if answers else 0.0,
                      # (a system that decides no claim, as LLM-as-Judge, has no claims to be coherent with)
                      "incoherent": len(incoherent(mine)) if row["system"] not in BASELINES
                      and mine["claims"].sum() > 0 else None,
                      f"p_vs_{reference}": p})
    return pd.concat([table, pd.DataFrame(extra)], axis=1)


def table_markdown(table: pd.DataFrame, reference: str = REFERENCE_SYSTEM) -> str:
    lines = [f"| dataset | system | turns | balanced acc. (95 % interval) | acc. | P / R / F1 halluc. | unknown | "
             f"incoherent | model s / turn | p vs {reference} |", "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        p = r[f"p_vs_{reference}"]
        seconds = r["model_s_per_turn"]
        lines.append(
            f"| {r['dataset']} | {r['system']} | {r['turns']} | {r['balanced_accuracy']:.3f} ({r['ba_low']:.3f}-"
            f"{r['ba_high']:.3f}) | {r['accuracy']:.3f} | {r['precision_h']:.2f} / {r['recall_h']:.2f} / "
            f"{r['f1_h']:.2f} | {r['unknown']} | {'' if pd.isna(r['incoherent']) else int(r['incoherent'])} | "
            f"{'' if seconds is None or pd.isna(seconds) else f'{seconds:.1f}'}"
            f"{f' ({cached:.0%} of answers cached)' if (cached := r.get('cached_share', 0.0) or 0.0) > 0 else ''} | "
            f"{'' if p is None or pd.isna(p) else f'{p:.3f}'} |")
    return "\n".join(lines) + "\n"


def suite_table(out: Path) -> tuple[pd.DataFrame, str] | None:
    """The instrument's table of a suite directory over every system its runs hold (several commands may fill one
    directory, as for the other tables), in plan order, with McNemar against VISTA when it is there; and the
    reference it tests against. None when no run has a judged turn."""
    turns = run_turns(out)
    if turns.empty:
        return None
    judged = set(turns["system"])
    present = list(dict.fromkeys(system for _, system, _ in run_dirs(out) if system in judged))
    reference = REFERENCE_SYSTEM if REFERENCE_SYSTEM in present else present[0]  # the paper's table tests against VISTA
    return instrument_table(turns, present, reference=reference), reference


def write_suite_table(out: Path) -> str:
    """``suite_table`` as Markdown, also written to OUT/instrument.md and instrument.csv ('' when there is none)."""
    found = suite_table(out)
    if found is None:
        return ""
    table, reference = found
    text = ("## The instrument: balanced accuracy on the suite's turns\n\n" + table_markdown(table, reference) +
            "\nIntervals: 95 % bootstrap over dialogues resampled; every row on the turns all "
            "systems judged. incoherent: turns whose label does not follow from their claims.\n")
    table.to_csv(out / "instrument.csv", index=False)
    (out / "instrument.md").write_text(text)
    return text


def gate_report(turns: pd.DataFrame, candidate: str, anchor: str = "seed", no_lm: str | None = "evidence"
                ) -> tuple[dict[str, Any], str]:
    """The anchored gate's record and its Markdown (``optimize.instrument.anchored_gate``)."""
    if no_lm is not None and no_lm not in set(turns["system"]):
        no_lm = None
    record = anchored_gate(turns, candidate, anchor, no_lm=no_lm)
    return record, "\n".join(gate_markdown(record)) + "\n"

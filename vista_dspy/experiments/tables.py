"""The benchmark's tables, computed from its run directories (pandas): turn accuracy per dataset x system with McNemar
tests against VISTA, abstention (CoCoNot) and contradiction (RGM) tables, and their Markdown / display forms."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from .. import scoring
from ..optimize.metrics import mcnemar_exact
from ..schema import Category, DialogueVerdict

REFERENCE_SYSTEM = "vista"
SEED_SYSTEM = "seed"  # VISTA with the seed program whatever --program is: the base of the paired tables
TIMING = "timing.json"
PLAN = "benchmark.json"


def is_claim_categorizer(system: str) -> bool:
    """Whether a system sorts claims into VISTA's categories (FActScore has supported/unsupported only, the
    holistic judge no claims), so that ABSTENTION / CONTRADICTED rates mean something for it."""
    return system in (REFERENCE_SYSTEM, SEED_SYSTEM) or system.startswith("vista-")



def run_dirs(out_dir: Path) -> list[tuple[str, str, Path]]:
    """(dataset, system, directory) of every run under a benchmark directory, in plan order when known; a
    single `vista evaluate` directory is one run, named after its input and system."""
    from ..run.runner import RUN, VERDICTS

    if (out_dir / VERDICTS).exists():
        settings = json.loads((out_dir / RUN).read_text()) if (out_dir / RUN).exists() else {}
        dataset = Path(str(settings.get("input", out_dir.name)).split(":")[-1]).stem
        system = "vista" if "use_context" in settings else str(settings.get("program", "vista"))
        return [(dataset, system, out_dir)]
    found = {(p.parent.parent.name, p.parent.name): p.parent
             for p in sorted((out_dir / "runs").glob("*/*/verdicts.jsonl"))}
    plan_path = out_dir / PLAN
    if plan_path.exists():
        plans = json.loads(plan_path.read_text()).get("plans", [])
        order = list(dict.fromkeys((d, s) for plan in plans for d in plan["datasets"] for s in plan["systems"]))
        keys = [k for k in order if k in found] + [k for k in found if k not in order]
    else:
        keys = list(found)
    return [(d, s, found[d, s]) for d, s in keys]


def turn_frame(verdicts: Sequence[DialogueVerdict], **columns: Any) -> pd.DataFrame:
    """One row per judged turn: prediction, gold, claim-category flags, and the CoCoNot expectation."""
    rows = []
    for verdict in verdicts:
        calls = verdict.usage.total.calls
        for turn in verdict.turns:
            categories = [c.category for c in turn.claims]
            rows.append({
                **columns,
                "dialogue_id": verdict.dialogue_id,
                "turn_index": turn.turn_index,
                "label": turn.label,
                "gold_label": turn.gold_label,
                "expected": verdict.source.get("expected"),
                "claims": len(categories),
                "abstention": Category.ABSTENTION in categories,
                "contradicted": Category.CONTRADICTED in categories
                or bool(turn.contradiction and turn.contradiction.contradicts),
                "calls": calls / max(1, len(verdict.turns)),
            })
    return pd.DataFrame(rows)


def load_turns(out_dir: Path) -> pd.DataFrame:
    """The turn frame of every run of a benchmark directory, with dataset and system columns."""
    from ..run.runner import VERDICTS, read_verdicts

    frames = [turn_frame(read_verdicts(path / VERDICTS), dataset=d, system=s) for d, s, path in run_dirs(out_dir)]
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _timing(out_dir: Path, dataset: str, system: str) -> float | None:
    path = out_dir / "runs" / dataset / system / TIMING
    if not path.exists():
        return None
    timing = json.loads(path.read_text())
    return timing["seconds"] / timing["dialogues"] if timing["dialogues"] else None


def loads(out_dir: Path) -> dict[str, dict[str, Any]]:
    """What each dataset's loader kept and skipped, as the benchmark recorded it (``bench.load_record``)."""
    path = out_dir / PLAN
    return json.loads(path.read_text()).get("loaded", {}) if path.exists() else {}


def skipped_lines(out_dir: Path) -> list[str]:
    """One Markdown line per dataset whose loader skipped rows: how many, and why."""
    lines = []
    for dataset, load in loads(out_dir).items():
        skipped = sum(load.get("skipped", {}).values())
        if skipped:
            reasons = ", ".join(f"{reason}: {count}" for reason, count in load["skipped"].items())
            lines.append(f"- {dataset}: {skipped} of {load['kept'] + skipped} rows skipped ({reasons})")
    return lines


def _mark(pvalue: float | None) -> str:
    if pvalue is None:
        return ""
    return "**" if pvalue < 0.01 else "*" if pvalue < 0.05 else ""


def accuracy_table(turns: pd.DataFrame, out_dir: Path) -> pd.DataFrame:
    """Rows dataset x system over turns with a gold label: accuracy (unknown counted wrong), F1 of the
    hallucinated class, and the exact McNemar test against VISTA on the same turns."""
    rows = []
    loaded = loads(out_dir)
    labelled = turns[turns["gold_label"].notna()] if not turns.empty else turns
    for (dataset, system), group in labelled.groupby(["dataset", "system"], sort=False):
        metrics = scoring.turn_metrics(list(group["label"]), list(group["gold_label"]))
        row = {
            "dataset": dataset, "system": system, "turns": metrics["turns"],
            "skipped_rows": sum(loaded.get(dataset, {}).get("skipped", {}).values()) if dataset in loaded else None,
            "accuracy": metrics["accuracy"], "vs_vista": "", "vs_vista_p": None,
            "accuracy_excl_unknown": metrics["accuracy_excluding_unknown"],
            "unknown": metrics["unknown"], "precision_h": metrics["precision_hallucinated"],
            "recall_h": metrics["recall_hallucinated"], "f1_h": metrics["f1_hallucinated"],
            "always_h": metrics["always_hallucinated_accuracy"],
            "calls_per_turn": group["calls"].mean(), "seconds_per_dialogue": _timing(out_dir, dataset, system),
        }
        reference = labelled[(labelled["dataset"] == dataset) & (labelled["system"] == REFERENCE_SYSTEM)]
        if system != REFERENCE_SYSTEM and not reference.empty:
            paired = group.merge(reference, on=["dialogue_id", "turn_index"], suffixes=("", "_ref"))
            if not paired.empty:
                test = mcnemar_exact(list(paired["gold_label"]), list(paired["label"]), list(paired["label_ref"]))
                row["vs_vista_p"] = test["pvalue"]
                row["vs_vista"] = _mark(test["pvalue"])
        rows.append(row)
    return pd.DataFrame(rows)


def abstention_table(turns: pd.DataFrame) -> pd.DataFrame:
    """CoCoNot: refusals should get an ABSTENTION claim (and not be called hallucinated); compliant answers
    should not. ``abstention_accuracy`` is over both sides; holistic judges (no categories) get None there."""
    rows = []
    data = turns[turns["expected"].notna()] if not turns.empty else turns
    for (dataset, system), group in data.groupby(["dataset", "system"], sort=False):
        refusals = group[group["expected"] == "abstention"]
        compliant = group[group["expected"] == "compliant"]
        categorical = is_claim_categorizer(system)
        correct = (group["abstention"] == (group["expected"] == "abstention")).mean() if categorical else None
        rows.append({
            "dataset": dataset, "system": system, "refusals": len(refusals), "compliant": len(compliant),
            "abstention_accuracy": correct,
            "refusals_with_abstention": refusals["abstention"].mean() if categorical and len(refusals) else None,
            "refusals_judged_faithful": (refusals["label"] == "faithful").mean() if len(refusals) else None,
            "compliant_with_abstention": compliant["abstention"].mean() if categorical and len(compliant) else None,
            "compliant_judged_faithful": (compliant["label"] == "faithful").mean() if len(compliant) else None,
        })
    return pd.DataFrame(rows)


def contradiction_table(turns: pd.DataFrame) -> pd.DataFrame:
    """RGM-Contradictions: F1 of the contradictory class, predicting it from the turn label (all systems) and
    from a CONTRADICTED claim or a fired contradiction check (claim-level systems)."""
    from sklearn.metrics import f1_score

    rows = []
    data = turns[turns["dataset"] == "rgm-contradictions"] if not turns.empty else turns
    for system, group in data.groupby("system", sort=False):
        gold = group["gold_label"] == "hallucinated"
        categorical = is_claim_categorizer(system)
        rows.append({
            "dataset": "rgm-contradictions", "system": system, "turns": len(group),
            "contradictory": int(gold.sum()),
            "f1_turn_label": f1_score(gold, group["label"] == "hallucinated", zero_division=0),
            "f1_contradicted_claim": f1_score(gold, group["contradicted"], zero_division=0) if categorical else None,
        })
    return pd.DataFrame(rows)


def compute_tables(turns: pd.DataFrame, out_dir: Path) -> dict[str, pd.DataFrame]:
    """accuracy (datasets with gold labels), abstention (CoCoNot), contradiction (RGM) from a turn frame."""
    if turns.empty:
        return {}
    tables = {"accuracy": accuracy_table(turns, out_dir)}
    if turns["expected"].notna().any():
        tables["abstention"] = abstention_table(turns)
    if (turns["dataset"] == "rgm-contradictions").any():
        tables["contradiction"] = contradiction_table(turns)
    return {k: v for k, v in tables.items() if not v.empty}


def write_tables(out_dir: Path) -> dict[str, pd.DataFrame]:
    """Recompute every table from the runs on disk and write CSV, Markdown and benchmark.json."""
    tables = compute_tables(load_turns(out_dir), out_dir)
    names = {"accuracy": "table", "abstention": "abstention", "contradiction": "contradiction"}
    for key, frame in tables.items():
        frame.to_csv(out_dir / f"{names[key]}.csv", index=False)
    (out_dir / "table.md").write_text(markdown(tables, skipped_lines(out_dir)))
    plan_path = out_dir / PLAN
    document = json.loads(plan_path.read_text()) if plan_path.exists() else {}
    document["tables"] = {k: json.loads(v.to_json(orient="records")) for k, v in tables.items()}
    plan_path.write_text(json.dumps(document, indent=2) + "\n")
    return tables


# Display: column -> (header, format); pct = fraction shown in %, p = p-value, num = 1 decimal, else as is.
DISPLAY: dict[str, tuple[str, str]] = {
    "dataset": ("dataset", ""), "system": ("system", ""), "turns": ("turns", ""),
    "skipped_rows": ("rows skipped", ""),
    "accuracy": ("accuracy %", "pct"), "accuracy_excl_unknown": ("acc. excl. unknown %", "pct"),
    "unknown": ("unknown", ""), "precision_h": ("P halluc. %", "pct"), "recall_h": ("R halluc. %", "pct"),
    "f1_h": ("F1 halluc. %", "pct"), "always_h": ("always-halluc. %", "pct"), "vs_vista_p": ("p vs vista", "p"),
    "calls_per_turn": ("calls/turn", "num"), "seconds_per_dialogue": ("s/dialogue", "num"),
    "refusals": ("refusals", ""), "compliant": ("compliant", ""),
    "abstention_accuracy": ("abstention acc. %", "pct"),
    "refusals_with_abstention": ("refusals with ABSTENTION %", "pct"),
    "refusals_judged_faithful": ("refusals judged faithful %", "pct"),
    "compliant_with_abstention": ("compliant with ABSTENTION %", "pct"),
    "compliant_judged_faithful": ("compliant judged faithful %", "pct"),
    "contradictory": ("contradictory", ""), "f1_turn_label": ("F1 from turn label %", "pct"),
    "f1_contradicted_claim": ("F1 from CONTRADICTED %", "pct"),
}
TABLE_TEXT: dict[str, tuple[str, str]] = {
    "accuracy": ("Turn accuracy", "Accuracy counts `unknown` turns (a stage failed) as wrong. Marks: exact McNemar "
                 "test against `vista` on the same turns, * p < 0.05, ** p < 0.01. always-halluc.: accuracy of "
                 "calling every turn hallucinated. rows skipped: rows of the dataset its loader left out (per reason "
                 "below the tables). calls/turn: LM calls that reached the model per judged turn "
                 "(cache hits are not calls). s/dialogue: wall time of the sessions that judged."),
    "abstention": ("Abstention (CoCoNot)", "Refusals should carry an ABSTENTION claim and compliant answers "
                   "should not (abstention acc. is over both); empty for systems without VISTA's categories."),
    "contradiction": ("Contradiction (RGM-Contradictions)", "F1 of the contradictory class, predicted from the "
                      "turn label, or from a CONTRADICTED claim or a fired contradiction check."),
}


def _format(value: Any, kind: str) -> str:
    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return ""
    if kind == "pct":
        return f"{100 * value:.1f}"
    if kind == "p":
        return f"{value:.3f}"
    if kind == "num":
        return f"{value:.1f}"
    return str(value)


def display_table(frame: pd.DataFrame) -> pd.DataFrame:
    """A table as strings with readable headers; accuracy carries its significance mark."""
    view = pd.DataFrame({DISPLAY[c][0]: [_format(v, DISPLAY[c][1]) for v in frame[c]]
                         for c in frame.columns if c in DISPLAY})
    if "vs_vista" in frame:
        view["accuracy %"] = view["accuracy %"] + frame["vs_vista"].fillna("")
    return view


def markdown(tables: dict[str, pd.DataFrame], skipped: Sequence[str] = ()) -> str:
    """The tables as Markdown with their notes, and (``skipped``) the rows the loaders left out, per reason."""
    parts = []
    for key, frame in tables.items():
        view = display_table(frame)
        table = view.to_markdown(index=False, disable_numparse=True,
                                 colalign=["left", "left"] + ["right"] * (len(view.columns) - 2))
        parts.append(f"## {TABLE_TEXT[key][0]}\n\n{table}\n\n{TABLE_TEXT[key][1]}\n")
    if parts and skipped:
        parts.append("## Rows the loaders skipped\n\n" + "\n".join(skipped) + "\n")
    return "\n".join(parts) or "No runs yet.\n"

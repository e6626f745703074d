"""Human-readable views of verdicts and summaries (terminal tables with rich; flat rows with pandas)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from rich.console import Console
from rich.table import Table

from .schema import Category, DialogueVerdict

STYLE = {
    Category.VERIFIED: "green",
    Category.OUT_OF_SCOPE: "cyan",
    Category.ABSTENTION: "blue",
    Category.CONTRADICTED: "bold red",
    Category.LACKING_EVIDENCE: "yellow",
    Category.ERROR: "bold magenta",
}
LABEL_STYLE = {"faithful": "green", "hallucinated": "red", "unknown": "magenta"}


def claims_frame(verdicts: Sequence[DialogueVerdict]) -> pd.DataFrame:
    """One row per judged claim, for analysis in pandas."""
    rows = [
        {
            "dialogue_id": v.dialogue_id,
            "turn_index": t.turn_index,
            "turn_label": t.label,
            "gold_label": t.gold_label,
            "claim": c.claim,
            "category": c.category.value,
            "gold_category": c.gold_category.value if c.gold_category else None,
            "stage": c.stage,
            "explanation": c.explanation,
            "error": c.error,
        }
        for v in verdicts
        for t in v.turns
        for c in t.claims
    ]
    return pd.DataFrame(rows)


def print_verdict(console: Console, verdict: DialogueVerdict) -> None:
    console.rule(f"[bold]{verdict.dialogue_id}[/]  score {_pct(verdict.score)}")
    for error in verdict.errors:
        console.print(f"  [magenta]error:[/] {error}")
    for turn in verdict.turns:
        gold = f"  (gold: {turn.gold_label})" if turn.gold_label else ""
        console.print(
            f"turn {turn.turn_index} [{LABEL_STYLE[turn.label]}]{turn.label}[/]{gold}  score {_pct(turn.score)}"
            f"  — {turn.text[:120]}",
            highlight=False,
        )
        if turn.error:
            console.print(f"  [magenta]{turn.error}[/]", highlight=False)
        for claim in turn.claims:
            why = claim.error if claim.category == Category.ERROR else claim.explanation
            gold = f" (gold {claim.gold_category.value})" if claim.gold_category else ""
            console.print(
                f"  [{STYLE[claim.category]}]{claim.category.value:<16}[/] {claim.claim}{gold}\n"
                f"  {'':16} [dim]{why}[/]",
                highlight=False,
            )
        if turn.contradiction is not None:
            console.print(f"  contradiction check: {turn.contradiction.contradicts} — {turn.contradiction.explanation}")


def print_summary(console: Console, summary: dict[str, Any]) -> None:
    table = Table(title="VISTA summary", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    labels = summary.get("turn_labels", {})
    table.add_row("dialogues / judged turns / claims",
                  f"{summary['dialogues']} / {summary['judged_turns']} / {summary['claims']}")
    table.add_row("turn labels", ", ".join(f"{k} {v}" for k, v in labels.items()))
    table.add_row("VISTA score (micro)", _pct(summary.get("vista_score")))
    table.add_row("categories", ", ".join(f"{k} {v}" for k, v in summary["categories"].items() if v))
    errors = summary["errors"]
    table.add_row("errors", f"claims {errors['claims']}, failed turns {errors['turns_failed']}, "
                            f"other {errors['dialogue_errors']}")
    usage = summary["usage"]
    total = usage["total"]
    table.add_row("LM usage (total)", _usage(total))
    for stage, counts in usage["by_stage"].items():
        table.add_row(f"  {stage}", _usage(counts))
    turn = summary.get("turn_metrics")
    if turn:
        table.add_row("turn accuracy vs gold",
                      f"{_pct(turn['accuracy'])} (unknown counted wrong), "
                      f"{_pct(turn['accuracy_excluding_unknown'])} excluding {turn['unknown']} unknown")
        table.add_row("hallucinated class P / R / F1",
                      f"{_pct(turn['precision_hallucinated'])} / {_pct(turn['recall_hallucinated'])} / "
                      f"{_pct(turn['f1_hallucinated'])}")
        table.add_row("trivial baselines",
                      f"always hallucinated {_pct(turn['always_hallucinated_accuracy'])}, "
                      f"always faithful {_pct(turn['always_faithful_accuracy'])}")
    claim = summary.get("claim_metrics")
    if claim:
        table.add_row("claim accuracy vs gold",
                      f"{_pct(claim['accuracy'])} over {claim['claims']} claims, macro-F1 {_pct(claim['macro_f1'])}")
    console.print(table)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _usage(counts: dict[str, int]) -> str:
    return f"{counts['calls']} calls, {counts['prompt_tokens']} prompt + {counts['completion_tokens']} completion tokens"

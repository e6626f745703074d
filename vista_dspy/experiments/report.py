"""Human-readable views of verdicts and summaries (terminal tables with rich; flat rows with pandas)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..schema import Category, DialogueVerdict
from ..spans import unsafe_parts, where

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
        if turn.explanation:  # a holistic judge's reason, or why a turn model decided the turn
            console.print(f"  [dim]{escape(turn.explanation)}[/]", highlight=False)
        for claim in turn.claims:
            why = claim.error if claim.category == Category.ERROR else claim.explanation
            gold = f" (gold {claim.gold_category.value})" if claim.gold_category else ""
            place = f" [dim]({where(claim)})[/]" if where(claim) else ""  # where the turn said it
            console.print(
                f"  [{STYLE[claim.category]}]{claim.category.value:<16}[/] {escape(claim.claim)}{gold}{place}\n"
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
    table.add_row("errors", f"ERROR claims {errors['claims']}, turns without claims {errors['turns_failed']}, "
                            f"contradiction checks {errors.get('contradiction_checks', 0)}, "
                            f"background turns {errors['dialogue_errors']}")
    if errors.get("turns_missing_background"):
        table.add_row("incomplete knowledge", f"{errors['turns_missing_background']} turns judged against a store "
                                              "without a failed background turn's claims")
    if summary.get("unread_probabilities"):
        table.add_row("label probabilities", f"{summary['unread_probabilities']} given but unreadable: those claims "
                                             "were decided without them")
    decomposition = summary.get("decomposition")
    if decomposition:
        table.add_row("decomposition", f"ungrounded claims dropped {decomposition['ungrounded_claims']}, turns with "
                                       f"content but no claim {decomposition['empty_turns']}")
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
    cached = counts.get("cache_hits", 0)
    return (f"{counts['calls']} calls, {counts['prompt_tokens']} prompt + {counts['completion_tokens']} completion "
            "tokens" + (f"; {cached} answer{'s' if cached != 1 else ''} from the LM cache (their tokens and time not counted)"
                        if cached else ""))


# ---- HTML report -------------------------------------------------------------------------------------------------

COLOURS = {
    Category.VERIFIED.value: "#2e8b57",
    Category.OUT_OF_SCOPE.value: "#1f8fb3",
    Category.ABSTENTION.value: "#4b5fc7",
    Category.LACKING_EVIDENCE.value: "#d49a00",
    Category.CONTRADICTED.value: "#c62828",
    Category.ERROR.value: "#8e24aa",
}
def build_report(path: Path) -> str:
    """One self-contained HTML page for a benchmark directory or a single `vista evaluate` output directory:
    tables, plots (inline SVG) and a filterable per-turn browser with every claim's category and reason."""
    from .. import __version__
    from ..run.runner import VERDICTS, read_verdicts
    from .tables import compute_tables, run_dirs, turn_frame

    runs = [(dataset, system, read_verdicts(directory / VERDICTS)) for dataset, system, directory in run_dirs(path)]
    if not runs:
        raise FileNotFoundError(f"{path}: no verdicts.jsonl here or under runs/<dataset>/<system>/")
    turns = pd.concat([turn_frame(v, dataset=d, system=s) for d, s, v in runs if v], ignore_index=True)
    tables = compute_tables(turns, path)
    claims = pd.concat([claims_frame(v).assign(dataset=d, system=s) for d, s, v in runs if v], ignore_index=True)
    models = sorted({v.model for _, _, verdicts in runs for v in verdicts if v.model})
    template = _environment().get_template("report.html.j2")
    return template.render(
        version=__version__,
        title=path.resolve().name,
        subtitle=f"{len(runs)} run(s), {len(turns)} judged turns, {len(claims)} claims; model "
                 f"{', '.join(models) or 'unknown'}; from {path.resolve()}",
        colours=COLOURS,
        tables=_instrument_html(path) + [_table_html(key, frame) for key, frame in tables.items()],
        figures=_figures(turns, claims, tables),
        runs=[{"key": f"{d} / {s}", "turns": _browser_turns(v)} for d, s, v in runs],
        turn_count=len(turns),
    )


def _environment():
    import jinja2

    environment = jinja2.Environment(loader=jinja2.PackageLoader("vista_dspy.experiments", "templates"),
                                     autoescape=jinja2.select_autoescape(["html", "j2"]))
    environment.filters["cssname"] = lambda name: str(name).lower().replace(" ", "-")
    return environment


def build_results_page(title: str, sections: Sequence[dict[str, Any]], subtitle: str = "") -> str:
    """One self-contained HTML page of tables in the report's style (``benchmarks/results.py --html``): each section a
    ``title``, a ``frame`` (a DataFrame of cells already formatted; Markdown bold is kept as bold) and a ``note``."""
    import re

    from markupsafe import Markup, escape

    from .. import __version__

    def cell(value: Any) -> str:
        return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", str(escape(value))).replace("`", "")

    rendered = []
    for number, section in enumerate(sections, 1):
        frame = section["frame"].map(cell) if not section["frame"].empty else section["frame"]
        html = frame.to_html(index=False, border=0, escape=False, classes="numbers")
        rendered.append({"id": f"t{number}", "title": section["title"], "note": Markup(cell(section.get("note", ""))),
                         "html": Markup(f'<div class="scroll">{html}</div>')})
    return _environment().get_template("results.html.j2").render(
        version=__version__, title=title, subtitle=subtitle, sections=rendered, colours=COLOURS)


def write_results_page(benchmarks: Path, out: Path) -> Path:
    """The page of RESULTS.md's tables, from the committed records the folder's ``results.py`` reads
    (``vista report benchmarks/``; ``python benchmarks/results.py --html OUT`` writes the same)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("vista_benchmarks_results", benchmarks / "results.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out.write_text(module.html_page(module.all_tables()), encoding="utf-8")
    return out


def write_report(path: Path, out: Path | None = None) -> Path:
    out = out or path / "report.html"
    out.write_text(build_report(path), encoding="utf-8")
    return out


def _table_html(key: str, frame: pd.DataFrame) -> dict[str, Any]:
    from markupsafe import Markup

    from .tables import TABLE_TEXT, display_table

    title, note = TABLE_TEXT[key]
    html = display_table(frame).to_html(index=False, border=0, escape=True, classes="numbers")
    return {"title": title, "note": note, "html": Markup(f'<div class="scroll">{html}</div>')}


def _instrument_html(path: Path) -> list[dict[str, Any]]:
    """The instrument's table of a `vista benchmark --suite` directory, recomputed from its runs, first on the page."""
    from markupsafe import Markup

    from .instrument import suite_table
    from .tables import PLAN

    plans = json.loads((path / PLAN).read_text()).get("plans", []) if (path / PLAN).is_file() else []
    if not any(plan.get("suite") for plan in plans):
        return []
    found = suite_table(path)  # from the runs on disk: every system they hold, whichever command judged it
    if found is None:
        return []
    frame = found[0]
    columns = ["dataset", "system", "turns", "balanced_accuracy", "ba_low", "ba_high", "accuracy", "precision_h",
               "recall_h", "f1_h", "unknown", "incoherent", "model_s_per_turn", "cached_share"]
    view = frame[[c for c in columns if c in frame]].round(3)
    html = view.to_html(index=False, border=0, escape=True, classes="numbers", na_rep="")
    return [{"title": "The instrument: balanced accuracy on the suite's turns",
             "note": "ba_low / ba_high: 95 % bootstrap interval over dialogues resampled; every row on "
                     "the turns all systems judged; incoherent: turns whose label does not follow from their claims; "
                     "model_s_per_turn: the server's own seconds per judged turn, over the turns no LM cache "
                     "answered; cached_share: the share of answers the LM cache gave.",
             "html": Markup(f'<div class="scroll">{html}</div>')}]


def _svg(figure) -> Any:
    import io

    import matplotlib.pyplot as plt
    from markupsafe import Markup

    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(figure)
    text = buffer.getvalue()
    return Markup(text[text.index("<svg"):])  # drop the XML prolog and doctype


def _figures(turns: pd.DataFrame, claims: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> list[dict[str, Any]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.metrics import confusion_matrix

    figures = []
    accuracy = tables.get("accuracy")
    if accuracy is not None and not accuracy.empty:
        pivot = accuracy.pivot(index="dataset", columns="system", values="accuracy") * 100
        pivot = pivot.reindex(index=list(dict.fromkeys(accuracy["dataset"])),
                              columns=list(dict.fromkeys(accuracy["system"])))
        figure, axes = plt.subplots(figsize=(8, 0.6 + 0.5 * len(pivot) * max(1, len(pivot.columns)) / 2))
        pivot.plot.barh(ax=axes, width=0.8)
        for i, dataset in enumerate(pivot.index):
            always = accuracy[accuracy["dataset"] == dataset]["always_h"].iloc[0] * 100
            axes.plot([always, always], [i - 0.45, i + 0.45], color="black", linestyle=":", linewidth=1)
        axes.set_xlabel("turn accuracy, % (dotted: always hallucinated)")
        axes.set_xlim(0, 100)
        axes.invert_yaxis()
        axes.legend(loc="lower right", fontsize="small")
        figures.append({"svg": _svg(figure), "caption": "Turn accuracy by dataset and system."})

    judged = claims[claims["category"].notna()] if not claims.empty else claims
    if not judged.empty:
        order = [c for c in COLOURS if c in set(judged["category"])]
        shares = (judged.groupby(["dataset", "system"], sort=False)["category"].value_counts(normalize=True)
                  .unstack(fill_value=0).reindex(columns=order, fill_value=0) * 100)
        figure, axes = plt.subplots(figsize=(8, 0.6 + 0.35 * len(shares)))
        shares.index = [f"{d} / {s}" for d, s in shares.index]
        shares.plot.barh(ax=axes, stacked=True, color=[COLOURS[c] for c in order], width=0.8)
        axes.set_xlabel("share of claims, %")
        axes.set_xlim(0, 100)
        axes.invert_yaxis()
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12 - 0.6 / max(3, len(shares))), ncol=3,
                    fontsize="small")
        figures.append({"svg": _svg(figure), "caption": "Category distribution of judged claims per run "
                                                        "(FActScore knows only supported / unsupported)."})

    labelled = turns[turns["gold_label"].notna()] if not turns.empty else turns
    pairs = list(labelled.groupby(["dataset", "system"], sort=False))
    if pairs:
        columns = min(4, len(pairs))
        rows = -(-len(pairs) // columns)
        figure, grid = plt.subplots(rows, columns, figsize=(2.6 * columns, 2.4 * rows), squeeze=False)
        predicted_labels = ["faithful", "hallucinated", "unknown"]
        for axes, ((dataset, system), group) in zip(grid.flat, pairs):
            matrix = confusion_matrix(group["gold_label"], group["label"], labels=predicted_labels)[:2]
            _matrix(axes, matrix, ["faith.", "halluc.", "unk."], ["faith.", "halluc."])
            axes.set_title(f"{dataset}\n{system}", fontsize="small")
        for axes in list(grid.flat)[len(pairs):]:
            axes.axis("off")
        figure.supxlabel("predicted", fontsize="small")
        figure.supylabel("gold", fontsize="small")
        figure.tight_layout()
        figures.append({"svg": _svg(figure), "caption": "Turn-level confusion matrices (rows gold, columns "
                                                        "predicted)."})

    gold_claims = claims[claims["gold_category"].notna()] if not claims.empty else claims
    for (dataset, system), group in gold_claims.groupby(["dataset", "system"], sort=False):
        labels = [c for c in COLOURS if c in set(group["category"]) | set(group["gold_category"])]
        matrix = confusion_matrix(group["gold_category"], group["category"], labels=labels)
        figure, axes = plt.subplots(figsize=(1.2 + 0.9 * len(labels), 1 + 0.7 * len(labels)))
        _matrix(axes, matrix, labels, labels)
        axes.tick_params(axis="x", labelrotation=30)
        axes.set_xlabel("predicted")
        axes.set_ylabel("gold")
        figures.append({"svg": _svg(figure), "caption": f"Claim categories against gold: {dataset} / {system}."})
    return figures


def _matrix(axes, matrix, columns: list[str], rows: list[str]) -> None:
    """A confusion matrix as a heat map with its counts written in."""
    axes.imshow(matrix, cmap="Blues")
    for i in range(matrix.shape[0]):
        for j in range(matrix.shape[1]):
            axes.text(j, i, str(matrix[i, j]), ha="center", va="center",
                      color="white" if matrix[i, j] > matrix.max() / 2 else "black")
    axes.set_xticks(range(len(columns)), columns, fontsize="small")
    axes.set_yticks(range(len(rows)), rows, fontsize="small")


def _browser_turns(verdicts: Sequence[DialogueVerdict]) -> list[dict[str, Any]]:
    rows = []
    for verdict in verdicts:
        for turn in verdict.turns:
            contradiction = None
            if turn.contradiction is not None:
                contradiction = (f"{turn.contradiction.contradicts} — "
                                 f"{turn.contradiction.error or turn.contradiction.explanation}")
            rows.append({
                "dialogue_id": verdict.dialogue_id,
                "turn_index": turn.turn_index,
                "text": turn.text,
                "parts": unsafe_parts(turn),  # the turn's text, its unsafe claims' spans highlighted
                "label": turn.label,
                "gold_label": turn.gold_label,
                "expected": verdict.source.get("expected"),
                "wrong": turn.gold_label is not None and turn.label != turn.gold_label,
                "knowledge": turn.knowledge,
                "passages": turn.passages,
                "error": turn.error,
                "explanation": turn.explanation,
                "contradiction": contradiction,
                "ungrounded": turn.ungrounded,
                "empty_decomposition": turn.empty_decomposition,
                "claims": [{
                    "claim": c.claim,
                    "category": c.category.value,
                    "gold_category": c.gold_category.value if c.gold_category else None,
                    "why": c.error if c.category == Category.ERROR else c.explanation,
                    "unaligned": c.alignment == "unaligned",
                } for c in turn.claims],
            })
    return rows


def screenshot(html: Path, png: Path, *, width: int = 1280, height: int = 2000, browser: str | None = None) -> Path:
    """Render ``html`` in headless Chromium and save a PNG (checks that the page really renders)."""
    import shutil
    import subprocess
    import tempfile

    executable = browser or next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                                  if shutil.which(name)), None)
    if executable is None:
        raise FileNotFoundError("no Chromium found (apt-get install chromium, or pass its path)")
    with tempfile.TemporaryDirectory() as profile:
        # No background networking: this machine's network is closed and Chromium would keep retrying.
        subprocess.run([executable, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={profile}", f"--window-size={width},{height}",
                        f"--screenshot={png.resolve()}", html.resolve().as_uri()],
                       check=True, capture_output=True, timeout=120)
    return png

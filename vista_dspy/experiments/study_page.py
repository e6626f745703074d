"""The priced study's page (`vista study --report`, `vista study-page`): each trial a point with its intervals, the
Pareto front joined, the seed and the shipped program marked, the table of front trials and what each choice did."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from .report import _svg

MARK_STYLE = {"seed": ("s", "black"), "shipped": ("D", "#c62828")}
MODEL_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b")


def study_page(results: Sequence[Any]) -> str:
    """One self-contained HTML page for one or more priced studies (``optimize.study_result.StudyResult``): per study,
    every trial a point with its intervals and the Pareto front joined, the seed and the shipped program marked, the
    table of front trials (both objectives and their intervals, claim decisions, tokens, each one's gate against the
    seed), what each choice did (the one-factor trials against the seed; optuna's importances), and every trial;
    with several studies priced alike, their fronts side by side on one plot first."""
    import jinja2

    from .. import __version__

    studies = [_study_section(result, MODEL_COLOURS[i % len(MODEL_COLOURS)]) for i, result in enumerate(results)]
    units = {result.price_model.unit for result in results}
    together = _fronts_figure(results) if len(results) > 1 and len(units) == 1 else None
    environment = jinja2.Environment(loader=jinja2.PackageLoader("vista_dspy.experiments", "templates"),
                                     autoescape=jinja2.select_autoescape(["html", "j2"]))
    return environment.get_template("study.html.j2").render(
        title=" / ".join(result.study for result in results), version=__version__, studies=studies,
        together=together)


def _label(result) -> str:
    return result.model_name or result.model or result.study


def _fronts_figure(results) -> dict[str, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.2))
    for i, result in enumerate(results):
        colour = MODEL_COLOURS[i % len(MODEL_COLOURS)]
        _draw_study(axes, result, colour, label=_label(result))
    axes.set_xlabel(results[0].price_model.unit)
    axes.set_ylabel("balanced turn accuracy")
    axes.legend(loc="lower right", fontsize="small")
    return {"svg": _svg(figure), "caption": "The fronts side by side: each model's trials (dots), its Pareto front "
                                           "(line), its seed (square) and shipped program (diamond)."}


def _draw_study(axes, result, colour: str, *, label: str | None = None, intervals: bool = False) -> None:
    """A study's completed trials, its front joined, and its marked trials, on ``axes``."""
    done = result.completed()
    front = result.front()
    xs, ys = [t.cost for t in done], [t.accuracy for t in done]
    if intervals:
        lows = [t.accuracy - t.outcome.balanced_accuracy_interval[0] for t in done]
        highs = [t.outcome.balanced_accuracy_interval[1] - t.accuracy for t in done]
        left = [t.cost - t.outcome.cost_interval[0] for t in done]
        right = [t.outcome.cost_interval[1] - t.cost for t in done]
        axes.errorbar(xs, ys, yerr=[lows, highs], xerr=[left, right], fmt="none", ecolor=colour, alpha=0.25,
                      linewidth=1)
    axes.plot(xs, ys, "o", color=colour, alpha=0.45, markersize=5, label=f"{label}: trials" if label else "trial")
    axes.plot([t.cost for t in front], [t.accuracy for t in front], "-o", color=colour, markersize=6,
              label=f"{label}: Pareto front" if label else "Pareto front", drawstyle="steps-post")
    for mark, (marker, edge) in MARK_STYLE.items():
        trial = result.marked(mark)
        if trial is not None:
            axes.plot([trial.cost], [trial.accuracy], marker, markersize=11, markerfacecolor="none",
                      markeredgecolor=edge, markeredgewidth=2,
                      label=f"{label}: {mark}" if label else f"{mark} (trial {trial.number})")
    for trial in front:
        axes.annotate(str(trial.number), (trial.cost, trial.accuracy), textcoords="offset points", xytext=(4, 4),
                      fontsize="x-small", color=colour)


def _study_section(result, colour: str) -> dict[str, Any]:
    import matplotlib

    from ..optimize.study.result import budget_range

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    price = result.price_model
    done = result.completed()
    figures = []
    if done:
        figure, axes = plt.subplots(figsize=(8, 4.2))
        _draw_study(axes, result, colour, intervals=True)
        axes.set_xlabel(price.unit)
        axes.set_ylabel("balanced turn accuracy")
        axes.legend(loc="lower right", fontsize="small")
        figures.append({"svg": _svg(figure), "caption": f"{_label(result)}: every completed trial (with its 95 % "
                                                        "intervals, bootstrap over dialogues), the Pareto front joined "
                                                        "(numbers: trials), the seed and the shipped program marked."})
    seed = result.marked("seed")
    front = [{**_front_row(result, t), "budgets": budget_range(low, high)} for t, low, high in result.budgets()]
    effects = [{"trial": t.number, "design": t.design,
                "accuracy": _signed(t.accuracy - seed.accuracy), "cost": _signed(t.cost - seed.cost, "{:+.4g}"),
                "cost_ratio": f"{t.cost / seed.cost:.2f}x" if seed.cost else "—"}
               for t in done if t.design and seed is not None]
    importances = {name: {k: f"{v:.2f}" for k, v in values.items()}
                   for name, values in (result.importances() if len(done) >= 5 else {}).items()}
    trials = pd.DataFrame([{"trial": t.number, "state": t.state, "marks / design": ", ".join(t.marks) or
                            (t.design or ""),
                            "balanced accuracy": _with_interval(t.outcome.balanced_accuracy,
                                                                t.outcome.balanced_accuracy_interval)
                            if t.outcome else "—",
                            "cost": _with_interval(t.outcome.cost, t.outcome.cost_interval, "{:.4g}")
                            if t.outcome else "—",
                            "choices": _choices(t.params)} for t in result.trials])
    data = result.data
    return {
        "name": result.study, "model": result.model, "model_name": result.model_name, "unit": price.unit,
        "data": {"name": data.get("name"), "dialogues": len(data.get("dialogues", [])),
                 "turns": len(data.get("turns", [])), "sha256": data.get("sha256"),
                 "datasets": dict(pd.Series(data.get("datasets", [])).value_counts()) if data.get("datasets")
                 else {}},
        "completed": len(done), "trials_count": len(result.trials), "command": result.command,
        "figures": figures, "front": front, "effects": effects, "importances": importances,
        "space": result.space, "pool": result.pool, "programs": result.programs,
        "trials": _frame_html(trials),
    }


def _front_row(result, trial) -> dict[str, Any]:
    outcome = trial.outcome
    gate = None
    if result.marked("seed") is not None and "seed" not in trial.marks:
        verdict = result.gate(trial)
        gate = {"passed": verdict.passed, "text": f"{'passed' if verdict.passed else 'failed'} "
                                                  f"({verdict.turns['difference']:+.3f}, lower bound "
                                                  f"{verdict.turns['low']:+.3f})"}
    return {
        "trial": trial.number, "marks": ", ".join(trial.marks), "design": trial.design or "",
        "accuracy": _with_interval(outcome.balanced_accuracy, outcome.balanced_accuracy_interval),
        "claims": _claims_cell(outcome),
        "cost": _with_interval(outcome.cost, outcome.cost_interval, "{:.4g}"),
        "turn_accuracy": f"{outcome.turn_accuracy:.3f}",
        "tokens": f"{outcome.calls_per_turn:.2f} / {outcome.prompt_tokens_per_turn:.0f} / "
                  f"{outcome.completion_tokens_per_turn:.0f}",
        "by_dataset": ", ".join(f"{k} {v:.3f}" for k, v in outcome.by_dataset.items()),
        "changes": _choices(result.changes(trial)) or "— (the seed's own)", "gate": gate,
    }


def _claims_cell(outcome) -> str:
    """Claim decisions with their interval; without one where they come from a single dialogue."""
    if outcome.claim_decisions is None:
        return "—"
    if outcome.claim_decisions_interval is None:
        return f"{outcome.claim_decisions:.3f} (one dialogue: no interval)"
    return _with_interval(outcome.claim_decisions, outcome.claim_decisions_interval)


def _with_interval(value: float, interval, number: str = "{:.3f}") -> str:
    return f"{number.format(value)} [{number.format(interval[0])}, {number.format(interval[1])}]"


def _signed(value: float, number: str = "{:+.3f}") -> str:
    return number.format(value)


def _choices(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def _frame_html(frame: pd.DataFrame) -> Any:
    from markupsafe import Markup

    return Markup(frame.to_html(index=False, border=0, escape=True))


def write_study_page(results: Sequence[Any], out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(study_page(results), encoding="utf-8")
    return out

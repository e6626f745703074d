"""The program card (``NAME.card.md`` and ``NAME.card.html``, beside a compiled program): what a user needs to trust
or refuse a compiled program, from its meta and its study alone (no LM). The model and its endpoint; the front with
the chosen trial; the gate against the seed; the test part against the seed per dataset; the tier with no LM call;
the baselines where measured; the cost per 1,000 judged turns; what was fitted on which dialogues; the command that
reproduces it. ``vista models`` reads its headline (``headline``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

Section = tuple[str, list[str], list[list[str]] | None]  # title, paragraphs, table rows (header first)


def _number(value: Any, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def card_sections(meta: dict[str, Any], result: Any | None = None) -> list[Section]:
    """The card's sections, in order (``result``: the study's ``StudyResult``, for its front and no-LM tier)."""
    from ..optimize.study import NO_CASCADE
    from ..optimize.study.plan import NO_LM_BAND

    settings = meta.get("settings") or {}
    saved = meta.get("saved", True)
    gate = meta.get("gate") or {}
    unit = (meta.get("cost") or {}).get("unit", "")
    chosen = settings.get("trial")
    sections: list[Section] = []
    probabilities = settings.get("label_probabilities")
    endpoint = (["The endpoint gives no label probabilities (token log-probabilities): this program decides by the "
                 "judge's labels and, where it has a decision rule, the evidence cues only."]
                if probabilities is False else
                ["The endpoint gives label probabilities (token log-probabilities); a decision rule may read them."]
                if probabilities else [])
    verdict = ("saved: it passed the gate against the seed" if saved else
               "nothing saved: the seed program stays (see the gate)")
    sections.append(("Model", [f"Model `{meta.get('model')}` (program name `{meta.get('program')}`); {verdict}. "
                               f"Compiled {meta.get('date', '')[:10]} with DSPy {meta.get('dspy_version', '')}.",
                               *endpoint], None))
    if result is not None:
        rows = [["trial", "", "balanced accuracy [95 %]", f"cost ({unit})", "what it changes"]]
        for trial in result.front():
            o = trial.outcome
            rows.append([str(trial.number), "chosen" if trial.number == chosen else ", ".join(trial.marks),
                         f"{o.balanced_accuracy:.3f} [{o.balanced_accuracy_interval[0]:.3f}, "
                         f"{o.balanced_accuracy_interval[1]:.3f}]", f"{o.cost:.4g}",
                         ", ".join(f"{k}={v}" for k, v in result.changes(trial).items()) or "the seed"])
        sections.append(("The front", [f"Study `{result.study}`: {len(result.completed())} trials on "
                                       f"{len(result.data.get('turns', []))} turns of {result.data.get('name')}; "
                                       f"the Pareto front, cheapest first; trial {chosen} chosen"
                                       + (f" within {settings['budget']:g} {unit}." if settings.get("budget")
                                          is not None else " (the most accurate).")], rows))
    turns = gate.get("turns") or {}
    if turns:
        sections.append(("The gate against the seed (compile part)", [
            f"Balanced accuracy {turns.get('candidate', 0):.3f} against the seed's {turns.get('seed', 0):.3f} on the "
            f"same {turns.get('turns')} turns; difference {turns.get('difference', 0):+.3f}, one-sided "
            f"{gate.get('confidence', 0.95):.0%} lower bound {turns.get('low', 0):+.3f} (non-inferior if at least "
            f"{-gate.get('margin', 0.01):+.3f}, paired bootstrap over dialogues): "
            f"{'passed' if gate.get('passed') else 'failed'}" + ("; a significant win." if gate.get("wins") else ".")],
            None))
    test = meta.get("test_part")
    if test:
        rows = [["turns of", "turns", "seed bal. acc.", "program bal. acc.", "seed turn acc.", "program turn acc."]]
        for name, row in test["datasets"].items():
            rows.append([name, str(row["turns"]), _number(row["seed"]["balanced_accuracy"]),
                         _number(row["compiled"]["balanced_accuracy"]), _number(row["seed"]["turn_accuracy"]),
                         _number(row["compiled"]["turn_accuracy"])])
        sections.append(("The test part, read once", [f"{test['data'].get('name')}: {test['data']['dialogues']} "
                                                      "dialogues no choice and no fit saw, judged once by the seed "
                                                      "and by this program.",
                                                      f"The seed's side: {test.get('seed_source', 'judged by this compile')}."],
                          rows))
    else:
        sections.append(("The test part, read once", ["Not judged: nothing passed the gate."], None))
    no_lm = [t for t in (result.completed() if result is not None else []) if t.params.get("cascade") == NO_LM_BAND]
    sections.append(("The tier with no LM call", [
        "; ".join(f"trial {t.number}: balanced accuracy {t.accuracy:.3f} at {t.cost:.4g} {unit}" for t in no_lm)
        if no_lm else "Not measured by this study (no starting program with a decision rule"
                      + (f"; cascade {NO_CASCADE} only)" if result is not None else ")")], None))
    baselines = meta.get("baselines") or {}
    sections.append(("FActScore and LLM-as-Judge", [
        "; ".join(f"{k}: balanced accuracy {_number(v)}" for k, v in baselines.items()) if baselines else
        "Not measured by this compile: `vista benchmark --suite test --system factscore --system llm-judge` with "
        "the same model measures them on the same test part."], None))
    cost = (meta.get("cost") or {}).get("per_judged_turn")
    dollars = "dollars" in unit or "$" in unit
    sections.append(("Cost", [
        (f"{cost * (1 if dollars else 1000):,.4g} " + ("$ per 1,000 judged turns" if dollars else
                                                        "server seconds per 1,000 judged turns")
         + f" (the chosen trial on the compile part; {cost:.4g} {unit})") if cost is not None else "Not measured."],
        None))
    fitted = meta.get("fitted_on") or {}
    sections.append(("What was fitted on which dialogues", [
        "Demos and decision rule were fitted on: " + "; ".join(f"{k}: {len(v)} dialogues ({', '.join(v)})"
                                                               for k, v in fitted.items())
        if fitted else "Nothing was fitted: the program's demos and rule are its starting program's own "
                       "(the seed's hand-written demos, or a shipped program's, whose own card says what it saw).",
        f"Choices were made on {(meta.get('dev') or {}).get('name')} ({(meta.get('dev') or {}).get('dialogues')} "
        "dialogues of the compile part); none of the test part's dialogues was fitted on or chosen on."], None))
    sections.append(("Reproduce", [f"`{settings.get('command') or 'vista compile'}`"], None))
    return sections


def card_markdown(sections: Sequence[Section], title: str) -> str:
    lines = [f"# {title}", ""]
    for heading, paragraphs, rows in sections:
        lines += [f"## {heading}", "", *[p + "\n" for p in paragraphs]]
        if rows:
            lines += ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
            lines += ["| " + " | ".join(r) + " |" for r in rows[1:]]
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def card_html(sections: Sequence[Section], title: str) -> str:
    """The same sections as a self-contained page in the study page's style."""
    import re

    import jinja2
    from markupsafe import Markup, escape

    from .. import __version__

    def inline(text: str) -> Markup:
        return Markup(re.sub(r"`([^`]+)`", r"<code>\1</code>", str(escape(text))))

    environment = jinja2.Environment(loader=jinja2.PackageLoader("vista_dspy.experiments", "templates"),
                                     autoescape=jinja2.select_autoescape(["html", "j2"]))
    environment.filters["inline"] = inline
    return environment.get_template("program_card.html.j2").render(title=title, sections=sections,
                                                                  version=__version__)


def write_card(meta: dict[str, Any], result: Any | None = None, folder: Path | None = None) -> tuple[Path, Path]:
    """Write ``NAME.card.md`` and ``NAME.card.html`` into ``folder`` (default: the user's programs folder)."""
    from ..compiled.files import programs_dir

    folder = folder or programs_dir()
    folder.mkdir(parents=True, exist_ok=True)
    sections = card_sections(meta, result)
    title = f"Program card: {meta.get('program')}"
    markdown = folder / f"{meta.get('program')}.card.md"
    markdown.write_text(card_markdown(sections, title))
    html = folder / f"{meta.get('program')}.card.html"
    html.write_text(card_html(sections, title))
    return markdown, html


def headline(meta: dict[str, Any]) -> str:
    """The card's headline numbers for `vista models`: the test part's pooled balanced accuracy against the seed's,
    and the cost per judged turn."""
    pooled = ((meta.get("test_part") or {}).get("datasets") or {}).get("pooled")
    cost = meta.get("cost") or {}
    parts = []
    if pooled:
        parts.append(f"test bal. acc. {pooled['compiled']['balanced_accuracy']:.3f} vs seed "
                     f"{pooled['seed']['balanced_accuracy']:.3f}")
    if cost.get("per_judged_turn") is not None:
        parts.append(f"{cost['per_judged_turn']:.4g} {cost.get('unit', '').split(' (')[0]}")
    return "; ".join(parts)

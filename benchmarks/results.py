"""RESULTS.md's tables (and README's headline) rewritten from the committed records alone: no LM, no dataset.

    python benchmarks/results.py                 # rewrite every table between its markers (RESULTS.md, README.md)
    python benchmarks/results.py --check         # exit 1 naming each table that is not what the records give
    python benchmarks/results.py --html OUT.html # the same tables as one page, in `vista report`'s style
    python benchmarks/results.py --compress      # gzip the plain turns.jsonl of new records under probes/ first

A table sits between ``<!-- table:NAME -->`` and ``<!-- /table:NAME -->``; the text around the markers is prose and
is left as it is. The records read: ``probes/suite-*/`` (the instrument), ``fronts/*.json`` (the priced studies),
``compiles/*/`` (the one compile of each embedded model), ``vista_dspy/compiled/*.meta.json`` (what ships).

**When a new program ships**: record its runs of both parts (``record_suite_probe.py RUN-COMPILE RUN-TEST vista
local-1.5b-NAME ...``; a record that arrived as plain ``turns.jsonl`` is gzipped by ``--compress``), then change the
one line ``"default": ...`` in RECORDS below to ``"suite-local-1.5b-NAME"`` and run this script. The test
(``tests/test_results.py``) also checks that the name is the candidate of the shipped program's anchored gate, and
its content hash the shipped program's (``compiled/local.meta.json``). The prose that names the default (its trial,
band and quick start in RESULTS.md and README) is written by hand: read it again.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PROBES, FRONTS, COMPILES = HERE / "probes", HERE / "fronts", HERE / "compiles"
COMPILED = REPO / "vista_dspy" / "compiled"
DOCUMENTS = (HERE / "RESULTS.md", REPO / "README.md")

# Which record is which: the one place to change when a program ships or a baseline is re-recorded.
RECORDS = {
    "default": "suite-local-1.5b-passage",       # the shipped default, compiled/local.json (trial 21, refitted: issue 60)
    "seed": "suite-local-1.5b-seed",             # the anchor of every gate: the paper's method, the seed program
    "no LM": "suite-no-lm-passage",              # the default's tier with no LM call (--system evidence)
    "FActScore": "suite-local-1.5b-factscore",   # the paper's claim-level baseline, same model, test part
    "LLM-as-Judge": "suite-local-1.5b-judge",    # one call per turn, same model, test part
}
# Records whose usage is not their cost (their answers came from an answer cache an earlier run filled): none today.
NO_COST: set[str] = set()
STUDIES = ("local-1.5b", "local-0.5b")           # fronts/NAME.json
DATASETS = {"begin": "BEGIN", "fade": "FADE", "faithdial-audit": "FaithDial audit", "vista-human": "dev half",
            "pooled": "**pooled**"}
PARTS = ("compile", "test")


@dataclass
class Table:
    """One table: its rows (strings already formatted), and lines printed under it (in Markdown and HTML alike)."""

    name: str
    title: str
    frame: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        columns = list(self.frame.columns)
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in self.frame.itertuples(index=False)]
        return "\n".join(lines + ([""] + self.notes if self.notes else [])) + "\n"


# ---- the instrument -------------------------------------------------------------------------------------------------

def instrument_turns() -> pd.DataFrame:
    from vista_dspy.experiments.instrument import probe_turns

    return pd.concat([probe_turns(PROBES / record).assign(system=name) for name, record in RECORDS.items()],
                     ignore_index=True)


def on_part(turns: pd.DataFrame, part: str) -> tuple[pd.DataFrame, list[str]]:
    """The part's turns, and the systems that judged every one of them (in RECORDS' order)."""
    mine = turns[turns["part"] == part]
    everything = mine[mine["system"] == "no LM"].set_index(["dataset", "dialogue_id", "turn_index"]).index
    systems = [s for s in RECORDS if mine[mine["system"] == s].set_index(
        ["dataset", "dialogue_id", "turn_index"]).index.isin(everything).sum() == len(everything)]
    for needed in ("default", "seed"):
        if needed not in systems:
            raise SystemExit(f"{RECORDS[needed]} does not hold every turn of the {part} part ({len(everything)}): "
                             "record both parts whole before it names the " + needed)
    return mine[mine["system"].isin(systems)], systems


def _ba(row) -> str:
    return f"{row['balanced_accuracy']:.3f} ({row['ba_low']:.3f}-{row['ba_high']:.3f})"


def _p(value) -> str:
    return "" if value is None or pd.isna(value) else "< 0.001" if value < 0.001 else f"{value:.3f}"


def suite_table(turns: pd.DataFrame) -> Table:
    tier = turns[turns["system"] == "no LM"]
    rows = []
    for dataset, label in DATASETS.items():
        group = tier if dataset == "pooled" else tier[tier["dataset"] == dataset]
        cells = {"dataset": label}
        for part in PARTS:
            mine = group[group["part"] == part]
            cells[f"{part} part: turns (faithful / hallucinated)"] = (
                f"{len(mine)} ({(mine['gold'] == 'faithful').sum()} / {(mine['gold'] == 'hallucinated').sum()})")
        rows.append(cells)
    return Table("suite", "The suite's turns", pd.DataFrame(rows))


def part_tables(turns: pd.DataFrame, part: str) -> list[Table]:
    from vista_dspy.experiments.instrument import instrument_table

    mine, systems = on_part(turns, part)
    table = instrument_table(mine, systems, reference="default")
    by_dataset = []
    for dataset, label in DATASETS.items():
        rows = table[table["dataset"] == dataset].set_index("system")
        by_dataset.append({"dataset (turns)": f"{label} ({rows.loc['default', 'turns']})",
                           **{s: _ba(rows.loc[s]) for s in systems},
                           "always hallucinated": f"{rows.loc['always-hallucinated', 'balanced_accuracy']:.3f}"})
    pooled = table[table["dataset"] == "pooled"].set_index("system")
    summary = []
    for system in systems:  # the trivial judges: "always hallucinated" in the table per dataset
        r = pooled.loc[system]
        summary.append({
            "system": system, "balanced acc. (95 % interval)": _ba(r), "acc.": f"{r['accuracy']:.3f}",
            "P / R / F1 halluc.": f"{r['precision_h']:.2f} / {r['recall_h']:.2f} / {r['f1_h']:.2f}",
            "unknown": int(r["unknown"]),
            "incoherent": "" if pd.isna(r["incoherent"]) else int(r["incoherent"]),
            "McNemar p vs default": _p(r["p_vs_default"]),
        })
    cost = []
    for system in [name for name in systems if name not in NO_COST]:
        judged = mine[mine["system"] == system]
        live = judged[judged["cache_hits"] == 0]
        answers = (judged["calls"] + judged["cache_hits"]).sum()
        cost.append({"system": system, "LM calls": f"{judged['calls'].mean():.2f}",
                     "prompt tokens": f"{judged['prompt_tokens'].mean():,.0f}",
                     "written tokens": f"{judged['completion_tokens'].mean():.1f}",
                     "model s (turns no cache answered)": f"{live['model_ms'].mean() / 1000:.2f}" if len(live) else "",
                     "answers from the LM cache": f"{judged['cache_hits'].sum() / answers:.0%}" if answers else "0%"})
    return [Table(f"{part}-datasets", f"{part} part: balanced accuracy per dataset", pd.DataFrame(by_dataset)),
            Table(f"{part}-pooled", f"{part} part: pooled", pd.DataFrame(summary)),
            Table(f"{part}-cost", f"{part} part: cost per judged turn", pd.DataFrame(cost))]


def gate_table(turns: pd.DataFrame, part: str) -> Table:
    from vista_dspy.experiments.instrument import gate_report

    mine, _ = on_part(turns, part)
    record, _ = gate_report(mine, "default", "seed", "no LM")
    rows = []
    for dataset, d in record["datasets"].items():
        rows.append({"turns of": DATASETS[dataset], "turns": d["turns"],
                     "seed": f"{d['anchor']['balanced_accuracy']:.3f}",
                     "default": f"{d['candidate']['balanced_accuracy']:.3f}",
                     "difference (95 % interval)": f"{100 * d['difference']:+.1f} ({100 * d['interval_95'][0]:+.1f} "
                                                   f"to {100 * d['interval_95'][1]:+.1f})",
                     "one-sided 95 % bound": f"{100 * d['lower_bound']:+.1f}",
                     "only default / only seed right (McNemar p)":
                         f"{d['turns_only_candidate_right']} / {d['turns_only_anchor_right']} ({_p(d['mcnemar_p'])})"})
    verdict = "wins" if record["wins"] else "passes" if record["passes"] else "fails"
    flips = record["lm_flips"]
    labels = "turn label" if flips["turns"] == 1 else "turn labels"
    notes = [f"Pooled, the default **{verdict}** against the seed (passes: bound at least -{100 * record['margin']:.0f}"
             f" point; wins: above 0). Its LM changed {flips['turns']} {labels} against the no-LM tier "
             f"({flips['now_right']} now right, {flips['now_wrong']} now wrong)."]
    return Table(f"{part}-gate", f"{part} part: the anchored gate", pd.DataFrame(rows), notes)


# ---- the priced studies -----------------------------------------------------------------------------------------------

def front_numbers(trials: list[dict]) -> set[int]:
    """The completed trials no other dominates (more accurate and no dearer, or cheaper and no less accurate); equal
    trials are all kept. The same set as optuna's best_trials (``StudyResult.front``)."""
    done = [t for t in trials if t["state"] == "COMPLETE" and t.get("values")]
    return {t["number"] for t in done if not any(
        u["values"][0] >= t["values"][0] and u["values"][1] <= t["values"][1] and u["values"] != t["values"]
        for u in done)}


def _what(trial: dict) -> str:
    if trial.get("design"):
        return trial["design"].split(" (")[0]
    if "seed" in trial.get("marks", []):
        return "the seed (the paper's method)"
    if "shipped" in trial.get("marks", []):
        return "the program shipped when the study began"
    p = trial["params"]
    demos = "/".join(f"{p.get(f'demos_{stage}')}{'p' if p.get(f'source_{stage}') == 'pool' else ''}"
                     for stage in ("decompose", "verify", "categorize"))
    parts = [p.get("program"), p.get("units"), f"demos {demos}", p.get("claim_calls"),
             f"{p.get('instructions', 'base')} instructions", f"cascade {p['cascade']}" if "cascade" in p else None]
    return "sampled: " + ", ".join(str(x) for x in parts if x)


def front_table(name: str, shipped: dict) -> Table:
    result = json.loads((FRONTS / f"{name}.json").read_text())
    trials = result["trials"]
    front = front_numbers(trials)
    rows = []
    for t in trials:
        if t["state"] != "COMPLETE" or not t.get("values"):
            continue
        o = t["outcome"]
        ships = shipped.get("study") == result["study"] and shipped.get("trial") == t["number"]
        rows.append({"trial": f"**{t['number']}**" if ships else t["number"],
                     "front": "yes" if t["number"] in front else "",
                     "what": _what(t) + (" — **ships**" if ships else ""),
                     "balanced acc. [95 %]": f"{o['balanced_accuracy']:.3f} [{o['balanced_accuracy_interval'][0]:.3f}, "
                                             f"{o['balanced_accuracy_interval'][1]:.3f}]",
                     "s / judged turn [95 %]": f"{o['cost']:.2f} [{o['cost_interval'][0]:.2f}, "
                                               f"{o['cost_interval'][1]:.2f}]",
                     "LM calls / prompt / written tokens": f"{o['calls_per_turn']:.2f} / "
                                                            f"{o['prompt_tokens_per_turn']:,.0f} / "
                                                            f"{o['completion_tokens_per_turn']:.0f}"})
    data = result["data"]
    cheapest_first = sorted((t for t in trials if t["number"] in front), key=lambda t: (t["values"][1], -t["values"][0]))
    notes = [f"{len(rows)} completed trials of {len(trials)} on {data['name']} ({len(data.get('turns', []))} turns), "
             f"exported {result['exported'][:10]}. The front, cheapest first: trials "
             f"{', '.join(str(t['number']) for t in cheapest_first)}."]
    if any(str(r["what"]).startswith("sampled") for r in rows):
        notes[0] += " Sampled: demos of Decompose/Verify/Categorize (p: drawn from the pool)."
    return Table(f"front-{name}", f"the priced study {name}: every completed trial", pd.DataFrame(rows), notes)


# ---- what ships, cost ---------------------------------------------------------------------------------------------

def shipped_settings() -> dict:
    return json.loads((COMPILED / "local.meta.json").read_text())["settings"]


def shipped_table() -> Table:
    rows = []
    for path in sorted(COMPILED.glob("*.meta.json")):
        meta = json.loads(path.read_text())
        settings = meta.get("settings") or {}
        if meta["optimizer"] == "study":
            made = (f"trial {settings['trial']} of the priced study `{settings['study']}`, the most accurate front "
                    f"trial within {settings['budget']} s per judged turn")
        elif meta["optimizer"] == "rule":
            made = f"a decision rule fitted on the live probe `{Path(settings['probe']).name}`"
        else:
            made = meta["optimizer"].split(" (")[0]
        gate = meta.get("anchored_gate")
        pooled = gate["datasets"]["pooled"] if gate else None
        rows.append({"program": f"`{meta['program']}`", "made by": made, "compiled": meta["date"][:10],
                     "anchored gate (compile part)": (f"{'wins' if gate['wins'] else 'passes' if gate['passes'] else 'fails'}"
                                                      f": {100 * pooled['difference']:+.1f}, bound "
                                                      f"{100 * pooled['lower_bound']:+.1f}") if gate else "—"})
    return Table("shipped", "the compiled programs", pd.DataFrame(rows))


def compiles_table() -> Table:
    """The one compile run for each embedded model (``compiles/NAME/``: the study's result, and the program's meta
    when one passed): its pick within the command's budget, the gate against the seed on the compile sample, and the
    test part read once."""
    import shlex

    from vista_dspy.optimize.study.result import StudyResult

    rows = []
    for folder in sorted(p for p in COMPILES.iterdir() if p.is_dir()):
        study_file = next(folder.glob("*.study.json"))
        result = StudyResult.load(study_file)
        words = shlex.split(result.command or "")
        budget = float(words[words.index("--budget") + 1]) if "--budget" in words else None
        front = result.front()
        picked = result.pick(budget) if budget is not None else max(front, key=lambda t: t.accuracy)
        seed = result.marked("seed")
        gate = result.gate(picked)
        meta_file = study_file.with_name(study_file.name.replace(".study.json", ".meta.json"))
        test = json.loads(meta_file.read_text()).get("test_part") if meta_file.is_file() else None
        pooled = test["datasets"]["pooled"] if test else None
        rows.append({"model": folder.name, "trials": len(result.completed()),
                     "pick": f"trial {picked.number}: {_what(picked.model_dump(mode='json'))}"
                             + (f" (budget {budget:g} s)" if budget is not None else ""),
                     "compile sample, pick / seed": f"{picked.accuracy:.3f} / {seed.accuracy:.3f}",
                     "gate (bound)": f"{'passed' if gate.passed else 'refused'} ({100 * gate.turns['low']:+.1f})",
                     "test part, program / seed": (f"{pooled['compiled']['balanced_accuracy']:.3f} / "
                                                   f"{pooled['seed']['balanced_accuracy']:.3f}") if pooled else
                                                  "not judged (nothing passed)",
                     "s / judged turn": f"{picked.cost:.2f}"})
    return Table("compiles", "the one compile of each embedded model", pd.DataFrame(rows))


def headline(tables: dict[str, Table]) -> Table:
    """README's numbers: the default beside the seed, the no-LM tier and the baselines, on both parts."""
    rows = []
    for part in PARTS:
        pooled = tables["pooled"].frame
        pooled = pooled[pooled["part"] == part].set_index("system")["balanced acc. (95 % interval)"]
        cost = tables["cost"].frame
        cost = cost[cost["part"] == part].set_index("system")
        turns = tables[f"{part}-datasets"].frame["dataset (turns)"].iloc[-1].split("(")[-1].rstrip(")")
        rows.append({"instrument part": f"{part} ({turns} turns)",
                     **{s: pooled.get(s, "—") for s in RECORDS},
                     "default's model s / turn": cost.loc["default", "model s (turns no cache answered)"]})
    return Table("headline", "The shipped default on the instrument: balanced accuracy (95 % interval)",
                 pd.DataFrame(rows))


# ---- all of it ------------------------------------------------------------------------------------------------------

def all_tables() -> dict[str, Table]:
    turns = instrument_turns()
    tables = [suite_table(turns)]
    for part in PARTS:
        tables += [*part_tables(turns, part), gate_table(turns, part)]
    shipped = shipped_settings()
    tables += [front_table(name, shipped) for name in STUDIES]
    tables += [shipped_table(), compiles_table()]
    found = {t.name: t for t in tables}
    for kind, title in (("pooled", "both parts, pooled"), ("cost", "cost per judged turn on the instrument")):
        frame = pd.concat([found.pop(f"{part}-{kind}").frame.assign(part=part) for part in PARTS], ignore_index=True)
        found[kind] = Table(kind, title, frame[["part", *[c for c in frame.columns if c != "part"]]])
    found["headline"] = headline(found)
    order = ["headline", "shipped", "suite", "compile-datasets", "test-datasets", "pooled", "compile-gate", "test-gate",
             *[f"front-{name}" for name in STUDIES], "compiles", "cost"]  # RESULTS.md's order, for the page
    return {**{name: found[name] for name in order}, **found}


MARKER = re.compile(r"(<!-- table:(?P<name>[\w.-]+) -->\n)(?P<body>.*?)(<!-- /table:(?P=name) -->)", re.S)


def rewrite(text: str, tables: dict[str, Table]) -> tuple[str, list[str]]:
    """``text`` with every marked table replaced by what the records give, and the names of those that changed."""
    changed = []

    def one(match: re.Match) -> str:
        name = match["name"]
        if name not in tables:
            raise SystemExit(f"no table named {name!r} (known: {', '.join(tables)})")
        body = tables[name].markdown()
        if body != match["body"]:
            changed.append(name)
        return match.group(1) + body + match.group(4)

    return MARKER.sub(one, text), changed


def html_page(tables: dict[str, Table]) -> str:
    from vista_dspy.experiments.report import build_results_page

    sections = [{"title": t.title[0].upper() + t.title[1:], "frame": t.frame, "note": " ".join(t.notes)}
                for t in tables.values()]
    return build_results_page("benchmarks/RESULTS.md", sections,
                              subtitle="the tables of benchmarks/RESULTS.md, from the committed records "
                                       "(python benchmarks/results.py --html)")


def compress_new_records() -> list[Path]:
    from vista_dspy.data.records import compress

    return [compress(path) for path in sorted(PROBES.glob("*/turns.jsonl"))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if a table is out of date")
    parser.add_argument("--html", type=Path, default=None, help="also write the tables as one HTML page here")
    parser.add_argument("--compress", action="store_true", help="gzip plain probes/*/turns.jsonl first")
    args = parser.parse_args()
    if args.compress:
        for path in compress_new_records():
            print(f"compressed: {path.relative_to(REPO)}")
    tables = all_tables()
    stale = []
    for document in DOCUMENTS:
        text, changed = rewrite(document.read_text(encoding="utf-8"), tables)
        stale += [f"{document.name}: {name}" for name in changed]
        if changed and not args.check:
            document.write_text(text, encoding="utf-8")
    if args.html is not None:
        args.html.write_text(html_page(tables), encoding="utf-8")
        print(f"page: {args.html}")
    if stale:
        print(("out of date: " if args.check else "rewritten: ") + ", ".join(stale))
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())

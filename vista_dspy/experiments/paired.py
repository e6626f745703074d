"""A benchmark's VISTA systems paired against the seed program on VISTA's human re-annotation: for each such dataset
judged by the ``seed`` system, every VISTA system's turns and matched claims beside the seed's, with exact McNemar
tests and the turn difference's interval (``optimize.paired_table``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .tables import PLAN, SEED_SYSTEM, is_claim_categorizer, run_dirs

NOTE = ("Each row judged end to end on the same dialogues. Claim columns: the decomposed claims that carry an "
        "annotators' judgement (matched to a human claim of their turn, `judged_turns.label_claims`), claim decisions "
        "= safe / unsafe as the annotators; vs seed: exact McNemar on the turns and on the matched claims both rows "
        "decided (+ only this row right / − only the seed right), the interval resamples dialogues.")


def _dataset_paths(out_dir: Path) -> dict[str, str]:
    path = out_dir / PLAN
    plans = json.loads(path.read_text()).get("plans", []) if path.exists() else []
    return {name: where for plan in plans for name, where in plan["datasets"].items()}


def paired_tables(out_dir: Path) -> dict[str, dict[str, Any]]:
    """{dataset: {"base", "rows": paired numbers per system, "lines": the Markdown table}} for every dataset of VISTA's
    human format that the ``seed`` system judged (its dialogues read again from the path the plan recorded)."""
    from ..data import load_dialogues
    from ..optimize.paired_table import decisions_of, paired_markdown, paired_numbers
    from ..run.runner import VERDICTS, read_verdicts

    found: dict[str, dict[str, Path]] = {}
    for dataset, system, directory in run_dirs(out_dir):
        if dataset.startswith("vista-human") and (is_claim_categorizer(system) or system == "evidence"):
            found.setdefault(dataset, {})[system] = directory
    paths = _dataset_paths(out_dir)
    tables = {}
    for dataset, systems in found.items():
        if SEED_SYSTEM not in systems or len(systems) < 2 or dataset not in paths:
            continue
        dialogues = {d.id: d for d in load_dialogues(Path(paths[dataset]), "vista")}
        rows = {}
        for system in (SEED_SYSTEM, *(s for s in systems if s != SEED_SYSTEM)):
            verdicts = read_verdicts(systems[system] / VERDICTS)
            program = verdicts[0].program if verdicts else None
            rows[f"{system} ({program})" if program and program != system else system] = decisions_of(verdicts,
                                                                                                       dialogues)
        base = next(iter(rows))
        numbers = paired_numbers(rows, base)
        tables[dataset] = {"base": base, "rows": numbers, "lines": paired_markdown(numbers, "seed")}
    return tables


def paired_markdown_section(tables: dict[str, dict[str, Any]]) -> str:
    """The paired tables as Markdown sections (empty when there is none)."""
    parts = [f"## Paired against the seed program: {dataset}\n\n" + "\n".join(table["lines"]) + f"\n\n{NOTE}\n"
             for dataset, table in tables.items()]
    return "\n".join(parts)


def write_paired(out_dir: Path) -> dict[str, dict[str, Any]]:
    """Append the paired tables to table.md (after ``tables.write_tables`` wrote it) and record their numbers in
    benchmark.json (``paired``); the tables."""
    tables = paired_tables(out_dir)
    if not tables:
        return tables
    with (out_dir / "table.md").open("a") as handle:
        handle.write("\n" + paired_markdown_section(tables))
    path = out_dir / PLAN
    document = json.loads(path.read_text()) if path.exists() else {}
    document["paired"] = {dataset: {"base": t["base"], "rows": t["rows"]} for dataset, t in tables.items()}
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return tables

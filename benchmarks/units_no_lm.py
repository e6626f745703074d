"""The unit as a choice of the program, with no LM call: the shipped default's tier that asks no LM (``local`` with
its rule, the cascade band empty: ``Vista.evidence_from_program``) judging the suite's compile part with each unit
cut from the turn's own text -- its sentences, or their clauses (``grounding.clause_units``) -- side by side.

    python benchmarks/units_no_lm.py [--program local] [--out benchmarks/premise/units-no-lm-compile.json]

Only the compile part is read. Printed and written: balanced accuracy per dataset and pooled with 95 % intervals over
dialogues (the instrument's table, McNemar against sentences), clauses against sentences as the anchored gate
reads a candidate (paired difference of balanced accuracy, its intervals, the discordant turns), units per turn, and each unit's claim-set F1 against the annotators' claims on the
compile part's annotated turns.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vista_dspy import Vista
from vista_dspy.data.location import data_dir
from vista_dspy.data.suite import load_suite
from vista_dspy.experiments.bench import suite_paths
from vista_dspy.experiments.instrument import frame_of, instrument_table, probe_rows, table_markdown
from vista_dspy.grounding import TEXT_UNITS
from vista_dspy.optimize.gate import anchored_gate, gate_markdown
from vista_dspy.optimize.metrics import match_claims


def judged(program: str, units: str, suite: dict) -> tuple[list[dict], int]:
    """(probe rows of every judged turn, units judged) of the no-LM tier with ``units``."""
    judge = Vista.evidence_from_program(program, units=units)
    if judge.needs_lm:
        raise SystemExit(f"{program} with units={units} would ask an LM")
    rows, count = [], 0
    for dataset, dialogues in suite.items():
        for dialogue in dialogues:
            verdict = judge(dialogue)
            count += sum(len(t.claims) for t in verdict.turns if t.gold_label is not None)
            rows += [{"dataset": dataset, "system": units, **row} for row in probe_rows(verdict)]
    return rows, count


def claim_set_f1(suite: dict, units: str) -> dict:
    """Claim-set F1 of the turn's ``units`` against the annotated claims (``metrics.match_claims``), pooled."""
    matched = total = turns = 0
    for dialogue in suite.get("vista-human", []):
        for index in dialogue.judged_turns:
            gold = dialogue.turns[index].gold
            if gold is None or gold.claims is None:
                continue
            match = match_claims(TEXT_UNITS[units](dialogue.turns[index].text), [c.text for c in gold.claims])
            matched += len(match.pairs)
            total += match.extracted + match.gold
            turns += 1
    return {"turns": turns, "claim_set_f1": round(2 * matched / total, 4) if total else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--program", default="local")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args()
    suite = load_suite(suite_paths(data_dir()), "compile")
    names = list(TEXT_UNITS)
    rows, units = [], {}
    for name in names:
        mine, count = judged(args.program, name, suite)
        rows += mine
        units[name] = {"units_per_turn": round(count / len(mine), 3), **claim_set_f1(suite, name)}
    turns = frame_of(rows)
    table = instrument_table(turns, names, reference=names[0])
    print(table_markdown(table, reference=names[0]))
    gate = anchored_gate(turns, "clauses", anchor="sentences")
    print("\n" + "\n".join(gate_markdown(gate)))
    for name, figures in units.items():
        print(f"{name}: {figures}")
    if args.out:
        record = {"command": f"python benchmarks/units_no_lm.py --program {args.program}"
                             + (f" --out {args.out}" if args.out else ""),
                  "part": "compile", "program": f"{args.program}+evidence-only", "units": units,
                  "clauses_against_sentences": gate,
                  "rows": json.loads(table.to_json(orient="records"))}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

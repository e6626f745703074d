"""The instrument's tables from the committed suite probes alone (no LM, no dataset): balanced accuracy per dataset
and pooled with 95 % intervals, the baselines, incoherent turns, model seconds per judged turn, and the gate of each
candidate against the seed, on one part of the suite.

    python benchmarks/instrument_table.py --part compile --systems local-1.5b-default,local-1.5b-evidence \\
        --anchor local-1.5b-seed --no-lm local-1.5b-evidence

Each name is a record ``benchmarks/probes/suite-NAME/`` (``record_suite_probe.py``); ``results.py`` writes
RESULTS.md's tables from the same records. Every row is computed on the
turns all the named records judged (a probe still running covers fewer turns; the table says how many).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from vista_dspy.experiments.instrument import gate_report, instrument_table, probe_turns, table_markdown

PROBES = Path(__file__).parent / "probes"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("compile", "test", "all"), default="compile")
    parser.add_argument("--anchor", default="local-1.5b-seed")
    parser.add_argument("--systems", default="", help="comma-separated candidates, gated against the anchor")
    parser.add_argument("--no-lm", default=None, help="the tier with no LM call (its flips are counted)")
    parser.add_argument("--others", default="", help="comma-separated records shown in the table, not gated")
    parser.add_argument("--reference", default=None,
                        help="the record the McNemar column tests against (default: the anchor)")
    parser.add_argument("--meta", type=Path, default=None,
                        help="write the gate of the (one) candidate into this program meta as anchored_gate")
    args = parser.parse_args()

    candidates = [s for s in args.systems.split(",") if s]
    if args.meta is not None and len(candidates) != 1:
        parser.error("--meta writes one candidate's gate: name exactly one in --systems")
    others = [s for s in args.others.split(",") if s]
    names = list(dict.fromkeys([args.anchor, *candidates, *([args.no_lm] if args.no_lm else []), *others]))
    turns = pd.concat([probe_turns(PROBES / f"suite-{name}") for name in names], ignore_index=True)
    if args.part != "all":
        turns = turns[turns["part"] == args.part]
    print(f"## The suite's {args.part} part\n")
    reference = args.reference or args.anchor
    print(table_markdown(instrument_table(turns, names, reference=reference), reference))
    for candidate in candidates:
        if candidate == args.no_lm:
            continue
        record, text = gate_report(turns, candidate, args.anchor, args.no_lm)
        print(f"### {candidate} against {args.anchor}\n\n{text}")
        if args.meta is not None:
            from vista_dspy.optimize.gate import write_anchored_gate  # only to write a meta

            write_anchored_gate(args.meta, {**record, "part": args.part,
                                            "records": [f"benchmarks/probes/suite-{n}" for n in names]})
            print(f"anchored gate written into {args.meta}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

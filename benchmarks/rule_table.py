"""Decision rules against the seed, from a live probe alone (no LM, no dataset): every row decided two-fold over the
annotated dev file's halves (each turn by a rule chosen on the other half only), with the false alarms and misses,
turn accuracy per claim count, and the bootstrap interval of the turn difference.

    python benchmarks/rule_table.py [--probe local-1.5b-seed-live] [--json out.json]

The probe (benchmarks/probes/NAME, see its probe.json) must be a live recording: ``vista evaluate`` run with the
program as it ships without its rule, named by its content hash (``benchmarks/record_probe.py``). Rows:
- seed: the judge's own labels (the paper's method);
- two-threshold rule: the recipe of the program shipped before (a claim threshold for claims, a lower one for each
  turn's most doubtful claim, ``rule_gate.choose_two_threshold_rule``);
- turn-model rule: a claim threshold for claims and a turn model over the claims' P(unsafe) that knows how many
  claims the turn has (``rule_gate.choose_turn_model_rule``), each with the cascade ``vista compile`` would choose;
- evidence only: the cues alone decide every claim (no Verify or Categorize call).
Claim columns are on the decomposed claims matched to an annotators' claim; paired tests against the seed: exact
McNemar on those claims and on the turns; the interval resamples dialogues (``rule_gate.turn_difference_interval``).
"contradicted -> verified": claims the judge was asked about and found CONTRADICTED (Verify: UNVERIFIABLE) that the
row calls VERIFIED.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vista_dspy.evidence import CUES
from vista_dspy.experiments.paired_table import matched_claim_scores, paired_markdown, paired_numbers
from vista_dspy.optimize.rules.probe_records import read_probe
from vista_dspy.optimize.rules.rule_fitting import fit_rule
from vista_dspy.optimize.rules.rule_gate import (
    cascade_choice,
    choose_turn_model_rule,
    choose_two_threshold_rule,
    seed_decisions,
    two_fold,
)

PROBES = Path(__file__).parent / "probes"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--probe", default="local-1.5b-seed-live", help="a live probe under benchmarks/probes/")
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    args = parser.parse_args()

    turns, half_of, meta = read_probe(PROBES / args.probe)
    if not meta.get("program_sha256"):
        print(f"{args.probe}: no program hash: not a live probe (benchmarks/record_probe.py records one)",
              file=sys.stderr)
        return 2
    seed = seed_decisions(turns)
    rows: dict[str, list] = {"seed": seed}
    cascades = {}
    recipes = (("two-threshold rule", choose_two_threshold_rule), ("turn-model rule", choose_turn_model_rule))
    for name, choose in recipes:
        def recipe(part, choose=choose):
            return choose(part)[0]

        decided, _ = two_fold(turns, half_of, recipe)
        rows[name] = decided
        band, cascaded, record = cascade_choice(turns, half_of, recipe, decided, seed)
        cascades[name] = record
        if band is not None:
            rows[f"{name} + cascade {band.low:.2f}-{band.high:.2f}"] = cascaded
    rows["evidence only"] = two_fold(turns, half_of, lambda part: fit_rule(part, CUES).evidence_only(), judge=False)[0]

    print(f"# Two-fold over the {len(turns)} judged turns of the annotated dev file (halves: {meta['halves']})\n\n"
          f"probe: {args.probe} ({meta['command']}; commit {meta['commit']}, {meta['date']}; program "
          f"{meta.get('program')} {meta['program_sha256'][:12]})\n")
    out = paired_numbers(rows, "seed")
    print("\n".join(paired_markdown(out, "seed")))
    for row in out.values():  # the record's own name for the comparison
        row["vs_seed"] = row.pop("vs_base")
    print("\n## Turns per claim count: right of all (false alarms, misses)\n")
    groups = sorted({g for row in out.values() for g in row["by_claim_count"]})
    print("| decisions | " + " | ".join(f"{g} claims" for g in groups) + " |")
    print("|---" * (len(groups) + 1) + "|")
    for name, row in out.items():
        cells = [row["by_claim_count"].get(g) for g in groups]
        print(f"| {name} | " + " | ".join(f"{c['right']}/{c['turns']} ({c['false_alarms']}, {c['misses']})"
                                          if c else "-" for c in cells) + " |")
    print(f"\nclaims matched to an annotators' claim: {matched_claim_scores(seed).get('claims')}; the probe's wall "
          f"time: {meta.get('seconds')} s ({meta.get('seconds_per_judged_turn')} s per judged turn; its note: "
          f"{meta.get('note')})")
    print("knobs tuned on the turns that report these rows: none of any rule's parameters (each half's rule is "
          "chosen on the other half); the turn-model recipe's design (its candidate summaries, threshold 0.5, "
          "deciding only turns with no unsafe claim) was settled with the earlier dev probes' two-fold numbers in view")
    for name, record in cascades.items():
        print(f"cascade for {name}: {record}")
    if args.json:
        args.json.write_text(json.dumps({"probe": args.probe, "rows": out, "cascades": cascades}, indent=2,
                                        default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Compare two `verdict_snapshot.sh` directories mode by mode: byte-identical, or identical once the named fields
(added by a change, e.g. a new verdict field) are removed from every claim and from the options.

    python benchmarks/compare_snapshots.py BEFORE AFTER --claim-field probabilities --option label_probabilities
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def normalised(line: str, claim_fields: set[str], option_fields: set[str]) -> str:
    verdict = json.loads(line)
    for turn in verdict["turns"]:
        for claim in turn["claims"]:
            for name in claim_fields:
                claim.pop(name, None)
    for name in option_fields:
        verdict["options"].pop(name, None)
    return json.dumps(verdict, sort_keys=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--claim-field", action="append", default=[], help="a claim field to ignore (repeatable)")
    parser.add_argument("--option", action="append", default=[], help="an option to ignore (repeatable)")
    args = parser.parse_args()
    differing = 0
    for path in sorted(args.before.glob("*.jsonl")):
        before = path.read_text().splitlines()
        after = (args.after / path.name).read_text().splitlines()
        changed = sum(normalised(a, set(args.claim_field), set(args.option))
                      != normalised(b, set(args.claim_field), set(args.option)) for a, b in zip(before, after))
        changed += abs(len(before) - len(after))
        differing += changed
        print(f"{path.stem:20} byte-identical: {'yes' if before == after else 'no '}; dialogues differing once the "
              f"ignored fields are removed: {changed} of {len(before)}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())

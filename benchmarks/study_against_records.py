"""Whether a study's live trials give the labels the instrument's records give for the same program on the same turns:
one line per TRIAL=RECORD pair, the turns labelled alike and those that differ. A record made before a change to the
code against a trial run after it says whether the change moved any verdict (the model at temperature 0, its answers
uncached in both).

    python benchmarks/study_against_records.py RESULT.json 0=suite-local-1.5b-seed 1=suite-local-1.5b-passage

RESULT.json: a study result (`vista study --export`, `vista compile` writes one beside the program).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from write_anchor import row_letter  # noqa: E402

from vista_dspy.data.records import read_jsonl_records  # noqa: E402


def record_letters(name: str) -> dict[tuple[str, int], str]:
    rows = read_jsonl_records(ROOT / "benchmarks" / "probes" / name / "turns.jsonl")
    return {(r["dialogue_id"], r["turn_index"]): row_letter(r) for r in rows}


def compare(result: dict, trial: int, record: str) -> tuple[int, int, list[str]]:
    """(turns alike, turns of the trial, the differing turns as 'dialogue#turn: trial/record')."""
    letters = next(t for t in result["trials"] if t["number"] == trial)["outcome"]["labels"]
    recorded = record_letters(record)
    differ = [f"{did}#{index}: {letter}/{recorded.get((did, index), '-')}"
              for (_, did, index, _), letter in zip(result["data"]["turns"], letters)
              if recorded.get((did, index)) != letter]
    return len(letters) - len(differ), len(letters), differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("result", type=Path)
    parser.add_argument("pairs", nargs="+", help="TRIAL=RECORD: a trial number and a record under benchmarks/probes")
    args = parser.parse_args()
    result = json.loads(args.result.read_text())
    for pair in args.pairs:
        trial, record = pair.split("=", 1)
        alike, total, differ = compare(result, int(trial), record)
        print(f"trial {trial} vs {record}: {alike}/{total} turns labelled alike" + (f"; differ: {', '.join(differ)}"
                                                                                    if differ else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

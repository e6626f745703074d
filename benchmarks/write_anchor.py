"""Write the anchor record a compile reads instead of judging the seed again (``optimize.compile.Anchor``): the seed's
label and server seconds per judged turn, from the instrument's live record of the seed on one embedded model.

    python benchmarks/write_anchor.py benchmarks/probes/suite-local-1.5b-seed local

writes ``vista_dspy/compiled/anchors/local.json``. It refuses a record whose program hash is not the seed's as the
code builds it today (the anchor must be the program a compile would judge) or whose turns carry no server timings.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from vista_dspy.data.records import read_jsonl_records  # noqa: E402
from vista_dspy.optimize.compile import ANCHOR_FORMAT  # noqa: E402
from vista_dspy.optimize.seed_program import build_seed_program  # noqa: E402
from vista_dspy.optimize.study import LABEL_LETTERS  # noqa: E402


def row_letter(row: dict) -> str:
    """A recorded turn's label as the study's letter: h, f, or u (unknown, or the turn failed)."""
    return "u" if row.get("error") else LABEL_LETTERS.get(row["label"], "u")


def anchor_record(probe: Path) -> dict:
    meta = json.loads((probe / "probe.json").read_text())
    seed_hash = build_seed_program().content_hash()
    if meta.get("program_sha256") != seed_hash:
        raise SystemExit(f"{probe}: program {meta.get('program_sha256')} is not the seed's ({seed_hash})")
    rows = read_jsonl_records(probe / "turns.jsonl")
    untimed = [r["dialogue_id"] for r in rows if r["usage"]["calls"] and not r["usage"].get("model_ms")]
    if untimed:
        raise SystemExit(f"{probe}: {len(untimed)} turns carry no server timings (e.g. {untimed[0]})")
    turns = sorted([r["part"], r["dataset"], r["dialogue_id"], r["turn_index"],
                    row_letter(r),
                    round(r["usage"].get("model_ms", 0.0) / 1000.0, 3)] for r in rows)
    source = f"instrument record {probe.name} ({meta.get('commit')}; {meta.get('model')})"
    return {"format": ANCHOR_FORMAT, "source": source, "program": "seed", "program_sha256": seed_hash,
            "price": "time", "columns": ["dataset", "dialogue_id", "turn_index", "label", "server_seconds"],
            "note": meta.get("note", ""), "turns": [row[1:] for row in turns]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("probe", type=Path, help="a live instrument record of the seed (probe.json, turns.jsonl.gz)")
    parser.add_argument("model", help="the embedded model's program name (local, local-0.5b)")
    args = parser.parse_args()
    out = ROOT / "vista_dspy" / "compiled" / "anchors" / f"{args.model}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = anchor_record(args.probe)
    out.write_text(json.dumps(record, separators=(",", ":")) + "\n")
    print(f"{out}: {len(record['turns'])} turns of the seed from {record['source']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Record a real-model probe as committed data: the run folder of a program run as users run it (``vista evaluate
dev.json --program P --out RUN_DIR``: its own Decompose, coverage and store, label probabilities on) becomes
``benchmarks/probes/NAME/`` with ``turns.jsonl.gz`` (gzipped JSON Lines, no dataset text: ids, the model's claims, cues, probabilities,
labels, matched judgements; see ``vista_dspy.optimize.rules.probe_records``) and ``probe.json`` (command, commit, the
program's name and content hash from the run's ``run.json``, model, date, data sha256, wall time, LM calls and tokens
per stage and per judged turn).

    python benchmarks/record_probe.py RUN_DIR NAME --command "vista evaluate ... --program seed --out RUN_DIR" \
        --commit f02bc3d --date 2026-12-02 --seconds 2910

The annotated file is needed here (to match claims to the annotators' claims) and never after: fitting and gating
(``benchmarks/refit_compile_part.py``, ``benchmarks/probe_agreement.py``) read the record alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from vista_dspy.data import load_dialogues, part_of
from vista_dspy.data.location import data_dir
from vista_dspy.data.records import compress
from vista_dspy.optimize.rules.judged_turns import turns_of
from vista_dspy.optimize.rules.probe_records import write_probe
from vista_dspy.run.runner import VERDICTS, read_verdicts
from vista_dspy.schema import Usage

DEFAULT_DATA = data_dir(Path(__file__).resolve().parents[1]) / "vista_human_eval" / "dev.json"

PROBES = Path(__file__).parent / "probes"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="the probe's run folder (verdicts.jsonl, run.json)")
    parser.add_argument("name", help="the record's folder name under benchmarks/probes/")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--command", required=True, help="the command that ran the probe")
    parser.add_argument("--commit", required=True, help="the commit it ran at")
    parser.add_argument("--date", required=True)
    parser.add_argument("--seconds", type=float, default=None, help="its wall time, if known")
    parser.add_argument("--model", default="local (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, llama.cpp, 2 cores)")
    parser.add_argument("--note", default=None)
    args = parser.parse_args()

    dialogues = load_dialogues(args.data)
    by_id = {d.id: d for d in dialogues}
    half_of = {d.id: part for part in ("train", "dev") for d in part_of(dialogues, part)}
    verdicts = read_verdicts(args.run / VERDICTS)
    turns = turns_of(verdicts, by_id)
    run = json.loads((args.run / "run.json").read_text()) if (args.run / "run.json").is_file() else {}
    usage = Usage()
    for verdict in verdicts:
        usage.merge(verdict.usage)
    per_turn = max(len(turns), 1)
    stages = {stage: {**counts.model_dump(), "per_judged_turn": {k: round(v / per_turn, 2)
                                                                 for k, v in counts.model_dump().items()}}
              for stage, counts in sorted(usage.by_stage.items())}
    program = run.get("program")
    if program and Path(program).is_absolute():  # no record names a path of the machine it was made on
        program = Path(program).name
    meta = {"command": args.command, "commit": args.commit, "date": args.date, "model": args.model,
            "program": program, "program_sha256": run.get("program_sha256"),
            "options": verdicts[0].options if verdicts else {},
            "data": {"file": args.data.name, "sha256": hashlib.sha256(args.data.read_bytes()).hexdigest(),
                     "dialogues": len(verdicts), "of": sum(bool(d.judged_turns) for d in dialogues)},
            "seconds": args.seconds,
            "usage": {"by_stage": stages, "note": "calls and tokens that reached the model (cache hits are not "
                      "calls); prompt tokens include the prefix the server's cache served"},
            "seconds_per_judged_turn": round(args.seconds / len(turns), 1) if args.seconds and turns else None,
            "halves": "vista_dspy.data.part_of(dialogues, 'train' / 'dev'): the seeded split by dialogue",
            "note": args.note}
    out = write_probe(PROBES / args.name, turns, half_of, meta)
    (out / "turns.jsonl.gz").unlink(missing_ok=True)
    compress(out / "turns.jsonl")  # committed gzipped; every reader takes either
    print(f"{out}: {len(turns)} turns, {sum(len(t.rows) for t in turns)} claims")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Record a system's runs of a `vista benchmark --suite PART` directory as committed data:
``benchmarks/probes/suite-NAME/turns.jsonl.gz`` (gzipped JSON Lines, one line per judged turn: dataset, system, ids, part, gold, label, the
claims' categories, stages, probabilities and cues, usage; no dataset text) and ``probe.json`` (command, commit,
program and its content hash, model, the suite's name, per dataset the turns recorded).

    python benchmarks/record_suite_probe.py RUN-COMPILE RUN-TEST seed local-1.5b-seed \\
        --command "vista benchmark --suite PART --systems evidence,vista,seed --model local" --commit 09a269c

Several directories (the compile part's and the test part's) make one record; a dataset's turns of a part come from
the directory that judged the most of them (the first on a tie: list a live run before a replay from the cache, whose
verdicts carry no usage). Rerunning it over directories that have grown replaces the record with the longer one.
A program named by a path is recorded by its file name alone (its content hash beside it): no record holds a path
of the machine it was made on. ``benchmarks/results.py`` rebuilds RESULTS.md's tables from these records alone.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vista_dspy.data.records import compress
from vista_dspy.data.suite import read_suite
from vista_dspy.experiments.instrument import probe_rows
from vista_dspy.experiments.tables import run_dirs
from vista_dspy.run.runner import RUN, VERDICTS, read_verdicts

PROBES = Path(__file__).parent / "probes"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs="+", help="benchmark directories (runs/<dataset>/<system>/)")
    parser.add_argument("system", help="the system's run folder name (vista, seed, evidence, ...)")
    parser.add_argument("name", help="the record's name: benchmarks/probes/suite-NAME/")
    parser.add_argument("--as", dest="label", default=None, help="the system's name in the record (default: NAME)")
    parser.add_argument("--command", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--model", default="local (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, llama.cpp, 2 cores)")
    parser.add_argument("--note", default=None)
    args = parser.parse_args()

    suite = read_suite()
    rows, datasets, settings = [], {}, {}
    found: dict[tuple[str, str], list] = {}  # (dataset, part) -> the rows of the directory that judged the most
    for run in args.runs:
        for dataset, system, path in run_dirs(run):
            if system != args.system or dataset not in suite["datasets"]:
                continue
            settings = json.loads((path / RUN).read_text()) if (path / RUN).is_file() else settings
            mine = [{"dataset": dataset, "system": args.label or args.name, **row}
                    for verdict in read_verdicts(path / VERDICTS) for row in probe_rows(verdict)]
            for part in {row["part"] for row in mine}:
                rows_of_part = [row for row in mine if row["part"] == part]
                if len(rows_of_part) > len(found.get((dataset, part), [])):
                    found[dataset, part] = rows_of_part
    for (dataset, _), mine in sorted(found.items()):
        of = sum(p["judged_turns"] for p in suite["datasets"][dataset]["parts"].values())
        datasets[dataset] = {"turns": datasets.get(dataset, {}).get("turns", 0) + len(mine), "of": of}
        rows += mine
    if not rows:
        print(f"no runs of system {args.system!r} under {', '.join(map(str, args.runs))}", file=sys.stderr)
        return 2
    out = PROBES / f"suite-{args.name}"
    out.mkdir(parents=True, exist_ok=True)
    plain = out / "turns.jsonl"
    plain.with_name(plain.name + ".gz").unlink(missing_ok=True)
    plain.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    compress(plain)
    program = settings.get("program")
    if program and Path(program).is_absolute():
        program = Path(program).name
    meta = {"suite": suite["name"], "command": args.command, "commit": args.commit, "model": args.model,
            "system": args.system, "program": program, "program_sha256": settings.get("program_sha256"),
            "parts": sorted({r["part"] for r in rows}), "datasets": datasets, "note": args.note}
    (out / "probe.json").write_text(json.dumps(meta, indent=2) + "\n")
    counts = ", ".join(f"{dataset} {v['turns']}" for dataset, v in datasets.items())
    print(f"{out}: {len(rows)} turns ({counts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`vista gate`: a candidate program against the seed on the instrument's turns (no LM call: it reads the runs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from .app import app
from .common import err, fail


@app.command()
def gate(
    runs: Annotated[list[Path], typer.Argument(help="`vista benchmark --suite PART` directories; a system name "
                                                    "already taken by an earlier directory is read as "
                                                    "SYSTEM@DIRNAME.", show_default=False)],
    candidate: Annotated[str, typer.Option(help="The system to gate (e.g. vista, or vista@DIRNAME).")] = "vista",
    anchor: Annotated[str, typer.Option(help="The fixed anchor: the seed program, the paper's method.")] = "seed",
    no_lm: Annotated[Optional[str], typer.Option(help="The tier with no LM call on the same turns, to count the "
                                                      "turn labels the candidate's LM changed ('' for none).")
                     ] = "evidence",
    part: Annotated[str, typer.Option(help="Which part's turns to gate on: compile (choices and gates), test "
                                           "(reports only) or all.")] = "compile",
    meta: Annotated[Optional[Path], typer.Option(help="Also write the gate's record into this program meta file "
                                                      "(compiled/NAME.meta.json) as anchored_gate.")] = None,
) -> None:
    """Gate a candidate against the seed on the same suite turns: it passes when its balanced accuracy is not below
    the seed's by more than 1 point (one-sided 95 %, paired bootstrap over dialogues), and wins only
    when the bound is above zero. Prints the table, writes gate.json and gate.md in the first directory; exit code 1
    when the candidate fails."""
    import pandas as pd

    from ..experiments.instrument import gate_report, run_turns

    frames = []
    taken: set[str] = set()
    for directory in runs:
        if not directory.is_dir():
            raise fail(f"{directory}: no such directory")
        turns = run_turns(directory)
        if turns.empty:
            raise fail(f"{directory}: no judged turns with a gold label (is it a `vista benchmark` directory?)")
        turns["system"] = [s if s not in taken else f"{s}@{directory.name}" for s in turns["system"]]
        taken |= set(turns["system"])
        frames.append(turns)
    turns = pd.concat(frames, ignore_index=True)
    if part != "all":
        turns = turns[turns["part"] == part]
    for name in (candidate, anchor):
        if name not in taken:
            raise fail(f"no system {name!r} in {', '.join(map(str, runs))}; found: {', '.join(sorted(taken))}")
    try:
        record, text = gate_report(turns, candidate, anchor, no_lm or None)
    except ValueError as exc:
        raise fail(str(exc)) from None
    record["part"] = part
    record["runs"] = [str(r) for r in runs]
    (runs[0] / "gate.json").write_text(json.dumps(record, indent=2) + "\n")
    (runs[0] / "gate.md").write_text(text)
    sys.stdout.write(text)
    if meta is not None:
        from ..optimize.gate import write_anchored_gate

        try:
            write_anchored_gate(meta, record)
        except ValueError as exc:
            raise fail(str(exc)) from None
        err.print(f"anchored gate written into {meta}", highlight=False)
    if not record["passes"]:
        raise typer.Exit(1)

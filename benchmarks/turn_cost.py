"""What a judged turn costs the model, per stage, for several programs on the same dev turns in one run: LM calls,
prompt tokens the model read (not served by the server's prefix cache), tokens it wrote, and the model's own
seconds (llama.cpp's ``timings``: reading the uncached prompt plus writing the answer), per judged turn; with the
turn accuracy of each program on those turns and its wall seconds.

    python benchmarks/turn_cost.py --dialogues 10 \
        --variant seed "--program seed" \
        --variant default "" \
        --variant sentences "--program benchmarks/programs/sentences.json"

Each variant is ``vista evaluate`` as users run it (a subprocess, ``--model local`` on one embedded server this
script starts and every variant reuses, ``--no-cache``: every answer live), given the variant's own flags. Before
its measured dialogues each variant judges one warm-up dialogue that is not measured (the file's last), so the
first reads of its few-shot prompts are left out, as a long run amortises them. Variants run one after another:
compare them within one run, never across machines. Writes ``turn_cost.json`` under --out (each variant's run
folder is kept there too).
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from vista_dspy.data import load_dialogues
from vista_dspy.data.location import data_dir
from vista_dspy.lm.server import LocalServer, embedded_settings
from vista_dspy.run.runner import VERDICTS, read_verdicts
from vista_dspy.schema import Usage

DEFAULT_DATA = data_dir(Path(__file__).resolve().parents[1]) / "vista_human_eval" / "dev.json"
VISTA = [sys.executable, "-m", "vista_dspy.cli"]


def run_variant(args: list[str], data: Path, out: Path, port: int, limit: int | None) -> float:
    """``vista evaluate`` of ``data`` with ``args`` on the shared server; returns its wall seconds."""
    command = [*VISTA, "evaluate", str(data), "--model", "local", "--port", str(port), "--no-cache", "--out",
               str(out), "--overwrite", "--no-show-claims", *args] + (["--limit", str(limit)] if limit else [])
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return time.perf_counter() - started


def cost_of(run: Path, seconds: float) -> dict:
    """Per stage and in total: calls, uncached prompt tokens, written tokens and model seconds per judged turn;
    turn accuracy against the annotators."""
    verdicts = read_verdicts(run / VERDICTS)
    usage = Usage()
    for verdict in verdicts:
        usage.merge(verdict.usage)
    turns = sum(len(v.turns) for v in verdicts)
    scored = [t for v in verdicts for t in v.turns if t.gold_label in ("hallucinated", "faithful")]
    right = sum(t.label == t.gold_label for t in scored)

    def per_turn(counts) -> dict:
        return {"calls": round(counts.calls / turns, 2),
                "uncached_prompt_tokens": round((counts.prompt_tokens - counts.cached_prompt_tokens) / turns, 1),
                "written_tokens": round(counts.completion_tokens / turns, 1),
                "model_seconds": round(counts.model_ms / 1000 / turns, 2)}

    return {"judged_turns": turns, "turns_right": right, "turns_scored": len(scored),
            "turn_accuracy": round(right / len(scored), 4) if scored else None,
            "wall_seconds_per_turn": round(seconds / turns, 2) if turns else None,
            "stages": {stage: per_turn(c) for stage, c in sorted(usage.by_stage.items())},
            "total": per_turn(usage.total)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--dialogues", type=int, default=10, help="the file's first N dialogues are measured")
    parser.add_argument("--variant", nargs=2, action="append", metavar=("NAME", "FLAGS"), required=True,
                        help="a program to measure: its name and its `vista evaluate` flags (one string)")
    parser.add_argument("--model", default="local", help="the embedded model (local, or local-0.5b)")
    parser.add_argument("--port", type=int, default=8797)
    parser.add_argument("--out", type=Path, default=Path("turn-cost"))
    args = parser.parse_args()

    dialogues = load_dialogues(args.data)
    if args.dialogues >= len(dialogues):
        raise SystemExit(f"--dialogues must leave the last of the file's {len(dialogues)} for the warm-up")
    args.out.mkdir(parents=True, exist_ok=True)
    warm = args.out / "warm-up.json"
    warm.write_text(json.dumps([dialogues[-1].model_dump(mode="json", exclude_defaults=True)]))
    results = {}
    with LocalServer(embedded_settings(args.model, port=args.port)):
        for name, flags in args.variant:
            extra = shlex.split(flags)
            run_variant(extra, warm, args.out / f"{name}-warm-up", args.port, None)
            seconds = run_variant(extra, args.data, args.out / name, args.port, args.dialogues)
            results[name] = {"flags": flags, **cost_of(args.out / name, seconds)}
            print(f"{name}: {json.dumps(results[name]['total'])}", file=sys.stderr, flush=True)
    report = {"data": str(args.data.name), "dialogues": args.dialogues, "model": args.model, "variants": results,
              "note": "per judged turn; model seconds are the server's own (llama.cpp timings), uncached prompt "
                      "tokens exclude what its prefix cache served; one warm-up dialogue per variant not counted"}
    (args.out / "turn_cost.json").write_text(json.dumps(report, indent=2) + "\n")
    print(table(report))
    return 0


def table(report: dict) -> str:
    lines = [f"{'variant':<14} {'stage':<12} {'calls':>6} {'read tok':>9} {'written':>8} {'model s':>8}"]
    for name, v in report["variants"].items():
        for stage, c in [*v["stages"].items(), ("total", v["total"])]:
            lines.append(f"{name:<14} {stage:<12} {c['calls']:>6} {c['uncached_prompt_tokens']:>9} "
                         f"{c['written_tokens']:>8} {c['model_seconds']:>8}")
        lines.append(f"{name:<14} turns right {v['turns_right']}/{v['turns_scored']} ({v['turn_accuracy']}), "
                     f"{v['judged_turns']} judged; wall {v['wall_seconds_per_turn']} s per turn")
    base = next(iter(report["variants"].values()))["total"]["model_seconds"]
    for name, v in report["variants"].items():
        lines.append(f"model time per judged turn, {name} / first: {v['total']['model_seconds'] / base:.2f}"
                     if base else f"{name}: no model time reported")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

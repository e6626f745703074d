"""Speed and accuracy of the embedded local judge on the first N judged turns of the annotated dev file.

    python benchmarks/local_model.py [--turns 20] [--data ../shared/data/vista_human_eval/dev.json]
    python benchmarks/local_model.py --part dev --program PROGRAM   # a compile's held-out half (vista_dspy.data.PARTS)

Runs two passes with the same server, both uncached: VISTA end to end (decompose -> verify -> categorize) for
turn accuracy and the agreement of decomposed claims with the human claims (claim-set F1, vista_dspy.optimize.metrics),
and --judge-given-claims (the human claims are judged) for claim accuracy. Prints seconds per
judged turn, LM calls and tokens per judged turn, parse failures, and accuracies beside trivial baselines.
Verdicts are kept under --out for inspection. Appends nothing by itself: copy the printed Markdown into
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import platform
import shutil
import sys
import time
from datetime import date
from pathlib import Path

import dspy

from vista_dspy import Vista
from vista_dspy.data import PARTS, data_dir, load_dialogues, part_of
from vista_dspy.lm.clients.cache import use_cache_for
from vista_dspy.lm.server import LOCAL_SHORT_ANSWER_TOKENS, LocalServer, ServerSettings, local_model_config
from vista_dspy.lm.weights import resolve_gguf
from vista_dspy.optimize.metrics import decomposition_agreement, mcnemar_exact, paired_f1_difference
from vista_dspy.run.runner import VERDICTS, Threads, evaluate, read_verdicts
from vista_dspy.scoring import summarize

DEFAULT_DATA = data_dir(Path(__file__).resolve().parents[1]) / "vista_human_eval" / "dev.json"


def first_judged_turns(dialogues, n):
    """Whole dialogues, in file order, until at least n judged turns are covered."""
    chosen, turns = [], 0
    for dialogue in dialogues:
        if turns >= n:
            break
        chosen.append(dialogue)
        turns += len(dialogue.judged_turns)
    return chosen


def parse_failures(verdicts) -> int:
    errors = [c.error for v in verdicts for t in v.turns for c in t.claims if c.error]
    errors += [t.error for v in verdicts for t in v.turns if t.error] + [e for v in verdicts for e in v.errors]
    return sum("AdapterParseError" in e for e in errors)


def run_pass(name, dialogues, program, config, given, out_dir, resume=False):
    lm = config.build()
    if not resume:
        shutil.rmtree(out_dir, ignore_errors=True)
    started = time.perf_counter()
    result = evaluate(dialogues, program.with_options(given_claims=given), Threads(lm, config.build_adapter()),
                      out_dir=out_dir)
    return measure(name, dialogues, result.verdicts, None if resume else time.perf_counter() - started, given)


def reference_calls(dialogues, verdicts, given: bool) -> int:
    """The reference implementation's calls for the same claims: one Decompose per decomposed assistant turn (with
    given claims, the judged turns are not decomposed), one Verify per claim, one Categorize per claim not
    verified."""
    judged = {v.dialogue_id for v in verdicts}
    decomposed = sum(turn.role == "assistant" and not (given and turn.judged)
                     for d in dialogues if d.id in judged for turn in d.turns)
    claims = [c for v in verdicts for t in v.turns for c in t.claims if c.category != "ERROR"]
    return decomposed + len(claims) + sum(c.category != "VERIFIED" for c in claims)


def measure(name, dialogues, verdicts, seconds, given):
    """One table row from a pass's verdicts (``seconds`` None when re-reading a finished run)."""
    summary = summarize(verdicts)
    turns = summary["judged_turns"]
    usage = summary["usage"]["total"]
    row = {
        "pass": name,
        "judged turns": turns,
        "claims": summary["claims"],
        "s / judged turn": seconds / turns if seconds else None,
        "LM calls / turn": usage["calls"] / turns,
        "x reference calls": usage["calls"] / reference_calls(dialogues, verdicts, given),
        "prompt tok / turn": usage["prompt_tokens"] / turns,
        "completion tok / turn": usage["completion_tokens"] / turns,
        "parse failures": parse_failures(verdicts),
        "ERROR claims": summary["errors"]["claims"],
        "wall s": seconds,
    }
    if not given:
        agreement = decomposition_agreement(dialogues, verdicts)
        row["claim-set F1 vs human"] = agreement.f1
        row["matched claims: same category"] = (
            agreement.same_category / agreement.matched if agreement.matched else None)
    metrics = summary.get("turn_metrics", {})
    row["turn acc"] = metrics.get("accuracy")
    row["always-halluc acc"] = metrics.get("always_hallucinated_accuracy")
    row["F1 halluc"] = metrics.get("f1_hallucinated")
    claim = summary.get("claim_metrics")
    if claim:
        row["claim acc"] = claim["accuracy"]
        row["claim macro-F1"] = claim["macro_f1"]
    row["categories"] = ", ".join(f"{k} {v}" for k, v in summary["categories"].items() if v)
    return row


def server_peak_rss_gib(server: LocalServer) -> str:
    """Peak resident memory of the server process this script started (Linux /proc), as text."""
    if server.process is None:
        return "n/a (reused a running server)"
    try:
        for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return f"{int(line.split()[1]) / 2**20:.2f} GiB"
    except OSError:
        pass
    return "n/a"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=20, help="judged turns to cover (whole dialogues)")
    parser.add_argument("--part", choices=PARTS, default=None,
                        help="instead of the first --turns: every dialogue of this part of the seeded split "
                             "`vista compile` uses (seed 0; dev is the held-out half)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--port", type=int, default=8799)
    parser.add_argument("--gguf", default=None)
    parser.add_argument("--program", default=None, help="saved program (default: seed)")
    parser.add_argument("--skip-given", action="store_true", help="only the end-to-end pass")
    parser.add_argument("--skip-end-to-end", action="store_true", help="only the given-claims pass")
    parser.add_argument("--resume", action="store_true",
                        help="keep the verdicts already under --out and judge only the missing dialogues (no "
                             "timings are printed then)")
    parser.add_argument("--claim-calls", default=None, choices=("per-claim", "batched", "joint"),
                        help="judging mode (default: the program's saved option, else per-claim, the mode of runs "
                             "1-3 in RESULTS.md)")
    parser.add_argument("--decompose-calls", default=None, choices=("per-turn", "per-dialogue"),
                        help="one Decompose call per assistant turn or per dialogue (default: the program's saved "
                             "option, else per-turn)")
    parser.add_argument("--report-only", action="store_true",
                        help="do not run: re-read the verdicts under --out and print the table (no timings)")
    parser.add_argument("--compare", type=Path, default=None, metavar="OTHER_OUT",
                        help="with --report-only: exact McNemar of the end-to-end turn labels against another "
                             "run's --out, on the turns both judged")
    parser.add_argument("--poll", type=int, default=None, help="server polling (default: ServerSettings')")
    parser.add_argument("--no-check-grounding", dest="check_grounding", action="store_false",
                        help="keep decomposed claims the turn does not contain (the behaviour before the check)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the verdicts go (default benchmarks/runs/local-<program>-<turns>)")
    args = parser.parse_args()

    dialogues = load_dialogues(args.data)
    dialogues = part_of(dialogues, args.part) if args.part else first_judged_turns(dialogues, args.turns)
    settings = ServerSettings(gguf=resolve_gguf(args.gguf), port=args.port,
                              **({} if args.poll is None else {"poll": args.poll}))
    config = local_model_config(settings, cache=False)
    use_cache_for(config)
    given = {"claim_calls": args.claim_calls, "decompose_calls": args.decompose_calls,
             "check_grounding": False if not args.check_grounding else None}
    program = Vista.from_program(args.program, short_answer_tokens=LOCAL_SHORT_ANSWER_TOKENS,
                                 **{k: v for k, v in given.items() if v is not None})
    args.claim_calls, args.decompose_calls = program.options.claim_calls, program.options.decompose_calls
    print(f"model {settings.gguf.name}, program {program.program_name}, data {args.data} "
          f"({len(dialogues)} dialogues, {sum(len(d.judged_turns) for d in dialogues)} judged turns)", flush=True)
    mode = ("" if args.claim_calls == "per-claim" else f"-{args.claim_calls}") + \
        ("" if args.decompose_calls == "per-turn" else f"-{args.decompose_calls}")
    span = args.part or args.turns
    out = args.out or Path(__file__).parent / "runs" / f"local-{Path(program.program_name).stem}-{span}{mode}"
    if args.report_only:
        wanted = {d.id for d in dialogues}
        rows = [measure(name, dialogues, [v for v in read_verdicts(out / folder / VERDICTS) if v.dialogue_id in wanted],
                        None, given)
                for name, folder, given in (("end to end", "end-to-end", False), ("given claims", "given", True))
                if (out / folder / VERDICTS).exists()]
        print_table(rows, args, settings, program, "n/a (re-read)")
        if args.compare:
            print_comparison(out, args.compare, wanted)
        return 0
    rows = []
    with LocalServer(settings) as server:
        if not args.skip_end_to_end:
            rows.append(run_pass("end to end", dialogues, program, config, given=False, out_dir=out / "end-to-end",
                                 resume=args.resume))
            print(rows[-1], flush=True)
        if not args.skip_given:
            rows.append(run_pass("given claims", dialogues, program, config, given=True, out_dir=out / "given",
                                 resume=args.resume))
            print(rows[-1], flush=True)
        peak = server_peak_rss_gib(server)
    print_table(rows, args, settings, program, peak)
    return 0


def print_comparison(out: Path, other: Path, wanted: set[str]) -> None:
    """Two runs on the same items of the dialogues ``wanted``, with exact McNemar tests: end-to-end turn labels
    (and the F1 of the hallucinated class), and given-claims categories when both runs have that pass."""
    def items(run: Path, folder: str) -> dict:
        path = run / folder / VERDICTS
        if not path.exists():
            return {}
        verdicts = [v for v in read_verdicts(path) if v.dialogue_id in wanted]
        if folder == "end-to-end":
            return {(v.dialogue_id, t.turn_index): (t.gold_label, t.label) for v in verdicts for t in v.turns}
        return {(v.dialogue_id, t.turn_index, c.claim): (c.gold_category, c.category)
                for v in verdicts for t in v.turns for c in t.claims}

    for folder, what in (("end-to-end", "turns"), ("given", "given claims")):
        mine, theirs = items(out, folder), items(other, folder)
        both = sorted(set(mine) & set(theirs))
        if not both:
            continue
        gold, a, b = [mine[k][0] for k in both], [mine[k][1] for k in both], [theirs[k][1] for k in both]
        test = mcnemar_exact(gold, a, b)
        print(f"\n{len(both)} {what} judged by both {out.name} and {other.name}: accuracy "
              f"{(test['both_right'] + test['a_only']) / len(both):.3f} vs "
              f"{(test['both_right'] + test['b_only']) / len(both):.3f}; right only in {out.name} {test['a_only']}, "
              f"only in {other.name} {test['b_only']}; exact McNemar p = {test['pvalue']:.3f}")
        if folder == "end-to-end":
            f1 = paired_f1_difference(gold, a, b, "hallucinated")
            print(f"F1 of the hallucinated class, {out.name} minus {other.name}: {f1['difference']:+.3f} "
                  f"(95 % paired bootstrap CI {f1['low']:+.3f} to {f1['high']:+.3f})")


def print_table(rows, args, settings, program, peak) -> None:
    print(f"\n### Local model, {date.today()} — `python benchmarks/local_model.py "
          f"{f'--part {args.part}' if args.part else f'--turns {args.turns}'} "
          f"--claim-calls {args.claim_calls} --decompose-calls {args.decompose_calls}"
          f"{'' if args.poll is None else f' --poll {args.poll}'}"
          f"{'' if args.check_grounding else ' --no-check-grounding'}`")
    print(f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}, "
          f"dspy {dspy.__version__}; model {settings.gguf.name}; program {program.program_name}; "
          f"server peak RSS {peak}.\n")
    columns = list(dict.fromkeys(k for row in rows for k in row if k != "categories"))
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(_fmt(row.get(c)) for c in columns) + " |")
    for row in rows:
        print(f"\n{row['pass']}: {row['categories']}")


def _fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}" if value <= 1 else f"{value:.1f}"
    return str(value)


if __name__ == "__main__":
    sys.exit(main())

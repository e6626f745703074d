"""A compiled program against the seed on data no choice saw, with an embedded model: the RESULTS table of
`vista compile`.

    python benchmarks/compiled_table.py --model local --program benchmarks/programs/local.json
    python benchmarks/compiled_table.py --model local-0.5b --program benchmarks/programs/local.json --rows compiled

Rows (``--rows``, default all that differ from the seed): ``seed``; ``demos`` (the compiled program's demos without
its decision rule, when they differ from the seed's); ``compiled`` (the program as compiled). Each row is judged end to end on the dialogues of ``--part``
(turn accuracy, P/R/F1 of the hallucinated class, LM calls and seconds per judged turn) and on their human claims
(claim decision accuracy -- safe/unsafe as the annotators --, five-way macro-F1, predicted shares beside the
annotators'), with exact McNemar tests against the seed on the same turns and the same claims. Runs are resumable
(under --out) and answers cached, so a rerun only prints; seconds are those of the session that judged.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

from vista_dspy import Vista
from vista_dspy.data import PARTS, data_dir, load_dialogues, part_of
from vista_dspy.lm.clients.cache import use_cache_for
from vista_dspy.lm.server import LOCAL_SHORT_ANSWER_TOKENS, LocalServer, embedded_settings, local_model_config
from vista_dspy.lm.weights import EMBEDDED
from vista_dspy.optimize.demos import claim_scores, safe
from vista_dspy.optimize.gate import PairedTest
from vista_dspy.run.runner import Threads, evaluate

DEFAULT_DATA = data_dir(Path(__file__).resolve().parents[1]) / "vista_human_eval" / "dev.json"
ROWS = ("seed", "demos", "compiled")


def variants(program_path: Path, wanted: list[str]) -> dict[str, Vista]:
    """The judges of the table's rows, built from the compiled program."""
    compiled = Vista.from_program(program_path)
    found: dict[str, Vista] = {"seed": Vista.from_program(None)}
    if compiled.rule is not None and compiled.dump_state() != found["seed"].dump_state():
        found["demos"] = compiled.deepcopy()
        found["demos"].rule = None
        found["demos"].program_name = f"{compiled.program_name} without its rule"
    found["compiled"] = compiled
    return {name: judge for name, judge in found.items() if name in wanted}


def run(judge: Vista, dialogues, config, out: Path, given: bool) -> tuple[list, float | None]:
    started = time.perf_counter()
    result = evaluate(dialogues, judge.with_options(given_claims=given, short_answer_tokens=LOCAL_SHORT_ANSWER_TOKENS),
                      Threads(config.build(), config.build_adapter()), out_dir=out)
    seconds = time.perf_counter() - started
    return result.verdicts, (seconds if result.resumed == 0 else None)


def turn_items(verdicts) -> dict:
    return {(v.dialogue_id, t.turn_index): t for v in verdicts for t in v.turns if t.gold_label is not None}


def claim_items(verdicts) -> dict:
    return {(v.dialogue_id, t.turn_index, i): c for v in verdicts for t in v.turns for i, c in enumerate(t.claims)
            if c.gold_category is not None}


def row(name: str, turns_run, claims_run, seed_runs) -> dict:
    from vista_dspy.scoring import turn_metrics

    turns, claims = turn_items(turns_run[0]), claim_items(claims_run[0])
    keys = sorted(turns)
    metrics = turn_metrics([turns[k].label for k in keys], [turns[k].gold_label for k in keys])
    judged = len(keys)
    calls = sum(v.usage.total.calls for v in turns_run[0])
    decided = [claims[k].category.value for k in sorted(claims)]
    gold = [claims[k].gold_category.value for k in sorted(claims)]
    scores = claim_scores(decided, gold)
    result = {"row": name, "turns": judged, "turn accuracy": metrics["accuracy"],
              "P halluc": metrics["precision_hallucinated"], "R halluc": metrics["recall_hallucinated"],
              "F1 halluc": metrics["f1_hallucinated"], "claims": len(gold),
              "claim decision acc": scores["decision_accuracy"], "category macro-F1": scores["macro_f1"],
              "shares": scores["shares"], "gold shares": scores["gold_shares"],
              "LM calls / turn": calls / judged if judged else None,
              "s / turn": turns_run[1] / judged if turns_run[1] and judged else None}
    if seed_runs is not None:
        seed_turns, seed_claims = turn_items(seed_runs[0][0]), claim_items(seed_runs[1][0])
        result["turns vs seed"] = PairedTest.of([turns[k].label == turns[k].gold_label for k in keys],
                                                [seed_turns[k].label == seed_turns[k].gold_label for k in keys])
        ck = sorted(claims)
        result["claims vs seed"] = PairedTest.of(
            [safe(claims[k].category.value) == safe(claims[k].gold_category.value) for k in ck],
            [safe(seed_claims[k].category.value) == safe(seed_claims[k].gold_category.value) for k in ck])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(EMBEDDED), default="local")
    parser.add_argument("--program", type=Path, required=True, help="the compiled program file (its meta beside it)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
    parser.add_argument("--part", choices=PARTS, default="dev", help="the dialogues judged (default: dev, held out)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--port", type=int, default=8799)
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/runs/table-<model>-<program>")
    args = parser.parse_args()

    dialogues = part_of(load_dialogues(args.data), args.part)
    wanted = [r.strip() for r in args.rows.split(",") if r.strip()]
    judges = variants(args.program, sorted(set(wanted) | {"seed"}))
    settings = embedded_settings(args.model, port=args.port)
    config = local_model_config(settings)
    use_cache_for(config)
    out = args.out or Path(__file__).parent / "runs" / f"table-{args.model}-{args.program.stem}"
    print(f"{args.model} ({settings.gguf.name}), program {args.program}, part {args.part}: {len(dialogues)} "
          f"dialogues, {sum(len(d.judged_turns) for d in dialogues)} judged turns; rows {', '.join(judges)}",
          flush=True)
    runs = {}
    with LocalServer(settings):
        for name, judge in judges.items():
            runs[name] = (run(judge, dialogues, config, out / name / "end-to-end", given=False),
                          run(judge, dialogues, config, out / name / "given", given=True))
            print(f"  {name}: judged", flush=True)
    rows = [row(name, *runs[name], None if name == "seed" else runs["seed"]) for name in judges if name in wanted]
    print_table(rows, args, settings)
    (out / "table.json").write_text(json.dumps(
        [{k: (v.model_dump() if isinstance(v, PairedTest) else v) for k, v in r.items()} for r in rows], indent=2))
    return 0


def print_table(rows, args, settings) -> None:
    print(f"\n### {args.program.stem} on {args.model}, {date.today()} — `python benchmarks/compiled_table.py "
          f"--model {args.model} --program {args.program} --rows {args.rows} --part {args.part}`")
    print(f"Machine: {platform.machine()}, Python {platform.python_version()}; model {settings.gguf.name}.\n")
    columns = ["row", "turn accuracy", "P halluc", "R halluc", "F1 halluc", "claim decision acc",
               "category macro-F1", "LM calls / turn", "s / turn", "turns vs seed", "claims vs seed"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        print("| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |")
    print()
    labels = list(rows[0]["gold shares"]) if rows else []
    print("| predicted share of human claims | " + " | ".join(labels) + " |")
    print("|" + "---|" * (len(labels) + 1))
    if rows:
        print("| annotators | " + " | ".join(f"{rows[0]['gold shares'][k]:.3f}" for k in labels) + " |")
    for r in rows:
        print(f"| {r['row']} | " + " | ".join(f"{r['shares'][k]:.3f}" for k in labels) + " |")


def _fmt(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, PairedTest):
        return f"+{value.candidate_only}/−{value.base_only}, p = {value.pvalue:.3f}"
    if isinstance(value, float):
        return f"{value:.3f}" if value <= 1 else f"{value:.1f}"
    return str(value)


if __name__ == "__main__":
    sys.exit(main())

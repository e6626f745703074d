"""Speed of the embedded judge, lever by lever, side by side on the same annotated dev turns.

    python benchmarks/local_speed.py [--turns 12] [--rows baseline,parallel,...] [--out DIR] [--redo ROW]

Every row starts its own server (a fresh prompt cache) with the row's settings and judges the same dialogues (the
first N judged turns of the dev file, whole dialogues) end to end with the row's client settings, LM cache off.
For each row it prints seconds per judged turn, judged turns per hour and the speed-up over the first row, LM calls
and prompt / completion tokens per turn, completion tokens per stage, the server's peak RSS, turn accuracy, claim-set
F1 of the decomposed claims against the human claims, and the exact McNemar p of the turn labels against the first
row (same turns). A row of two runs at once (`shared-*`) starts two servers and two evaluations on the same cores and
reports each run's seconds per turn beside the same settings alone.

Rows are kept under --out (row.json + each run's verdicts): a rerun prints the finished rows and runs only the
missing ones, so a long measurement resumes where it stopped; --redo ROW runs a row again. Nothing is written to
RESULTS.md by the script: copy the printed table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import re
import shutil
import sys
import threading
import time
from datetime import date
from pathlib import Path

import dspy
from local_model import DEFAULT_DATA, first_judged_turns

from vista_dspy import Vista
from vista_dspy.data import load_dialogues
from vista_dspy.lm.clients.cache import use_cache_for
from vista_dspy.lm.server import LOCAL_SHORT_ANSWER_TOKENS, LocalServer, ServerSettings, local_model_config
from vista_dspy.lm.weights import GGUFS, resolve_gguf
from vista_dspy.optimize.metrics import decomposition_agreement, mcnemar_exact
from vista_dspy.run.runner import VERDICTS, evaluate, local_backend, read_verdicts
from vista_dspy.scoring import summarize


@dataclasses.dataclass(frozen=True)
class Row:
    """One configuration: server settings (ServerSettings fields) and client settings (runner / program)."""

    about: str
    server: dict = dataclasses.field(default_factory=dict)
    threads: int = 1  # dialogues at a time (threads), or with concurrency: asyncio dialogues at a time
    concurrency: int | None = None  # requests in flight (asyncio runner)
    program: dict = dataclasses.field(default_factory=dict)  # Vista options
    runs: int = 1  # 2 = two evaluations at once, each with its own server (sharing the cores)
    # Server settings of the second run that differ from the first's.
    second: dict = dataclasses.field(default_factory=dict)
    given: bool = False  # judge the human claims (claim accuracy) instead of end to end


# The rows change one thing at a time against the default before this round (poll 50, BEFORE).
BEFORE = {"poll": 50}
ROWS: dict[str, Row] = {
    "baseline": Row("the default before this round: per-claim, one dialogue at a time, 4 slots, 2 threads, poll 50",
                    BEFORE),
    "poll0": Row("baseline, worker threads sleep between steps (poll 0; the default since this round)", {"poll": 0}),
    "dialogues-2": Row("two dialogues at a time (threads: claims of a turn back to back), 8 slots",
                       {**BEFORE, "slots": 8}, threads=2),
    "dialogues-3": Row("three dialogues at a time (threads), 12 slots", {**BEFORE, "slots": 12}, threads=3),
    "dialogues-3-unified": Row("three dialogues at a time, 12 slots sharing one 48k-token KV cache",
                               {**BEFORE, "slots": 12, "kv_unified": True, "ctx_per_slot": 4096}, threads=3),
    "parallel": Row("4 requests in flight (8 dialogues at a time, the claims of a turn at once), 8 slots",
                    {**BEFORE, "slots": 8}, threads=8, concurrency=4),
    "parallel-spec": Row("parallel + n-gram speculation (ngram-simple)",
                         {**BEFORE, "slots": 8, "speculative": "ngram-simple"}, threads=8, concurrency=4),
    "terse-verify": Row("baseline, Verify answers with its label alone (--no-explain-verified)", BEFORE,
                        program={"explain_verified": False}),
    "given": Row("baseline on the human claims (claim accuracy)", BEFORE, given=True),
    "given-terse-verify": Row("terse-verify on the human claims", BEFORE, program={"explain_verified": False},
                              given=True),
    "spec": Row("baseline + n-gram speculation (ngram-simple, up to 16 drafted tokens)",
                {**BEFORE, "speculative": "ngram-simple"}),
    "spec-4": Row("baseline + n-gram speculation (ngram-simple, up to 4 drafted tokens)",
                  {**BEFORE, "speculative": "ngram-simple", "draft_max": 4}),
    "draft-4": Row("baseline + draft model Qwen2.5-Coder-0.5B (up to 4 drafted tokens)",
                   {**BEFORE, "speculative": "draft", "draft_max": 4}),
    # Threads are pinned where a row says how many: with threads 0 a server that starts beside another would take a
    # share of the cores (local.auto_threads), which these rows measure against.
    "shared-default": Row("two runs at once on the 2 cores, each as the baseline (2 threads, poll 50)",
                          {**BEFORE, "threads": 2}, runs=2),
    "shared-poll0": Row("two runs at once, each with 2 threads and poll 0", {"poll": 0, "threads": 2}, runs=2),
    "1thread": Row("one server thread, poll 0, alone on the 2 cores", {"poll": 0, "threads": 1}),
    "shared-1thread": Row("two runs at once, each with 1 thread and poll 0", {"poll": 0, "threads": 1}, runs=2),
    "shared-2-1": Row("two runs at once, poll 0: the first server with 2 threads, the second with 1 (a server that "
                      "starts beside another)", {"poll": 0, "threads": 2}, runs=2, second={"threads": 1}),
}


def server_settings(row: Row, port: int) -> ServerSettings:
    server = dict(row.server)
    if server.get("speculative") == "draft":
        server["draft_gguf"] = resolve_gguf(spec=GGUFS["0.5b"], allow_download=False)
    return ServerSettings(gguf=resolve_gguf(None, allow_download=False), port=port, **server)


def peak_rss_gib(server: LocalServer) -> float | None:
    """Peak resident memory of the server process (Linux /proc VmHWM), in GiB."""
    try:
        for line in Path(f"/proc/{server.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 2**20
    except (OSError, AttributeError):
        pass
    return None


def judge_once(row: Row, dialogues, port: int, out_dir: Path) -> dict:
    """One evaluation with its own server; returns the measured figures and keeps the verdicts under out_dir."""
    settings = server_settings(row, port)
    config = local_model_config(settings, cache=False)
    program = Vista.from_program(None, short_answer_tokens=LOCAL_SHORT_ANSWER_TOKENS, **row.program)
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    with LocalServer(settings, log=out_dir / "server.log") as server:
        started = time.perf_counter()
        result = evaluate(dialogues, program.with_options(given_claims=row.given),
                          local_backend(config.build(), config.build_adapter(), threads=row.threads,
                                        concurrency=row.concurrency), out_dir=out_dir)
        seconds = time.perf_counter() - started
        rss = peak_rss_gib(server)
    return {"seconds": seconds, "peak_rss_gib": rss, **figures(dialogues, result.verdicts),
            **server_time(out_dir / "server.log", result.summary["judged_turns"])}


TIMING = re.compile(r"\| (prompt eval|       eval) time = +([\d.]+) ms / +(\d+) tokens")


def server_time(log: Path, turns: int) -> dict:
    """Where the server spent its time, from llama.cpp's per-request timing lines: prompt tokens it had to process
    (not served from a slot's cache) and tokens it generated, with the milliseconds each took, per judged turn.
    Requests decoded together overlap in time, so the seconds can add up to more than the wall time."""
    totals = {"prompt eval": [0.0, 0], "       eval": [0.0, 0]}
    for kind, ms, tokens in TIMING.findall(log.read_text(errors="replace") if log.exists() else ""):
        totals[kind][0] += float(ms)
        totals[kind][1] += int(tokens)
    (prompt_ms, prompt_n), (eval_ms, eval_n) = totals["prompt eval"], totals["       eval"]
    return {"uncached_prompt_tokens_per_turn": prompt_n / turns, "prompt_seconds_per_turn": prompt_ms / 1000 / turns,
            "generated_tokens_per_turn": eval_n / turns, "generate_seconds_per_turn": eval_ms / 1000 / turns}


def figures(dialogues, verdicts) -> dict:
    summary = summarize(verdicts)
    turns = summary["judged_turns"]
    usage = summary["usage"]
    return {
        "judged_turns": turns,
        "claims": summary["claims"],
        "calls_per_turn": usage["total"]["calls"] / turns,
        "prompt_tokens_per_turn": usage["total"]["prompt_tokens"] / turns,
        "completion_tokens_per_turn": usage["total"]["completion_tokens"] / turns,
        "completion_tokens_by_stage": {stage: counts["completion_tokens"] / turns
                                       for stage, counts in usage["by_stage"].items()},
        "errors": summary["errors"]["claims"] + summary["errors"]["turns_failed"],
        "turn_accuracy": summary.get("turn_metrics", {}).get("accuracy"),
        "claim_accuracy": (summary.get("claim_metrics") or {}).get("accuracy"),
        "claim_set_f1": decomposition_agreement(dialogues, verdicts).f1,
    }


def run_row(name: str, row: Row, dialogues, out: Path, port: int) -> dict:
    row_dir = out / name
    if row.runs == 1:
        result = judge_once(row, dialogues, port, row_dir / "run-1")
        return {"row": name, "about": row.about, **result, "runs": [result["seconds"]]}
    results: list[dict | None] = [None] * row.runs

    def one(i: int) -> None:
        settings = dataclasses.replace(row, server={**row.server, **row.second}) if i else row
        results[i] = judge_once(settings, dialogues, port + i, row_dir / f"run-{i + 1}")

    workers = [threading.Thread(target=one, args=(i,)) for i in range(row.runs)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    first = results[0]
    return {"row": name, "about": row.about, **first, "runs": [r["seconds"] for r in results]}


def labels(out: Path, name: str) -> dict:
    """{item: (gold, predicted)}: turn labels end to end; claim categories when the row judged the human claims."""
    verdicts = read_verdicts(out / name / "run-1" / VERDICTS)
    if ROWS[name].given:
        return {(v.dialogue_id, t.turn_index, i): (c.gold_category, c.category)
                for v in verdicts for t in v.turns for i, c in enumerate(t.claims)}
    return {(v.dialogue_id, t.turn_index): (t.gold_label, t.label) for v in verdicts for t in v.turns}


def mcnemar_against(out: Path, names: list[str], name: str) -> float | None:
    """Exact McNemar p against the first row of the same kind (end to end: turn labels; given claims: claims)."""
    first = next(n for n in names if ROWS[n].given == ROWS[name].given)
    if name == first:
        return None
    mine, theirs = labels(out, name), labels(out, first)
    both = sorted(set(mine) & set(theirs), key=str)
    if not both:
        return None
    return mcnemar_exact([mine[k][0] for k in both], [mine[k][1] for k in both],
                         [theirs[k][1] for k in both])["pvalue"]


def print_table(rows: list[dict], out: Path, turns: int) -> None:
    first = rows[0]
    per_turn = {r["row"]: r["seconds"] / r["judged_turns"] for r in rows}
    print(f"\n### Local speed, {date.today()} — `python benchmarks/local_speed.py --turns {turns} "
          f"--rows {','.join(r['row'] for r in rows)}`")
    print(f"Machine: {platform.machine()}, {platform.processor() or 'cpu'}, Python {platform.python_version()}, "
          f"dspy {dspy.__version__}; first {first['judged_turns']} judged turns of the dev file; LM cache off.\n")
    print("| row | s / turn | turns / h | speed-up | calls / turn | prompt tok / turn | completion tok / turn "
          "| uncached prompt tok / turn | server s / turn: prompt + generate | peak RSS GiB | turn acc | claim-set F1 "
          "| claim acc (given claims) | McNemar p vs first of its kind | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        seconds = per_turn[r["row"]]
        runs = r["runs"]
        shown = (f"{seconds:.1f}" if len(runs) == 1 else
                 " / ".join(f"{s / r['judged_turns']:.1f}" for s in runs))
        p = mcnemar_against(out, [x["row"] for x in rows], r["row"])
        print(f"| {r['row']} | {shown} | {3600 / seconds:.0f} | {per_turn[first['row']] / seconds:.2f} "
              f"| {r['calls_per_turn']:.1f} | {r['prompt_tokens_per_turn']:.0f} "
              f"| {r['completion_tokens_per_turn']:.0f} | {r['uncached_prompt_tokens_per_turn']:.0f} "
              f"| {r['prompt_seconds_per_turn']:.1f} + {r['generate_seconds_per_turn']:.1f} "
              f"| {_num(r['peak_rss_gib'])} | {_num(r['turn_accuracy'])} | {_num(r['claim_set_f1'])} "
              f"| {_num(r.get('claim_accuracy'))} "
              f"| {'—' if p is None else f'{p:.2f}'} | {r['errors']} |")
    print()
    for r in rows:
        stages = ", ".join(f"{k} {v:.0f}" for k, v in r["completion_tokens_by_stage"].items())
        print(f"- {r['row']}: {r['about']}. Completion tokens per turn by stage: {stages}. Server tokens/s, prompt / "
              f"generated: {'; '.join(throughput(log) for log in sorted((out / r['row']).glob('run-*/server.log')))}.")


def throughput(log: Path) -> str:
    """A run's prompt and generation speed from its server's timing lines (tokens per second)."""
    times = server_time(log, 1)
    return (f"{log.parent.name} {times['uncached_prompt_tokens_per_turn'] / times['prompt_seconds_per_turn']:.1f} / "
            f"{times['generated_tokens_per_turn'] / times['generate_seconds_per_turn']:.1f}")


def _num(value) -> str:
    return "—" if value is None else f"{value:.3f}" if value < 1 else f"{value:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=12, help="judged turns to cover (whole dialogues)")
    parser.add_argument("--rows", default="baseline,parallel", help=f"comma-separated, first = reference: "
                                                                    f"{', '.join(ROWS)}")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--port", type=int, default=8811, help="first server port (a shared row uses two)")
    parser.add_argument("--out", type=Path, default=None, help="default benchmarks/runs/local-speed-<turns>")
    parser.add_argument("--redo", default="", help="comma-separated rows to run again even if finished")
    args = parser.parse_args()
    names = [n.strip() for n in args.rows.split(",") if n.strip()]
    unknown = [n for n in names if n not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; known: {', '.join(ROWS)}")
    out = args.out or Path(__file__).parent / "runs" / f"local-speed-{args.turns}"
    out.mkdir(parents=True, exist_ok=True)
    dialogues = first_judged_turns(load_dialogues(args.data), args.turns)
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    use_cache_for(local_model_config(ServerSettings(gguf=resolve_gguf(None)), cache=False))
    redo = {n.strip() for n in args.redo.split(",") if n.strip()}
    rows = []
    for name in names:
        saved = out / name / "row.json"
        if saved.exists() and name not in redo:
            rows.append(json.loads(saved.read_text()))
            print(f"{name}: finished earlier ({rows[-1]['seconds']:.0f} s)", flush=True)
            continue
        print(f"{name}: {ROWS[name].about} ...", flush=True)
        rows.append(run_row(name, ROWS[name], dialogues, out, args.port))
        saved.write_text(json.dumps(rows[-1], indent=2) + "\n")
        print(f"{name}: {rows[-1]['seconds']:.0f} s, {rows[-1]['seconds'] / rows[-1]['judged_turns']:.1f} s / turn",
              flush=True)
    print_table(rows, out, args.turns)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Throughput and cost of the judging modes, side by side in one run.

Part 1 (always): against a fake OpenAI-compatible server (stdlib, rule-based answers, fixed latency per request)
on the dev file's dialogues:
  (a) the reference call pattern: sequential, one call per claim and stage (per-claim, 1 thread, no concurrency)
  (b) per-claim judging with the claims of a turn and the dialogues in parallel (--concurrency)
  (c) batched judging (one Verify and one Categorize call per turn), same concurrency
  (d) joint judging (one call per turn for both), same concurrency
  (e) batched judging with one Decompose call per dialogue instead of one per assistant turn, same concurrency
For each: LM calls and prompt tokens per judged turn, wall time, speed-up over (a), the ratio to the ideal
bound max(longest chain of dependent calls, calls / concurrency) x latency, and this process's CPU per call.

Part 2 (--local N): the embedded local model judges the human claims of the first N judged dev turns per-claim,
batched and joint: seconds and calls per turn, claim accuracy and macro-F1 against the annotators.

    python benchmarks/throughput.py                       # part 1 (about 2 minutes)
    python benchmarks/throughput.py --local 10 --skip-fake  # part 2 only (about 15 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import time
from pathlib import Path

import dspy
from local_model import first_judged_turns  # (benchmarks/, the script's own folder)

from vista_dspy.data import data_dir, load_dialogues
from vista_dspy.experiments.bench import ABLATIONS
from vista_dspy.lm.models import ModelConfig
from vista_dspy.lm.offline import offline_litellm
from vista_dspy.program import Vista
from vista_dspy.run.runner import Threads, dialogues_for, evaluate, local_backend

offline_litellm()
ROOT = Path(__file__).resolve().parents[1]

# Judging modes: per-claim judging with per-turn Decompose (the paper's method) and `vista benchmark`'s mode ablations.
MODES = {"per-claim": {"claim_calls": "per-claim", "decompose_calls": "per-turn"},
         **{mode: ABLATIONS[mode] for mode in ("batched", "joint", "batched-dialogue")}}
DEV = data_dir(ROOT) / "vista_human_eval" / "dev.json"


def chain_length(dialogue, verdict, joint: bool) -> int:
    """Rounds of dependent calls: one round of Decompose calls (they read only the dialogue's text), then the
    judged turns in order (each reads the store the turns before it built), each Verify -> (Categorize), or one
    joint call (whose categorized claims also carry stage "categorize")."""
    rounds = 1 if any(turn.role == "assistant" for turn in dialogue.turns) else 0
    for judged in verdict.turns:
        claims = judged.claims
        rounds += (1 if claims else 0) + (1 if any(c.stage == "categorize" for c in claims) and not joint else 0)
    return rounds


@contextlib.contextmanager
def fake_server(latency: float):
    """The tests' fake server in a process of its own, so that its work does not share the client's GIL."""
    process = subprocess.Popen([sys.executable, "-m", "vista_dspy.lm.fake.server", "--latency", str(latency)],
                               stdout=subprocess.PIPE, text=True)
    try:
        yield process.stdout.readline().strip()
    finally:
        process.terminate()
        process.wait()


def fake_part(dialogues, latency: float, concurrency: int) -> None:
    rows = []
    with fake_server(latency) as url:
        # hosted_vllm/: DSPy's native HTTP client, the recommended spelling for a self-hosted server; one row
        # shows the same run through litellm's client (openai/ + api_base) for comparison.
        native = ModelConfig(model="hosted_vllm/fake", api_base=url, num_retries=0, cache=False)
        litellm = ModelConfig(model="openai/fake", api_base=url, num_retries=0, cache=False)
        at_once = dialogues_for(concurrency)  # as `vista evaluate --concurrency N` runs
        runs = [("(a) reference pattern", "per-claim", None, 1, native),
                ("(b) per-claim, concurrent", "per-claim", concurrency, at_once, native),
                ("(b') same, litellm client", "per-claim", concurrency, at_once, litellm),
                ("(c) batched, concurrent", "batched", concurrency, at_once, native),
                ("(d) joint, concurrent", "joint", concurrency, at_once, native),
                ("(e) batched + per-dialogue", "batched-dialogue", concurrency, at_once, native)]
        for name, mode, limit, at_once, config in runs:
            program = Vista.from_program(None, **MODES[mode])
            started, cpu = time.perf_counter(), time.process_time()
            result = evaluate(dialogues, program, local_backend(config.build(), threads=at_once, concurrency=limit))
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            summary = result.summary
            calls = summary["usage"]["total"]["calls"]
            turns = summary["judged_turns"]
            joint = program.options.claim_calls == "joint"
            chain = max(chain_length(d, v, joint) for d, v in zip(dialogues, result.verdicts))
            ideal = max(chain, calls / (limit or 1)) * latency
            rows.append((name, calls, calls / turns, summary["usage"]["total"]["prompt_tokens"] / turns, seconds,
                         ideal, turns, chain, 1000 * cpu / calls))
            assert not summary["errors"]["claims"] and not summary["errors"]["dialogue_errors"], summary["errors"]
    base_calls, base_seconds = rows[0][1], rows[0][4]
    print(f"\nfake server, {latency * 1000:.0f} ms per request, {len(dialogues)} dialogues, {rows[0][6]} judged turns,"
          f" concurrency {concurrency} ({dialogues_for(concurrency)} dialogues at a time)")
    print(f"{'run':<28}{'calls':>7}{'calls/turn':>12}{'x ref calls':>12}{'prompt tok/turn':>17}{'chain':>7}"
          f"{'ideal s':>9}{'wall s':>9}{'speed-up':>10}{'x ideal':>9}{'client CPU ms/call':>20}")
    for name, calls, per_turn, tokens, seconds, ideal, _, chain, cpu in rows:
        print(f"{name:<28}{calls:>7}{per_turn:>12.2f}{calls / base_calls:>12.2f}{tokens:>17.0f}{chain:>7}"
              f"{ideal:>9.2f}{seconds:>9.2f}{base_seconds / seconds:>10.1f}{seconds / ideal:>9.2f}{cpu:>20.1f}")


def local_part(dialogues, turns: int) -> None:
    from vista_dspy.lm.server import LOCAL_SHORT_ANSWER_TOKENS, LocalServer, ServerSettings, local_model_config
    from vista_dspy.lm.weights import resolve_gguf

    chosen = first_judged_turns(dialogues, turns)
    settings = ServerSettings(gguf=resolve_gguf(None))
    config = local_model_config(settings, cache=False)
    rows = []
    with LocalServer(settings):
        for mode in ("per-claim", "batched", "joint"):
            program = Vista.from_program(None, claim_calls=mode, short_answer_tokens=LOCAL_SHORT_ANSWER_TOKENS)
            started = time.perf_counter()
            result = evaluate(chosen, program.with_options(given_claims=True),
                              Threads(config.build(), dspy.JSONAdapter()))
            seconds = time.perf_counter() - started
            summary = result.summary
            judged = summary["judged_turns"]
            claim = summary["claim_metrics"]
            turn = summary["turn_metrics"]
            rows.append((mode, seconds / judged, summary["usage"]["total"]["calls"] / judged, claim["accuracy"],
                         claim["macro_f1"], claim["errors"], turn["accuracy"], judged, claim["claims"]))
            print(f"  {mode}: {seconds:.0f} s", flush=True)
    print(f"\nlocal model (Qwen2.5-Coder-1.5B Q4_K_M), human claims of {rows[0][7]} judged dev turns "
          f"({rows[0][8]} claims)")
    print(f"{'mode':<12}{'s/turn':>8}{'calls/turn':>12}{'claim acc':>11}{'macro-F1':>10}{'errors':>8}{'turn acc':>10}")
    for mode, per_turn, calls, accuracy, macro, errors, turn_accuracy, _, _ in rows:
        print(f"{mode:<12}{per_turn:>8.1f}{calls:>12.2f}{accuracy:>11.3f}{macro:>10.3f}{errors:>8}"
              f"{turn_accuracy:>10.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--latency", type=float, default=0.1, help="seconds per fake request (default 0.1)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--dialogues", type=int, default=70, help="dev dialogues for part 1 (default: all 70)")
    parser.add_argument("--local", type=int, default=0, metavar="N", help="part 2 on the first N judged turns")
    parser.add_argument("--skip-fake", action="store_true", help="skip part 1")
    args = parser.parse_args()
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    dialogues = load_dialogues(DEV)
    if not args.skip_fake:
        fake_part(dialogues[: args.dialogues], args.latency, args.concurrency)
    if args.local:
        local_part(dialogues, args.local)


if __name__ == "__main__":
    main()

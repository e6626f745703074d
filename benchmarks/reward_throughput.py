"""Throughput of ``VistaReward`` on a GRPO-shaped batch: 8 prompts x 8 completions.

The prompts are assistant turns of the annotated dev file that have earlier assistant turns (so each prompt has a
history to decompose: its common ground); the completions of each are eight kinds a policy produces (the annotated
answer, refusals, an opinion, the answer with an invented sentence, ...). Every row judges the same batch with a new
reward and no LM cache, so each pays its own calls.

Default: against the tests' fake OpenAI-compatible server (in a process of its own, a fixed latency per request):
rewards per second at concurrency 1 and 16, LM calls per completion with and without the shared prompt work, and
the evidence tier. ``--embedded``: the same batch judged by the embedded local model (seconds per completion; it
needs the model file and, to be meaningful, cores no one else is using).

    python benchmarks/reward_throughput.py                       # fake server (about a minute)
    python benchmarks/reward_throughput.py --embedded --concurrency 2   # embedded model (long)
    python benchmarks/reward_throughput.py --no-lm --generations 64     # the tier with no LM (seconds)
    python benchmarks/reward_throughput.py --no-lm --generations 64 --against DIR   # ... beside another checkout

``--no-lm``: the tier that calls no LM (``system="evidence", units="sentences"``: the turn's sentences decided by the
program's evidence cues; no model is started), rewards per second on this process's one thread, over ``--rounds``
batches of new completions (a trainer's steps): the first round apart, the median of the others; wall time and the
process's CPU time (the CPU rate is what the tier costs when other work shares the cores).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import dspy
from throughput import fake_server  # (benchmarks/, the script's own folder)

from vista_dspy import VistaReward
from vista_dspy.data import data_dir, load_dialogues
from vista_dspy.lm.models import ModelConfig
from vista_dspy.lm.offline import offline_litellm

offline_litellm()
ROOT = Path(__file__).resolve().parents[1]
DEV = data_dir(ROOT) / "vista_human_eval" / "dev.json"
INVENTED = " It was founded in 1850 by a Dutch sea captain named Willem Gorter."


def batch(data: Path, prompts: int, generations: int) -> dict:
    """GRPOTrainer's reward call for ``prompts`` dev turns (with history) x ``generations`` completions."""
    rows = []
    for dialogue in load_dialogues(data):
        for index in dialogue.judged_turns:
            turn = dialogue.turns[index]
            earlier = [t for t in dialogue.turns[:index] if t.role == "assistant"]
            if turn.grounding.document and earlier and len(rows) < prompts:
                rows.append((dialogue.turns[:index], turn))
    if len(rows) < prompts:
        raise SystemExit(f"{data}: only {len(rows)} turns with a document and a history, {prompts} wanted")
    prompt_list, completions, documents = [], [], []
    for history, turn in rows:
        answer = turn.text
        first = answer.split(". ")[0].rstrip(".") + "."
        kinds = [answer, "I'm sorry, I don't know.", "I think that is a lovely topic!", answer + INVENTED, first,
                 answer + " I hope this helps!", "I am not sure about that, sorry.", first + INVENTED]
        for text in (kinds * (generations // len(kinds) + 1))[:generations]:
            prompt_list.append([{"role": t.role, "content": t.text} for t in history])
            completions.append([{"role": "assistant", "content": text}])
            documents.append(turn.grounding.document)
    return {"prompts": prompt_list, "completions": completions, "document": documents,
            "completion_ids": [[0]] * len(completions), "trainer_state": None}


def measure(judge, call: dict, **settings) -> dict:
    with VistaReward(judge, **settings) as reward:
        started = time.perf_counter()
        rewards = reward(**call)
        seconds = time.perf_counter() - started
    stats = reward.stats
    calls = stats.prompt_calls + stats.completion_calls
    return {"seconds": seconds, "completions": len(rewards), "unjudged": sum(r is None for r in rewards),
            "calls": calls, "per_completion": calls / len(rewards), "saved": stats.calls_saved,
            "prompt_calls": stats.prompt_calls, "rewards": rewards}


def fake_part(call: dict, latency: float, concurrencies: list[int]) -> None:
    rows = []
    with fake_server(latency) as url:
        def judge():
            return ModelConfig(model="hosted_vllm/fake", api_base=url, num_retries=0, cache=False).build()

        for system in ("vista", "evidence"):
            for concurrency in concurrencies:
                for share in (True, False):
                    if system == "evidence" and not share:
                        continue
                    result = measure(judge(), call, system=system, concurrency=concurrency, share_prompt_work=share)
                    rows.append((system, concurrency, share, result))
                    print(f"  {system} concurrency {concurrency} shared={share}: {result['seconds']:.1f} s",
                          flush=True)
    same = {share: r["rewards"] for system, c, share, r in rows if system == "vista" and c == concurrencies[-1]}
    print(f"\nfake server, {latency * 1000:.0f} ms a request; {len(call['completions'])} completions; rewards "
          f"{'identical' if same[True] == same[False] else 'DIFFERENT'} with and without the shared prompt work\n")
    print("| system | concurrency | prompt work | wall s | rewards / s | LM calls / completion | calls saved | "
          "not judged |")
    print("|---|---|---|---|---|---|---|---|")
    for system, concurrency, share, r in rows:
        print(f"| {system} | {concurrency} | {'once per prompt' if share else 'per completion'} | "
              f"{r['seconds']:.2f} | {r['completions'] / r['seconds']:.1f} | {r['per_completion']:.2f} | "
              f"{r['saved']} | {r['unjudged']} |")


def embedded_part(call: dict, concurrency: int, system: str) -> None:
    result = measure("local", call, system=system, concurrency=concurrency)
    n = result["completions"]
    print(f"\nembedded model, {system}, concurrency {concurrency}: {n} completions in {result['seconds']:.0f} s = "
          f"{result['seconds'] / n:.1f} s per completion; {result['per_completion']:.2f} LM calls per completion "
          f"({result['prompt_calls']} for the prompts' common ground, {result['saved']} saved); "
          f"{result['unjudged']} not judged")


def no_lm_part(call: dict, rounds: int) -> dict[str, float]:
    """``rounds`` batches of new completions through one reward, as a trainer's steps call it: the first pays for
    what a process does once (pysbd's patterns compiled, the rule read), the later ones are the steady rate."""
    n = len(call["completions"])
    rows = []
    with VistaReward("local", system="evidence", units="sentences") as reward:
        for r in range(rounds):
            # Every completion distinct, within and across rounds (the batch repeats each prompt's eight kinds: each
            # gets a sentence of its own), so none is judged from another's verdict or a cached split.
            batch = {**call, "completions": [[{"role": "assistant",
                                               "content": f"{c[0]['content']} It opened in {1500 + k + n * r}."}]
                                             for k, c in enumerate(call["completions"])]}
            wall, cpu = time.perf_counter(), time.process_time()
            rewards = reward(**batch)
            rows.append((time.perf_counter() - wall, time.process_time() - cpu, sum(x is None for x in rewards)))
            print(f"  round {r + 1}: {n} completions in {rows[-1][0]:.2f} s ({rows[-1][1]:.2f} s of CPU)", flush=True)
    later = rows[1:] or rows
    wall = statistics.median(row[0] for row in later)
    cpu = statistics.median(row[1] for row in later)
    print(f"\nno LM (evidence cues over the turn's sentences), {n} new completions a round, {rounds} rounds, one "
          f"thread: first round {n / rows[0][0]:.0f} rewards per second; later rounds (median) {n / wall:.0f} "
          f"rewards per second ({n / cpu:.0f} per second of this process's CPU); "
          f"{reward.stats.prompt_calls + reward.stats.completion_calls} LM calls; {sum(r[2] for r in rows)} not judged")
    return {"first": n / rows[0][0], "wall": n / wall, "cpu": n / cpu}


def against_part(argv: list[str], other: Path, pairs: int) -> None:
    """This checkout's no-LM tier and another's (``--against DIR``: a checkout of an earlier commit, e.g. from
    ``git archive COMMIT | tar -x -C DIR``) side by side: ``pairs`` pairs of processes, the order alternating, each
    judging the same rounds; the ratio of their steady rates, pair by pair (the machine's other load moves both)."""
    import json
    import subprocess

    rates: dict[str, list[dict[str, float]]] = {"this checkout": [], str(other): []}
    roots = {"this checkout": ROOT, str(other): other}
    for i in range(pairs):
        for name in (list(roots) if i % 2 else list(roots)[::-1]):
            done = subprocess.run([sys.executable, __file__, *argv, "--print-rates"], capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": str(roots[name])}, check=True)
            rates[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"  pair {i + 1}, {name}: {rates[name][-1]['wall']:.0f} rewards/s, {rates[name][-1]['cpu']:.0f} per "
                  "CPU second", flush=True)
    mine, theirs = rates["this checkout"], rates[str(other)]
    for key, what in (("wall", "rewards per second"), ("cpu", "rewards per CPU second")):
        ratios = [a[key] / b[key] for a, b in zip(mine, theirs)]
        print(f"{what}: this checkout {statistics.median(r[key] for r in mine):.0f}, {other} "
              f"{statistics.median(r[key] for r in theirs):.0f} (medians of {pairs}); ratio pair by pair "
              f"{', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per fake request (default 0.05)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=None,
                        help="fake server: the concurrencies to compare (default 1 16); --embedded: one (default 2)")
    parser.add_argument("--embedded", action="store_true", help="judge with the embedded local model instead")
    parser.add_argument("--system", choices=("vista", "evidence"), default="vista", help="--embedded: the tier")
    parser.add_argument("--no-lm", action="store_true", help="the tier with no LM instead")
    parser.add_argument("--rounds", type=int, default=5, help="--no-lm: batches of new completions (default 5)")
    parser.add_argument("--against", type=Path, default=None,
                        help="--no-lm: also run another checkout (DIR) side by side and print the ratio")
    parser.add_argument("--pairs", type=int, default=3, help="--against: pairs of runs (default 3)")
    parser.add_argument("--print-rates", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, default=DEV)
    args = parser.parse_args(argv)
    if args.against is not None:
        forwarded = ["--no-lm", "--rounds", str(args.rounds), "--prompts", str(args.prompts), "--generations",
                     str(args.generations), "--data", str(args.data)]
        against_part(forwarded, args.against.resolve(), args.pairs)
        return 0

    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)  # every row pays its own calls
    from vista_dspy.cli.common import without_call_history

    without_call_history()
    call = batch(args.data, args.prompts, args.generations)
    print(f"{args.prompts} prompts x {args.generations} completions from {args.data}; Python "
          f"{platform.python_version()}, dspy {dspy.__version__}, {os.cpu_count()} CPUs", flush=True)
    if args.no_lm:
        rates = no_lm_part(call, args.rounds)
        if args.print_rates:
            import json

            print(json.dumps(rates))
    elif args.embedded:
        embedded_part(call, (args.concurrency or [2])[0], args.system)
    else:
        fake_part(call, args.latency, args.concurrency or [1, 16])
    return 0


if __name__ == "__main__":
    sys.exit(main())

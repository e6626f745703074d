"""Local threads vs the Ray backend on one machine, against two fake OpenAI-compatible endpoints with latency.

Runs the same dev dialogues (a) in this process with 2 threads on one endpoint, (b) on Ray with 1 worker, and
(c) on Ray with 2 workers spread over the two endpoints; prints wall time, dialogues per second and the time Ray
adds per dialogue against the local run of the same width. Ray's own start (ray.init) is timed apart; worker
start-up (a fresh Python importing DSPy and litellm) is inside the Ray runs, as a user would see it.

    python benchmarks/scale_out.py [--dialogues 20] [--latency 0.2]

One 2-core machine can show Ray's overhead and that results are identical, not a speed-up: the workers and the
fake servers share the same two cores.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import dspy
from throughput import DEV, fake_server

from vista_dspy.data import load_dialogues
from vista_dspy.lm.models import ModelConfig
from vista_dspy.program import Vista
from vista_dspy.run.runner import Threads, evaluate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dialogues", type=int, default=20)
    parser.add_argument("--latency", type=float, default=0.2)
    args = parser.parse_args()
    import ray

    from vista_dspy.run.distributed import RayBackend

    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    dialogues = load_dialogues(DEV)[: args.dialogues]
    program = Vista.from_program(None, claim_calls="per-claim")  # as recorded in RESULTS.md
    rows = []
    with fake_server(args.latency) as first, fake_server(args.latency) as second:
        config = ModelConfig(model="openai/fake", api_base=first, num_retries=0, cache=False)
        started = time.perf_counter()
        local = evaluate(dialogues, program, Threads(config.build(), threads=2))
        rows.append(("local, 2 threads, 1 endpoint", time.perf_counter() - started, local))
        started = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        init = time.perf_counter() - started
        for workers, bases in ((1, [first]), (2, [first, second])):
            started = time.perf_counter()
            result = evaluate(dialogues, program, RayBackend(config, workers=workers, api_bases=bases))
            rows.append((f"ray, {workers} worker(s), {len(bases)} endpoint(s)", time.perf_counter() - started,
                         result))
        ray.shutdown()
    same = all([v.model_dump(exclude={"usage"}) for v in r.verdicts] ==
               [v.model_dump(exclude={"usage"}) for v in local.verdicts] for _, _, r in rows)
    turns = local.summary["judged_turns"]
    print(f"\n{len(dialogues)} dialogues ({turns} judged turns), {args.latency * 1000:.0f} ms per fake request; "
          f"ray.init {init:.1f} s (not included below); identical verdicts: {same}")
    print(f"{'run':<34}{'wall s':>8}{'dialogues/s':>13}{'s added per dialogue':>22}")
    for name, seconds, _ in rows:
        added = (seconds - rows[0][1]) / len(dialogues) if name != rows[0][0] else 0.0
        print(f"{name:<34}{seconds:>8.1f}{len(dialogues) / seconds:>13.2f}{added:>22.2f}")


if __name__ == "__main__":
    main()

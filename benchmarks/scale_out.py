"""Throughput against nodes: the Ray backend on a cluster of 1, 2, 4 ... worker nodes simulated on this machine
(``ray.cluster_utils.Cluster``: each node its own raylet and object store; the head holds the driver and no worker),
each node judging with a model server of its own (``NodeServers``): the fake OpenAI-compatible server with a fixed
latency per request and a few parallel slots (llama.cpp's), so that the servers, not the clients, are the bottleneck.

For each node count: dialogues per second (the steady rate, from the first quarter of the verdicts to the last:
worker start-up -- a fresh Python importing DSPy -- is left out, and the wall time with it is printed beside it; the
longest dialogues go first, so the later ones are shorter than the average), the ratio to one node, and the driver's
own CPU per verdict over the same stretch (what one driver can keep up with: 1 / that many verdicts per second,
whatever the nodes). The verdicts are checked against a local run.

    python benchmarks/scale_out.py [--nodes 1 2 4] [--dialogues 40] [--latency 0.2] [--slots 2] [--workers-per-node 4]
    python benchmarks/scale_out.py --embedded --nodes 2 --dialogues 4 --workers-per-node 2   # the embedded model

``--embedded``: a judge per node for real -- each node starts the embedded model's server for the run and stops it
after (the nodes of one machine share its cores, so this shows the mechanism and its cost, not a speed-up).

One machine simulates the nodes: the fake servers and the workers share its cores. The fake server's latency is a
sleep, so while the endpoints are the bottleneck the nodes add capacity until the cores run out.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import time

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import dspy
from throughput import DEV

from vista_dspy.data import load_dialogues
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig
from vista_dspy.program import Vista
from vista_dspy.run.runner import Threads, evaluate


def run_on(cluster, dialogues, program, config, workers: int, servers) -> dict:
    """One run on the cluster as it stands: verdicts, steady rate, wall time, driver CPU per verdict."""
    import ray

    from vista_dspy.run.distributed import RayBackend

    ray.init(address=cluster.address, log_to_driver=False)
    try:
        backend = RayBackend(config, workers=workers, node_servers=servers)
        arrivals: list[tuple[float, float]] = []  # (wall, driver CPU) as each verdict is recorded
        started = time.perf_counter()
        result = evaluate(dialogues, program, backend,
                          on_done=lambda v: arrivals.append((time.perf_counter(), time.process_time())))
        wall = time.perf_counter() - started
    finally:
        ray.shutdown()
    quarter = len(arrivals) // 4
    (t0, c0), (t1, c1) = arrivals[quarter], arrivals[-1]
    steady = len(arrivals) - 1 - quarter
    return {"result": result, "wall": wall, "steady": steady / (t1 - t0), "cpu_per_verdict": (c1 - c0) / steady,
            "per_node": sorted(backend.judged_on.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 2, 4], help="worker node counts, ascending")
    parser.add_argument("--dialogues", type=int, default=40)
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per fake request (default 0.2)")
    parser.add_argument("--slots", type=int, default=2, help="requests a node's server answers at once (default 2)")
    parser.add_argument("--workers-per-node", type=int, default=4)
    parser.add_argument("--embedded", action="store_true",
                        help="each node runs the embedded model instead of the fake server (needs the weights; "
                             "minutes a dialogue on a small machine: use few dialogues)")
    args = parser.parse_args()
    if args.dialogues < 4:
        parser.error("--dialogues: at least 4 (the steady rate is read from the first quarter of them to the last)")
    from ray.cluster_utils import Cluster

    from vista_dspy.run.distributed import NodeServers

    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    dialogues = load_dialogues(DEV)[: args.dialogues]
    if args.embedded:
        from vista_dspy.lm.models import program_for_model
        from vista_dspy.lm.server import (
            LOCAL_SHORT_ANSWER_TOKENS,
            LocalServerSpec,
            embedded_settings,
            local_model_config,
        )

        settings = embedded_settings()
        servers = NodeServers(LocalServerSpec(settings), port=settings.port)
        config = local_model_config(settings, cache=False)
        program = Vista.from_program(program_for_model(None), short_answer_tokens=LOCAL_SHORT_ANSWER_TOKENS)
        what = f"the embedded model ({settings.gguf.name}, `vista serve` on each node)"
        expected = None  # (a local run would take as long again; the servers' thread counts differ anyway)
        calls = None
    else:
        servers = NodeServers(functools.partial(FakeOpenAIServer, latency=args.latency, slots=args.slots))
        program = Vista.from_program(None, claim_calls="per-claim")
        config = ModelConfig(model="openai/fake", api_base="http://127.0.0.1:9/v1", num_retries=0, cache=False)
        with FakeOpenAIServer() as server:  # the reference: a local run (the fake answers the same at any latency)
            local = evaluate(dialogues, program, Threads(dataclass_replace(config, server.url).build(), threads=4))
        expected = [v.model_dump(exclude={"usage"}) for v in local.verdicts]
        calls = sum(v.usage.total.calls for v in local.verdicts)
        what = (f"one fake server, {args.latency * 1000:.0f} ms a request, {args.slots} slots (at most "
                f"{args.slots / args.latency:.0f} requests/s)")

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    rows = []
    try:
        for count in sorted(args.nodes):
            while len(cluster.worker_nodes) < count:
                cluster.add_node(num_cpus=1)
            cluster.wait_for_nodes()
            row = run_on(cluster, dialogues, program, config, args.workers_per_node * count, servers)
            row["same"] = ("not checked" if expected is None else
                           [v.model_dump(exclude={"usage"}) for v in row["result"].verdicts] == expected)
            rows.append((count, row))
            print(f"  {count} node(s): {row['steady']:.2f} dialogues/s steady, {row['wall']:.1f} s wall", flush=True)
    finally:
        cluster.shutdown()

    turns = sum(len(d.judged_turns) for d in dialogues)
    print(f"\n{len(dialogues)} dev dialogues ({turns} judged turns{f', {calls} LM calls' if calls else ''}); each "
          f"node: {what}, {args.workers_per_node} workers; {os.cpu_count()} CPUs on this machine\n")
    print(f"| worker nodes | dialogues / s (steady) | ratio to {rows[0][0]} node(s) | wall s (with worker start-up) "
          "| verdicts per node | driver CPU ms / verdict | identical verdicts |")
    print("|---|---|---|---|---|---|---|")
    base = rows[0][1]["steady"]
    for count, row in rows:
        print(f"| {count} | {row['steady']:.2f} | {row['steady'] / base:.2f}x | {row['wall']:.1f} | "
              f"{'/'.join(map(str, row['per_node']))} | {row['cpu_per_verdict'] * 1000:.1f} | {row['same']} |")
    cpu = statistics.median(row["cpu_per_verdict"] for _, row in rows)
    print(f"\nThe driver's ceiling: {1 / cpu:.0f} verdicts per second of its one core (median "
          f"{cpu * 1000:.1f} ms of driver CPU a verdict: receiving it, checking it, recording it).")


def dataclass_replace(config: ModelConfig, url: str) -> ModelConfig:
    import dataclasses

    return dataclasses.replace(config, api_base=url)


if __name__ == "__main__":
    main()

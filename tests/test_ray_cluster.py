"""A Ray cluster of several nodes simulated on this machine (``ray.cluster_utils.Cluster``: a head and two worker
nodes, each with its own raylet and object store) judging with the fake OpenAI-compatible server. A worker node lost
mid-run -- a replacement joining, then every worker node lost with none joining -- and `vista evaluate --backend ray
--address` still finishes by itself (exit 0) with every dialogue written once and the local run's verdicts; a model
server per node, started on each node that has workers (a worker node lost mid-run too), all stopped with the run."""

import functools
import json
import os
import subprocess
import sys
import threading
import time

import pytest
from helpers import museum_conversations

from vista_dspy.data import load_dialogues
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig
from vista_dspy.lm.server import port_in_use
from vista_dspy.program import Vista
from vista_dspy.run.runner import VERDICTS, Threads, evaluate, read_verdicts

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]')")
pytestmark = pytest.mark.ray

DIALOGUES = 30


@pytest.fixture(scope="module")
def cluster():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "dialogues.json"
    path.write_text(json.dumps(museum_conversations(DIALOGUES)))
    return path


def comparable(verdicts):
    return [v.model_dump(exclude={"usage"}) for v in verdicts]


def by_id(verdicts):
    return {v.dialogue_id: v.model_dump(exclude={"usage"}) for v in verdicts}


def local_verdicts(data):
    """The verdicts of a local run (the fake server answers the same on every port, at any latency)."""
    with FakeOpenAIServer() as server:
        config = ModelConfig(model="openai/fake", api_base=server.url, num_retries=0, cache=False)
        return evaluate(load_dialogues(data), Vista.from_program(None), Threads(config.build(), threads=4)).verdicts


def judge_actors(cluster, state=None):
    return [a for a in cluster.global_state.actor_table(None, actor_state_name=state).values()
            if a["ActorClassName"] == "JudgeActor"]


def lines(path):
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_for(condition, timeout=180.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)


def test_worker_nodes_lost_mid_run_and_the_run_finishes_with_every_dialogue_once(tmp_path, data, cluster):
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    out = tmp_path / "run"
    verdicts = out / VERDICTS
    expected = local_verdicts(data)
    lost = []  # (verdicts written when the node went, judging workers it held)
    with FakeOpenAIServer(latency=0.2) as first, FakeOpenAIServer(latency=0.2) as second:
        run = subprocess.Popen(
            [sys.executable, "-m", "vista_dspy.cli", "evaluate", str(data), "--model", "openai/fake", "--api-base",
             f"{first.url},{second.url}", "--backend", "ray", "--address", cluster.address, "--workers", "4",
             "--out", str(out), "--no-cache", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        output = {}
        reader = threading.Thread(target=lambda: output.update(zip(("out", "err"), run.communicate())))
        reader.start()

        def lose(node):
            on_it = [a for a in judge_actors(cluster, "ALIVE") if a["Address"]["NodeID"] == node.node_id]
            lost.append((lines(verdicts), len(on_it)))
            cluster.remove_node(node)

        # A worker node that holds judging workers goes after 9 verdicts and another joins; after 18 the two worker
        # nodes left go and none joins (the workers start again on the head).
        wait_for(lambda: lines(verdicts) >= 9 or run.poll() is not None)
        inode = verdicts.stat().st_ino
        alive = {a["Address"]["NodeID"] for a in judge_actors(cluster, "ALIVE")}
        lose(next(w for w in workers if w.node_id in alive))
        replacement = cluster.add_node(num_cpus=1)
        wait_for(lambda: lines(verdicts) >= 18 or run.poll() is not None)
        for node in [w for w in workers if w in cluster.worker_nodes] + [replacement]:
            lose(node)
        reader.join(timeout=300)
    assert run.returncode == 0, output.get("err")
    assert [count < DIALOGUES for count, _ in lost] == [True, True, True]  # every loss came mid-run
    assert lost[0][1] >= 1  # the first node lost held judging workers
    assert sum(a["NumRestarts"] for a in judge_actors(cluster)) >= 1  # ... which started again elsewhere
    written = read_verdicts(verdicts)
    assert verdicts.stat().st_ino == inode  # appended to, never rewritten to drop a second line
    assert len(verdicts.read_text().splitlines()) == len({v.dialogue_id for v in written}) == DIALOGUES
    assert by_id(written) == by_id(expected)
    assert json.loads((out / "summary.json").read_text())["judged_turns"] == 2 * DIALOGUES


def test_each_node_with_workers_judges_with_its_own_server_one_lost_mid_run_and_all_stopped(tmp_path, data, cluster):
    from vista_dspy.run.distributed import NodeServers, RayBackend

    for node in list(cluster.worker_nodes):
        cluster.remove_node(node)
    workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    done: list = []
    try:
        config = ModelConfig(model="openai/fake", api_base="http://127.0.0.1:9/v1", num_retries=0, cache=False)
        backend = RayBackend(config, workers=3, node_servers=NodeServers(functools.partial(FakeOpenAIServer,
                                                                                           latency=0.1)))
        run = threading.Thread(target=lambda: done.append(evaluate(
            load_dialogues(data), Vista.from_program(None), backend, out_dir=tmp_path / "run")))
        run.start()
        verdicts = tmp_path / "run" / VERDICTS
        wait_for(lambda: lines(verdicts) >= 6 or not run.is_alive())
        lost_at = lines(verdicts)
        cluster.remove_node(workers[0])  # the node, its worker and its server
        cluster.add_node(num_cpus=1)
        run.join(timeout=300)
    finally:
        ray.shutdown()
    [result] = done
    assert lost_at < DIALOGUES  # lost mid-run
    first = {n.node_id for n in [cluster.head_node, *workers]}
    assert first <= set(backend.servers)  # each node with a worker had its own server, the lost one too
    assert set(backend.judged_on) <= set(backend.servers)  # every verdict came from a node with its own server
    assert len(set(backend.servers.values())) == len(backend.servers)  # one machine: a port each
    assert not any(port_in_use(int(url.rsplit(":", 1)[1].split("/")[0])) for url in backend.servers.values())
    assert len(result.verdicts) == DIALOGUES
    assert comparable(result.verdicts) == comparable(local_verdicts(data))


def test_a_backend_with_no_address_starts_its_own_ray_beside_a_cluster_left_running(tmp_path, data, cluster):
    """A Ray cluster another process left running on this machine (the fixture's, not joined here) is not joined
    by a run that names no address: it starts an instance of its own with the CPUs it asks for and finishes."""
    from vista_dspy.run.distributed import RayBackend

    assert not ray.is_initialized()
    with FakeOpenAIServer() as server:
        config = ModelConfig(model="openai/fake", api_base=server.url, num_retries=0, cache=False)
        result = evaluate(load_dialogues(data), Vista.from_program(None), RayBackend(config, workers=1, num_cpus=1))
    assert not ray.is_initialized()  # the instance it started is gone with the run
    assert by_id(result.verdicts) == by_id(local_verdicts(data))

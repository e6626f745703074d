"""Running an evaluation on a Ray cluster (``pip install 'vista-dspy[ray]'``; ``--backend ray``).

Dialogues go to a pool of Ray actors, one per worker. Each actor builds its own judge and LM client in its own
process from the run's description: the model configuration (model string, endpoint, decoding; never a key:
keys are read from the worker's environment, e.g. through ``runtime_env={"env_vars": ...}``) and the judge's
spec (class and options; for VISTA its whole program -- demos, instructions, options, calibration -- as JSON, so an
unsaved program is judged remotely exactly as in memory). Nothing holding an LM or a secret crosses the cluster;
dialogues and verdicts travel as JSON. Several endpoints are spread over the workers round-robin.

With ``node_servers`` each node that has workers gets a model server of its own (the embedded model: ``LocalServer``
started on that node, or found running there), its workers judge with it, and the servers stop with the run
(``NodeServers``).

Verdicts stream back to the driver, which appends them to the same ``verdicts.jsonl`` as a local run (resume,
summary and reports are unchanged). Workers are spread over the nodes. An actor whose process or node dies is started
again on a node that is alive and Ray retries the call it was serving, so a killed worker or a lost worker node loses
nothing and the run goes on by itself; a verdict is recorded once per dialogue whatever the retries. Each worker
counts its endpoint's failures as a local run does (``stages.CallFailures``); the first worker to find it down stops
the run with ``EndpointDown``: verdicts already streamed back are kept, the dialogues in progress are dropped. The
head node and the driver are not replaced: losing either stops the run, and rerunning the command resumes it
(docs/scaling-out.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..lm.models import ModelConfig
from ..lm.server import LocalServerError
from ..schema import Dialogue, DialogueVerdict
from ..stages import CallFailures, EndpointDown, StagedModule

RAY_MISSING = "the Ray backend needs Ray: pip install 'vista-dspy[ray]' (or pip install 'ray==2.60.0')"


# The share of a CPU a worker asks Ray for: a worker mostly waits for its endpoint, so a hundred fit on a core; and
# Ray's SPREAD spreads only what asks for something (workers asking for nothing piled up on one node of three).
# A node started with no CPU (a head kept free of work, ``ray start --head --num-cpus 0``) gets no worker.
WORKER_CPUS = 0.01


class BackendUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


def import_ray():
    try:
        import ray
    except ImportError:
        raise BackendUnavailable(RAY_MISSING) from None
    return ray


@dataclass(frozen=True)
class NodeServers:
    """A model server per node that has workers: started on the node (or found running there) when its first worker
    needs it, the endpoint of that node's workers, stopped when the run ends. ``start(port=...)`` is a context
    manager whose value has the server's ``url`` (the embedded model: ``lm.server.LocalServerSpec``; tests: the fake
    server); it travels to the node, so it must pickle. ``port``: the port on each machine (0: any free one); nodes
    that share a machine (a cluster simulated on one) get the ports after it, one each."""

    start: Callable[..., contextlib.AbstractContextManager]
    port: int = 0


@dataclass
class RayBackend:
    """Where and how wide to run: ``address`` None starts a local Ray instance (``auto`` joins a running
    cluster, ``ray://host:10001`` a remote one, ``host:6379`` a cluster's head); ``workers`` actors, spread over
    the nodes; ``api_bases`` endpoints spread over them (default: the model configuration's own), or
    ``node_servers`` a server per node. After a run, ``judged_on`` counts the verdicts each node's workers returned
    (by Ray node id) and ``servers`` holds the node servers' URLs (by node id)."""

    config: ModelConfig
    workers: int = 2
    address: str | None = None
    api_bases: Sequence[str] = ()
    num_cpus: int | None = None  # for a local instance only
    runtime_env: dict[str, Any] | None = None
    node_servers: NodeServers | None = None
    judged_on: Counter = field(default_factory=Counter)
    servers: dict[str, str] = field(default_factory=dict)

    def worker_config(self, index: int) -> ModelConfig:
        if not self.api_bases:
            return self.config
        return dataclasses.replace(self.config, api_base=self.api_bases[index % len(self.api_bases)])

    def run(self, todo: Iterable[Dialogue], judge: StagedModule, record: Callable[[DialogueVerdict], None],
            failures: CallFailures | None = None) -> None:
        """Judge ``todo`` on the cluster with the judge as it is in memory (its whole program travels, not its
        name), calling ``record`` on the driver as each verdict arrives; each worker treats failed calls as
        ``failures`` says (its own counts)."""
        spec = judge_spec(judge)
        ray = import_ray()
        from ray.util import ActorPool
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        started_here = not ray.is_initialized()
        if started_here:
            try:
                # None is a fresh instance of this run's own ("local"), never a cluster some other process left
                # running on this machine, nor RAY_ADDRESS's: joining one is asked for by name ("auto" or an address).
                ray.init(address=self.address or "local", num_cpus=self.num_cpus if self.address is None else None,
                         include_dashboard=False, log_to_driver=False, runtime_env=self.runtime_env)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise BackendUnavailable(f"cannot start or join Ray at {self.address or 'a local instance'}: "
                                         f"{exc}") from None
        # A dead actor process is restarted (on a live node when its node is gone) and the call it was serving is
        # retried. (litellm stays off the network in the worker as in this process: the worker builds its LM with
        # ModelConfig.build.) Spread over the nodes: a node's loss takes a share of the workers, not all of them.
        actor = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=WORKER_CPUS,
                           scheduling_strategy="SPREAD")(JudgeActor)
        policy = failures or CallFailures()
        # The run's coordinator, on the driver's node (whose loss ends the run anyway): it outlives any worker node,
        # and a worker started again elsewhere finds it by name. (A worker given the program or an actor handle as
        # an argument would depend on Ray keeping them for its restart, and Ray warns so on every run.)
        name = f"vista-run-{uuid.uuid4().hex[:12]}"
        coordinator = ray.remote(num_cpus=0, max_concurrency=64)(Coordinator).options(
            name=name, scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(),
                                                                          soft=False)).remote(spec,
                                                                                              self.node_servers)
        actors = [actor.remote(self.worker_config(i), name, policy.parse_retries, policy.stop_after)
                  for i in range(self.workers)]
        seen: set[str] = set()
        self.judged_on.clear()
        try:
            pool = ActorPool(actors)
            for node, text in pool.map_unordered(lambda a, d: a.judge.remote(d.model_dump_json()), list(todo)):
                verdict = DialogueVerdict.model_validate_json(text)
                if verdict.dialogue_id not in seen:  # a retried call never writes a second line
                    seen.add(verdict.dialogue_id)
                    self.judged_on[node] += 1
                    record(verdict)
        except ray.exceptions.RayTaskError as exc:
            cause = _first_cause(exc)
            if isinstance(cause, (EndpointDown, LocalServerError)):
                raise type(cause)(str(cause)) from None
            raise
        finally:
            for handle in actors:
                ray.kill(handle)
            with contextlib.suppress(ray.exceptions.RayError):
                self.servers = ray.get(coordinator.stop.remote(), timeout=60)
            ray.kill(coordinator)
            if started_here:
                ray.shutdown()


def _first_cause(exc: BaseException) -> BaseException:
    """The error a worker raised, under the Ray task errors that carried it (a worker's call to the coordinator for
    its node's server nests one in another)."""
    import ray

    while isinstance(exc, ray.exceptions.RayTaskError) and exc.cause is not None and exc.cause is not exc:
        exc = exc.cause
    return exc


def judge_spec(judge: StagedModule) -> dict[str, Any]:
    """What rebuilds ``judge`` in another process (a Ray worker), as JSON: its class and options, and a VISTA
    judge's whole program (demos, instructions, options, calibration) -- not its name, so that an unsaved program
    (a study's trial) is judged as it is in memory. No LM, no key."""
    from ..program import Vista

    if isinstance(judge, Vista):
        return {"kind": "Vista", "program": dataclasses.asdict(judge.program_file()),
                "options": judge.option_values()}
    return {"kind": type(judge).__name__, "options": judge.option_values()}


def build_judge(spec: dict[str, Any]) -> StagedModule:
    """The judge a ``judge_spec`` describes."""
    from ..baselines import FActScore, LLMJudge
    from ..compiled.files import ProgramFile
    from ..program import Vista

    if spec["kind"] == "Vista":
        return Vista.from_program(ProgramFile(**spec["program"]), **spec["options"])
    kinds: dict[str, type[StagedModule]] = {"FActScore": FActScore, "LLMJudge": LLMJudge}
    if spec["kind"] not in kinds:
        raise ValueError(f"unknown judge kind {spec['kind']!r}")
    return kinds[spec["kind"]](**spec["options"])


class JudgeActor:
    """One worker: its own LM client and judge, built in its own process from what the run's ``Coordinator`` (found
    by ``coordinator``, its name) holds; with node servers, its endpoint is its node's server (asked for when the
    first dialogue comes, so a worker started again on another node finds that node's)."""

    def __init__(self, config: ModelConfig, coordinator: str, parse_retries: int, stop_after: int | None) -> None:
        import ray

        self.node = ray.get_runtime_context().get_node_id()
        self.coordinator = ray.get_actor(coordinator)
        spec, self.node_servers = ray.get(self.coordinator.judging.remote())
        self.config = config
        self.program = build_judge(spec)
        self.failures = CallFailures(parse_retries, stop_after)
        self.lm = self.adapter = None

    def _connect(self) -> None:
        import ray

        from ..lm.clients.cache import use_cache_for
        from ..lm.server import LOCAL_MODEL, register_local_model

        config = self.config
        if self.node_servers:
            url = ray.get(self.coordinator.url_for.remote(self.node, ray.util.get_node_ip_address()))
            config = dataclasses.replace(config, api_base=url)
        if config.model == LOCAL_MODEL:  # as local_model_config does in the driver: llama.cpp enforces the schema
            register_local_model(config.max_tokens)
        use_cache_for(config)
        self.lm, self.adapter = config.build(), config.build_adapter()

    def judge(self, dialogue_json: str) -> tuple[str, str]:
        """(this worker's node id, the dialogue's verdict as JSON)."""
        import dspy

        if self.lm is None:
            self._connect()
        dialogue = Dialogue.model_validate_json(dialogue_json)
        with dspy.context(lm=self.lm, adapter=self.adapter, trace=None), self.failures.active():
            verdict = self.program(dialogue)
        return self.node, verdict.model_dump_json()


class NodeServer:
    """The model server of one node, run by this actor (in its process, or as its child for the embedded model) until
    ``stop`` or the actor's end. A server that cannot start says why when its address is asked for."""

    def __init__(self, start: Callable[..., contextlib.AbstractContextManager], port: int) -> None:
        self.url: str | None = None
        self.error: str | None = None
        try:
            self.context = start(port=port)
            self.url = self.context.__enter__().url
        except Exception as exc:  # the node's server, not this actor, failed: reported to the worker that asked
            self.error = f"{type(exc).__name__}: {exc}"

    def address(self) -> str:
        if self.url is None:
            raise LocalServerError(self.error or "the node's model server did not start")
        return self.url

    def stop(self) -> None:
        if self.url is not None:
            self.context.__exit__(None, None, None)
            self.url = None


class Coordinator:
    """What the workers of a run ask the driver's node for: the judge's program (``judging``) and, with node servers,
    their node's server (``url_for``: one ``NodeServer`` per node, started on the node when its first worker asks,
    its URL handed to every worker there); ``stop`` ends the servers. A threaded actor: workers ask at once."""

    def __init__(self, spec: dict[str, Any], servers: NodeServers | None) -> None:
        self.spec = spec
        self.servers = servers
        self.started: dict[str, tuple[Any, str]] = {}  # node id -> (its NodeServer actor, URL)
        self.on_machine: Counter = Counter()  # node IP -> servers started there
        self.lock = threading.Lock()
        self.node_locks: dict[str, threading.Lock] = {}

    def judging(self) -> tuple[dict[str, Any], bool]:
        """(the judge's spec, whether workers judge with their node's server)."""
        return self.spec, self.servers is not None

    def url_for(self, node_id: str, ip: str) -> str:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        with self.lock:
            node_lock = self.node_locks.setdefault(node_id, threading.Lock())
        with node_lock:
            if node_id in self.started:
                return self.started[node_id][1]
            with self.lock:
                port = self.servers.port + self.on_machine[ip] if self.servers.port else 0
                self.on_machine[ip] += 1
            server = ray.remote(num_cpus=0, max_restarts=0)(NodeServer).options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(self.servers.start,
                                                                                                 port)
            try:
                url = ray.get(server.address.remote())
            except ray.exceptions.RayTaskError as exc:
                ray.kill(server)
                raise LocalServerError(f"the model server of node {ip} ({node_id[:12]}) did not start: "
                                       f"{_first_cause(exc)}") from None
            self.started[node_id] = (server, url)
            return url

    def stop(self) -> dict[str, str]:
        """Stop every node's server (those of lost nodes are gone already); returns their URLs by node id."""
        import ray

        stopping = [(server, server.stop.remote()) for server, _ in self.started.values()]  # all at once
        for server, stopped in stopping:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(stopped, timeout=30)
            ray.kill(server)
        return {node: url for node, (_, url) in self.started.items()}

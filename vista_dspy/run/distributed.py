"""Running an evaluation on a Ray cluster (``pip install 'vista-dspy[ray]'``; ``--backend ray``).

Dialogues go to a pool of Ray actors, one per worker. Each actor builds its own judge and LM client in its own
process from the run's description: the model configuration (model string, endpoint, decoding; never a key:
keys are read from the worker's environment, e.g. through ``runtime_env={"env_vars": ...}``) and the judge's
spec (class and options; for VISTA its whole program -- demos, instructions, options, calibration -- as JSON, so an
unsaved program is judged remotely exactly as in memory). Nothing holding an LM or a secret crosses the cluster;
dialogues and verdicts travel as JSON. Several endpoints are spread over the workers round-robin.

Verdicts stream back to the driver, which appends them to the same ``verdicts.jsonl`` as a local run (resume,
summary and reports are unchanged). Actors restart when their process dies and Ray retries the task they were
running, so a killed worker loses nothing; a verdict is recorded once per dialogue whatever the retries. Each worker
counts its endpoint's failures as a local run does (``stages.CallFailures``); the first worker to find it down stops
the run with ``EndpointDown``: verdicts already streamed back are kept, the dialogues in progress are dropped.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..lm.models import ModelConfig
from ..schema import Dialogue, DialogueVerdict
from ..stages import CallFailures, EndpointDown, StagedModule

RAY_MISSING = "the Ray backend needs Ray: pip install 'vista-dspy[ray]' (or pip install 'ray==2.60.0')"


class BackendUnavailable(RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


def import_ray():
    try:
        import ray
    except ImportError:
        raise BackendUnavailable(RAY_MISSING) from None
    return ray


@dataclass
class RayBackend:
    """Where and how wide to run: ``address`` None starts a local Ray instance (``auto`` joins a running
    cluster, ``ray://host:10001`` a remote one); ``workers`` actors; ``api_bases`` endpoints spread over them
    (default: the model configuration's own)."""

    config: ModelConfig
    workers: int = 2
    address: str | None = None
    api_bases: Sequence[str] = ()
    num_cpus: int | None = None  # for a local instance only
    runtime_env: dict[str, Any] | None = None

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

        started_here = not ray.is_initialized()
        if started_here:
            try:
                ray.init(address=self.address, num_cpus=self.num_cpus if self.address is None else None,
                         include_dashboard=False, log_to_driver=False, runtime_env=self.runtime_env)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise BackendUnavailable(f"cannot start or join Ray at {self.address or 'a local instance'}: "
                                         f"{exc}") from None
        # A dead actor process is restarted and the call it was serving is retried. (litellm stays off the network
        # in the worker as in this process: the worker builds its LM with ModelConfig.build.)
        actor = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(JudgeActor)
        policy = failures or CallFailures()
        actors = [actor.remote(self.worker_config(i), spec, policy.parse_retries, policy.stop_after)
                  for i in range(self.workers)]
        seen: set[str] = set()
        try:
            pool = ActorPool(actors)
            for text in pool.map_unordered(lambda a, d: a.judge.remote(d.model_dump_json()), list(todo)):
                verdict = DialogueVerdict.model_validate_json(text)
                if verdict.dialogue_id not in seen:  # a retried call never writes a second line
                    seen.add(verdict.dialogue_id)
                    record(verdict)
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, EndpointDown):
                raise EndpointDown(str(exc.cause)) from None
            raise
        finally:
            for handle in actors:
                ray.kill(handle)
            if started_here:
                ray.shutdown()


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
    """One worker: its own LM client and judge, built in its own process."""

    def __init__(self, config: ModelConfig, judge: dict[str, Any], parse_retries: int, stop_after: int | None
                 ) -> None:
        from ..lm.clients.cache import use_cache_for

        use_cache_for(config)
        self.lm, self.adapter = config.build(), config.build_adapter()
        self.program = build_judge(judge)
        self.failures = CallFailures(parse_retries, stop_after)

    def judge(self, dialogue_json: str) -> str:
        import dspy

        dialogue = Dialogue.model_validate_json(dialogue_json)
        with dspy.context(lm=self.lm, adapter=self.adapter), self.failures.active():
            verdict = self.program(dialogue)
        return verdict.model_dump_json()

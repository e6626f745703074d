"""What the commands share: the options declared once, the model set-up, and failures as one-line messages."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console

from ..lm.server import DEFAULT_PORT, LOCAL_SHORT_ANSWER_TOKENS
from ..options import CLAIM_CALLS, DECOMPOSE_CALLS, EVIDENCE_READINGS

if TYPE_CHECKING:
    from ..lm.models import ModelConfig

err = Console(stderr=True)


class System(str, Enum):
    vista = "vista"
    evidence = "evidence"
    factscore = "factscore"
    factscore_nosplit = "factscore-nosplit"
    judge = "judge"


class Backend(str, Enum):
    local = "local"
    ray = "ray"


class Adapter(str, Enum):
    json = "json"
    chat = "chat"


ClaimCalls = Enum("ClaimCalls", {mode.replace("-", "_"): mode for mode in CLAIM_CALLS}, type=str)
DecomposeCalls = Enum("DecomposeCalls", {mode.replace("-", "_"): mode for mode in DECOMPOSE_CALLS}, type=str)
Reading = Enum("Reading", {reading: reading for reading in EVIDENCE_READINGS}, type=str)

CLAIM_CALLS_HELP = ("How claims are judged. per-claim: one Verify call per claim and one Categorize call per "
                    "unverified claim (the paper's method); batched: one Verify and one Categorize call per turn "
                    "(about half the calls of a run); joint: one call per turn for both. Claims a batched answer "
                    "misses are asked one by one. Default: the program's saved option, else per-claim.")

# ---- options shared by several commands ---------------------------------------------------------------------
ModelOption = Annotated[Optional[str], typer.Option(
    "--model", "-m", envvar="VISTA_MODEL",
    # Typer reads help as Rich markup: "\\[" prints a bracket that "[" alone would turn into a (lost) style tag.
    help="'local' (the embedded offline model, Qwen2.5-Coder-1.5B; the default), 'local-0.5b' (its 0.5B sibling, "
         "the \\[draft] extra), a short name from `vista models`, or any DSPy/litellm model string: openai/gpt-4o, "
         "deepseek/deepseek-chat, hosted_vllm/<name>, ollama_chat/<name>, openai/<name> with --api-base ...")]
ApiBaseOption = Annotated[Optional[str], typer.Option(
    envvar="VISTA_API_BASE", help="Base URL of an OpenAI-compatible endpoint (vLLM, llama.cpp, Ollama ...). The key, "
                                  "if any, comes from VISTA_API_KEY or OPENAI_API_KEY.")]
GgufOption = Annotated[Optional[Path], typer.Option(
    envvar="VISTA_GGUF", help="With the local model: this GGUF file instead of the bundled one.")]
PortOption = Annotated[int, typer.Option(
    help="With the local model: port of the embedded server (an already running `vista serve` on it is reused).")]
MaxTokensOption = Annotated[int, typer.Option(help="Cap on tokens per LM answer.")]
CacheOption = Annotated[bool, typer.Option(help="Reuse cached LM answers (one cache per model and endpoint).")]
AdapterOption = Annotated[Optional[Adapter], typer.Option(
    help="How DSPy formats prompts and parses answers. Default: the program's saved adapter, else json (the local "
         "model always uses json, with a server-enforced schema).", show_default=False)]
TemperatureOption = Annotated[Optional[float], typer.Option(
    help="Sampling temperature (default: the model's; 0 for most).")]
DataDirOption = Annotated[Optional[Path], typer.Option(
    envvar="VISTA_DATA_DIR", help="A folder laid out as the cache, read for a dataset `vista data get` did not fetch "
                                  "(default: ../shared/data or ./data, the first that exists).")]
SAVED = " Default: the program's saved option, else {}."
EvidenceOption = Annotated[Optional[Reading], typer.Option(
    help="How a prompt reads the turn's sources: turn (each source whole when it fits its budget, else the passages "
         "that share most of the turn's units, the same for every claim of the turn, so a server's prefix cache "
         "serves them all), unit (the same per claim) or full (every source word, every earlier claim and the whole "
         "history: the paper's reading, for replication). Each claim records what it was checked against."
         + SAVED.format("turn"), show_default=False)]
ClaimCallsOption = Annotated[Optional[ClaimCalls], typer.Option(help=CLAIM_CALLS_HELP, show_default=False)]
DecomposeCallsOption = Annotated[Optional[DecomposeCalls], typer.Option(
    help="How turns are decomposed. per-turn: one Decompose call per assistant turn (the paper's method); "
         "per-dialogue: one call for all the assistant turns of a dialogue (a turn its answer misses is asked on its "
         "own). Default: the program's saved option, else per-turn.", show_default=False)]
BackendOption = Annotated[Backend, typer.Option(
    help="local (threads or asyncio in this process) or ray (a pool of Ray workers, each with its own LM client; "
         "--api-base may list several endpoints, spread over the workers).")]
AddressOption = Annotated[Optional[str], typer.Option(
    help="With --backend ray: 'auto' (a running cluster), ray://HOST:10001, or none to start Ray here.")]
WorkersOption = Annotated[int, typer.Option(min=1, help="With --backend ray: worker actors.")]
RetryErrorsOption = Annotated[bool, typer.Option(
    help="On resume, judge again every dialogue whose verdict holds a failure (an ERROR claim, a failed stage, an "
         "unknown turn) and replace its verdict; its calls that succeeded come from the cache.")]
ParseRetriesOption = Annotated[int, typer.Option(
    min=0, help="An answer that does not parse is asked again, past the cache, up to N times; then its claim is "
                "ERROR.")]
StopAfterOption = Annotated[int, typer.Option(
    min=0, help="Stop when the model endpoint fails N calls in a row (connection refused, DNS, timeouts, HTTP 5xx "
                "or 429 left after the client's own retries): finished dialogues are kept, the one in progress is "
                "not written, the command exits 1, and rerunning it resumes. 0: never stop (failures become ERROR "
                "verdicts).")]


def fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"


@contextlib.contextmanager
def run_errors(*input_errors: type[Exception]):
    """Failures of a run as one-line messages: bad input or settings, or an output folder another run holds, exit 2;
    an unusable model or server, an endpoint that went down mid-run, or an output folder that takes no more bytes
    (full disk, read-only), 1."""
    from dspy.utils.exceptions import LMError

    from ..data import InputError
    from ..lm.server import LocalServerError
    from ..run.distributed import BackendUnavailable
    from ..run.outdir import FolderBusy, OutputUnwritable
    from ..run.runner import RunConflict
    from ..stages import EndpointDown

    try:
        yield
    except (InputError, RunConflict, FolderBusy, BackendUnavailable, *input_errors) as exc:
        raise fail(str(exc)) from None
    except (EndpointDown, OutputUnwritable) as exc:
        raise fail(str(exc), code=1) from None
    except LMError as exc:
        raise fail(f"the model cannot be used: {exc}", code=1) from None
    except LocalServerError as exc:
        raise fail(str(exc), code=1) from None


@dataclass
class ModelSetup:
    config: ModelConfig
    server: contextlib.AbstractContextManager
    threads: int
    short_answer_tokens: int | None

    @property
    def label_probabilities(self) -> bool:
        """Whether the endpoint is asked for label probabilities (``ModelConfig.logprobs``)."""
        return self.config.logprobs

    def judging_with(self, program) -> None:
        """The embedded server's warm start restores and saves the slots of this program (its content hash)."""
        if hasattr(self.server, "program_key"):
            self.server.program_key = program.content_hash()


def model_setup(console: Console, model: str | None, *, api_base: str | None, gguf: Path | None,
                port: int = DEFAULT_PORT, temperature: float | None = None, max_tokens: int = 1024,
                cache: bool = True, adapter: Adapter | None = None) -> ModelSetup:
    """The LM to judge with: the embedded local model (started on demand), a short name of the paper's models
    (`vista models`), or any DSPy/litellm model string. A model that cannot be set up exits 2 with the reason."""
    from ..lm import warm_start
    from ..lm.models import MODELS, ModelConfig, gives_logprobs
    from ..lm.server import LocalServer, embedded_settings, local_model_config
    from ..lm.weights import EMBEDDED, ModelNotFound

    api_base = api_base.split(",")[0].strip() if api_base else None  # several: spread by --backend ray
    try:
        if model is None or model in EMBEDDED:
            if model is None:
                console.print("no --model given: judging with the embedded local model (Qwen2.5-Coder-1.5B-Instruct "
                              "Q4_K_M on llama.cpp; offline, no API key)", highlight=False)
            settings = embedded_settings(model, gguf=gguf, port=port)
            server = LocalServer(settings, warm_start=cache and warm_start.max_bytes() > 0)  # --no-cache: no warm start
            return ModelSetup(local_model_config(settings, max_tokens=min(max_tokens, 768), cache=cache), server,
                              threads=1, short_answer_tokens=LOCAL_SHORT_ANSWER_TOKENS)
        if model in MODELS:
            config = MODELS[model].config(api_base=api_base, temperature=temperature, max_tokens=max_tokens,
                                          cache=cache, adapter=(adapter or Adapter.json).value)
        else:
            config = ModelConfig(model=model, api_base=api_base, temperature=temperature or 0.0,
                                 max_tokens=max_tokens, cache=cache, adapter=(adapter or Adapter.json).value,
                                 logprobs=gives_logprobs(model))
    except (ModelNotFound, ValueError) as exc:
        raise fail(str(exc)) from None
    return ModelSetup(config, contextlib.nullcontext(), threads=4, short_answer_tokens=None)


# What a run that asks no LM records as its model (run.json): none judged.
NO_LM = "none"


def no_lm_setup() -> ModelSetup:
    """The set-up of a judge that asks no LM (the evidence over the turn's sentences): no model is resolved, no weights
    are looked for, no server is started, no answer cache is opened; the run records its model as ``NO_LM``."""
    from ..lm.models import ModelConfig

    return ModelSetup(ModelConfig(model=NO_LM, cache=False), contextlib.nullcontext(), threads=1,
                      short_answer_tokens=None)


def dspy_context(config: ModelConfig) -> contextlib.AbstractContextManager:
    import dspy

    return dspy.context(lm=config.build(), adapter=config.build_adapter())


def with_program_adapter(lm_setup: ModelSetup, judge, flag: Adapter | None, console: Console) -> None:
    """The adapter a run formats prompts with: the flag's, else the program's saved one, else json; the embedded
    model always json (its server enforces a JSON schema)."""
    saved = getattr(getattr(judge, "options", None), "adapter", None)
    wanted = flag.value if flag is not None else saved
    if wanted is None or wanted == lm_setup.config.adapter:
        return
    if lm_setup.config.cache_identity is not None:  # the embedded model
        console.print(f"the embedded model judges with the json adapter, not {wanted}", highlight=False)
        return
    if flag is None:
        console.print(f"program {judge.program_name} applies its saved adapter: {wanted}", highlight=False)
    lm_setup.config = dataclasses.replace(lm_setup.config, adapter=wanted)


def judge_backend(backend: Backend, config: ModelConfig, lm_setup: ModelSetup, *, address: str | None = None,
                  workers: int = 2, api_base: str | None = None, threads: int | None = None,
                  concurrency: int | None = None):
    """Where a command's dialogues are judged: a Ray cluster (``--backend ray``; endpoints from a comma-separated
    --api-base), asyncio with at most ``concurrency`` requests in flight, or threads. On Ray, the embedded model is
    served on every node that has workers, started there by the run (``lm_setup.server``, which would start it on
    this machine, becomes a no-op), unless --api-base lists servers already running (``vista serve``)."""
    from ..lm.server import LocalServer, LocalServerSpec
    from ..run.runner import local_backend

    if backend is Backend.ray:
        from ..run.distributed import NodeServers, RayBackend

        bases = [b.strip() for b in (api_base or "").split(",") if b.strip()]
        if isinstance(lm_setup.server, LocalServer):
            spec = LocalServerSpec.of(lm_setup.server)
            lm_setup.server = contextlib.nullcontext()  # none on this machine: the nodes' own, or the listed ones
            if not bases:
                return RayBackend(config, workers=workers, address=address,
                                  node_servers=NodeServers(spec, port=spec.settings.port))
        return RayBackend(config, workers=workers, address=address, api_bases=bases)
    return local_backend(config.build(), config.build_adapter(), concurrency=concurrency,
                         threads=threads or (None if concurrency else lm_setup.threads))


def describe_judge(judge) -> str:
    """The judge in a run's first line: its program and content hash, and how it decides."""
    name = f"program [bold]{judge.program_name}[/]"
    if not hasattr(judge, "content_hash"):
        return name
    rule = judge.rule
    return (f"{name} (sha256 {judge.content_hash()[:12]}), "
            + (rule.describe() if rule is not None else "the judge's own labels decide"))


def evidence_only_notice(judge, console: Console):
    """A callback for each verdict that says once, when a program with a decision rule over label probabilities
    gets answers without them (the endpoint gave none), that its evidence-only model decides."""
    said = []

    def check(verdict) -> None:
        rule = getattr(judge, "rule", None)
        if said or rule is None or rule.judged is None:
            return
        claims = [c for t in verdict.turns for c in t.claims if c.category.value != "ERROR" and c.stage != "evidence"]
        if claims and not any(c.probabilities and c.probabilities.verify for c in claims):
            said.append(True)
            console.print(f"the endpoint gave no label probabilities (dialogue {verdict.dialogue_id}): the "
                          "program's evidence-only rule decides, over the evidence cues alone", highlight=False)

    return check


def without_call_history() -> None:
    """A batch command keeps no history of LM calls: DSPy keeps the last 10,000 calls' prompts and answers for
    ``inspect_history`` (globally, per LM, per module and per predictor), over 1 GB in a 20,000-dialogue run
    (benchmarks/faults.py), and nothing in a command reads them; nor DSPy's trace, the last 10,000 predictor calls'
    inputs and predictions (a teleprompter, or the demo pool, opens its own with ``dspy.context(trace=[])``)."""
    import dspy

    dspy.configure(disable_history=True, trace=None)


def progress_bar():
    """The progress display of long runs (on stderr, so that --json output stays clean)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("dialogues"), TimeElapsedColumn(), TimeRemainingColumn(), console=err,
                    transient=False)


# Options of the commands that read training and dev dialogues (`vista compile`, `vista study`).
NTrainOption = Annotated[Optional[int], typer.Option(min=1, help="At most this many training dialogues.")]
PARTS_HELP = ("part: train / dev = the two halves of a seeded split grouped by dialogue (dev is the held-out half "
              "results are reported on); pool / select = the two halves of train within each source dataset (demos "
              "/ choosing); all. DATASET as in `vista benchmark`, optionally =PATH.")
ScoringThreadsOption = Annotated[Optional[int], typer.Option(min=1, help="Dev dialogues scored in parallel.")]

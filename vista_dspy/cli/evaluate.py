"""`vista evaluate`: judge a file of dialogues with VISTA or a baseline, resumably."""

from __future__ import annotations

import dataclasses
import json
import sys
import warnings
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from ..lm.server import DEFAULT_PORT, endpoint_options
from ..options import JudgeOptions, from_flags
from ..program import Vista
from ..stages import PARSE_RETRIES, STOP_AFTER
from .app import app
from .common import (
    SAVED,
    AdapterOption,
    AddressOption,
    ApiBaseOption,
    Backend,
    BackendOption,
    CacheOption,
    ClaimCallsOption,
    DecomposeCallsOption,
    EvidenceOption,
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
    describe_judge,
    err,
    evidence_only_notice,
    fail,
    judge_backend,
    model_setup,
    no_lm_setup,
    progress_bar,
    run_errors,
    slug,
    with_program_adapter,
    without_call_history,
)

# ---- evaluate's own options ---------------------------------------------------------------------------------
InputArgument = Annotated[Path, typer.Argument(
    help="Dialogues: VISTA's JSON format (optionally annotated), JSONL of Dialogue records, chat logs (JSONL or JSON "
         "of OpenAI-style messages), or a Hugging Face dataset on disk (a save_to_disk directory, parquet files).",
    show_default=False)]
SystemOption = Annotated[System, typer.Option(
    help="vista; evidence (the program's decomposed claims decided by evidence cues alone, no Verify or Categorize "
         "call: what the judge adds); or a baseline with the same LM: factscore, factscore-nosplit (facts from the "
         "whole turn), judge (LLM-as-Judge). The VISTA switches below apply to vista and evidence only.")]
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
    "--context/--no-context", help="VISTA+ctx: give the dialogue history to Verify and Categorize." + SAVED.format(
        "off"), show_default=False)]
AccumulateOption = Annotated[Optional[bool], typer.Option(
    "--accumulate/--no-accumulate", help="Keep the knowledge store across turns (--no-accumulate = the -AC "
                                         "ablation)." + SAVED.format("on"), show_default=False)]
HistoryOption = Annotated[Optional[bool], typer.Option(
    "--history/--no-history", help="Give the history to Decompose (--no-history = the ablation)." + SAVED.format(
        "on"), show_default=False)]
ZeroShotOption = Annotated[Optional[bool], typer.Option(
    "--zero-shot/--no-zero-shot", help="Ignore the program's demos in every stage." + SAVED.format("off"),
    show_default=False)]
ContradictionOption = Annotated[Optional[bool], typer.Option(
    "--contradiction-check/--no-contradiction-check",
    help="One more call per turn: does it contradict an earlier turn? A yes makes the turn hallucinated."
         + SAVED.format("off"), show_default=False)]
BackgroundOption = Annotated[Optional[bool], typer.Option(
    "--background/--no-background", help="Seed the knowledge store with each dialogue's background facts."
                                         + SAVED.format("on"), show_default=False)]
ExplainVerifiedOption = Annotated[Optional[bool], typer.Option(
    help="Verify writes a short explanation before its label (a VERIFIED claim then has one). Off: the label alone "
         "(a third of Verify's written tokens with the local model, and its decisions were no worse; an unverified "
         "claim still gets Categorize's explanation). Per-claim judging only: batched answers always explain."
         + SAVED.format("off"), show_default=False)]
ExplainUnverifiedOption = Annotated[Optional[bool], typer.Option(
    help="Categorize writes a short explanation before its category (the paper's method). Off: its category alone, "
         "and the claim's explanation cites its evidence (for runs whose explanations no one reads: about a "
         "third of the tokens the local model writes). Per-claim judging only." + SAVED.format("on"),
    show_default=False)]


class Units(str, Enum):
    claims = "claims"
    sentences = "sentences"
    clauses = "clauses"


UnitsOption = Annotated[Optional[Units], typer.Option(
    help="What is judged: claims (Decompose's atomic claims, VISTA's method), sentences (each statement of the "
         "turn with content is a unit: no Decompose call) or clauses (each statement cut at its clause boundaries: "
         "a semicolon, a colon, a spaced dash, a comma before and / but / which ...; no Decompose call)."
         + SAVED.format("claims"), show_default=False)]
CheckGroundingOption = Annotated[Optional[bool], typer.Option(
    help="Drop decomposed claims that the turn and the dialogue before it do not contain (a small model copies its "
         "demos' claims): they are neither judged nor stored, and are listed in the turn's verdict (ungrounded). "
         "--no-check-grounding keeps them (the behaviour before this check)." + SAVED.format("on"),
    show_default=False)]
CoverageOption = Annotated[Optional[bool], typer.Option(
    help="Judge the sentences of a turn that no decomposed claim covers (most of their content words in no claim) as "
         "claims of their own, marked added_by 'coverage' in the verdict: a turn with content never ends with no "
         "claim. The compiled program for the local model has it on; the seed (the paper's method) off."
         + SAVED.format("off"), show_default=False)]


class EmptyTurns(str, Enum):
    unknown = "unknown"
    faithful = "faithful"


EmptyTurnsOption = Annotated[Optional[EmptyTurns], typer.Option(
    help="How a turn with content from which Decompose took no claim is labelled: unknown (a failed decomposition, "
         "with its reason; a failure for the CI gate) or faithful (the paper's reading: a turn with no claims is "
         "faithful)." + SAVED.format("unknown"), show_default=False)]
EvidenceTokensOption = Annotated[Optional[int], typer.Option(
    min=1, help="Tokens (4 characters each) of the reference a prompt carries: the whole document when it fits, else "
                "its passages ranked for the claims within it." + SAVED.format("1024"), show_default=False)]
KnowledgeTokensOption = Annotated[Optional[int], typer.Option(
    min=1, help="Tokens of the knowledge store a prompt carries: the whole store when it fits, else the earlier claims "
                "that bear on the claims within it." + SAVED.format("384"), show_default=False)]
HistoryTokensOption = Annotated[Optional[int], typer.Option(
    min=1, help="Tokens of the dialogue before a turn that Decompose, LLM-as-Judge, the contradiction check and "
                "--context read: its last turns within it." + SAVED.format("512"), show_default=False)]
ReasoningOption = Annotated[Optional[str], typer.Option(
    help="Stages run as chain of thought (a reasoning output first), comma-separated: decompose, verify, "
         "categorize; 'none' for none." + SAVED.format("none"), show_default=False)]
LabelProbabilitiesOption = Annotated[Optional[bool], typer.Option(
    help="Ask Verify and Categorize for token log-probabilities: each label's probability is recorded on its claim "
         "and a program with a decision rule decides with them (without them, with its evidence-only model). "
         "Default: on where the endpoint gives them (not OpenAI's reasoning models nor Anthropic's); "
         "--no-label-probabilities for an endpoint that refuses them.",
    show_default=False)]
FormatOption = Annotated[Optional[str], typer.Option(
    help="Input format: vista, dialogues, chat or hf (a datasets dataset; default: detected), or a benchmark "
         "loader: begin, fade, faithdial-audit, coconot, rgm-contradictions, ais (see vista_dspy/data/).")]
OverwriteOption = Annotated[bool, typer.Option(help="Discard an earlier run in --out instead of resuming it.")]
ShowClaimsOption = Annotated[Optional[bool], typer.Option(
    help="Print every claim's verdict (default: when at most 3 dialogues).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the summary as JSON on stdout.")]
FailUnderOption = Annotated[Optional[float], typer.Option(
    min=0.0, max=1.0, help="CI gate: exit 1 when the run's VISTA score (safe claims / judged claims, 0 to 1, as in "
                           "summary.json) is below this.", show_default=False)]
FailUnderFaithfulOption = Annotated[Optional[float], typer.Option(
    min=0.0, max=1.0, help="CI gate: exit 1 when the share of judged turns labelled faithful (0 to 1; an unknown "
                           "turn is not faithful) is below this.", show_default=False)]
MaxUnjudgedOption = Annotated[Optional[int], typer.Option(
    min=0, help="CI gate: exit 1 when more than N things could not be judged: ERROR claims, turns without claims "
                "(a failed or empty decomposition), failed contradiction checks, failed background turns. Default: "
                "0 whenever --fail-under or --fail-under-faithful is given (a score that leaves failures out never "
                "passes on its own).", show_default=False)]


# Over 80 lines only for its signature: typer declares each flag in it (46 lines); the body is 49.
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
    accumulate: AccumulateOption = None,
    history: HistoryOption = None,
    zero_shot: ZeroShotOption = None,
    contradiction_check: ContradictionOption = None,
    background: BackgroundOption = None,
    claim_calls: ClaimCallsOption = None,
    decompose_calls: DecomposeCallsOption = None,
    reasoning: ReasoningOption = None,
    explain_verified: ExplainVerifiedOption = None,
    explain_unverified: ExplainUnverifiedOption = None,
    units: UnitsOption = None,
    check_grounding: CheckGroundingOption = None,
    coverage: CoverageOption = None,
    empty_turns: EmptyTurnsOption = None,
    evidence: EvidenceOption = None,
    evidence_tokens: EvidenceTokensOption = None,
    knowledge_tokens: KnowledgeTokensOption = None,
    history_tokens: HistoryTokensOption = None,
    label_probabilities: LabelProbabilitiesOption = None,
    adapter: AdapterOption = None,
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
    fail_under: FailUnderOption = None,
    fail_under_faithful: FailUnderFaithfulOption = None,
    max_unjudged: MaxUnjudgedOption = None,
) -> None:
    """Judge every assistant turn of the dialogues in INPUT; write per-dialogue verdicts as they finish."""
    from ..lm.clients.cache import use_cache_for
    from ..run.runner import evaluate as run_evaluation
    from ..run.runner import run_settings
    from ..stages import CallFailures

    console = Console(stderr=json_summary)
    dialogues = _dialogues(input, format, limit, judge_given_claims)
    # Flags given on the command line win over a program's saved options (None: not given).
    flags = from_flags(context=context, accumulate=accumulate, history=history, zero_shot=zero_shot,
                       contradiction_check=contradiction_check, background=background, claim_calls=claim_calls,
                       decompose_calls=decompose_calls, reasoning=reasoning, explain_verified=explain_verified,
                       explain_unverified=explain_unverified, units=units,
                       check_grounding=check_grounding, coverage=coverage, empty_turns=empty_turns,
                       evidence=evidence, evidence_tokens=evidence_tokens, knowledge_tokens=knowledge_tokens,
                       history_tokens=history_tokens, judge_given_claims=judge_given_claims or None)
    # The judge first, from names alone: the model is set up only if the judge asks an LM at all (the evidence
    # over the turn's sentences does not, and needs no weights).
    endpoint = endpoint_options(model)
    if label_probabilities is not None:
        endpoint["label_probabilities"] = label_probabilities
    judge = _judge(system, program, model, endpoint, flags, console)
    needs_lm = not isinstance(judge, Vista) or judge.needs_lm
    if needs_lm:
        lm_setup = model_setup(console, model, api_base=api_base, gguf=gguf, port=port, temperature=temperature,
                               max_tokens=max_tokens, cache=cache, adapter=adapter)
        if label_probabilities is not None:
            lm_setup.config = dataclasses.replace(lm_setup.config, logprobs=label_probabilities)
    else:
        lm_setup = no_lm_setup()
    with_program_adapter(lm_setup, judge, adapter, console)
    if isinstance(judge, Vista):
        lm_setup.judging_with(judge)
    config = lm_setup.config
    use_cache_for(config)
    without_call_history()
    backend = judge_backend(backend, config, lm_setup, address=address, workers=workers, api_base=api_base,
                            threads=threads, concurrency=concurrency)
    where = (" on a server of its own on every node (port "
             f"{backend.node_servers.port})" if getattr(backend, "node_servers", None) is not None
             else f" at {config.api_base}" if config.api_base else "")
    with_lm = f"[bold]{config.model}[/]{where}" if needs_lm else "no LM"
    console.print(f"judging {len(dialogues)} dialogues with {with_lm}, {describe_judge(judge)}", highlight=False)

    suffix = "" if system is System.vista else f"__{system.value}"
    out = out or Path("vista-runs") / f"{slug(input.stem)}__{slug(model or 'local')}{suffix}"
    # --limit is not a setting: a later run with a larger limit resumes and extends this one.
    settings = run_settings(judge, input=str(input.resolve()), **config.run_settings())
    progress = progress_bar()
    on_done = _progress_line(progress, len(dialogues), sum(len(d.judged_turns) for d in dialogues), judge, console)
    with run_errors(), lm_setup.server, progress:
        result = run_evaluation(dialogues, judge, backend, out_dir=out, settings=settings, on_done=on_done,
                                retry_errors=retry_errors, failures=CallFailures(parse_retries, stop_after),
                                overwrite=overwrite)
        progress.update(progress.task_ids[0], completed=len(result.verdicts))

    _show(console, result, out, show_claims=show_claims, json_summary=json_summary)
    _gate(result.summary, fail_under, fail_under_faithful, max_unjudged)


def _gate(summary: dict, fail_under: float | None, fail_under_faithful: float | None,
          max_unjudged: int | None) -> None:
    """Exit 1 with one line when the run misses a threshold of the CI gate (a score gate allows no failure unless
    --max-unjudged says how many)."""
    from ..run.testing import shortfalls

    if max_unjudged is None and (fail_under is not None or fail_under_faithful is not None):
        max_unjudged = 0
    missed = shortfalls(summary, min_score=fail_under, min_faithful=fail_under_faithful, max_unjudged=max_unjudged)
    flags = {"min_score": "--fail-under", "min_faithful": "--fail-under-faithful", "max_unjudged": "--max-unjudged"}
    if missed:
        err.print("[bold red]failed:[/] " + "; ".join(f"{text} ({flags[name]})" for name, text in missed.items()),
                  highlight=False, soft_wrap=True)
        raise typer.Exit(1)


def _show(console: Console, result, out: Path, *, show_claims: bool | None, json_summary: bool) -> None:
    """The run's verdicts (when few, or asked for) and summary; exit 130 if it was interrupted."""
    from ..experiments.report import print_summary, print_verdict
    from ..run.runner import DAMAGED, SUMMARY, VERDICTS

    if result.set_aside:
        err.print(f"set aside: {result.set_aside} damaged lines of {out / VERDICTS} (not a dialogue verdict) were "
                  f"moved to {out / DAMAGED}; their dialogues were judged again", highlight=False, soft_wrap=True)
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


def _judge(system: System, program: str | None, model: str | None, endpoint: dict, flags: dict, console: Console):
    """VISTA with its program, its saved options and the flags given (which win), or a baseline, with the options
    its endpoint sets (``endpoint_options``: from the model's name, nothing resolved); exits 2 when the program
    cannot be loaded or the flags do not go together."""
    from ..baselines import baseline
    from ..compiled.files import StaleMeta, read_program
    from ..lm.models import program_for_model

    label_probabilities = endpoint["label_probabilities"]
    endpoint = {"short_answer_tokens": endpoint["short_answer_tokens"]}
    if system is System.evidence:
        from ..experiments.bench import build_system

        try:
            return build_system("evidence", program=program or program_for_model(model), changes=flags, **endpoint)
        except (FileNotFoundError, KeyError, ValueError) as exc:
            raise fail(f"cannot load program {program or 'seed'}: {exc}") from None
    if system is not System.vista:
        if flags.get("given_claims") or program:
            raise fail(f"--judge-given-claims and --program apply to --system vista only, not {system.value}")
        return baseline(system.value, changes=flags, **endpoint)
    program = program or program_for_model(model)
    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", StaleMeta)
            file = read_program(program)
        for warning in said:
            err.print(f"[bold yellow]warning:[/] {warning.message}", highlight=False, soft_wrap=True)
        overridden = {k: v for k, v in flags.items() if k in file.options and file.options[k] != v}
        applied = {k: v for k, v in file.options.items() if k not in flags and v != JudgeOptions().as_dict()[k]}
        if applied:
            console.print(f"program {file.name} applies its saved options: "
                          + ", ".join(f"{k}={v}" for k, v in applied.items()), highlight=False)
        if overridden:
            console.print(f"flags override program {file.name}'s saved options: "
                          + ", ".join(f"{k}={v} (saved {file.options[k]})" for k, v in overridden.items()),
                          highlight=False)
        return Vista.from_program(file, **endpoint, label_probabilities=label_probabilities, **flags)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise fail(f"cannot load program {program or 'seed'}: {exc}") from None


def _progress_line(progress, dialogues: int, turns_total: int, judge, console: Console):
    """A progress task for the run, and the callback that advances it as each dialogue's verdict arrives (and says
    once when a calibrated program gets no label probabilities to calibrate)."""
    task = progress.add_task("judging", total=dialogues)
    stats = {"turns": 0, "failed": 0, "errors": 0}
    evidence_notice = evidence_only_notice(judge, console)

    def on_done(verdict) -> None:
        evidence_notice(verdict)
        stats["turns"] += len(verdict.turns)
        stats["failed"] += sum(t.error is not None or t.label == "unknown" for t in verdict.turns)
        stats["errors"] += sum(c.error is not None for t in verdict.turns for c in t.claims)
        progress.update(task, advance=1, description=f"judging ({stats['turns']}/{turns_total} turns, "
                                                     f"{stats['failed']} failed, {stats['errors']} ERROR claims)")

    return on_done

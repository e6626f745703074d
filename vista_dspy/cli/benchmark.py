"""`vista benchmark` (the paper's comparisons with one LM) and `vista report` (a run as one HTML page)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..lm.server import DEFAULT_PORT
from ..stages import PARSE_RETRIES, STOP_AFTER
from .app import app
from .common import (
    AdapterOption,
    AddressOption,
    ApiBaseOption,
    Backend,
    BackendOption,
    CacheOption,
    ClaimCallsOption,
    DataDirOption,
    EvidenceOption,
    GgufOption,
    MaxTokensOption,
    ModelOption,
    ParseRetriesOption,
    PortOption,
    RetryErrorsOption,
    StopAfterOption,
    TemperatureOption,
    WorkersOption,
    err,
    fail,
    judge_backend,
    model_setup,
    progress_bar,
    run_errors,
    slug,
    with_program_adapter,
    without_call_history,
)


# Over 80 lines only for its signature: typer declares each flag in it (40 lines); the body is 44.
@app.command()
def benchmark(
    datasets: Annotated[Optional[str], typer.Option(help="Comma-separated datasets, each optionally =PATH: vista-human, "
                                               "begin, fade, faithdial, faithdial-audit, ais, coconot, "
                                               "rgm-contradictions, vista-human:heldout-half. Without a path: the cache "
                                               "(`vista data get`), else its place under --data-dir. Default: "
                                               "begin,fade,faithdial-audit; with --suite: its datasets, or those "
                                               "named here.")
                        ] = None,
    systems: Annotated[str, typer.Option(help="Comma-separated: vista, vista-ctx (history in Verify/Categorize), "
                                              "seed (the seed program whatever --program is: with vista on "
                                              "vista-human, a table of both paired on turns and matched claims), "
                                              "evidence (the program's claims decided by evidence cues alone: "
                                              "what the judge adds), factscore, factscore-nosplit, judge.")
                       ] = "vista,factscore,factscore-nosplit,judge",
    ablations: Annotated[str, typer.Option(help="Comma-separated VISTA ablations, run as vista-<name>: no-ac, "
                                                "no-history, zero-shot, contradiction-check; and the judging "
                                                "modes batched, joint, batched-dialogue (batched, with one "
                                                "Decompose call per dialogue).")] = "",
    claim_calls: ClaimCallsOption = None,
    evidence: EvidenceOption = None,
    model: ModelOption = None,
    api_base: ApiBaseOption = None,
    gguf: GgufOption = None,
    port: PortOption = DEFAULT_PORT,
    program: Annotated[Optional[str], typer.Option(help="Saved VISTA program (default: compiled/<model>.json when "
                                                        "it exists, else the seed program).")] = None,
    n: Annotated[int, typer.Option(min=0, help="Dialogues sampled per dataset (seeded; balanced for coconot and "
                                               "rgm-contradictions); 0: all of them.")] = 50,
    seed: Annotated[int, typer.Option(help="Sampling seed.")] = 0,
    suite: Annotated[Optional[str], typer.Option(help="Run the instrument instead of --datasets/--n: the committed "
                                                      "suite of labelled turns (BEGIN, FADE, FaithDial's audit, the "
                                                      "annotated dev half), its 'compile' part (choices and gates), "
                                                      "'test' part (reports) or 'all'. Tables add balanced accuracy "
                                                      "with bootstrap intervals over dialogues.")] = None,
    data_dir: DataDirOption = None,
    out: Annotated[Optional[Path], typer.Option(help="Output directory; rerunning into it resumes every run. "
                                                     "Default: vista-runs/benchmark__<model>.")] = None,
    threads: Annotated[Optional[int], typer.Option(min=1, help="Dialogues judged in parallel (default: 1 with "
                                                              "the local model, 4 otherwise).")] = None,
    adapter: AdapterOption = None,
    temperature: TemperatureOption = None,
    max_tokens: MaxTokensOption = 1024,
    cache: CacheOption = True,
    backend: BackendOption = Backend.local,
    address: AddressOption = None,
    workers: WorkersOption = 2,
    retry_errors: RetryErrorsOption = True,
    parse_retries: ParseRetriesOption = PARSE_RETRIES,
    stop_after: StopAfterOption = STOP_AFTER,
) -> None:
    """Run the paper's comparisons with one LM: every system (and ablation) on the same seeded sample of every
    dataset. Writes table.md / table.csv (turn accuracy, McNemar marks against vista), abstention.csv (CoCoNot)
    and contradiction.csv (RGM), and one resumable run per dataset x system under OUT/runs/."""

    from ..data.location import data_dir as default_data_dir
    from ..experiments.bench import Plan, build_system, parse_datasets, run_benchmark, suite_paths, system_names
    from ..experiments.paired import paired_markdown_section
    from ..experiments.tables import markdown, skipped_lines
    from ..lm.clients.cache import use_cache_for
    from ..lm.models import program_for_model
    from ..stages import CallFailures

    try:
        if suite is not None and suite not in ("compile", "test", "all"):
            raise ValueError(f"unknown suite part {suite!r}; known: compile, test, all")
        if suite is not None:
            chosen = suite_paths(data_dir or default_data_dir(), datasets.split(",") if datasets else None)
        else:
            chosen = parse_datasets(datasets or "begin,fade,faithdial-audit", data_dir or default_data_dir())
        names = system_names([s.strip() for s in systems.split(",") if s.strip()],
                             [a.strip() for a in ablations.split(",") if a.strip()])
    except ValueError as exc:
        raise fail(str(exc)) from None
    lm_setup = model_setup(err, model, api_base=api_base, gguf=gguf, port=port, temperature=temperature,
                           max_tokens=max_tokens, cache=cache, adapter=adapter)
    config = lm_setup.config

    program = program or program_for_model(model)
    try:
        vista = build_system("vista", program=program)
        with_program_adapter(lm_setup, vista, adapter, err)
        lm_setup.judging_with(vista)
    except (FileNotFoundError, ValueError) as exc:
        raise fail(f"cannot load program {program}: {exc}") from None
    config = lm_setup.config
    err.print(f"VISTA program: {program}", highlight=False)
    plan = Plan(datasets=chosen, systems=names, n=None if suite else (n or None), seed=seed, model=config.model,
                program=program, claim_calls=claim_calls.value if claim_calls else None, settings=config.run_settings(),
                label_probabilities=lm_setup.label_probabilities, suite=suite,
                evidence=evidence.value if evidence else None)
    out = out or Path("vista-runs") / f"benchmark__{slug(model or 'local')}"
    use_cache_for(config)
    without_call_history()

    progress = progress_bar()
    # (Before the server is entered: on Ray, the nodes start their own.)
    backend = judge_backend(backend, config, lm_setup, address=address, workers=workers, api_base=api_base,
                            threads=threads)
    with run_errors(ValueError, FileNotFoundError, KeyError), lm_setup.server, progress:
        result = run_benchmark(plan, backend, out,
                               short_answer_tokens=lm_setup.short_answer_tokens, **_progress_callbacks(progress),
                               retry_errors=retry_errors, failures=CallFailures(parse_retries, stop_after))
    sys.stdout.write(markdown(result.tables, skipped_lines(out)))
    if result.paired:
        sys.stdout.write("\n" + paired_markdown_section(result.paired))
    if suite is not None:
        from ..experiments.instrument import write_suite_table

        sys.stdout.write("\n" + write_suite_table(out))
    if result.interrupted:
        err.print("interrupted: rerun the same command to resume.")
        raise typer.Exit(130)
    err.print(f"tables: {out / 'table.md'}   runs: {out / 'runs'}   report: vista report {out}", highlight=False)


def _progress_callbacks(progress) -> dict:
    """run_benchmark's callbacks: a line per loaded dataset, a progress task per run."""
    state: dict = {}

    def loaded(name, dialogues) -> None:
        from ..experiments.bench import load_record

        turns = sum(len(d.judged_turns) for d in dialogues)
        skipped = load_record(name, dialogues)["skipped"]
        said = (f"; {sum(skipped.values())} rows skipped (" + ", ".join(f"{r}: {n}" for r, n in skipped.items())
                + ")") if skipped else ""
        err.print(f"{name}: {len(dialogues)} dialogues, {turns} judged turns{said}", highlight=False)

    def on_start(dataset, system, total) -> None:
        if "task" in state:
            progress.update(state["task"], visible=False)
        state["task"] = progress.add_task(f"{dataset} / {system}", total=total)

    def on_done(verdict) -> None:
        progress.update(state["task"], advance=1)

    return {"loaded": loaded, "on_start": on_start, "on_done": on_done}


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A `vista benchmark` directory or a `vista evaluate` output "
                                                 "directory.", show_default=False)],
    out: Annotated[Optional[Path], typer.Option(help="HTML file to write (default: RUN_DIR/report.html).")] = None,
    screenshot: Annotated[Optional[Path], typer.Option(help="Also render the page in headless Chromium and save "
                                                            "a PNG here.")] = None,
) -> None:
    """Render one self-contained HTML page: tables, plots (accuracy by system, category distribution, confusion
    matrices) and a per-turn browser showing every claim with its category and reason. Given the repository's
    `benchmarks/` folder (committed records and their `results.py`), the page of RESULTS.md's tables instead."""
    from ..experiments.report import screenshot as take_screenshot
    from ..experiments.report import write_report, write_results_page
    from ..run.runner import RunConflict

    if not run_dir.is_dir():
        raise fail(f"{run_dir}: no such directory")
    try:
        if (run_dir / "results.py").is_file() and (run_dir / "RESULTS.md").is_file():
            path = write_results_page(run_dir, out or run_dir / "results.html")
        else:
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

"""`vista study` (a priced optuna study of a program's choices: accuracy against cost per judged turn) and
`vista study-page` (its page from committed results)."""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from ..lm.server import DEFAULT_PORT
from ..stages import PARSE_RETRIES, STOP_AFTER, CallFailures
from .app import app
from .common import (
    PARTS_HELP,
    ApiBaseOption,
    DataDirOption,
    GgufOption,
    ModelOption,
    NTrainOption,
    ParseRetriesOption,
    PortOption,
    ScoringThreadsOption,
    StopAfterOption,
    dspy_context,
    err,
    fail,
    model_setup,
    run_errors,
)
from .trials import study_pool


@app.command()
def study(
    context: typer.Context,
    model: ModelOption = None,
    trials: Annotated[int, typer.Option(min=1, help="Total trials wanted; a study resumed from --storage runs only "
                                                    "the missing ones.")] = 12,
    storage: Annotated[Optional[str], typer.Option(help="Optuna storage URL (default: sqlite:///STUDY_NAME.db under "
                                                        "the cache folder, ~/.cache/vista-dspy/studies: outside the "
                                                        "repository, resumable).", show_default=False)] = None,
    study_name: Annotated[Optional[str], typer.Option(help="Study name in the storage (default: "
                                                           "vista-<model>).")] = None,
    dev: Annotated[str, typer.Option(help="The labelled dialogues every trial is judged on: suite:compile (the "
                                          "instrument's compile part) or DATASET[:part]. " + PARTS_HELP)
                   ] = "suite:compile",
    train: Annotated[Optional[str], typer.Option(
        help="Human-annotated dialogues the demo pool is built from: DATASET[:part], suite:PART (that part's "
             "dialogues outside --dev), or none: every demo a starting program's own. Default: suite:compile with "
             "a --dev of the suite (the compile part's dialogues a --n-dev sample left out), else vista-human:pool.",
        show_default=False)] = None,
    n_train: NTrainOption = None,
    n_dev: Annotated[Optional[int], typer.Option(min=1, help="At most this many --dev dialogues: a seeded sample "
                                                             "(of the suite's part, each dataset keeping its "
                                                             "share).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the split, the samples, the sampler and the bootstrap.")] = 0,
    price: Annotated[Optional[str], typer.Option(help="The cost objective: time (the server's own seconds per "
                                                      "judged turn; default for the embedded model and an "
                                                      "--api-base) or dollars (litellm's cost map, per 1,000 judged "
                                                      "turns; default for a hosted model).", show_default=False)
                     ] = None,
    designs: Annotated[bool, typer.Option(help="A new study first measures the seed and the shipped program, then "
                                               "the shipped program with fewer demos, then the seed with one "
                                               "choice changed at a time, then samples with TPE.")] = True,
    export: Annotated[Optional[Path], typer.Option(help="Write the study's result here (JSON: every trial's choices, "
                                                        "both objectives, intervals; no dataset text): the committed "
                                                        "data `vista study-page` and `vista compile --budget` read.",
                                                   show_default=False)] = None,
    report: Annotated[Optional[Path], typer.Option(help="Also write the study page (HTML) here.",
                                                   show_default=False)] = None,
    queue: Annotated[Optional[list[str]], typer.Option(
        "--queue", help="TRIAL:CHOICE=VALUE[,CHOICE=VALUE...]: measure a recorded trial with some choices changed "
                        "(e.g. 15:cascade=0.40-0.60), after the planned designs and before TPE's samples; once, "
                        "however often the study is resumed. Repeatable.", show_default=False)] = None,
    from_result: Annotated[Optional[Path], typer.Option(
        "--from-result", help="A committed study result (--export) of this study: if --storage lacks the study (a new "
                              "machine, a cleared cache), it is first rebuilt from the result, trial by trial, and "
                              "resumes from there; ignored if --storage holds it.", show_default=False)] = None,
    data_dir: DataDirOption = None,
    api_base: ApiBaseOption = None,
    gguf: GgufOption = None,
    port: PortOption = DEFAULT_PORT,
    threads: ScoringThreadsOption = None,
    cache: Annotated[bool, typer.Option(help="Cache the demo pool's LM answers (trials are always judged with the "
                                             "cache off: each is priced by the calls it makes).")] = True,
    parse_retries: ParseRetriesOption = PARSE_RETRIES,
    stop_after: StopAfterOption = STOP_AFTER,
) -> None:
    """A priced study of per-model prompt choices: each trial a candidate program judged on --dev, measured on two
    objectives, balanced turn accuracy and the cost of a judged turn, by optuna's multi-objective TPE. The choices:
    per stage how many demos and whose, the units (claims, sentences or clauses), label-only answers, the judging mode, the
    starting program (the seed or the model's shipped one) and its cascade band. Prints the Pareto front; --export
    writes the result that `vista compile --budget S --study RESULT` picks from and `vista study-page` draws;
    --from-result resumes a study from that result on a machine whose store lacks it."""
    from ..data import InputError
    from .train_dev import default_train, objective_data, pool_dialogues

    try:
        data = objective_data(dev, data_dir, seed, n_dev)
        pooled = pool_dialogues(train or default_train(dev), data_dir, seed, n_train,
                                frozenset(d.id for d in data.dialogues))
    except (ValueError, InputError) as exc:
        raise fail(str(exc)) from None
    command = _command_line(context)
    lm_setup = model_setup(err, model, api_base=api_base, gguf=gguf, port=port, cache=cache)
    found = priced_study(lm_setup, data, pooled, model=model, api_base=api_base, trials=trials, storage=storage,
                         study_name=study_name, seed=seed, price=price, designs=designs, export=export,
                         queue=queue, from_result=from_result, threads=threads, parse_retries=parse_retries,
                         stop_after=stop_after, command=command)
    result = found.result
    _print_front(result)
    if export is not None:
        err.print(f"study result: {result.save(export)}", highlight=False)
    if report is not None:
        from ..experiments.study_page import write_study_page

        err.print(f"study page: {write_study_page([result], report)}", highlight=False)


@dataclasses.dataclass
class PricedStudy:
    """What ``priced_study`` leaves: the study's result, the programs its trials start from, and its demo pool (built
    only if a trial read it)."""

    result: Any
    bases: dict
    pool: Any


# Over 80 lines: the study's setup, each step a few lines (data checks, starting programs, lazy pool, queue), then
# the one call that runs it.
def priced_study(lm_setup, data, pooled, *, model: str | None, api_base: str | None, trials: int,
                 storage: str | None, study_name: str | None, seed: int, price: str | None, designs: bool,
                 export: Path | None, queue: list[str] | None, from_result: Path | None, threads: int | None,
                 parse_retries: int, stop_after: int, command: str) -> PricedStudy:
    """Run (or resume) the priced study of ``vista study`` and ``vista compile`` on ``data`` with the LM of
    ``lm_setup``: the starting programs (the seed, the model's shipped program), the demo pool from ``pooled``'s
    human annotations built the first time a trial reads it, the planned designs, then TPE. Ctrl-C keeps what is
    done (and the result so far in ``export``) and exits 130."""
    import optuna

    from ..lm.clients.cache import use_cache_for
    from ..lm.models import program_for_model, program_name_for
    from ..optimize.demos import LazyPool
    from ..optimize.metrics import price_for, price_named
    from ..optimize.study import (
        DESIGNS,
        INSTRUCTIONS,
        START_DESIGNS,
        base_params,
        program_judge,
        run_study,
        search_space,
    )
    from ..optimize.study.result import StudyStore, starting_programs, widen_space
    from ..optimize.study.result import export as export_result
    from ..program import Vista

    try:
        chosen_price = price_named(price) if price else price_for(model, api_base)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if pooled is not None and {d.id for d in pooled[0]} & {d.id for d in data.dialogues}:
        raise fail("--train and --dev share dialogues; use disjoint parts")
    config = lm_setup.config
    use_cache_for(config)
    name = program_name_for(model)
    study_name = study_name or f"vista-{name}"
    storage = storage or default_storage(study_name)
    endpoint = {"short_answer_tokens": lm_setup.short_answer_tokens,
                "label_probabilities": lm_setup.label_probabilities}
    bases = {"seed": Vista.from_program(None, **endpoint)}
    shipped = program_for_model(model)
    if shipped != "seed":
        bases[shipped] = Vista.from_program(shipped, **endpoint)
    if from_result is not None:
        _restore(from_result, storage, study_name, name)
    existing = _existing(storage, study_name)
    recorded = dict(existing.user_attrs) if existing else {}  # what it recorded about where it ran
    if recorded.get("programs"):  # a resumed study starts from the programs it began with, not today's
        try:
            bases = starting_programs(study_name, recorded["programs"], recorded.get("program_files", {}),
                                      **endpoint)
        except ValueError as exc:
            raise fail(str(exc)) from None
    instructions = {**INSTRUCTIONS, **recorded.get("instructions", {})}  # the texts its trials measured win
    lm_setup.judging_with(bases["seed"])
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # a failed trial is told in one line by run_study, not a traceback
    log = lambda message: err.print(message, highlight=False)  # noqa: E731
    workers = threads or lm_setup.threads

    def build_pool():
        """The demo pool, when a trial first reads it: the same LM answers as the study's first build, or refused."""
        pool, record = study_pool(bases["seed"], pooled, workers, log)
        kept = (recorded.get("pool") or {}).get("sha256", record["sha256"])
        if kept != record["sha256"]:
            raise ValueError(f"the demo pool built now is not the one study {study_name} measured (its LM answers "
                             "changed): a trial drawing on it would not be the one recorded; start a new study "
                             "(--study-name)")
        optuna.load_study(study_name=study_name, storage=storage).set_user_attr("pool", record)
        return pool

    pool = LazyPool(build_pool, StudyStore(storage, study_name)) if pooled is not None else None
    with _interrupt_resumes(storage, study_name, export, command), run_errors(ValueError), lm_setup.server, \
            dspy_context(config), CallFailures(parse_retries, stop_after).active():
        space = search_space(bases, pool)
        starts = {"seed": base_params("seed", bases["seed"], space)}
        if shipped in bases:  # the seed too, for a model with no compiled program: one trial, both marks
            starts["shipped"] = base_params(shipped, bases[shipped], space)
        try:
            if widen_space(storage, study_name, [c.as_dict() for c in space]):
                log(f"study {study_name}: its choices gained values since its trials ran; rebuilt it under today's")
            existing = _existing(storage, study_name) if queue else None  # read again: widen_space may rebuild it
            recorded_trials = existing.trials if existing else []
            queued = [_queued(text, recorded_trials, study_name, space) for text in queue or ()]
        except ValueError as exc:
            raise fail(f"--queue {exc}") from None
        judge = program_judge(bases, pool, threads=workers, instructions=instructions, log=log)
        found = run_study(judge, data, chosen_price, space=space, starts=starts, trials=trials, storage=storage,
                          study_name=study_name, seed=seed, designs=DESIGNS if designs else (),
                          start_designs=START_DESIGNS if designs else (), bases=bases,
                          record={"model": config.model, "model_name": name,
                                  "programs": {k: b.content_hash() for k, b in bases.items()},
                                  "program_files": {k: b.program_file().to_json() for k, b in bases.items()},
                                  "instructions": instructions},
                          queued=queued, log=log)
    return PricedStudy(export_result(found, command=command), bases, pool)


def default_storage(study_name: str) -> str:
    """Where a study lives unless --storage says: a sqlite file under the package cache, outside any repository."""
    from ..lm.clients.cache import cache_root

    folder = cache_root() / "studies"
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / (study_name + '.db')}"


def _restore(path: Path, storage: str, study_name: str, model_name: str) -> None:
    """--from-result: rebuild the study in ``storage`` from its committed result, unless the storage holds it."""
    from ..optimize.study.result import StudyResult, restore

    try:
        result = StudyResult.load(path)
    except ValueError as exc:
        raise fail(str(exc)) from None
    if result.study != study_name or (result.model_name or model_name) != model_name:
        raise fail(f"{path}: the result of study {result.study!r} of model {result.model_name}, not of "
                   f"{study_name!r} of {model_name}: pass --study-name and --model as it records")
    rebuilt = restore(result, storage)
    err.print(f"study {study_name}: rebuilt {rebuilt} trials in {storage} from {path}" if rebuilt else
              f"study {study_name}: {storage} holds it; --from-result {path} not used", highlight=False)


def _queued(text: str, trials, study_name: str, space) -> tuple[str, dict, dict, str]:
    """One --queue: (name, the recorded trial's choices, the change, the change in words) for ``run_study``;
    ``trials``: the study's trials so far."""
    from ..optimize.study.plan import LATER_CHOICES, trial_params

    number, _, changes = text.partition(":")
    choices = {c.name: c for c in space}
    if not number.strip().isdigit() or int(number) >= len(trials) or not trial_params(trials[int(number)]):
        raise ValueError(f"{text!r}: no recorded trial {number.strip()!r} in study {study_name} (TRIAL:CHOICE=VALUE)")
    change = {}
    for item in filter(None, (part.strip() for part in changes.split(","))):
        name, _, value = (x.strip() for x in item.partition("="))
        if name not in choices:
            raise ValueError(f"{text!r}: no choice {name!r} (choices: {', '.join(choices)})")
        choice = choices[name]
        named = {str(v).lower(): v for v in choice.values}
        if choice.integer and value.isdigit() and choice.values[0] <= int(value) <= choice.values[-1]:
            change[name] = int(value)
        elif not choice.integer and value.lower() in named:
            change[name] = named[value.lower()]
        else:
            raise ValueError(f"{text!r}: {name} takes {choice.values[0]} to {choice.values[-1]}" if choice.integer
                             else f"{text!r}: {name} takes one of {', '.join(map(str, choice.values))}")
    recorded = {**{k: v for k, v in LATER_CHOICES.items() if k in choices}, **trial_params(trials[int(number)])}
    if not change or set(change) - set(recorded):
        raise ValueError(f"{text!r}: name at least one CHOICE=VALUE to change, of those trial {int(number)} made "
                         f"({', '.join(recorded)})")
    return f"trial {int(number)}", recorded, change, ", ".join(f"{k}={v}" for k, v in change.items())


def _existing(storage: str, study_name: str):
    """The study in ``storage`` (None for a new one)."""
    import optuna

    try:
        return optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        return None


@contextlib.contextmanager
def _interrupt_resumes(storage: str, study_name: str, export: Path | None = None, command: str | None = None):
    """Ctrl-C or SIGTERM: the trials completed so far stay in the store, and in ``export`` if given (the result so
    far, from which --from-result rebuilds the store elsewhere); the same command resumes (the trial in flight is
    queued to run again); exit 130, no traceback."""
    try:
        yield
    except KeyboardInterrupt:
        import optuna

        from ..optimize.study.result import export as export_result

        try:
            study = optuna.load_study(study_name=study_name, storage=storage)
        except KeyError:  # interrupted before the study was created (while its demo pool was built)
            study = None
        done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials) if study else 0
        if study is not None and export is not None and "price" in study.user_attrs:
            err.print(f"study result so far: {export_result(study, command=command).save(export)}", highlight=False)
        err.print(f"interrupted: {done} trials complete in {storage}; rerun the same command to resume (the trial "
                  "in flight is queued to run again)", highlight=False)
        raise typer.Exit(130) from None


def _command_line(context) -> str:
    """The command as typed: its name and the options given on the command line (a study result records it)."""
    parts = ["vista", context.info_name or "study"]
    for param in context.command.params:
        source = context.get_parameter_source(param.name)
        if source is None or source.name != "COMMANDLINE":
            continue
        value = context.params[param.name]
        if isinstance(value, bool):
            parts.append(param.opts[0] if value or not param.secondary_opts else param.secondary_opts[0])
        elif isinstance(value, (list, tuple)):  # a repeatable option, as typed: once per value
            parts += [x for v in value for x in (param.opts[0], str(v))]
        else:
            parts += [param.opts[0], str(value)]
    return " ".join(parts)


def _print_front(result) -> None:
    """The Pareto front, cheapest first, on stdout."""
    from ..optimize.study.result import budget_range

    console = Console()
    unit = result.price_model.unit
    console.print(f"Pareto front of {result.study} ({len(result.completed())} trials completed; cost in {unit}):",
                  highlight=False)
    for trial, low, high in result.budgets():
        o = trial.outcome
        console.print(f"  trial {trial.number}{' [' + ', '.join(trial.marks) + ']' if trial.marks else ''}: "
                      f"balanced accuracy {o.balanced_accuracy:.3f} [{o.balanced_accuracy_interval[0]:.3f}, "
                      f"{o.balanced_accuracy_interval[1]:.3f}], cost {o.cost:.4g} [{o.cost_interval[0]:.4g}, "
                      f"{o.cost_interval[1]:.4g}], picked within budgets {budget_range(low, high)}; "
                      f"{result.changes(trial) or 'the seed'}", highlight=False)


@app.command(name="study-page")
def study_page_command(
    results: Annotated[list[Path], typer.Argument(help="Study results (`vista study --export`); two or more are "
                                                       "drawn side by side too.", show_default=False)],
    out: Annotated[Path, typer.Option(help="HTML file to write.")] = Path("study.html"),
) -> None:
    """The study page from committed study results, with no LM: each study's trials and Pareto front, the seed and
    the shipped program marked, the front's table with both objectives and their intervals, what each choice did."""
    from ..experiments.study_page import write_study_page
    from ..optimize.study.result import StudyResult

    try:
        loaded = [StudyResult.load(path) for path in results]
    except ValueError as exc:
        raise fail(str(exc)) from None
    for result in loaded:
        _print_front(result)
    err.print(f"study page: {write_study_page(loaded, out)}", highlight=False)

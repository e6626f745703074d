"""`vista compile` (choose a program for one model, or with --budget pick one from a study's Pareto front),
`vista study` (a priced optuna study of prompt choices: accuracy against cost) and `vista study-page` (its page from
committed results); the dialogues they read are ``train_dev``'s."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from ..lm.server import DEFAULT_PORT
from ..stages import PARSE_RETRIES, STOP_AFTER, CallFailures
from .app import app
from .common import (
    ApiBaseOption,
    CacheOption,
    DataDirOption,
    GgufOption,
    ModelOption,
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
from .trials import fitted_on_of, program_of_trial, refused_meta, save_trial

OutDirOption = Annotated[Optional[Path], typer.Option(
    help="Where the program, its meta and its card are written (default: your programs folder, $VISTA_PROGRAMS or "
         "the user data folder's vista-dspy/programs; programs are found by name there first, then among the shipped "
         "ones). A program shipped with the project is written with --out-dir vista_dspy/compiled.",
    show_default=False)]


# Over 80 lines only for its signature: typer declares each flag in it (54 lines); the body is 20.
@app.command(name="compile")
def compile_command(
    context: typer.Context,
    model: ModelOption = None,
    budget: Annotated[Optional[float], typer.Option(min=0.0, help="The most a judged turn may cost: seconds per "
                                                                  "judged turn for a local model, dollars per 1,000 "
                                                                  "judged turns for a hosted one. The most accurate "
                                                                  "front trial within it is gated against the seed "
                                                                  "(default: the most accurate front trial).",
                                                   show_default=False)] = None,
    trials: Annotated[int, typer.Option(min=1, help="Trials of the priced study (a rerun resumes it and runs only the "
                                                    "missing ones).")] = 12,
    n_dev: Annotated[Optional[int], typer.Option(min=1, help="A seeded sample of this many dialogues of the suite's "
                                                             "compile part, each dataset keeping its share (every "
                                                             "trial judges them; default all).")] = 60,
    n_test: Annotated[Optional[int], typer.Option(min=1, help="A seeded sample of this many dialogues of the suite's "
                                                              "test part, judged once at the end by the seed and the "
                                                              "chosen program (default all).", show_default=False)
                      ] = None,
    name: Annotated[Optional[str], typer.Option(help="Program name (default: the model's short name): NAME.json, "
                                                     "NAME.meta.json and its card NAME.card.md / .html in "
                                                     "--out-dir.")] = None,
    out_dir: OutDirOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the estimate (LM calls, tokens, dollars or server "
                                                            "time) and stop: no LM call.")] = False,
    study_result: Annotated[Optional[Path], typer.Option("--study", help="Instead of a new study: a committed study "
                                                                         "result (`vista study --export`) to pick "
                                                                         "from with --budget or --trial.",
                                                         show_default=False)] = None,
    trial_number: Annotated[Optional[int], typer.Option("--trial", min=0, help="With --study, instead of --budget: "
                                                                               "this trial (on the front or not), "
                                                                               "gated against the seed likewise.",
                                                        show_default=False)] = None,
    seed: Annotated[int, typer.Option(help="Seed of the samples, the sampler and the bootstrap.")] = 0,
    storage: Annotated[Optional[str], typer.Option(help="Optuna storage URL of the study (default: a sqlite file "
                                                        "under the cache folder).", show_default=False)] = None,
    price: Annotated[Optional[str], typer.Option(help="The cost objective: time (the server's own seconds per "
                                                      "judged turn; default for the embedded model and an "
                                                      "--api-base) or dollars (litellm's price map, per 1,000 "
                                                      "judged turns).", show_default=False)] = None,
    data_dir: DataDirOption = None,
    api_base: ApiBaseOption = None,
    gguf: GgufOption = None,
    port: PortOption = DEFAULT_PORT,
    threads: ScoringThreadsOption = None,
    cache: CacheOption = True,
    parse_retries: ParseRetriesOption = PARSE_RETRIES,
    stop_after: StopAfterOption = STOP_AFTER,
    always_save: Annotated[bool, typer.Option("--always-save", help="With --study: keep a trial that fails the gate "
                                                                    "as a named program (--name), its failed gate in "
                                                                    "its meta.")] = False,
    compile_data: Annotated[str, typer.Option("--compile-data", hidden=True)] = "suite:compile",
    test_data: Annotated[str, typer.Option("--test-data", hidden=True)] = "suite:test",
    pool_data: Annotated[Optional[str], typer.Option("--pool-data", hidden=True)] = None,
) -> None:
    """Compile a VISTA program for one model: a priced study of the program's design choices on the suite's compile
    part (a seeded sample of --n-dev dialogues), the most accurate front trial within --budget, gated against the
    seed (the paper's method) on the same turns, then the test part judged once by both and recorded. Writes
    NAME.json, NAME.meta.json and the program card (NAME.card.md, NAME.card.html) into your programs folder, where
    `vista evaluate --model M` finds it; prints the program's path. An estimate comes first (--dry-run: only it);
    every LM answer is cached and the study is stored, so Ctrl-C and the same command resume."""
    if study_result is None and trial_number is not None:
        raise fail("--trial takes --study (a committed study result to pick from)")
    if study_result is not None:
        if (budget is None) == (trial_number is None):
            raise fail("--study takes one of --budget (the most accurate front trial within it) or --trial N")
        _compile_within_budget(study_result, budget, trial_number, model=model, api_base=api_base, gguf=gguf,
                               port=port, data_dir=data_dir, name=name, out_dir=out_dir, always_save=always_save,
                               cache=cache, threads=threads)
        return
    _compile_by_study(context, model=model, budget=budget, trials=trials, n_dev=n_dev, n_test=n_test, name=name,
                      out_dir=out_dir, dry_run=dry_run, seed=seed, storage=storage, price=price, data_dir=data_dir,
                      api_base=api_base, gguf=gguf, port=port, threads=threads, cache=cache,
                      parse_retries=parse_retries, stop_after=stop_after,
                      specs=(compile_data, test_data, pool_data))


# Over 80 lines: the compile's steps in order (data, estimate, study, pick, gate, program, test part, save, card),
# each a few lines.
def _compile_by_study(context, *, model: str | None, budget: float | None, trials: int, n_dev: int | None,
                      n_test: int | None, name: str | None, out_dir: Path | None, dry_run: bool, seed: int,
                      storage: str | None, price: str | None, data_dir: Path | None, api_base: str | None,
                      gguf: Path | None, port: int, threads: int | None, cache: bool, parse_retries: int,
                      stop_after: int, specs: tuple[str, str, str | None]) -> None:
    """The one compile (see ``compile_command``)."""
    from ..compiled.files import programs_dir
    from ..data import InputError
    from ..lm.models import program_name_for
    from ..optimize.compile import estimate, judge_test_part, recorded_anchor
    from ..optimize.metrics import price_for, price_named
    from ..optimize.study import candidate
    from ..optimize.study.result import SEED_MARK
    from ..program import Vista
    from .study import _command_line, priced_study
    from .train_dev import default_train, objective_data, pool_dialogues

    compile_spec, test_spec, pool_spec_ = specs
    try:
        data = objective_data(compile_spec, data_dir, seed, n_dev)
        test = objective_data(test_spec, data_dir, seed, n_test)
        pooled = pool_dialogues(pool_spec_ or default_train(compile_spec), data_dir, seed, None,
                                frozenset(d.id for d in data.dialogues))
        chosen_price = price_named(price) if price else price_for(model, api_base)
    except (ValueError, InputError) as exc:
        raise fail(str(exc)) from None
    shared = {d.id for d in test.dialogues} & ({d.id for d in data.dialogues} | {d.id for d in (pooled or [[]])[0]})
    if shared:
        raise fail(f"the test part shares dialogues with what the compile chooses or fits on (e.g. {min(shared)})")
    name = name or program_name_for(model)
    # The embedded model as shipped (no other weights, no other server): its seed is the recorded anchor.
    anchor = recorded_anchor(program_name_for(model)) if gguf is None and api_base is None else None
    anchored = anchor is not None and anchor.covers(test, Vista.from_program(None), chosen_price)
    if dry_run:  # no model is set up (no weights looked for, no server): the estimate asks nothing of it
        for line in estimate(Vista.from_program(None), data.dialogues, test.dialogues, trials=trials,
                             model=_model_string(model), price_name=chosen_price.name,
                             model_name=program_name_for(model), anchored=anchored).describe():
            sys.stdout.write(line + "\n")
        return
    lm_setup = model_setup(err, model, api_base=api_base, gguf=gguf, port=port, cache=cache)
    endpoint = {"short_answer_tokens": lm_setup.short_answer_tokens,
                "label_probabilities": lm_setup.label_probabilities}
    found = estimate(Vista.from_program(None, **endpoint), data.dialogues, test.dialogues, trials=trials,
                     model=lm_setup.config.model, price_name=chosen_price.name, model_name=program_name_for(model),
                     anchored=anchored)
    for line in found.describe():
        err.print(line, highlight=False)
    command = _command_line(context)
    study = priced_study(lm_setup, data, pooled, model=model, api_base=api_base, trials=trials,
                         storage=storage, study_name=f"compile-{name}-{len(data.dialogues)}-seed{seed}", seed=seed,
                         price=chosen_price.name, designs=True, export=None, queue=None, from_result=None,
                         threads=threads, parse_retries=parse_retries, stop_after=stop_after, command=command)
    result = study.result
    folder = out_dir or programs_dir()
    err.print(f"study result: {result.save(folder / f'{name}.study.json')}", highlight=False)
    front = result.front()
    if not front:
        raise fail(f"study {result.study}: no trial completed")
    picked = result.pick(budget) if budget is not None else max(front, key=lambda t: t.accuracy)
    unit = result.price_model.unit
    if picked is None:
        raise fail(f"no front trial costs at most {budget:g} {unit}; the cheapest, trial {front[0].number}, costs "
                   f"{front[0].cost:.4g}")
    err.print(f"picked: trial {picked.number}, balanced accuracy {picked.accuracy:.3f}, cost {picked.cost:.4g} "
              f"{unit}" + (f" (within {budget:g})" if budget is not None else " (the most accurate on the front)"),
              highlight=False)
    verdict = result.gate(picked)
    for line in verdict.describe():
        err.print(line, highlight=False)
    seed_trial = SEED_MARK in picked.marks
    passed = verdict.passed and not seed_trial
    if seed_trial:
        err.print("the pick is the seed itself: nothing to compile, the seed program stays", highlight=False)
    elif not passed:
        err.print(f"refused: trial {picked.number} loses to the seed; nothing saved as {name}, the seed stays",
                  highlight=False)
    program = None
    test_record = None
    try:
        with run_errors(ValueError), lm_setup.server, dspy_context(lm_setup.config), \
                CallFailures(parse_retries, stop_after).active():
            if passed:
                program = candidate(study.bases, study.pool, picked.params, result.instructions or None)
                test_record = judge_test_part(program, study.bases["seed"], test, chosen_price,
                                              threads=threads or lm_setup.threads, anchor=anchor,
                                              log=lambda message: err.print(message, highlight=False))
    except KeyboardInterrupt:
        err.print("interrupted while judging the test part: the study is stored and the LM answers cached (unless --no-cache); rerun "
                  "the same command to finish", highlight=False)
        raise typer.Exit(130) from None
    fitted = fitted_on_of(picked, study, pooled, data_dir)
    # Whether label probabilities came: asked of an endpoint that gives none, the answers carry none (the test part
    # says, unless nothing there asked the LM); a program decides by the judge's labels and the evidence cues alone then.
    came = test_record.pop("label_probabilities") if test_record else None
    came = lm_setup.label_probabilities if came is None else came
    extra = {"test_part": test_record, "fitted_on": fitted, "label_probabilities": came,
             "estimate": found.as_dict()}
    if program is None:
        from ..experiments.program_card import write_card

        written = write_card(refused_meta(result, picked, verdict, name, budget, extra), result, folder)
        err.print(f"program card (nothing saved): {written[0]}", highlight=False)
        return
    path = save_trial(result, picked, program, verdict, name, budget, out_dir, extra=extra)
    err.print(f"program card: {path.with_name(f'{name}.card.md')}", highlight=False)
    sys.stdout.write(f"{path}\n")


def _model_string(model: str | None) -> str:
    """The litellm string a model name stands for (a short name of `vista models`, or the string itself)."""
    from ..lm.models import MODELS

    return MODELS[model].model if model in MODELS else model or "local"


def _compile_within_budget(path: Path, budget: float | None, number: int | None, *, model: str | None,
                           api_base: str | None, gguf: Path | None, port: int, data_dir: Path | None,
                           name: str | None, out_dir: Path | None, always_save: bool, cache: bool,
                           threads: int | None) -> None:
    """``vista compile --budget S --study RESULT``: the most accurate front trial costing at most S, gated against the
    seed trial on the study's turns (no LM), then built and saved if it passes (``--trial N``: that trial instead).
    An LM is needed only to rebuild the demo pool of a trial that reads pool demos."""
    from ..lm.models import program_name_for
    from ..optimize.study.result import SEED_MARK, StudyResult

    try:
        result = StudyResult.load(path)
    except ValueError as exc:
        raise fail(str(exc)) from None
    unit = result.price_model.unit
    front = result.front()
    if not front:
        raise fail(f"{path}: study {result.study} has no completed trial")
    if number is not None:
        try:
            picked = result.trial(number)
        except ValueError as exc:
            raise fail(str(exc)) from None
        if not picked.complete:
            raise fail(f"trial {number} of study {result.study} did not complete: nothing measured to gate")
    else:
        picked = result.pick(budget)
        if picked is None:
            raise fail(f"no front trial of study {result.study} costs at most {budget:g} {unit}; the cheapest, trial "
                       f"{front[0].number}, costs {front[0].cost:.4g}")
    marks = f" [{', '.join(picked.marks)}]" if picked.marks else ""
    if number is None:
        where, why = f"within {budget:g} {unit}", (f"the most accurate of {sum(t.cost <= budget for t in front)} "
                                                   "front trials within the budget")
    else:
        where, why = "asked for", f"{'on' if picked.number in {t.number for t in front} else 'off'} the front"
    err.print(f"{where}: trial {picked.number}{marks}, balanced accuracy {picked.accuracy:.3f}, cost "
              f"{picked.cost:.4g} ({why})", highlight=False)
    if SEED_MARK in picked.marks:
        err.print("that trial is the seed itself: nothing to compile, the seed program stays", highlight=False)
        return
    verdict = result.gate(picked)
    for line in verdict.describe():
        err.print(line, highlight=False)
    program_name = name or result.model_name or program_name_for(model)
    if not verdict.passed and always_save and program_name == (result.model_name or program_name_for(model)):
        raise fail(f"trial {picked.number} loses to the seed: it is kept only as a named program, never as "
                   f"{program_name}'s default (pass --name)")
    if not (verdict.passed or always_save):
        err.print(f"refused: trial {picked.number} is not saved as {program_name} (--always-save keeps it as a named "
                  "program, its failed gate in its meta)", highlight=False)
        return
    program = program_of_trial(result, picked, model=model, api_base=api_base, gguf=gguf, port=port,
                                data_dir=data_dir, cache=cache, threads=threads)
    sys.stdout.write(f"{save_trial(result, picked, program, verdict, program_name, budget, out_dir)}\n")

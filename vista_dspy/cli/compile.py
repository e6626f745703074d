"""`vista compile` (choose each predictor's demos for one model) and `vista study` (an optuna study of prompt
choices); the train / dev dialogues they read are ``train_dev``'s."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from ..lm.server import DEFAULT_PORT
from ..optimize.compile import DEFAULT_OPTIMIZER
from ..stages import PARSE_RETRIES, STOP_AFTER, CallFailures
from .app import app
from .common import (
    CLAIM_CALLS_HELP,
    ApiBaseOption,
    CacheOption,
    ClaimCalls,
    DataDirOption,
    GgufOption,
    MaxTokensOption,
    ModelOption,
    ParseRetriesOption,
    PortOption,
    StopAfterOption,
    dspy_context,
    err,
    fail,
    fraction,
    model_setup,
    run_errors,
)
from .train_dev import train_and_dev

NTrainOption = Annotated[Optional[int], typer.Option(min=1, help="At most this many training dialogues.")]
NDevOption = Annotated[Optional[int], typer.Option(min=1, help="At most this many dev dialogues.")]
PARTS_HELP = ("part: train / dev = the two halves of a seeded split grouped by dialogue (dev is the held-out half "
              "results are reported on); pool / select = the two halves of train within each source dataset (demos "
              "/ choosing); all. DATASET as in `vista benchmark`, optionally =PATH.")
ALL_CONFIGURED = "all-configured"  # --model value: every paper model this machine can reach
ScoringThreadsOption = Annotated[Optional[int], typer.Option(min=1, help="Dev dialogues scored in parallel.")]


# Over 80 lines only for its signature: typer declares each flag in it (50 lines); the body is 27.
@app.command(name="compile")
def compile_command(
    model: ModelOption = None,
    train: Annotated[str, typer.Option(help="Training dialogues, where every choice is made: DATASET[:part]. "
                                            + PARTS_HELP)] = "vista-human:train",
    dev: Annotated[str, typer.Option(help="Dialogues no choice sees, where the gate compares the seed and the "
                                          "compiled program (random-search and mipro also choose on them), same "
                                          "syntax.")] = "vista-human:dev",
    optimizer: Annotated[str, typer.Option(help="rule (a decision rule over the judge's label probabilities and "
                                                "evidence cues, fitted on the train dialogues judged end to end by "
                                                "the base program, cross-fitted by dialogue; no demo changes), "
                                                "claims (demos and judging mode chosen on the human "
                                                "claims of every train dialogue, cross-fitted by dialogue), labeled "
                                                "(demos from human annotations, the model's explanations where it "
                                                "agrees), bootstrap (dspy.BootstrapFewShot on turn labels), "
                                                "random-search (budget candidate demo sets scored on dev), mipro "
                                                "(dspy.MIPROv2: LM-proposed instructions and demo sets, budget "
                                                "candidates and trials).")] = DEFAULT_OPTIMIZER,
    demos: Annotated[str, typer.Option(help="Demos per predictor.")] = "decompose=6,verify=6,categorize=9",
    budget: Annotated[int, typer.Option(min=1, help="random-search and mipro: candidates (and mipro's trials).")] = 4,
    folds: Annotated[int, typer.Option(min=2, help="rule and claims: cross-fitting folds (by dialogue).")] = 2,
    n_train: NTrainOption = None,
    n_dev: NDevOption = None,
    seed: Annotated[int, typer.Option(help="Seed of the split, the folds, the samples and the demo selection.")] = 0,
    given_claims: Annotated[bool, typer.Option(help="Teleprompters: score candidates on the human claims of "
                                                    "annotated turns (claim and turn agreement) instead of end to "
                                                    "end.")] = False,
    name: Annotated[Optional[str], typer.Option(help="Program name (default: the model's short name); written "
                                                     "to vista_dspy/compiled/NAME.json + NAME.meta.json.")] = None,
    out_dir: Annotated[Optional[Path], typer.Option(help="Write there instead of vista_dspy/compiled/.")] = None,
    data_dir: DataDirOption = None,
    api_base: ApiBaseOption = None,
    gguf: GgufOption = None,
    port: PortOption = DEFAULT_PORT,
    threads: ScoringThreadsOption = None,
    max_tokens: MaxTokensOption = 1024,
    cache: CacheOption = True,
    parse_retries: ParseRetriesOption = PARSE_RETRIES,
    stop_after: StopAfterOption = STOP_AFTER,
    claim_calls: Annotated[Optional[ClaimCalls], typer.Option(
        help="The base program's judging mode (default: the seed's, per-claim); claims chooses the compiled "
             "program's. " + CLAIM_CALLS_HELP, show_default=False)] = None,
    alpha: Annotated[float, typer.Option(min=0.0, max=1.0, help="The gate: the compiled program is saved only if, "
                                                                 "on --dev, its claim decisions are better than the "
                                                                 "seed's with exact McNemar p below this and its turn "
                                                                 "accuracy is at most 2 points below the seed's "
                                                                 "(without human claims: its turns, p below this); "
                                                                 "1: any net win.")] = 0.05,
    always_save: Annotated[bool, typer.Option("--always-save", help="Save the compiled program even when it fails "
                                                                    "the gate (the gate is recorded in its "
                                                                    ".meta.json).")] = False,
    probe: Annotated[Optional[Path], typer.Option(help="rule: start from a recorded probe (a folder of "
                                                       "benchmarks/probes/, see benchmarks/record_probe.py) instead "
                                                       "of judging --train: no LM call; the rule is chosen and gated "
                                                       "two-fold over the probe's halves (--train / --dev unused).",
                                                  show_default=False)] = None,
    base_probe: Annotated[Optional[Path], typer.Option(help="With --probe: the seed's probe the gate compares with "
                                                            "(needed when --probe holds claims added by coverage; "
                                                            "default: --probe itself).", show_default=False)] = None,
    recipe: Annotated[str, typer.Option(help="With --probe: how the rule decides turns. turn-model: a claim "
                                             "threshold for claims and a turn model over the claims' P(unsafe) "
                                             "that knows how many claims a turn has (fitted on turn labels, chosen "
                                             "by held-out log-likelihood); two-threshold: a claim threshold and a "
                                             "lower one for each turn's most doubtful claim (the earlier recipe).")
                      ] = "turn-model",
) -> None:
    """Compile a VISTA program for one model on --train, then gate it on --dev, which no choice saw: it is saved
    (and used automatically by `vista evaluate --model M`) only if it beats the seed there; otherwise the command
    says so and the seed stays. Every LM answer is cached, so an interrupted compile resumes where it stopped.

    --model all-configured compiles each of the paper's eight models that this machine can reach -- a hosted model
    whose key is set, an open-weights model whose own endpoint is set (VISTA_API_BASE_<NAME>, e.g.
    VISTA_API_BASE_QWEN3_8B) -- one after the other, into compiled/<name>.json, and says what each skipped one
    lacks."""
    from ..data import InputError
    from ..lm.models import configured_models
    from ..optimize.compile import OPTIMIZERS
    from ..optimize.demos import parse_demos

    if optimizer not in OPTIMIZERS:
        raise fail(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if probe is not None:
        _compile_from_probe(probe, base_probe, optimizer=optimizer, model=model, name=name, out_dir=out_dir,
                            alpha=alpha, always_save=always_save, recipe=recipe)
        return
    if base_probe is not None or recipe != "turn-model":
        raise fail("--base-probe and --recipe apply with --probe only")
    try:
        budgets = parse_demos(demos)
        (train_set, train_info), (dev_set, dev_info) = train_and_dev(train, dev, data_dir, seed, n_train, n_dev)
    except (ValueError, InputError) as exc:
        raise fail(str(exc)) from None
    targets = [(model, api_base)]
    if model == ALL_CONFIGURED:
        if name:
            raise fail("--name applies to one model, not to --model all-configured")
        targets, skipped = configured_models()
        for skipped_name, missing in skipped:
            err.print(f"skip {skipped_name}: {missing}", highlight=False)
        if not targets:
            raise fail("none of the paper's models is configured (see the lines above)")
    for target, endpoint in targets:
        _compile_one(target, endpoint, train_set, dev_set, train_info, dev_info, optimizer=optimizer, budgets=budgets,
                     budget=budget, folds=folds, seed=seed, given_claims=given_claims, name=name, out_dir=out_dir,
                     gguf=gguf, port=port, threads=threads, max_tokens=max_tokens, cache=cache,
                     parse_retries=parse_retries, stop_after=stop_after,
                     claim_calls=claim_calls.value if claim_calls else None, alpha=alpha, always_save=always_save)


def _compile_one(model: str | None, api_base: str | None, train_set: list, dev_set: list, train_info: dict,
                 dev_info: dict, *, optimizer: str, budgets: dict, budget: int, folds: int, seed: int,
                 given_claims: bool, name: str | None, out_dir: Path | None, gguf: Path | None, port: int,
                 threads: int | None, max_tokens: int, cache: bool, parse_retries: int, stop_after: int,
                 claim_calls: str | None, alpha: float, always_save: bool) -> None:
    """Compile and gate the program of one model; if it passes the gate (or --always-save), save it and print its
    path on stdout."""
    from ..lm.clients.cache import use_cache_for
    from ..lm.models import program_name_for
    from ..optimize.compile import compile_program, save_compiled
    from ..program import Vista

    lm_setup = model_setup(err, model, api_base=api_base, gguf=gguf, port=port, max_tokens=max_tokens, cache=cache)
    config = lm_setup.config
    use_cache_for(config)
    name = name or program_name_for(model)
    err.print(f"compiling for {config.model} with {optimizer}: {len(train_set)} train / {len(dev_set)} dev "
              f"dialogues, demos {budgets}" + ("" if lm_setup.label_probabilities else
                                               "; the endpoint gives no label probabilities: an evidence-only rule at most"),
              highlight=False)
    base = Vista.from_program(None, short_answer_tokens=lm_setup.short_answer_tokens,
                              label_probabilities=lm_setup.label_probabilities,
                              **({"claim_calls": claim_calls} if claim_calls else {}))
    lm_setup.judging_with(base)
    with run_errors(ValueError), lm_setup.server, dspy_context(config), \
            CallFailures(parse_retries, stop_after).active():
        result = compile_program(
            train_set, dev_set, optimizer=optimizer, budgets=budgets, budget=budget, seed=seed, folds=folds,
            given_claims=given_claims, threads=threads or lm_setup.threads, base=base, alpha=alpha,
            describe={"model": config.model, "model_name": name, "train": train_info, "dev": dev_info},
            log=lambda message: err.print(message, highlight=False))
    _print_result(result)
    if not (result.passed or always_save):
        err.print(f"nothing saved for {name}: the {result.gate.base} program stays (--always-save saves it anyway)",
                  highlight=False)
        return
    path = save_compiled(result, name, out_dir)
    sys.stdout.write(f"{path}\n")


def _compile_from_probe(probe: Path, base_probe: Path | None, *, optimizer: str, model: str | None,
                        name: str | None, out_dir: Path | None, alpha: float, always_save: bool,
                        recipe: str) -> None:
    """``vista compile --probe``: the rule chosen and gated on a recorded probe, with no LM."""
    from ..lm.models import program_name_for
    from ..optimize.compile import save_compiled
    from ..optimize.probe_compile import compile_from_probe
    from ..optimize.probe_records import ProbeError

    if optimizer != "rule":
        raise fail(f"--probe applies to the rule optimizer, not {optimizer}")
    name = name or program_name_for(model)
    try:
        result = compile_from_probe(probe, base_probe, name=name, alpha=alpha, recipe_name=recipe,
                                    log=lambda message: err.print(message, highlight=False))
    except (ProbeError, ValueError) as exc:
        raise fail(f"{probe}: {exc}") from None
    _print_result(result)
    if not (result.passed or always_save):
        err.print(f"nothing saved for {name}: the seed program stays (--always-save saves it anyway)",
                  highlight=False)
        return
    sys.stdout.write(f"{save_compiled(result, name, out_dir)}\n")


def _print_result(result) -> None:
    """The compiled program's choices, both programs' scores on dev, and the gate's tests."""
    meta = result.meta
    program = result.program
    err.print(f"compiled: options {program.options.changed() or 'the defaults'}; "
              + (program.rule.describe() if program.rule else "no decision rule")
              + f"; demos {meta.demos}; cost {meta.cost.get('calls')} LM calls, {meta.cost.get('seconds_choosing')} s "
                f"choosing, {meta.cost.get('seconds_total')} s in all", highlight=False)
    for side in ("base", "compiled"):
        values = meta.scores.get(side, {})
        claims = values.get("given_claims", {})
        err.print(f"dev, {side}: turn accuracy {fraction(values.get('turn_accuracy'))}, F1 hallucinated "
                  f"{fraction(values.get('f1_hallucinated'))}"
                  + (f"; LM calls per judged turn {values['calls_per_turn']}" if "calls_per_turn" in values else "")
                  + (f"; human claims: decision accuracy {fraction(claims.get('claim_decision_accuracy'))}, "
                     f"macro-F1 {fraction(claims.get('claim_macro_f1'))}" if claims else ""), highlight=False)
    for line in result.gate.describe():
        err.print(line, highlight=False)


# Over 80 lines only for its signature: typer declares each flag in it (41 lines); the body is 50.
@app.command()
def study(
    model: ModelOption = None,
    trials: Annotated[int, typer.Option(min=1, help="Total trials wanted; a study resumed from --storage runs only "
                                                    "the missing ones.")] = 10,
    storage: Annotated[Optional[str], typer.Option(help="Optuna storage URL, e.g. sqlite:///vista-study.db "
                                                        "(default: in memory, not resumable).")] = None,
    study_name: Annotated[Optional[str], typer.Option(help="Study name in the storage (default: "
                                                           "vista-<model>).")] = None,
    train: Annotated[str, typer.Option(help="Dialogues the demos come from (human-annotated): DATASET[:part]. "
                                            + PARTS_HELP)] = "vista-human:pool",
    dev: Annotated[str, typer.Option(help="Dialogues each trial is scored on: DATASET[:part].")
                   ] = "vista-human:select",
    n_train: NTrainOption = None,
    n_dev: NDevOption = None,
    seed: Annotated[int, typer.Option(help="Seed of the split, the samples and the sampler.")] = 0,
    given_claims: Annotated[bool, typer.Option(help="Score on the human claims (claim and turn agreement).")
                            ] = False,
    apply: Annotated[bool, typer.Option("--apply", help="Save the best trial's program as compiled/<model>.json "
                                                        "(+ .meta.json) if it passes the gate (--alpha).")] = False,
    alpha: Annotated[float, typer.Option(min=0.0, max=1.0, help="The gate of --apply: the best trial must be right "
                                                                 "on more dev turns than the base program's trial "
                                                                 "(trial 0), exact McNemar p below this; 1 saves "
                                                                 "any best trial that is not the base.")] = 0.05,
    one_factor: Annotated[bool, typer.Option(help="A new study first tries the seed with one choice changed at a "
                                                  "time (demo sources, judging mode, chain of thought, +ctx), then "
                                                  "samples with TPE.")] = True,
    report: Annotated[Optional[Path], typer.Option(help="Also write an HTML page of the study: every trial, the "
                                                         "trial history, parameter importances and the gate.")
                      ] = None,
    name: Annotated[Optional[str], typer.Option(help="Program name for --apply (default: the model's).")] = None,
    out_dir: Annotated[Optional[Path], typer.Option(help="With --apply: write there instead of "
                                                         "vista_dspy/compiled/.")] = None,
    data_dir: DataDirOption = None,
    api_base: ApiBaseOption = None,
    gguf: GgufOption = None,
    port: PortOption = DEFAULT_PORT,
    threads: ScoringThreadsOption = None,
    cache: CacheOption = True,
    parse_retries: ParseRetriesOption = PARSE_RETRIES,
    stop_after: StopAfterOption = STOP_AFTER,
) -> None:
    """An optuna study of per-model prompt choices, each trial scored on dev: per predictor the demos' source (the
    seed's hand-written ones or human-annotated pool demos) and count, the selection seed, the adapter (json /
    chat), the judging mode, VISTA+ctx and Predict vs ChainOfThought per stage. Trial 0 is the seed program
    itself. Prints every trial, the best, optuna's parameter importances and the gate (best vs trial 0, exact
    McNemar on the dev turns); --apply saves the best program only if it passes the gate."""
    import optuna

    from ..data import InputError
    from ..lm.clients.cache import use_cache_for
    from ..lm.models import program_name_for
    from ..optimize.study import gate, run_study, study_tables
    from ..program import Vista

    try:
        (train_set, train_info), (dev_set, dev_info) = train_and_dev(train, dev, data_dir, seed, n_train, n_dev)
    except (ValueError, InputError) as exc:
        raise fail(str(exc)) from None
    lm_setup = model_setup(err, model, api_base=api_base, gguf=gguf, port=port, cache=cache)
    config = lm_setup.config
    use_cache_for(config)
    name = name or program_name_for(model)
    # The local server enforces a JSON schema per answer: only the JSON adapter applies there.
    adapters = ("json",) if model in (None, "local", "local-0.5b") else ("json", "chat")
    base = Vista.from_program(None, short_answer_tokens=lm_setup.short_answer_tokens,
                              label_probabilities=lm_setup.label_probabilities)
    lm_setup.judging_with(base)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with run_errors(), lm_setup.server, dspy_context(config), CallFailures(parse_retries, stop_after).active():
        found, pool, base = run_study(train_set, dev_set, trials=trials, storage=storage,
                                      study_name=study_name or f"vista-{name}", adapters=adapters, seed=seed,
                                      given_claims=given_claims, threads=threads or lm_setup.threads, base=base,
                                      one_factor=one_factor,
                                      log=lambda message: err.print(message, highlight=False))
    frame, importances = study_tables(found)
    console = Console()
    console.print(frame.to_string(index=False), highlight=False, soft_wrap=True)
    best = found.best_trial
    console.print(f"best trial {best.number}: dev agreement {best.value:.3f} with {best.params}", highlight=False)
    if importances:
        console.print("parameter importances: " + ", ".join(f"{k} {v:.2f}" for k, v in importances.items()),
                      highlight=False)
    verdict = gate(found, alpha)
    console.print(f"gate: {verdict.describe()}", highlight=False)
    if report is not None:
        from ..experiments.report import study_report

        report.write_text(study_report(found, verdict))
        err.print(f"study report: {report}", highlight=False)
    if apply and not verdict.passed:
        err.print(f"nothing saved: the base program stays ({verdict.describe()})", highlight=False)
    elif apply:
        _apply_best(found, pool, base, storage=storage, seed=seed, given_claims=given_claims, name=name,
                    out_dir=out_dir, gate=verdict, describe={"model": config.model, "model_name": name,
                                                             "train": train_info, "dev": dev_info},
                    train_set=train_set, dev_set=dev_set)


def _apply_best(found, pool, base, *, storage: str | None, seed: int, given_claims: bool, name: str,
                out_dir: Path | None, gate, describe: dict, train_set: list, dev_set: list) -> None:
    """Save the best trial's program as compiled/<name>.json (its options in the program file) + meta."""
    from ..optimize.compile import CompileResult, data_record, save_compiled
    from ..optimize.gate import ProgramMeta
    from ..optimize.study import program_from_params

    best = found.best_trial
    base_trial = found.trials[gate.base]
    program, adapter = program_from_params(base, pool, best.params)
    if adapter != "json":  # the endpoint's default otherwise
        program = program.with_options(adapter=adapter)
    meta = ProgramMeta(
        program=name, model=describe.get("model"), model_name=describe.get("model_name"), optimizer="study",
        settings={"trials": len(found.trials), "storage": storage, "study": found.study_name, "params": best.params,
                  "seed": seed, "given_claims": given_claims, "adapter": adapter},
        train=data_record(train_set, describe.get("train")), dev=data_record(dev_set, describe.get("dev")),
        scores={"base": {"program": base.program_name, "agreement": base_trial.value,
                         "turn_accuracy": base_trial.user_attrs.get("turn_accuracy")},
                "compiled": {"agreement": best.value, "turn_accuracy": best.user_attrs.get("turn_accuracy")}},
        gate=gate.gate.as_dict(), options=program.options.saved(),
        demos={n: len(p.demos) for n, p in program.named_predictors()}, dspy_version=dspy_version())
    path = save_compiled(CompileResult(program, meta, gate.gate), name, out_dir)
    err.print(f"saved {path} (with its options: {program.options.changed() or 'the defaults'})", highlight=False)


def dspy_version() -> str:
    import dspy

    return dspy.__version__

"""`vista compile` (choose a program for one model, or with --budget pick one from a study's Pareto front),
`vista study` (a priced optuna study of prompt choices: accuracy against cost) and `vista study-page` (its page from
committed results); the dialogues they read are ``train_dev``'s."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

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
OutDirOption = Annotated[Optional[Path], typer.Option(
    help="Where the program is written (default: your programs folder, $VISTA_PROGRAMS or the user data folder's "
         "vista-dspy/programs; programs are found by name there first, then among the shipped ones). A program "
         "shipped with the project is written with --out-dir vista_dspy/compiled.", show_default=False)]
ScoringThreadsOption = Annotated[Optional[int], typer.Option(min=1, help="Dev dialogues scored in parallel.")]


# Over 80 lines only for its signature: typer declares each flag in it (60 lines); the body is 35.
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
    candidates: Annotated[int, typer.Option(min=1, help="random-search and mipro: candidates (and mipro's "
                                                        "trials).")] = 4,
    budget: Annotated[Optional[float], typer.Option(min=0.0, help="With --study: the most a judged turn may cost, in "
                                                                  "the study's unit (seconds per judged turn for a "
                                                                  "local model, dollars per 1,000 judged turns for a "
                                                                  "hosted one): the most accurate front trial within "
                                                                  "it is gated against the seed and saved if it "
                                                                  "passes.", show_default=False)] = None,
    study_result: Annotated[Optional[Path], typer.Option("--study", help="A study result (`vista study --export`) "
                                                                         "to pick from with --budget or --trial.",
                                                         show_default=False)] = None,
    trial_number: Annotated[Optional[int], typer.Option("--trial", min=0, help="With --study, instead of --budget: "
                                                                               "this trial (on the front or not), "
                                                                               "gated against the seed likewise.",
                                                        show_default=False)] = None,
    folds: Annotated[int, typer.Option(min=2, help="rule and claims: cross-fitting folds (by dialogue).")] = 2,
    n_train: NTrainOption = None,
    n_dev: NDevOption = None,
    seed: Annotated[int, typer.Option(help="Seed of the split, the folds, the samples and the demo selection.")] = 0,
    given_claims: Annotated[bool, typer.Option(help="Teleprompters: score candidates on the human claims of "
                                                    "annotated turns (claim and turn agreement) instead of end to "
                                                    "end.")] = False,
    name: Annotated[Optional[str], typer.Option(help="Program name (default: the model's short name); written "
                                                     "to NAME.json + NAME.meta.json in --out-dir.")] = None,
    out_dir: OutDirOption = None,
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
    if (budget is None and trial_number is None) != (study_result is None) or None not in (budget, trial_number):
        raise fail("--study takes one of --budget (the most accurate front trial within it) or --trial N, and they "
                   "take --study (the candidates of random-search and mipro are --candidates)")
    if study_result is not None:
        _compile_within_budget(study_result, budget, trial_number, model=model, api_base=api_base, gguf=gguf,
                               port=port, data_dir=data_dir, name=name, out_dir=out_dir, always_save=always_save,
                               cache=cache, threads=threads)
        return
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
                     budget=candidates, folds=folds, seed=seed, given_claims=given_claims, name=name, out_dir=out_dir,
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


def _compile_within_budget(path: Path, budget: float | None, number: int | None, *, model: str | None,
                           api_base: str | None, gguf: Path | None, port: int, data_dir: Path | None,
                           name: str | None, out_dir: Path | None, always_save: bool, cache: bool,
                           threads: int | None) -> None:
    """``vista compile --budget S --study RESULT``: the most accurate front trial costing at most S, gated against the
    seed trial on the study's turns (no LM), then built and saved if it passes (``--trial N``: that trial instead).
    An LM is needed only to rebuild the demo pool of a trial that reads pool demos."""
    from ..lm.models import program_name_for
    from ..optimize.study_result import SEED_MARK, StudyResult

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
    program = _program_of_trial(result, picked, model=model, api_base=api_base, gguf=gguf, port=port,
                                data_dir=data_dir, cache=cache, threads=threads)
    sys.stdout.write(f"{_save_trial(result, picked, program, verdict, program_name, budget, out_dir)}\n")


def _program_of_trial(result, trial, *, model: str | None, api_base: str | None, gguf: Path | None, port: int,
                      data_dir: Path | None, cache: bool, threads: int | None):
    """The program a study trial describes, from the starting programs the study kept (checked by content hash)
    and, for a trial reading pool demos, the pool rebuilt with the LM (checked likewise)."""
    from ..optimize.study import candidate
    from ..program import Vista

    try:
        bases = result.starting_programs()
    except ValueError as exc:
        raise fail(str(exc)) from None
    pool = None
    if any(trial.params.get(f"source_{stage}") == "pool" for stage in ("decompose", "verify", "categorize")):
        from ..lm.clients.cache import use_cache_for
        from .train_dev import pool_dialogues, pool_spec

        train = (result.pool or {}).get("train") or {}
        spec = pool_spec(train)
        pooled = pool_dialogues(spec, data_dir, int(train.get("seed", 0)), None,
                                frozenset(result.data.get("dialogues", [])))
        lm_setup = model_setup(err, model or result.model_name, api_base=api_base, gguf=gguf, port=port, cache=cache)
        use_cache_for(lm_setup.config)
        seed = Vista.from_program(None, short_answer_tokens=lm_setup.short_answer_tokens,
                                  label_probabilities=lm_setup.label_probabilities)
        with run_errors(ValueError), lm_setup.server, dspy_context(lm_setup.config):
            pool, record = study_pool(seed, pooled, threads or lm_setup.threads,
                                       lambda message: err.print(message, highlight=False))
        if record["sha256"] != result.pool.get("sha256"):
            raise fail(f"the demo pool rebuilt from {spec} is not the one study {result.study} used: run the study "
                       "again")
    return candidate(bases, pool, trial.params, result.instructions or None)


def _rule_provenance(base: str, out_dir: Path | None) -> dict | None:
    """How the decision rule a trial keeps from its starting program was compiled: that program's meta settings
    (its probe, recipe and split), read before a trial saved under the same name replaces them."""
    from ..compiled.files import program_folders

    for folder in dict.fromkeys((*([out_dir] if out_dir else []), *program_folders())):
        path = folder / f"{base}.meta.json"
        if path.is_file():
            settings = json.loads(path.read_text()).get("settings") or {}
            return {"program": base, **settings.get("rule_compiled", settings)}
    return None


def _save_trial(result, trial, program, verdict, name: str, budget: float | None, out_dir: Path | None) -> Path:
    """Save a front trial's program as compiled/<name>.json with its meta: the study, the trial, the budget, both
    objectives of it and of the seed trial, and the gate."""
    from ..optimize.compile import CompileResult, save_compiled
    from ..optimize.gate import ProgramMeta
    from ..optimize.study_result import SEED_MARK

    seed = result.marked(SEED_MARK)
    rule_compiled = _rule_provenance(trial.params.get("program", SEED_MARK), out_dir) if program.rule else None

    def scores(t) -> dict:
        o = t.outcome
        return {"trial": t.number, "balanced_accuracy": o.balanced_accuracy,
                "balanced_accuracy_interval": list(o.balanced_accuracy_interval), "cost": o.cost,
                "cost_interval": list(o.cost_interval), "turn_accuracy": o.turn_accuracy,
                "claim_decisions": o.claim_decisions, "by_dataset": o.by_dataset}

    meta = ProgramMeta(
        program=name, model=result.model, model_name=result.model_name, optimizer="study",
        settings={"study": result.study, "trial": trial.number, "params": trial.params, "budget": budget,
                  "price": result.price, "command": result.command,
                  **({"rule_compiled": rule_compiled} if rule_compiled else {})},
        train=result.pool or {}, dev={k: result.data.get(k) for k in ("name", "sha256")} | {
            "dialogues": len(result.data.get("dialogues", [])), "turns": len(result.data.get("turns", []))},
        scores={"base": {"program": "seed", **scores(seed)}, "compiled": scores(trial)}, gate=verdict.as_dict(),
        options=program.options.saved(), rule=program.rule.model_dump(mode="json") if program.rule else None,
        demos={n: len(p.demos) for n, p in program.named_predictors()},
        cost={"per_judged_turn": trial.cost, "unit": result.price_model.unit}, dspy_version=dspy_version())
    return save_compiled(CompileResult(program, meta, verdict), name, out_dir)


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


# Over 80 lines only for its signature: typer declares each flag in it (45 lines); the body is 45.
def study_pool(seed_program, pooled: tuple[list, dict] | None, threads: int, log) -> tuple:
    """The demo pool from the human annotations of --train, and what a study result records of it."""
    if pooled is None:
        return None, None
    from ..optimize.demos import labeled_pool, pool_hash

    dialogues, info = pooled
    pool = labeled_pool(seed_program, dialogues, threads=threads,
                        on_dialogue=lambda v: log(f"  demo pool: judged the human claims of {v.dialogue_id}"))
    log(f"demo pool: {pool.sizes()}")
    return pool, {"train": info, "sizes": pool.sizes(), "sha256": pool_hash(pool)}


def dspy_version() -> str:
    import dspy

    return dspy.__version__

"""Per-model prompt tuning as an optuna study: demo counts per predictor, the demo selection seed, the adapter,
VISTA+ctx and Predict vs ChainOfThought per stage, each trial scored on dev dialogues; resumable from storage."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dspy

from .compiled import SEED_PROGRAM
from .optimize import DEFAULT_DEMOS, Meter, Pool, install, labeled_pool, score
from .program import REASONING_STAGES, Vista
from .schema import Dialogue

# Upper bounds of the demo counts a study tries per predictor.
STUDY_MAX_DEMOS: dict[str, int] = {"decompose": 8, "verify": 8, "categorize": 12}


def program_from_params(base: Vista, pool: Pool, params: dict[str, Any]) -> tuple[Vista, str]:
    """The program and adapter name a study trial's parameters describe."""
    budgets = {name: params[f"demos_{name}"] for name in DEFAULT_DEMOS}
    program = install(base, pool.pick(budgets, params["selection_seed"]), budgets, top_up=base)
    program.use_context = params["context"]
    program.reasoning = tuple(stage for stage in REASONING_STAGES if params.get(f"cot_{stage}"))
    return program, params["adapter"]


def run_study(
    train: Sequence[Dialogue],
    dev: Sequence[Dialogue],
    *,
    trials: int,
    storage: str | None = None,
    study_name: str = "vista",
    adapters: Sequence[str] = ("json", "chat"),
    seed: int = 0,
    given_claims: bool = False,
    threads: int = 1,
    base: Vista | None = None,
    log: Callable[[str], None] = lambda message: None,
):
    """An optuna study (TPE, maximize dev ``agreement``) over demo counts per predictor, the demo selection seed,
    the adapter, VISTA+ctx, and Predict vs ChainOfThought per stage. ``trials`` is the total wanted: a study
    resumed from ``storage`` runs only the missing ones. Returns (study, pool, base) — the pool is built once per
    session from human annotations."""
    import optuna

    from .clients import build_adapter

    base = base or Vista.from_program(SEED_PROGRAM)
    meter = Meter()
    pool = labeled_pool(base, train, meter=meter,
                        want={name: 2 * k for name, k in STUDY_MAX_DEMOS.items()})
    log(f"demo pool: {pool.sizes()}")
    study = optuna.create_study(study_name=study_name, storage=storage, direction="maximize", load_if_exists=True,
                                sampler=optuna.samplers.TPESampler(seed=seed))

    def objective(trial: optuna.Trial) -> float:
        params = {f"demos_{name}": trial.suggest_int(f"demos_{name}", 0, high)
                  for name, high in STUDY_MAX_DEMOS.items()}
        params["selection_seed"] = trial.suggest_int("selection_seed", 0, 9)
        params["adapter"] = trial.suggest_categorical("adapter", list(adapters))
        params["context"] = trial.suggest_categorical("context", [False, True])
        for stage in REASONING_STAGES:  # Predict or ChainOfThought, per stage
            params[f"cot_{stage}"] = trial.suggest_categorical(f"cot_{stage}", [False, True])
        program, adapter = program_from_params(base, pool, params)
        trial_meter = Meter()
        with dspy.context(adapter=build_adapter(adapter)):
            value = score(program, dev, given_claims=given_claims, threads=threads, meter=trial_meter)
        trial.set_user_attr("lm_calls", trial_meter.usage.total.calls)
        trial.set_user_attr("turn_accuracy", value.turn_accuracy)
        log(f"trial {trial.number}: {value.agreement:.3f} {params}")
        return value.agreement

    done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    if trials > done:
        study.optimize(objective, n_trials=trials - done)
    return study, pool, base


def study_tables(study) -> tuple[Any, dict[str, float]]:
    """(trials as a pandas DataFrame, parameter importances; empty when optuna cannot compute them yet)."""
    import optuna

    frame = study.trials_dataframe(attrs=("number", "value", "params", "user_attrs", "state"))
    try:
        importances = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError, ZeroDivisionError):
        importances = {}
    return frame, dict(importances)

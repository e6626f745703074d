"""Per-model prompt tuning as an optuna study, resumable from storage.

Each trial chooses, per predictor, where its demos come from (the base program's hand-written ones or the pool
built from human annotations) and how many, the pool's selection seed, the adapter, the judging mode (one claim
per call or a turn's claims in one call), VISTA+ctx and Predict vs ChainOfThought per stage; it is scored end to
end (or on given claims) on the dev dialogues. Trial 0 is always the base program itself, so every study holds the
baseline its winner must beat, on the same turns: ``gate`` applies an exact McNemar test between the two. The
next trials change one choice of the base at a time (``ONE_FACTOR``); then the changes that beat the base alone are
tried together, and TPE samples after that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dspy

from ..compiled.files import SEED_PROGRAM
from ..options import REASONING_STAGES
from ..program import Vista
from ..schema import Dialogue
from .demos import DEFAULT_DEMOS, Meter, Pool, install, labeled_pool
from .dev_score import score
from .gate import Gate, PairedTest

# Upper bounds of the demo counts a study tries per predictor.
STUDY_MAX_DEMOS: dict[str, int] = {"decompose": 8, "verify": 8, "categorize": 12}
JUDGING_MODES: tuple[str, ...] = ("per-claim", "batched")
# After the base trial, a fresh study tries the base with one choice changed at a time (what each lever does on its
# own, readable from a handful of trials), then lets TPE sample the whole space.
ONE_FACTOR: tuple[tuple[dict[str, Any], str], ...] = (
    ({"source_decompose": "pool"}, "Decompose demos: human claim lists"),
    ({"source_verify": "pool", "source_categorize": "pool"}, "Verify / Categorize demos: the pool's"),
    ({"claim_calls": "batched"}, "a turn's claims in one call"),
    ({"reasoning_verify": True, "reasoning_categorize": True}, "chain of thought in Verify and Categorize"),
    ({"use_context": True}, "VISTA+ctx"),
)
# Parameter names of studies recorded before the study spoke the judging options' vocabulary.
LEGACY_PARAMS = {"context": "use_context", **{f"cot_{stage}": f"reasoning_{stage}" for stage in REASONING_STAGES}}


def base_params(base: Vista, adapter: str = "json") -> dict[str, Any]:
    """The trial parameters that describe ``base`` itself: its own demos, options and judging mode."""
    options = base.options
    params: dict[str, Any] = {}
    for name in DEFAULT_DEMOS:
        params[f"source_{name}"] = "base"
        params[f"demos_{name}"] = min(len(getattr(base, name).demos), STUDY_MAX_DEMOS[name])
    params.update(selection_seed=0, adapter=adapter, use_context=options.use_context,
                  claim_calls=options.claim_calls if options.claim_calls in JUDGING_MODES else JUDGING_MODES[0])
    params.update({f"reasoning_{stage}": stage in options.reasoning for stage in REASONING_STAGES})
    return params


def options_of(params: dict[str, Any]) -> dict[str, Any]:
    """The judging options a trial's parameters set (``JudgeOptions`` names)."""
    params = {LEGACY_PARAMS.get(k, k): v for k, v in params.items()}
    changes = {"reasoning": tuple(stage for stage in REASONING_STAGES if params.get(f"reasoning_{stage}"))}
    changes.update({k: params[k] for k in ("use_context", "claim_calls") if k in params})
    return changes


def program_from_params(base: Vista, pool: Pool, params: dict[str, Any]) -> tuple[Vista, str]:
    """The program and adapter name a study trial's parameters describe. A predictor whose source is ``base``
    keeps the first k of the base program's demos; one whose source is ``pool`` gets k pool demos (a thin pool
    is topped up with the base's). Studies recorded before sources existed drew every predictor from the pool."""
    budgets = {name: params[f"demos_{name}"] for name in DEFAULT_DEMOS}
    from_pool = {name: k for name, k in budgets.items() if params.get(f"source_{name}", "pool") == "pool"}
    demos = pool.pick(from_pool, params["selection_seed"])
    demos.update({name: getattr(base, name).demos[:k] for name, k in budgets.items() if name not in from_pool})
    program = install(base, demos, budgets, top_up=base)
    return program.with_options(**options_of(params)), params["adapter"]


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
    one_factor: bool = True,
    log: Callable[[str], None] = lambda message: None,
):
    """An optuna study (TPE, maximize dev ``agreement``) over the choices of the module docstring, starting with
    the base program and (``one_factor``) the ``ONE_FACTOR`` variants of it. ``trials`` is the total wanted, the
    base program's trial included: a study resumed from ``storage`` runs only the missing
    ones. Returns (study, pool, base) — the pool is built once per session from human annotations (with the LM
    cache on, a resumed session rebuilds it from the cache)."""
    import optuna

    from ..lm.clients.adapters import build_adapter

    base = base or Vista.from_program(SEED_PROGRAM)
    meter = Meter()
    pool = labeled_pool(base, train, meter=meter, want={name: 2 * k for name, k in STUDY_MAX_DEMOS.items()},
                        on_dialogue=lambda v: log(f"  demo pool: judged the human claims of {v.dialogue_id}"))
    log(f"demo pool: {pool.sizes()}")
    study = optuna.create_study(study_name=study_name, storage=storage, direction="maximize", load_if_exists=True)
    # Seeded by the trials so far: a resumed session seeded alike would sample what the session before it sampled
    # after the same trials (a repeated trial; it happened in benchmarks/studies/local-1.5b.db, trials 11 and 12).
    study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.trials))
    if not study.trials:
        start = base_params(base, adapters[0])
        study.enqueue_trial(start, user_attrs={"base": base.program_name})
        for change, what in ONE_FACTOR if one_factor else ():
            if any(start[key] != value for key, value in change.items()):
                study.enqueue_trial({**start, **change}, user_attrs={"design": f"base, but {what}"})
        study.set_user_attr("dev_turns", [f"{d.id}#{i}" for d in dev for i in d.judged_turns])

    def objective(trial: optuna.Trial) -> float:
        params: dict[str, Any] = {}
        for name, high in STUDY_MAX_DEMOS.items():
            params[f"source_{name}"] = trial.suggest_categorical(f"source_{name}", ["base", "pool"])
            params[f"demos_{name}"] = trial.suggest_int(f"demos_{name}", 0, high)
        params["selection_seed"] = trial.suggest_int("selection_seed", 0, 9)
        params["adapter"] = trial.suggest_categorical("adapter", list(adapters))
        params["use_context"] = trial.suggest_categorical("use_context", [False, True])
        params["claim_calls"] = trial.suggest_categorical("claim_calls", list(JUDGING_MODES))
        for stage in REASONING_STAGES:  # Predict or ChainOfThought, per stage
            params[f"reasoning_{stage}"] = trial.suggest_categorical(f"reasoning_{stage}", [False, True])
        program, adapter = program_from_params(base, pool, params)
        trial_meter = Meter()
        log(f"trial {trial.number}: {params}")
        with dspy.context(adapter=build_adapter(adapter)):
            value = score(program, dev, given_claims=given_claims, threads=threads, meter=trial_meter, log=log)
        trial.set_user_attr("lm_calls", trial_meter.usage.total.calls)
        trial.set_user_attr("turn_accuracy", value.turn_accuracy)
        trial.set_user_attr("claim_accuracy", value.claim_accuracy)
        trial.set_user_attr("turns_right", value.turns_right)
        trial.set_user_attr("decomposition_f1", value.decomposition_f1)
        trial.set_user_attr("matched_category_accuracy", value.matched_category_accuracy)
        log(f"trial {trial.number}: agreement {value.agreement:.3f}, turn accuracy {value.turn_accuracy}, "
            f"decomposition F1 {value.decomposition_f1}")
        return value.agreement

    _requeue_unfinished(study)
    _combine_one_factor_winners(study, None)  # a study stopped right after its last one-factor trial
    done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    if trials > done:
        study.optimize(objective, n_trials=trials - done, callbacks=[_combine_one_factor_winners])
    return study, pool, base


def _requeue_unfinished(study) -> None:
    """A trial left RUNNING by an interrupted session, or FAILED by an outage, is marked failed and its parameters
    are queued again (once), so that a resumed study runs exactly the trials it planned. One process per study."""
    import optuna

    State = optuna.trial.TrialState
    for trial in study.trials:
        if trial.state == State.RUNNING:
            study.tell(trial.number, state=State.FAIL)
    planned = {_key(_params(t)) for t in study.get_trials(deepcopy=False, states=(State.COMPLETE, State.WAITING))}
    for trial in study.get_trials(deepcopy=False, states=(State.FAIL,)):
        params = _params(trial)
        if params and _key(params) not in planned:
            planned.add(_key(params))
            study.enqueue_trial(params, user_attrs={k: v for k, v in trial.user_attrs.items()
                                                    if k in ("base", "design")})


def _params(trial) -> dict[str, Any]:
    """A trial's parameters: those it suggested, or, before it suggested any, those it was queued with."""
    return trial.params or trial.system_attrs.get("fixed_params", {})


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted(params.items()))


def _combine_one_factor_winners(study, _trial) -> None:
    """Once every one-factor trial is complete, queue the base with every change that beat it on its own (when
    more than one did: a single winner has been tried already)."""
    import optuna

    State = optuna.trial.TrialState
    trials = study.get_trials(deepcopy=False)
    base = next((t for t in trials if "base" in t.user_attrs and t.state == State.COMPLETE), None)
    # A failed one-factor trial has been queued again (``_requeue_unfinished``): its rerun is the one that counts.
    designed = [t for t in trials if t.user_attrs.get("design", "").startswith("base, but") and t.state != State.FAIL]
    if (base is None or not designed or any(t.state != State.COMPLETE for t in designed)
            or any(t.user_attrs.get("design", "").startswith("combined") for t in trials)):
        return
    winners = [t for t in designed if t.value > base.value + 1e-9]  # the same turns judged alike: a float tie
    if len(winners) < 2:
        return
    params = dict(base.params)
    for winner in winners:
        params.update({k: v for k, v in winner.params.items() if v != base.params.get(k)})
    study.enqueue_trial(params, user_attrs={"design": "combined: the base with every change that beat it alone ("
                                            + "; ".join(t.user_attrs["design"].removeprefix("base, but ")
                                                        for t in winners) + ")"})


@dataclass
class StudyGate:
    """The study's best trial against its base trial on the same dev turns (``gate.Gate`` on turns)."""

    best: int
    base: int | None
    gate: Gate

    @property
    def passed(self) -> bool:
        """The best trial is not the base, is right on more turns, and the difference is significant at alpha."""
        return self.base is not None and self.best != self.base and self.gate.passed

    def describe(self) -> str:
        if self.base is None:
            return "the study has no base trial to compare with"
        if self.best == self.base:
            return f"the best trial is the base program's own (trial {self.base})"
        return "; ".join(self.gate.describe(f"trial {self.best}"))


def gate(study, alpha: float = 0.05) -> StudyGate:
    """Compare the best completed trial with the base trial (the one enqueued with ``base`` in its user attrs)."""
    best = study.best_trial
    base = next((t for t in study.trials if "base" in t.user_attrs and t.value is not None), None)
    if base is None or base.number == best.number:
        return StudyGate(best.number, base.number if base else None, Gate(alpha=alpha))
    try:
        test = PairedTest.of_strings(best.user_attrs.get("turns_right", ""), base.user_attrs.get("turns_right", ""))
    except ValueError:
        raise ValueError(f"trials {best.number} and {base.number} were not scored on the same dev turns") from None
    return StudyGate(best.number, base.number, Gate(alpha=alpha, turns=test, base=f"base trial {base.number}"))


def study_tables(study) -> tuple[Any, dict[str, float]]:
    """(trials as a pandas DataFrame, parameter importances; empty when optuna cannot compute them yet)."""
    import optuna

    frame = study.trials_dataframe(attrs=("number", "value", "params", "user_attrs", "state"))
    frame = frame.drop(columns=[c for c in ("user_attrs_turns_right",) if c in frame.columns])
    try:
        importances = optuna.importance.get_param_importances(study)
    except (ValueError, RuntimeError, ZeroDivisionError):
        importances = {}
    return frame, dict(importances)

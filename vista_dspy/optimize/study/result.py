"""A priced study's result as committed data (``StudyResult``, JSON): every trial with its choices, both objectives
and their intervals, and the item-wise record that lets any two trials be paired again (turn letters, hashed claim
keys, costs per dialogue; no dataset text). From it alone, with no LM and no optuna storage: the Pareto front
(optuna's own, ``front``), the most accurate front trial within a budget (``pick``), and its gate against the seed
trial (``gate``, ``gate.seed_gate``) -- what ``vista compile --budget`` and the study page read. What a study keeps
in its storage only, never in its result (demos hold dataset text): ``StudyStore``.
"""

from __future__ import annotations

import datetime as _dt
import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..gate import SeedGate, seed_gate
from ..metrics import Price
from .run import OBJECTIVES, Outcome

if TYPE_CHECKING:
    from ...program import Vista

RESULT_FORMAT = "vista-study-result"
RESULT_VERSION = 1
SEED_MARK, SHIPPED_MARK = "seed", "shipped"


class TrialRecord(BaseModel):
    """One trial: its choices, marks (``seed``, ``shipped``), design, both objectives and its outcome."""

    model_config = ConfigDict(extra="forbid")

    number: int
    state: str
    params: dict[str, Any]
    marks: list[str] = Field(default_factory=list)
    design: str | None = None
    values: list[float] | None = None  # [balanced accuracy, cost] (OBJECTIVES)
    outcome: Outcome | None = None

    @property
    def complete(self) -> bool:
        return self.state == "COMPLETE" and self.values is not None and self.outcome is not None

    @property
    def accuracy(self) -> float:
        return self.values[0]

    @property
    def cost(self) -> float:
        return self.values[1]

    def name(self) -> str:
        return f"trial {self.number}" + (f" ({', '.join(self.marks)})" if self.marks else "")


class StudyResult(BaseModel):
    """The JSON a priced study exports (``export``) and every later step reads."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["vista-study-result"] = RESULT_FORMAT
    version: int = RESULT_VERSION
    study: str
    model: str | None = None
    model_name: str | None = None
    objectives: list[list[str]] = Field(default_factory=lambda: [list(o) for o in OBJECTIVES])
    price: dict[str, Any]
    data: dict[str, Any]  # ObjectiveData.describe(): name, dialogue ids, datasets, turns, sha256
    space: list[dict[str, Any]]
    programs: dict[str, str] = Field(default_factory=dict)  # starting program name -> its content hash
    # starting program name -> its program file (ProgramFile.to_json) as the study measured it
    program_files: dict[str, dict[str, Any]] = Field(default_factory=dict)
    pool: dict[str, Any] | None = None  # where pool demos came from: train spec, sizes, content hash
    instructions: dict[str, dict[str, str]] = Field(default_factory=dict)  # variant -> stage -> the text measured
    trials: list[TrialRecord]
    command: str | None = None
    vista_dspy: str = ""
    exported: str = Field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    # ---- reading and writing ---------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path) -> StudyResult:
        path = Path(path)
        try:
            return cls.model_validate_json(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: not a study result ({' '.join(str(exc).split())[:300]})") from None

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.model_dump(mode="json"), indent=1) + "\n", encoding="utf-8")
        return path

    def starting_programs(self, **changes: Any) -> dict[str, Vista]:
        """The programs the trials start from, as the study measured them (``starting_programs``)."""
        return starting_programs(self.study, self.programs, self.program_files, **changes)

    # ---- the trials --------------------------------------------------------------------------------------------
    @property
    def price_model(self) -> Price:
        return Price.from_dict(self.price)

    def completed(self) -> list[TrialRecord]:
        return [t for t in self.trials if t.complete]

    def marked(self, mark: str) -> TrialRecord | None:
        return next((t for t in self.completed() if mark in t.marks), None)

    def trial(self, number: int) -> TrialRecord:
        found = next((t for t in self.trials if t.number == number), None)
        if found is None:
            raise ValueError(f"study {self.study} has no trial {number}")
        return found

    def front(self) -> list[TrialRecord]:
        """The completed trials no other trial dominates (optuna's ``best_trials`` over both objectives), cheapest
        first."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(directions=[direction for _, direction in self.objectives])
        for record in self.completed():
            study.add_trial(optuna.trial.create_trial(values=record.values, user_attrs={"number": record.number}))
        numbers = {t.user_attrs["number"] for t in study.best_trials}
        return sorted((t for t in self.completed() if t.number in numbers), key=lambda t: (t.cost, -t.accuracy))

    def pick(self, budget: float) -> TrialRecord | None:
        """The most accurate front trial whose cost is at most ``budget`` (the cheaper on a tie); None if none is."""
        within = [t for t in self.front() if t.cost <= budget]
        return max(within, key=lambda t: (t.accuracy, -t.cost)) if within else None

    def budgets(self) -> list[tuple[TrialRecord, float, float | None]]:
        """Which front trial ``pick`` returns at each budget: (trial, from, up to), the budgets at which the pick
        changes being the front's costs (the last trial's range has no end)."""
        front = self.front()
        return [(trial, trial.cost, front[i + 1].cost if i + 1 < len(front) else None)
                for i, trial in enumerate(front)]

    def gate(self, trial: TrialRecord, *, bootstrap_seed: int = 0) -> SeedGate:
        """``trial`` against the seed trial on the same turns and claims (``seed_gate``)."""
        seed = self.marked(SEED_MARK)
        if seed is None:
            raise ValueError(f"study {self.study} has no completed seed trial to gate against")
        turns = [(did, {"hallucinated": "h", "faithful": "f"}[gold]) for _, did, _, gold in self.data["turns"]]
        return seed_gate(turns, trial.outcome.labels, seed.outcome.labels, candidate_claims=trial.outcome.claims,
                         seed_claims=seed.outcome.claims, name=f"trial {trial.number}",
                         seed_name=f"seed (trial {seed.number})", bootstrap_seed=bootstrap_seed)

    def importances(self) -> dict[str, dict[str, float]]:
        """Per objective, optuna's parameter importances over the completed trials ({} while they cannot be
        computed: too few trials, or a choice that never varied)."""
        import optuna

        distributions = space_distributions(self.space)
        study = optuna.create_study(directions=[direction for _, direction in self.objectives])
        for record in self.completed():
            params = {k: v for k, v in record.params.items() if k in distributions}
            study.add_trial(optuna.trial.create_trial(values=record.values, params=params,
                                                      distributions={k: distributions[k] for k in params}))
        found: dict[str, dict[str, float]] = {}
        for index, (name, direction) in enumerate(self.objectives):
            sign = -1.0 if direction == "maximize" else 1.0  # optuna's evaluator rates what reaches low targets
            try:
                with warnings.catch_warnings():  # its notes on thin regimes: the page says how many trials there are
                    warnings.simplefilter("ignore")
                    found[name] = dict(optuna.importance.get_param_importances(
                        study, target=lambda t, i=index, sign=sign: sign * t.values[i]))
            except (ValueError, RuntimeError, ZeroDivisionError):
                continue
        return found

    def changes(self, trial: TrialRecord) -> dict[str, Any]:
        """The choices in which ``trial`` differs from the seed trial."""
        seed = self.marked(SEED_MARK)
        base = seed.params if seed is not None else {}
        return {k: v for k, v in trial.params.items() if base.get(k) != v}


def budget_range(low: float, high: float | None) -> str:
    """A front trial's range of budgets (``StudyResult.budgets``) in words."""
    return f"{low:.4g} and over" if high is None else f"{low:.4g} to {high:.4g}"


def starting_programs(study: str, programs: Mapping[str, str], files: Mapping[str, dict[str, Any]],
                      **changes: Any) -> dict[str, Vista]:
    """The programs a study's trials start from ({name: content hash} as recorded), each rebuilt from the program
    file the study kept, so that a trial means what it meant when it ran even after a program of that name changed
    (a new default ships). A study that kept only the hash reads the program of that name now, if its content is
    still the one measured. ``changes``: judging options that do not change a program's content (the endpoint's)."""
    from ...compiled.files import SEED_PROGRAM, ProgramFile
    from ...program import Vista

    bases = {}
    for name, recorded in programs.items():
        kept = files.get(name)
        base = Vista.from_program(ProgramFile.from_json(name, kept) if kept is not None
                                  else None if name == SEED_PROGRAM else name, **changes)
        if base.content_hash() != recorded:
            raise ValueError(f"program {name} is not the one study {study} measured (content hash "
                             f"{base.content_hash()[:12]}, not {recorded[:12]})"
                             + ("" if kept is not None else ", and the study did not keep that program: start a new "
                                "study (--study-name)"))
        bases[name] = base
    return bases


def export(study, *, command: str | None = None) -> StudyResult:
    """A study result from an optuna study that ``study.run_study`` ran (its user attributes hold the data, price,
    space and where it ran)."""
    from ... import __version__
    from .plan import trial_params

    attrs = dict(study.user_attrs)
    trials = []
    for trial in study.trials:
        if trial.state.name == "WAITING":
            continue
        outcome = trial.user_attrs.get("outcome")
        trials.append(TrialRecord(number=trial.number, state=trial.state.name, params=trial_params(trial),
                                  marks=list(trial.user_attrs.get("marks", [])),
                                  design=trial.user_attrs.get("design"),
                                  values=list(trial.values) if trial.values is not None else None,
                                  outcome=Outcome.model_validate(outcome) if outcome else None))
    return StudyResult(study=study.study_name, model=attrs.get("model"), model_name=attrs.get("model_name"),
                       objectives=attrs.get("objectives") or [list(o) for o in OBJECTIVES], price=attrs["price"],
                       data=attrs["data"], space=attrs["space"], programs=attrs.get("programs", {}),
                       program_files=attrs.get("program_files", {}), instructions=attrs.get("instructions", {}),
                       pool=attrs.get("pool"), trials=trials, command=command, vista_dspy=__version__)


class StudyStore:
    """Demos a study paid LM calls for (BootstrapFewShot's, per ``LazyPool.bootstrap`` key), kept in its optuna storage
    as user attributes named ``STORED`` + key: a resumed study reads them back instead of asking the model again. They
    hold dataset text, so a study result never exports them (``result.export``); a study rebuilt from its result
    bootstraps again (from the LM cache, when it is on)."""

    STORED = "bootstrap:"

    def __init__(self, storage: str, study_name: str) -> None:
        self.storage, self.study_name = storage, study_name

    def _study(self):
        import optuna

        return optuna.load_study(study_name=self.study_name, storage=self.storage)

    def get(self, key: str, default: Any = None) -> Any:
        return self._study().user_attrs.get(self.STORED + key, default)

    def __setitem__(self, key: str, value: Any) -> None:
        self._study().set_user_attr(self.STORED + key, value)


def space_distributions(space: list[dict[str, Any]]) -> dict[str, Any]:
    """Optuna's distribution of each choice of a recorded space (``Choice.as_dict``)."""
    import optuna

    return {c["name"]: optuna.distributions.IntDistribution(c["values"][0], c["values"][-1])
            if c.get("integer") else optuna.distributions.CategoricalDistribution(c["values"]) for c in space}


def restore(result: StudyResult, storage) -> int:
    """Rebuild a study that ``storage`` lacks from its committed result, trial by trial and under the same numbers:
    its record (data, price, space, programs, instructions), each trial's choices, objectives, outcome, marks and
    design, and a failed trial as failed (a resumed study queues it again). The study then resumes as if its store
    had never been lost: what it measured is not measured again, and its sampler draws what it would have drawn.
    Returns the number of trials rebuilt; 0 (nothing written) if ``storage`` already holds the study."""
    import optuna

    try:
        optuna.load_study(study_name=result.study, storage=storage)
        return 0
    except KeyError:
        pass
    study = optuna.create_study(study_name=result.study, storage=storage,
                                directions=[direction for _, direction in result.objectives])
    for key in ("data", "price", "space", "objectives", "model", "model_name", "pool", "programs", "program_files",
                "instructions"):
        if getattr(result, key) is not None:
            study.set_user_attr(key, getattr(result, key))
    distributions, State = space_distributions(result.space), optuna.trial.TrialState
    for record in sorted(result.trials, key=lambda t: t.number):
        while len(study.trials) < record.number:  # a trial the result left out (queued, never run): a failed blank
            study.add_trial(optuna.trial.create_trial(state=State.FAIL))
        params = {k: v for k, v in record.params.items() if k in distributions}
        attrs = {"marks": record.marks} if record.marks else {}
        attrs |= {"design": record.design} if record.design else {}
        if record.outcome is not None:
            attrs["outcome"] = record.outcome.model_dump(mode="json")
        study.add_trial(optuna.trial.create_trial(
            state=State.COMPLETE if record.complete else State.FAIL, values=record.values if record.complete else None,
            params=params, distributions={k: distributions[k] for k in params}, user_attrs=attrs))
    return len(result.trials)


def widen_space(storage: str, study_name: str, space: list[dict[str, Any]]) -> bool:
    """Optuna fixes a choice's values per study; a study whose choices gained values since its trials ran (a new
    cascade band, a wider demo range) is rebuilt under ``space`` (``Choice.as_dict``) from its own export
    (``restore``): the same trials under the same numbers, its queue planned again. A value a trial took that
    ``space`` lacks is refused (ValueError) before anything is written. Returns whether it rebuilt the study."""
    import optuna

    try:
        study = optuna.load_study(study_name=study_name, storage=storage)
    except KeyError:
        return False
    today = space_distributions(space)
    if all(today.get(name, kind) == kind for t in study.trials for name, kind in t.distributions.items()):
        return False
    result = export(study)
    for record in result.trials:
        for name, value in record.params.items():
            if not _offers(today.get(name), value):
                raise ValueError(f"study {study_name}: trial {record.number} took {name}={value!r}, which the "
                                 "study's choices no longer offer; start a new study (--study-name)")
    widened = result.model_copy(update={"space": space})
    restore(widened, optuna.storages.InMemoryStorage())  # a rehearsal: nothing is deleted unless it rebuilds
    stored = {k: v for k, v in study.user_attrs.items() if k.startswith(StudyStore.STORED)}  # not in a result
    optuna.delete_study(study_name=study_name, storage=storage)
    restore(widened, storage)
    rebuilt = optuna.load_study(study_name=study_name, storage=storage)
    for key, value in stored.items():
        rebuilt.set_user_attr(key, value)
    return True


def _offers(distribution, value) -> bool:
    """Whether a choice (an optuna distribution; None: a choice the space no longer has) offers ``value``."""
    import optuna

    if isinstance(distribution, optuna.distributions.CategoricalDistribution):
        return value in distribution.choices
    return distribution is not None and distribution.low <= value <= distribution.high

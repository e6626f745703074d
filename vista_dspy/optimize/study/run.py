"""Per-model prompt tuning as a priced optuna study: every trial is a candidate program, measured on two objectives
at once -- its balanced turn accuracy on labelled dialogues (maximised) and what a judged turn costs (minimised: the
server's own time for a local model, litellm's prices for a hosted one, ``metrics.Price``) -- so that the study's result is
a Pareto front, not one winner (``result``: the front, a pick within a budget, the seed-anchored gate).

- **The choices** a trial makes (``search_space``): per stage, how many demos and (with a demo pool built from human
  annotations) whose demos and which -- the starting program's, the pool's, or (Verify, Categorize) those
  ``dspy.BootstrapFewShot`` chooses from the pool's labelled claims; the units judged (Decompose's claims or the turn's sentences); label-only
  answers (Categorize's category without its explanation); the judging mode; Verify's and Categorize's
  instructions (their own, or the same rules in fewer words); which program it starts from (the seed,
  or the model's compiled program) and, for a program with a decision rule, the cascade's band. Each ``Choice`` says
  what it changes in the program, in words the study page prints.
- **The objective data** come through one interface, ``Judge``: given a trial's choices and the objective's labelled
  dialogues (``ObjectiveData``, e.g. the suite's compile part: ``run_study`` hands them over, so that they enter this
  module once more after they are built), the candidate's verdicts, each with the usage of the calls that reached
  the model. ``program_judge`` is the one that runs a program (the LM cache off: a cached answer costs nothing);
  tests give any function with that signature.
- **The design** (``plan``): a new study first measures the starting programs (the seed; the model's shipped
  program), each with a few changes, then the seed with one choice changed at a time (what each lever costs and buys
  on its own), then lets optuna's multi-objective TPE sample. Storage makes it resumable, and the study keeps the
  programs it starts from, so a trial means the same after a new default ships.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import BaseModel

from ...compiled.files import SEED_PROGRAM
from ...program import Vista
from ...schema import Category, Dialogue, DialogueVerdict, UsageCounts
from ...signatures import TERSE_INSTRUCTIONS
from ..demos import BOOTSTRAPPED, DEFAULT_DEMOS, Pool, install
from ..metrics import Price
from .plan import DESIGNS, NARROW_BANDS, NO_LM_BAND, START_DESIGNS, plan, requeue_unfinished

STAGES: tuple[str, ...] = tuple(DEFAULT_DEMOS)  # decompose, verify, categorize
# Instructions a trial may give some stages instead of its starting program's own: {variant: {stage: text}}. A study
# keeps the texts it measured (its record's "instructions"), and a trial is rebuilt from those.
INSTRUCTIONS: dict[str, dict[str, str]] = {"terse": TERSE_INSTRUCTIONS}
NO_CASCADE = "none"
SELECTION_SEEDS = 10
# The study's objectives, in optuna's order.
OBJECTIVES: tuple[tuple[str, str], ...] = (("balanced_accuracy", "maximize"), ("cost", "minimize"))
UNSAFE = frozenset({Category.CONTRADICTED, Category.LACKING_EVIDENCE})
LABEL_LETTERS = {"hallucinated": "h", "faithful": "f"}  # anything else (unknown) is "u": wrong for every gold


# ---- the choices -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Choice:
    """One parameter of a trial: its values (an integer range from ``values[0]`` to ``values[-1]`` when
    ``integer``), and what it changes in the program."""

    name: str
    values: tuple[Any, ...]
    what: str
    integer: bool = False

    def suggest(self, trial) -> Any:
        if self.integer:
            return trial.suggest_int(self.name, self.values[0], self.values[-1])
        return trial.suggest_categorical(self.name, list(self.values))

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "values": list(self.values), "what": self.what, "integer": self.integer}


def band_label(band) -> str:
    return NO_CASCADE if band is None else f"{band.low:.2f}-{band.high:.2f}"


def band_named(label: str):
    """The cascade band a choice names (None: no cascade, every unit asked)."""
    from ...decision import Band

    if label == NO_CASCADE:
        return None
    low, high = (float(x) for x in label.split("-"))
    return Band(low=low, high=high)


def search_space(bases: Mapping[str, Vista], pool: Pool | None = None) -> tuple[Choice, ...]:
    """The choices a trial makes, given the programs it may start from (``bases``, the seed first) and the demo
    pool (None or empty: every demo is a base program's)."""
    from ..rules.rule_fitting import BANDS

    space: list[Choice] = []
    if len(bases) > 1:
        space.append(Choice("program", tuple(bases), "the program the trial starts from: its demos, options and "
                                                     "decision rule (the seed: the paper's method, no rule)"))
    pooled = [stage for stage in STAGES if pool is not None and pool.offers(stage)]
    for stage in STAGES:
        space.append(Choice(f"demos_{stage}", (0, DEFAULT_DEMOS[stage]), f"how many demos {stage.capitalize()} "
                            "reads (each is prompt the model reads on every call)", integer=True))
        if stage in pooled:
            boot = stage in BOOTSTRAPPED
            space.append(Choice(f"source_{stage}", ("base", "pool", "bootstrap")[:3 if boot else 2], f"whose demos "
                                f"{stage.capitalize()} reads: the starting program's own, "
                                + ("ones built from human annotations, or the model's answers to the pool's labelled "
                                   "claims that dspy.BootstrapFewShot keeps (those agreeing with the annotators)"
                                   if boot else "or ones built from human annotations")))
    if pooled:
        space.append(Choice("selection_seed", (0, SELECTION_SEEDS - 1), "which pool demos (a seeded draw, "
                                                                         "stratified by label; for BootstrapFewShot, "
                                                                         "the order it asks in)", integer=True))
    space += [
        Choice("units", ("claims", "sentences", "clauses"), "what is judged: Decompose's atomic claims (VISTA's "
                                                            "method), or the turn's sentences or clauses (no call)"),
        Choice("explain_unverified", (True, False), "Categorize writes an explanation before its category (True, "
                                                    "the paper's) or answers with its category alone"),
        Choice("claim_calls", ("per-claim", "batched"), "one Verify / Categorize call per claim, or a turn's claims "
                                                        "in one call each"),
        Choice("instructions", ("base", *INSTRUCTIONS), "Verify's and Categorize's instructions: the starting "
                                                         "program's own, or the same rules in fewer words (terse)"),
        Choice("evidence_tokens", (512, 1024, 2048, 4096), "tokens of the reference a prompt reads (issue 63)"),
    ]
    ruled = [base.rule for base in bases.values() if base.rule is not None]
    if ruled:
        own = [band_label(rule.cascade) for rule in ruled]
        labels = tuple(dict.fromkeys([NO_CASCADE, *own, *(band_label(b) for b in BANDS), *NARROW_BANDS,
                                         NO_LM_BAND]))
        space.append(Choice("cascade", labels, "a program with a decision rule: the band of its evidence-only "
                                               "P(unsafe) outside which a unit is decided with no LM call "
                                               f"({NO_LM_BAND}: every unit, no LM call at all)"))
    return tuple(space)


def suggest(trial, space: Sequence[Choice], bases: Mapping[str, Vista]) -> dict[str, Any]:
    """A trial's choices (define-by-run: the cascade's band only for a program that has a rule)."""
    params: dict[str, Any] = {}
    for choice in space:
        if choice.name == "cascade" and bases[params.get("program", next(iter(bases)))].rule is None:
            continue
        params[choice.name] = choice.suggest(trial)
    return params


def base_params(name: str, base: Vista, space: Sequence[Choice]) -> dict[str, Any]:
    """The choices that describe ``base`` as it is: all its own demos, its options, its cascade."""
    names = {choice.name: choice for choice in space}
    params: dict[str, Any] = {"program": name}
    for stage in STAGES:
        params[f"demos_{stage}"] = min(len(getattr(base, stage).demos), names[f"demos_{stage}"].values[-1])
        params[f"source_{stage}"] = "base"
    params["selection_seed"] = 0
    params.update(units=base.options.units, explain_unverified=base.options.explain_unverified,
                  claim_calls=base.options.claim_calls, instructions="base",
                  evidence_tokens=base.options.evidence_tokens)
    if base.rule is not None:
        params["cascade"] = band_label(base.rule.cascade)
    kept = {k: v for k, v in params.items() if k in names}
    for key, value in kept.items():
        choice = names[key]
        if not choice.integer and value not in choice.values:
            raise ValueError(f"program {name}: its {key} ({value!r}) is not among the study's choices")
    return kept


def reads_pool(params: Mapping[str, Any]) -> bool:
    """Whether a trial's demos come from the demo pool (drawn from it, or bootstrapped from its labelled claims)."""
    return any(params.get(f"source_{stage}", "base") != "base" for stage in STAGES)


def candidate(bases: Mapping[str, Vista], pool: Pool | None, params: Mapping[str, Any],
              instructions: Mapping[str, Mapping[str, str]] | None = None) -> Vista:
    """The program a trial's choices describe. A stage whose demos come from its base keeps the first k of the
    base's; one whose demos come from the pool gets k pool demos, and one bootstrapped gets the k that
    ``dspy.BootstrapFewShot`` chooses with the pool's program as teacher (``Pool.bootstrap``; a thin pool or bootstrap
    topped up with the base's). An instructions variant's texts come from ``instructions`` (what a study measured), else from
    ``INSTRUCTIONS``."""
    from ..rules.rule_fitting import with_cascade

    base = bases[params.get("program", SEED_PROGRAM)]
    budgets = {stage: int(params.get(f"demos_{stage}", len(getattr(base, stage).demos))) for stage in STAGES}
    sources = {stage: params.get(f"source_{stage}", "base") for stage in STAGES}
    from_pool = {stage: k for stage, k in budgets.items() if sources[stage] == "pool"}
    if reads_pool(params) and pool is None:
        raise ValueError("the trial reads pool demos, but no demo pool was built (--train)")
    seed = int(params.get("selection_seed", 0))
    demos = pool.pick(from_pool, seed) if from_pool and pool is not None else {}
    demos.update({stage: pool.bootstrap(stage, k, seed) for stage, k in budgets.items()
                  if sources[stage] == "bootstrap" and pool is not None})
    demos.update({stage: getattr(base, stage).demos[:k] for stage, k in budgets.items() if sources[stage] == "base"})
    program = install(base, demos, budgets, top_up=base)
    options = {k: params[k] for k in ("units", "explain_unverified", "claim_calls", "evidence_tokens") if k in params}
    program = program.with_options(**options) if options else program
    variant = params.get("instructions", "base")
    for stage, text in ({} if variant == "base" else {**INSTRUCTIONS, **(instructions or {})}[variant]).items():
        getattr(program, stage).signature = getattr(program, stage).signature.with_instructions(text)
    if program.rule is not None and "cascade" in params:
        program.rule = with_cascade(program.rule, band_named(params["cascade"]))
    program.program_name = base.program_name
    return program


# ---- the objective data --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ObjectiveData:
    """The labelled dialogues every trial is judged on, each with its dataset (the suite's compile part: ``of``)."""

    name: str
    dialogues: tuple[Dialogue, ...]
    datasets: tuple[str, ...]

    @classmethod
    def of(cls, name: str, parts: Mapping[str, Sequence[Dialogue]]) -> ObjectiveData:
        """From {dataset: dialogues}, the shape of ``data.suite.load_suite(part)``."""
        pairs = [(dataset, d) for dataset, dialogues in parts.items() for d in dialogues]
        ids = [d.id for _, d in pairs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{name}: a dialogue id occurs twice; the study pairs programs by dialogue")
        return cls(name, tuple(d for _, d in pairs), tuple(dataset for dataset, _ in pairs))

    @cached_property
    def turns(self) -> list[tuple[str, str, int, str]]:
        """(dataset, dialogue id, turn index, gold label) of every judged turn with a gold turn label, in order."""
        return [(dataset, d.id, i, d.turns[i].gold.label)
                for dataset, d in zip(self.datasets, self.dialogues) for i in d.judged_turns
                if d.turns[i].gold is not None and d.turns[i].gold.label in LABEL_LETTERS]

    def describe(self) -> dict[str, Any]:
        """What a study result records of its data: ids and gold labels (no dataset text), and their hash."""
        record = {"name": self.name, "dialogues": [d.id for d in self.dialogues], "datasets": list(self.datasets),
                  "turns": [list(t) for t in self.turns]}
        return {**record, "sha256": hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()}


# Given a trial's choices and the objective data, the candidate's verdicts on its dialogues, each with its calls' usage.
Judge = Callable[[Mapping[str, Any], ObjectiveData], Sequence[DialogueVerdict]]


def program_judge(bases: Mapping[str, Vista], pool: Pool | None, *, threads: int = 1,
                  instructions: Mapping[str, Mapping[str, str]] | None = None,
                  log: Callable[[str], None] = lambda message: None) -> Judge:
    """The ``Judge`` that builds each trial's program (``candidate``) and runs it as ``vista evaluate`` does, with the
    LM and adapter of the current dspy context, its cache off (a trial is priced by the calls it makes)."""
    import dspy

    from ...run.runner import Threads, evaluate

    def judge(params: Mapping[str, Any], data: ObjectiveData) -> list[DialogueVerdict]:
        program = candidate(bases, pool, params, instructions)
        lm = dspy.settings.lm
        fresh = lm.copy(cache=False) if getattr(lm, "cache", False) else lm
        done: list[str] = []

        def progress(verdict: DialogueVerdict) -> None:
            done.append(verdict.dialogue_id)
            log(f"    {len(done)}/{len(data.dialogues)} dialogues judged ({verdict.dialogue_id})")

        result = evaluate(list(data.dialogues), program, Threads(fresh, dspy.settings.adapter, threads),
                          on_done=progress)
        if result.interrupted:  # never score a program on the dialogues an interrupt happened to leave judged
            raise KeyboardInterrupt
        return result.verdicts

    return judge


# ---- what a trial measured ---------------------------------------------------------------------------------------
class Outcome(BaseModel):
    """A candidate on the objective data, and the item-wise record that pairs it with any other trial (no dataset
    text: letters per turn, hashed claim keys). ``labels``: one letter per ``ObjectiveData.turns`` entry (h, f, or u
    for unknown); ``claims``: per decomposed claim carrying an annotators' judgement, its gold and its decision
    (u unsafe, s safe, e error); costs per dialogue in the price's raw unit, beside each dialogue's judged turns.
    Intervals: 95 % percentile bootstrap over dialogues."""

    balanced_accuracy: float
    balanced_accuracy_interval: tuple[float, float]
    cost: float
    cost_interval: tuple[float, float]
    turn_accuracy: float
    by_dataset: dict[str, float]
    claim_decisions: float | None = None
    claim_decisions_interval: tuple[float, float] | None = None
    calls_per_turn: float
    prompt_tokens_per_turn: float
    completion_tokens_per_turn: float
    labels: str
    claims: dict[str, str]
    cost_by_dialogue: list[float]
    turns_by_dialogue: list[int]


def claim_key(dialogue_id: str, turn_index: int, claim: str) -> str:
    """A claim by dialogue, turn and a hash of its normalised text: two programs' decisions on the same claim pair up,
    and a study result holds no claim's words."""
    from ..metrics import claim_tokens

    text = " ".join(sorted(claim_tokens(claim).elements()))
    return f"{dialogue_id}#{turn_index}#{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def measure(data: ObjectiveData, verdicts: Sequence[DialogueVerdict], price: Price, *, seed: int = 0) -> Outcome:
    """Both objectives of one candidate, with intervals, and its item-wise record."""
    from ..metrics import balanced_accuracy, balanced_accuracy_interval, grouped_interval
    from ..rules.judged_turns import UNSAFE_GOLD, label_claims

    by_id = {v.dialogue_id: v for v in verdicts}
    missing = [d.id for d in data.dialogues if d.id not in by_id]
    if missing:
        raise ValueError(f"the judge returned no verdict for {len(missing)} dialogues (e.g. {missing[0]})")
    labels = {(v.dialogue_id, t.turn_index): LABEL_LETTERS.get(t.label, "u") for v in verdicts for t in v.turns}
    letters = "".join(labels.get((did, index), "u") for _, did, index, _ in data.turns)
    gold = [LABEL_LETTERS[g] for *_, g in data.turns]
    claims: dict[str, str] = {}
    for dialogue in data.dialogues:
        for turn in by_id[dialogue.id].turns:
            human = label_claims(dialogue, turn.turn_index, [c.claim for c in turn.claims], turn.claims_source)
            for claim, judgement in zip(turn.claims, human):
                if judgement is None or claim.added_by == "coverage":
                    continue
                decision = "e" if claim.category == Category.ERROR else "u" if claim.category in UNSAFE else "s"
                claims[claim_key(dialogue.id, turn.turn_index, claim.claim)] = \
                    ("u" if judgement in UNSAFE_GOLD else "s") + decision
    ordered = [by_id[d.id] for d in data.dialogues]
    cost_by_dialogue = [price.of(v.usage) for v in ordered]
    turns_by_dialogue = [len(v.turns) for v in ordered]
    judged = sum(turns_by_dialogue)
    total = sum((v.usage.total for v in ordered), UsageCounts())
    groups = [did for _, did, _, _ in data.turns]
    claim_groups = [key.split("#", 1)[0] for key in claims]
    claim_gold, claim_pred = [v[0] for v in claims.values()], [v[1] for v in claims.values()]
    by_dataset: dict[str, tuple[list[str], list[str]]] = {}
    for (dataset, *_), g, p in zip(data.turns, gold, letters):
        by_dataset.setdefault(dataset, ([], []))[0].append(g)
        by_dataset[dataset][1].append(p)
    return Outcome(
        balanced_accuracy=round(balanced_accuracy(gold, letters), 6),
        balanced_accuracy_interval=_rounded(balanced_accuracy_interval(gold, letters, groups, seed=seed)),
        cost=round(price.per_turn(sum(cost_by_dialogue), judged), 6),
        cost_interval=_rounded(grouped_interval(lambda cost, turns: price.scale * cost / turns,
                                                [cost_by_dialogue, turns_by_dialogue], seed=seed)),
        turn_accuracy=round(sum(g == p for g, p in zip(gold, letters)) / len(gold), 6),
        by_dataset={k: round(balanced_accuracy(g, p), 6) for k, (g, p) in by_dataset.items()},
        claim_decisions=round(balanced_accuracy(claim_gold, claim_pred), 6) if claims else None,
        claim_decisions_interval=_rounded(balanced_accuracy_interval(claim_gold, claim_pred, claim_groups, seed=seed))
        if len(set(claim_groups)) >= 2 else None,  # one dialogue's claims cannot be resampled
        calls_per_turn=round(total.calls / judged, 4) if judged else 0.0,
        prompt_tokens_per_turn=round(total.prompt_tokens / judged, 2) if judged else 0.0,
        completion_tokens_per_turn=round(total.completion_tokens / judged, 2) if judged else 0.0,
        labels=letters, claims=claims, cost_by_dialogue=[round(c, 9) for c in cost_by_dialogue],
        turns_by_dialogue=turns_by_dialogue)


def _rounded(pair: tuple[float, float]) -> tuple[float, float]:
    return round(pair[0], 6), round(pair[1], 6)


# ---- the study -------------------------------------------------------------------------------------------------------
def run_study(judge: Judge, data: ObjectiveData, price: Price, *, space: Sequence[Choice],
              starts: Mapping[str, dict[str, Any]], trials: int, storage: str | None = None,
              study_name: str = "vista", seed: int = 0, designs: Sequence[tuple[dict[str, Any], str]] = DESIGNS,
              start_designs: Sequence[tuple[dict[str, Any], str]] = START_DESIGNS,
              record: Mapping[str, Any] | None = None, bases: Mapping[str, Vista] | None = None,
              queued: Sequence[tuple[str, dict[str, Any], dict[str, Any], str]] = (),
              log: Callable[[str], None] = lambda message: None):
    """A multi-objective optuna study (balanced accuracy up, cost per judged turn down) of ``trials`` trials in all:
    a study resumed from ``storage`` runs only the missing ones. It first measures ``starts`` ({mark: params}: the
    seed first, then e.g. the shipped program), then each other start with each of ``start_designs``, then the seed
    with each of ``designs`` (those whose choices are in ``space``; a resumed study queues the ones added since it
    began), then ``queued`` ((name, params, change, what): a recorded trial's choices with a change the user asked
    for), then optuna's TPE samples. ``record``: where it ran (model, pool, programs), kept in the storage."""
    import optuna

    study = optuna.create_study(study_name=study_name, storage=storage, load_if_exists=True,
                                directions=[direction for _, direction in OBJECTIVES])
    log(f"study {study_name}" + (f" in {storage}" if storage else "") + f": {len(data.turns)} labelled turns of "
        f"{len(data.dialogues)} dialogues ({data.name}); cost in {price.unit}")
    described = data.describe()
    if study.trials:
        recorded = study.user_attrs.get("data", {}).get("sha256")
        if recorded != described["sha256"]:
            raise ValueError(f"study {study_name!r} in {storage} was run on other dialogues or turns than "
                             f"{data.name}: resume it on the same data, or start a new study (--study-name)")
        if study.user_attrs.get("price", {}).get("name") != price.name:
            raise ValueError(f"study {study_name!r} in {storage} priced its trials by "
                             f"{study.user_attrs.get('price', {}).get('name')}, not {price.name}: resume it with "
                             "the same --price, or start a new study (--study-name)")
    # Seeded by the trials so far: a resumed session samples what a session that never stopped would have.
    study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.trials))
    # A resumed study keeps what it recorded and gains what it lacks (the program files, for one begun without);
    # its space is today's (a choice added since is one its new trials make), and so are its instruction variants
    # (``record``'s: those it measured, and any added since).
    for key, value in {"data": described, "price": price.as_dict(), "space": [c.as_dict() for c in space],
                       "objectives": [list(o) for o in OBJECTIVES], **(record or {})}.items():
        if key not in study.user_attrs or key in ("space", "instructions"):
            study.set_user_attr(key, value)
    requeue_unfinished(study, {choice.name for choice in space})
    plan(study, starts, [(mark, start, change, what) for mark, start in list(starts.items())[1:]
                          for change, what in start_designs]
          + [(next(iter(starts)), next(iter(starts.values())), change, what) for change, what in designs]
          + list(queued),
          {choice.name for choice in space})
    bases = bases or {}
    spent = [0.0]  # what this session's trials cost so far, in the price's raw unit (seconds, dollars)

    def objective(trial: optuna.Trial) -> tuple[float, float]:
        params = suggest(trial, space, bases) if bases else {c.name: c.suggest(trial) for c in space}
        log(f"trial {trial.number}: {params}")
        try:
            verdicts = judge(params, data)
        except Exception as exc:  # optuna marks it failed; a resumed study runs it again (requeue_unfinished)
            log(f"trial {trial.number} failed ({type(exc).__name__}: {exc}); a rerun of the study runs it again")
            raise
        outcome = measure(data, verdicts, price, seed=seed)
        trial.set_user_attr("outcome", outcome.model_dump(mode="json"))
        spent[0] += sum(outcome.cost_by_dialogue)
        log(f"trial {trial.number}: balanced accuracy {outcome.balanced_accuracy:.3f} "
            f"{list(outcome.balanced_accuracy_interval)}, {outcome.cost:.4g} {price.unit}; this session so far "
            + (f"${spent[0]:,.2f}" if price.name == "dollars" else f"{spent[0]:,.0f} s of server time"))
        return outcome.balanced_accuracy, outcome.cost

    done = sum(t.state == optuna.trial.TrialState.COMPLETE for t in study.trials)
    if trials > done:
        study.optimize(objective, n_trials=trials - done)
    return study

"""The plan of a priced study (``study.run_study``): what it measures before optuna samples -- the starting programs,
each with a few changes (``START_DESIGNS``), then the seed with one choice changed at a time (``DESIGNS``) -- and how a
resumed study keeps that plan: a trial an interruption left unfinished is queued again, and a design added since the
study began is queued, unless a trial with the same choices is already in it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NO_LM_BAND = "0.50-0.50"  # an empty cascade band: the evidence decides every unit, with no LM call
# Bands narrower than those a rule is fitted with (rule_fitting.BANDS, down to 0.25-0.75): fewer units asked, each
# where the evidence alone is least sure -- the cost lever between a rule's own band and no LM call at all.
NARROW_BANDS: tuple[str, ...] = ("0.30-0.70", "0.35-0.65", "0.40-0.60", "0.45-0.55")
# The seed with one choice changed at a time (those of the study's space), after the starting programs.
DESIGNS: tuple[tuple[dict[str, Any], str], ...] = (
    ({"units": "sentences"}, "the turn's sentences as units (no Decompose call)"),
    ({"explain_unverified": False}, "label-only answers from Categorize"),
    ({"claim_calls": "batched"}, "a turn's claims in one Verify and one Categorize call"),
    ({"demos_decompose": 2, "demos_verify": 2, "demos_categorize": 3}, "a third of the demos"),
    ({"demos_decompose": 0, "demos_verify": 0, "demos_categorize": 0}, "no demos"),
    ({"instructions": "terse"}, "terse Verify and Categorize instructions"),
    ({"source_verify": "pool", "source_categorize": "pool"}, "Verify / Categorize demos from the pool"),
    ({"source_verify": "bootstrap", "source_categorize": "bootstrap"}, "Verify / Categorize demos by BootstrapFewShot"),
    ({"source_decompose": "pool"}, "Decompose demos from human claim lists"),
    ({"units": "clauses"}, "the turn's clauses as units (no Decompose call)"),
)


# Every other starting program (the model's shipped one) with one change, measured right after the starts: what its
# LM calls buy (none at all, for a program with a rule) and what its prompt costs (its few-shot demos are most of
# what a judged turn reads). A change the start cannot take (a cascade band, for a program with no rule) is skipped.
START_DESIGNS: tuple[tuple[dict[str, Any], str], ...] = (
    ({"cascade": NO_LM_BAND}, "no LM call (its rule decides every unit from the evidence)"),
    ({"demos_decompose": 0, "demos_verify": 0, "demos_categorize": 0}, "no demos"),
    ({"demos_decompose": 2, "demos_verify": 2, "demos_categorize": 3}, "a third of the demos"),
    ({"demos_decompose": 1, "demos_verify": 1, "demos_categorize": 1}, "one demo per stage"),
    ({"instructions": "terse"}, "terse instructions"),
    ({"instructions": "terse", "demos_decompose": 1, "demos_verify": 1, "demos_categorize": 1},
     "terse instructions and one demo per stage"),
    ({"instructions": "terse", "demos_decompose": 0, "demos_verify": 0, "demos_categorize": 0},
     "terse instructions and no demos"),
)


# Choices added after studies began, with the value that does what a trial from before them did.
LATER_CHOICES: dict[str, Any] = {"instructions": "base", "evidence_tokens": 1024}


def plan(study, starts: Mapping[str, dict[str, Any]], designs: Sequence[tuple[str, dict, dict, str]],
         names: set[str]) -> None:
    """Queue each start, then each design (mark, start, change, what) whose choices are in the space (``names``) and
    the start's, unless a trial with the same choices is already in the study."""
    planned = [{**LATER_CHOICES, **trial_params(trial)} for trial in study.trials]
    queue = [(params, {"marks": [m for m, p in starts.items() if p == params]}) for params in starts.values()]
    queue += [({**start, **change}, {"design": f"{mark}, but {what}"}) for mark, start, change, what in designs
              if set(change) <= names & set(start)]
    for params, attrs in queue:
        if {**LATER_CHOICES, **params} not in planned:
            planned.append({**LATER_CHOICES, **params})
            study.enqueue_trial(params, user_attrs=attrs)


def requeue_unfinished(study, names: set[str] | None = None) -> None:
    """A trial left RUNNING by an interrupted session, or FAILED by an outage, is marked failed and its parameters
    are queued again (once), so that a resumed study runs exactly the trials it planned; a choice of the space
    (``names``) added since it failed is queued at the value that does what the trial did (``LATER_CHOICES``), not
    left for the sampler. One process per study."""
    import optuna

    State = optuna.trial.TrialState
    later = {k: v for k, v in LATER_CHOICES.items() if names is None or k in names}
    for trial in study.trials:
        if trial.state == State.RUNNING:
            study.tell(trial.number, state=State.FAIL)
    waiting = study.get_trials(deepcopy=False, states=(State.WAITING,))
    if any(set(later) - set(trial_params(t)) for t in waiting):
        # Queued before a choice existed: run as it is, the sampler would draw that choice. Every waiting trial is
        # taken off the queue (optuna has no other way) and queued again, in order, with the choice at its old value.
        for trial in waiting:
            study.tell(study.ask(), state=State.FAIL)
            study.enqueue_trial({**later, **trial_params(trial)}, user_attrs=dict(trial.user_attrs))
    kept = [(t, {**later, **trial_params(t)})
            for t in study.get_trials(deepcopy=False, states=(State.COMPLETE, State.WAITING))]
    planned = {params_key(choices) for _, choices in kept}
    for trial in study.get_trials(deepcopy=False, states=(State.FAIL,)):
        params = {**later, **trial_params(trial)} if trial_params(trial) else {}
        if params and params_key(params) not in planned and not requeued(trial, params, kept):
            planned.add(params_key(params))
            study.enqueue_trial(params, user_attrs={k: v for k, v in trial.user_attrs.items()
                                                    if k in ("marks", "design")})


def requeued(failed, params: Mapping[str, Any], kept: Sequence[tuple[Any, Mapping[str, Any]]]) -> bool:
    """Whether a later kept trial (``kept``: each with its choices, a choice it predates at its old value) is
    ``failed``'s requeue: the same design and marks, and every choice ``failed`` had made (a trial rebuilt from a
    result keeps only those it had suggested, so its requeue's own choices are a superset of them; without this check
    every resume would queue it again, the rest left to the sampler)."""
    attrs = {k: failed.user_attrs.get(k) for k in ("marks", "design")}
    return any(t.number > failed.number and {k: t.user_attrs.get(k) for k in attrs} == attrs
               and params.items() <= choices.items() for t, choices in kept)


def trial_params(trial) -> dict[str, Any]:
    """A trial's parameters: those it was queued with, and those it suggested (a trial that failed while suggesting
    has suggested only some of them)."""
    return {**trial.system_attrs.get("fixed_params", {}), **trial.params}


def params_key(params: Mapping[str, Any]) -> tuple:
    return tuple(sorted(params.items()))

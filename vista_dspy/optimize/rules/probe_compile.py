"""Compiling from a recorded live probe, with no LM: the arithmetic of ``vista compile --probe DIR``. The probe must
record the program it compiles (``probe_program``); the rule is chosen two-fold over the probe's halves and gated
against the seed's own labels (``rule_gate``), and the program is saved with its meta.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...decision import DecisionRule
from .judged_turns import TurnRows
from .rule_fitting import with_cascade
from .rule_gate import (
    by_claim_count,
    cascade_choice,
    choose_turn_model_rule,
    choose_two_threshold_rule,
    gate,
    seed_decisions,
    summary,
    turn_difference_interval,
    two_fold,
)

if TYPE_CHECKING:
    from ..compile import CompileResult


class NotLive(ValueError):
    """A probe that does not record the program it would compile (no program hash, or another program's)."""


def probe_program(meta: dict[str, Any], has_coverage: bool, name: str):
    """The program a probe recorded, rebuilt: the seed's demos and instructions with the probe's saved judging
    options (those a program file keeps: coverage, units, explain_unverified ...), checked against the probe's
    program hash. A probe without a hash, or of another program (e.g. a replay of the seed's claims judged again),
    is refused: a rule is fitted only on the program as it ran."""
    from ...options import NOT_SAVED, JudgeOptions
    from ...program import Vista

    recorded_options = {k: v for k, v in (meta.get("options") or {}).items()
                        if k in JudgeOptions.model_fields and k not in NOT_SAVED}
    program = Vista.from_program(None, **{**recorded_options, "coverage": has_coverage})
    program.program_name = name
    recorded = meta.get("program_sha256")
    if recorded is None:
        raise NotLive("the probe names no program hash: it is not a recording of a program as it runs "
                      "(benchmarks/record_probe.py records one from a `vista evaluate` run)")
    if recorded != program.content_hash():
        raise NotLive(f"the probe recorded program {recorded[:12]}, not the program it would compile "
                      f"({program.content_hash()[:12]}: the seed with the probe's options): "
                      "record a probe of that program")
    return program


# Each recipe by name: how it chooses a rule on judged turns, returning (rule, its record).
RECIPES = {"turn-model": choose_turn_model_rule, "two-threshold": choose_two_threshold_rule}
DEFAULT_RECIPE = "turn-model"


def recipe_of(name: str) -> Callable[[Sequence[TurnRows]], DecisionRule]:
    """The rule the recipe ``name`` chooses on a part of the turns (what ``two_fold`` and the cascade call)."""
    choose = RECIPES[name]

    def recipe(part: Sequence[TurnRows]) -> DecisionRule:
        return choose(part)[0]

    return recipe


def compile_from_probe(probe: Path, base_probe: Path | None = None, *, name: str = "local", alpha: float = 0.05,
                       recipe_name: str = DEFAULT_RECIPE, log: Callable[[str], None] = lambda message: None
                       ) -> CompileResult:
    """The ``rule`` optimizer on a recorded live probe, with no LM: the rule (``turn-model``: a claim threshold and
    a turn model, ``choose_turn_model_rule``; ``two-threshold``: the earlier claim and turn thresholds) scored
    two-fold over the probe's halves against the base's own labels (``base_probe``'s, else the probe's: the seed
    program), gated (``gate``), the cascade tried (``cascade_choice``), then fitted on every turn. The program is
    the probe's own (``probe_program``: its hash must match) with the rule."""
    import time

    import dspy

    from ..compile import CompileResult
    from ..gate import ProgramMeta
    from .probe_records import read_probe

    if recipe_name not in RECIPES:
        raise ValueError(f"unknown recipe {recipe_name!r}; choose one of {', '.join(RECIPES)}")
    started = time.perf_counter()
    turns, half_of, meta = read_probe(probe)
    has_coverage = any(r.cues.get("coverage", 0.0) == 1.0 for t in turns for r in t.rows)
    if has_coverage and base_probe is None:
        raise ValueError(f"{probe} holds claims added by coverage: give the seed's probe as the base "
                         "(--base-probe), so that the gate compares with the seed's own labels")
    program = probe_program(meta, has_coverage, name)
    base_turns, _, base_meta = read_probe(base_probe) if base_probe else (turns, half_of, meta)
    if base_probe is not None and base_meta.get("program_sha256") is None:
        raise NotLive(f"{base_probe} names no program hash: the gate's base must be the seed as it runs")
    base = seed_decisions(base_turns)
    recipe = recipe_of(recipe_name)

    log(f"two-fold over {len(turns)} turns ({len(set(half_of.values()))} halves of {len(half_of)} dialogues)")
    decided, rules = two_fold(turns, half_of, recipe)
    verdict = gate(decided, base, alpha=alpha)
    for line in verdict.describe():
        log(f"  {line}")
    band, cascaded, cascade_record = cascade_choice(turns, half_of, recipe, decided, base)
    log(f"  cascade: {cascade_record['chosen'] or 'none'} (calls ceiling {cascade_record['calls_ceiling']})")
    without_cascade = verdict
    if cascaded is not None:  # what ships is gated: the rule with its cascade
        verdict = gate(cascaded, base, alpha=alpha)
        for line in verdict.describe():
            log(f"  with the cascade: {line}")
    shipped = cascaded if band is not None else decided
    interval = turn_difference_interval(shipped, base)
    log(f"  turns: {interval['difference']:+.3f} against the base ({interval['confidence']:.0%} bootstrap interval "
        f"over {interval['dialogues']} dialogues: {interval['low']:+.3f} to {interval['high']:+.3f})")
    rule, record = RECIPES[recipe_name](turns, log=log)
    if band is not None:
        rule = with_cascade(rule, band)
    program.rule = rule
    probe_fields = ("command", "commit", "date", "program", "program_sha256", "data", "counts", "seconds", "usage")
    program_meta = ProgramMeta(
        program=name, model=meta.get("model"), model_name=name, optimizer="rule",
        settings={"probe": str(probe), "base_probe": str(base_probe) if base_probe else None, "alpha": alpha,
                  "recipe": recipe_name, "turn_margin": verdict.turn_margin, "features": record["features"],
                  "split": "two-fold over the probe's halves (vista_dspy.data.part_of 'train' / 'dev'): each turn "
                           "decided by the rule chosen on the other half; its claim threshold chosen on 5 "
                           "cross-fittings within that half"
                           + (", its turn model by held-out log-likelihood there (threshold 0.5)"
                              if recipe_name == "turn-model" else ", its turn threshold for turn accuracy there"),
                  "tuned_on_the_reported_turns": (
                      "no parameter of the rule; one design choice was made with two-fold numbers of the earlier "
                      "(replayed) dev probes in view: the turn model decides only turns with no unsafe claim "
                      "(against deciding every turn: 0.593 vs 0.602 there, one turn apart), kept for VISTA's "
                      "aggregation (an unsafe claim makes its turn hallucinated)")},
        train={"probe": {k: meta.get(k) for k in probe_fields}},
        dev={"base_probe": {k: base_meta.get(k) for k in probe_fields}},
        scores={"base": {**summary(base), "by_claim_count": by_claim_count(base)},
                "compiled": {**summary(shipped), "by_claim_count": by_claim_count(shipped)},
                "compiled_without_cascade": summary(decided), "turn_difference": interval,
                "rules_per_half": {h: r.model_dump(mode="json") for h, r in rules.items()}},
        gate={**verdict.as_dict(), "without_cascade": without_cascade.as_dict() if band is not None else None},
        choice={**record, "cascade": cascade_record}, options=program.options.saved(),
        rule=rule.model_dump(mode="json"), demos={n: len(p.demos) for n, p in program.named_predictors()},
        cost={"calls": 0, "seconds_choosing": round(time.perf_counter() - started, 1),
              "seconds_total": round(time.perf_counter() - started, 1),
              "probe_seconds": meta.get("seconds"), "machine": "2 cores (the probe's and this compile's)"},
        dspy_version=dspy.__version__)
    return CompileResult(program=program, meta=program_meta, gate=verdict)

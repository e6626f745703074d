"""Compiling VISTA for one model: choose its decision rule or each predictor's demos (and, with ``claims``, the
judging mode), score the base and the compiled program on dev data no choice saw, gate the result, and save it.

Optimizers (DSPy's teleprompters have one demo budget for the whole program; here every predictor has its own, and
a predictor whose pool is too thin for its budget is filled up with the base program's own demos):

- ``rule`` (default; ``rule_fitting``): the base program judges every training dialogue end to end once, both stages
  with label probabilities; a decision rule over those probabilities and the claims' evidence cues is fitted on the
  decomposed claims (labelled through the human claims they match), its features, thresholds and cascade chosen
  cross-fitted by dialogue. Demos and instructions stay the base's. One LM pass, then arithmetic.
- ``claims`` (``choosing``): chosen on the human-labelled claims of every training dialogue, pooled and
  cross-fitted by dialogue: demos from the annotations (stratified by category) and the judging mode.
- ``labeled``: Decompose demos are human claim lists of annotated turns; Verify and Categorize demos are human-
  labelled claims judged by the seed program, kept only where the model agrees with the annotators (the explanation
  is the model's own, so every demo is complete). Stratified by label / category.
- ``bootstrap``: ``dspy.BootstrapFewShot`` with the seed program as teacher over whole dialogues (any dataset with
  turn labels); traces of dialogues judged entirely right become demos; each predictor is cut to its budget.
- ``random-search``: ``budget`` candidate demo sets drawn (seeded) from the ``labeled`` pool, each scored on the dev
  dialogues; the best wins, and the seed program wins ties.
- ``mipro``: ``dspy.MIPROv2`` (instructions proposed by the same LM, demo sets bootstrapped as above, optuna choosing
  the combination on the dev dialogues; ``budget`` candidates and trials); demos cut per predictor.

Every optimizer ends with the same gate (``gate.Gate``): the compiled program against its base on the dev data,
turn by turn and, where the dev data has human claims, claim by claim.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from ..compiled.files import SEED_PROGRAM, programs_dir, write_program
from ..program import Vista
from ..schema import Dialogue
from .demos import DEFAULT_DEMOS, Meter, annotated, incomplete_demos
from .dev_score import gate_on, score
from .gate import Gate, ProgramMeta
from .teleprompters import teleprompt

OPTIMIZERS = ("rule", "claims", "labeled", "bootstrap", "random-search", "mipro")
DEFAULT_OPTIMIZER = "rule"

# ---- compile ---------------------------------------------------------------------------------------------------


@dataclass
class CompileResult:
    """A compiled program, the gate it passed or failed, and its meta record (``gate.ProgramMeta``)."""

    program: Vista
    meta: ProgramMeta
    gate: Gate

    @property
    def passed(self) -> bool:
        return self.gate.passed


def dialogues_hash(dialogues: Sequence[Dialogue]) -> str:
    """The sha256 of the dialogues' records, in order: what a meta says identifies its data (a program's own hash is
    ``Vista.content_hash``)."""
    digest = hashlib.sha256()
    for dialogue in dialogues:
        digest.update(dialogue.model_dump_json().encode())
    return digest.hexdigest()


def data_record(dialogues: Sequence[Dialogue], describe: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the meta says of a data set: its description, size and content hash."""
    return {**(describe or {}), "dialogues": len(dialogues), "sha256": dialogues_hash(dialogues),
            "turns": sum(len(d.judged_turns) for d in dialogues),
            "claims": sum(len(d.turns[i].gold.claims or []) for d in dialogues for i in d.judged_turns
                          if d.turns[i].gold is not None)}


def compile_program(
    train: Sequence[Dialogue],
    dev: Sequence[Dialogue],
    *,
    optimizer: str = DEFAULT_OPTIMIZER,
    budgets: dict[str, int] | None = None,
    budget: int = 4,
    seed: int = 0,
    given_claims: bool = False,
    threads: int = 1,
    base: Vista | None = None,
    alpha: float = 0.05,
    folds: int = 2,
    describe: dict[str, Any] | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> CompileResult:
    """Compile with the LM in the current dspy context and gate the result on ``dev``.

    ``base`` (default: the seed program) is the teacher, the starting point and what the compiled program must
    beat. ``budget`` is the number of candidates for random-search and mipro (and mipro's trials); ``folds`` the
    cross-fitting folds of ``claims``. ``describe`` (model, model_name, train / dev descriptions) goes into the
    meta. The result carries the gate; saving is the caller's (``save_compiled``)."""
    from .choosing import choose_on_claims
    from .rule_fitting import compile_rule

    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    budgets = budgets or dict(DEFAULT_DEMOS)
    base = base or Vista.from_program(SEED_PROGRAM)
    describe = dict(describe or {})
    if optimizer in ("rule", "claims", "labeled") and not annotated(train):
        raise ValueError(f"the {optimizer} optimizer needs training dialogues with human claims (VISTA's annotated "
                         "format, e.g. --train vista-human); use bootstrap for datasets with turn labels only")
    meter = Meter()
    started = time.perf_counter()
    choice: dict[str, Any] = {}
    base_score = None
    if optimizer == "rule":
        compiled, choice = compile_rule(base, annotated(train), folds=folds, seed=seed, threads=threads,
                                        alpha=alpha, meter=meter, log=log)
    elif optimizer == "claims":
        compiled, choice = choose_on_claims(base, annotated(train), budgets, seed=seed, folds=folds,
                                            threads=threads, alpha=alpha, meter=meter, log=log)
    else:
        log(f"scoring the {base.program_name} program on {len(dev)} dev dialogues")
        base_score = score(base, dev, given_claims=given_claims, threads=threads, meter=meter, log=log)
        log(f"  {base.program_name}: {base_score.as_dict()}")
        compiled, choice = teleprompt(optimizer, base, train, dev, budgets, base_score, budget=budget, seed=seed,
                                      given_claims=given_claims, threads=threads, meter=meter, log=log)
    problems = incomplete_demos(compiled)
    if problems:
        raise RuntimeError("compiled program has incomplete demos: " + "; ".join(problems[:5]))
    chosen_seconds = time.perf_counter() - started
    compiled.program_name = describe.get("model_name") or "compiled"
    gate, scores = gate_on(base, compiled, dev, alpha=alpha, threads=threads, meter=meter,
                           base_score=None if given_claims else base_score,
                           compiled_score=choice.pop("_compiled_score", None), log=log)
    meta = ProgramMeta(
        program=compiled.program_name, model=describe.get("model"), model_name=describe.get("model_name"),
        optimizer=optimizer,
        settings={"demos": budgets, "budget": budget, "seed": seed, "given_claims": given_claims, "folds": folds,
                  "alpha": alpha},
        train=data_record(train, describe.get("train")), dev=data_record(dev, describe.get("dev")),
        scores=scores, gate=gate.as_dict(), choice=choice, options=compiled.options.saved(),
        rule=compiled.rule.model_dump(mode="json") if compiled.rule else None,
        demos={name: len(p.demos) for name, p in compiled.named_predictors()},
        cost={**meter.usage.total.model_dump(), "seconds_choosing": round(chosen_seconds, 1),
              "seconds_total": round(time.perf_counter() - started, 1)},
        dspy_version=dspy.__version__)
    return CompileResult(program=compiled, meta=meta, gate=gate)


def save_compiled(result: CompileResult, name: str, directory: Path | None = None) -> Path:
    """Write ``<name>.json`` (the program file: demos and instructions, options, decision rule; no LM) and
    ``<name>.meta.json`` into ``directory`` (default: the user's programs folder, ``files.programs_dir``)."""
    directory = directory or programs_dir()
    directory.mkdir(parents=True, exist_ok=True)
    result.program.program_name = name
    path = write_program(result.program.program_file(name), directory / f"{name}.json")
    meta = result.meta.model_copy(update={"program": name, "program_sha256": result.program.content_hash()})
    (directory / f"{name}.meta.json").write_text(json.dumps(meta.model_dump(), indent=2) + "\n")
    return path

"""The demo-choosing optimizers (``labeled``, ``bootstrap``, ``random-search``, ``mipro``): DSPy's teleprompters
and our own candidate search, each predictor cut to its own demo budget (see ``compile``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dspy

from ..program import Vista
from ..schema import Dialogue
from .demos import Meter, agreement, examples, install, labeled_pool, one_item_per_call
from .dev_score import DevScore, score


def teleprompt(optimizer: str, base: Vista, train: Sequence[Dialogue], dev: Sequence[Dialogue],
               budgets: dict[str, int], base_score: DevScore, *, budget: int, seed: int, given_claims: bool,
               threads: int, meter: Meter, log: Callable[[str], None]) -> tuple[Vista, dict[str, Any]]:
    """The demo-choosing optimizers (all but ``claims``), the compiled program scored as the base is."""
    candidates: list[dict[str, Any]] = []
    compiled_score = None
    if optimizer == "bootstrap":
        compiled = _bootstrap(base, train, budgets, meter)
    elif optimizer == "mipro":
        compiled = _mipro(base, train, dev, budgets, budget=budget, threads=threads, seed=seed, meter=meter)
    else:
        pool = labeled_pool(base, train, meter=meter, threads=threads,
                            on_dialogue=lambda v: log(f"  judged human claims of {v.dialogue_id}"))
        log(f"demo pool: {pool.sizes()}")
        if optimizer == "labeled":
            compiled = install(base, pool.pick(budgets, seed), budgets, top_up=base)
        else:
            compiled, compiled_score = base, base_score
            for trial in range(budget):
                candidate = install(base, pool.pick(budgets, seed + trial), budgets, top_up=base)
                value = score(candidate, dev, given_claims=given_claims, threads=threads, meter=meter, log=log)
                candidates.append({"seed": seed + trial, **value.as_dict()})
                log(f"  candidate {trial} (seed {seed + trial}): {value.as_dict()}")
                if value.agreement > compiled_score.agreement:
                    compiled, compiled_score = candidate, value
    # Scored as the base is (demos were traced per claim and per turn).
    compiled = compiled.with_options(claim_calls=base.options.claim_calls,
                                     decompose_calls=base.options.decompose_calls)
    choice: dict[str, Any] = {"metric": "agreement: turn-label accuracy" + (
        ", averaged with claim-category accuracy" if given_claims else "") + " on the dev dialogues"}
    if candidates:
        choice["candidates"] = candidates
    if compiled_score is not None and not given_claims:
        choice["_compiled_score"] = compiled_score
    return compiled, choice


def _bootstrap(base: Vista, train: Sequence[Dialogue], budgets: dict[str, int], meter: Meter) -> Vista:
    """dspy.BootstrapFewShot with ``base`` as teacher; each predictor cut to its own budget."""
    teleprompter = dspy.BootstrapFewShot(metric=meter.wrap(agreement), max_bootstrapped_demos=max(budgets.values()),
                                         max_labeled_demos=0, max_rounds=1, max_errors=len(train) + 1)
    compiled = teleprompter.compile(one_item_per_call(base), teacher=one_item_per_call(base),
                                    trainset=examples(train))
    kept = {name: getattr(compiled, name).demos[:k] for name, k in budgets.items()}
    return install(base, kept, budgets, top_up=base)


def _mipro(base: Vista, train: Sequence[Dialogue], dev: Sequence[Dialogue], budgets: dict[str, int], *,
           budget: int, threads: int, seed: int, meter: Meter) -> Vista:
    """dspy.MIPROv2 (``budget`` candidates and trials, no minibatches); each predictor cut to its own budget."""
    teleprompter = dspy.MIPROv2(metric=meter.wrap(agreement), auto=None, num_candidates=budget,
                                max_bootstrapped_demos=max(budgets.values()), max_labeled_demos=0,
                                num_threads=threads, seed=seed, max_errors=len(train) + len(dev) + 1,
                                verbose=False)
    optimized = teleprompter.compile(one_item_per_call(base), trainset=examples(train), valset=examples(dev),
                                     num_trials=budget, minibatch=False)
    kept = {name: getattr(optimized, name).demos[:k] for name, k in budgets.items()}
    # Predictors outside the budgets (the contradiction check) keep the base program's demos.
    kept.update({name: list(p.demos) for name, p in base.named_predictors() if name not in budgets})
    return install(optimized, kept, budgets, top_up=base)

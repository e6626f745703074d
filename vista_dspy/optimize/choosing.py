"""The ``claims`` optimizer: choose a model's program on the human-labelled claims of every training dialogue.

A few dozen turns cannot tell a real gain from noise (a choice made on 29 turns won 8 points there and lost 15 on
59 fresh ones); hundreds of human-labelled claims are four times as many items and answer exactly the questions
Verify and Categorize ask. In a stated order, each choice by numbers pooled over claims and cross-fitted by dialogue
(``cross_fitting.folds``: a demo is never scored on its own dialogue):

1. The base program judges every training claim with both stages and label probabilities (``probing.probe``);
   its agreeing answers become the demo pool (``demos.pool_from_traces``).
2. Each fold's claims are judged again by a program whose Verify / Categorize demos come from the other folds
   (stratified by category; the base's hand-written demos fill a category the pool lacks).
3. The base's demos or the pool's: the variant whose claim decisions give the most turns their annotated label wins,
   then the one with the most claim decisions right (ties: the base). Turns first: on claims alone, always-safe
   scores well. (How the model's probabilities and the claims' evidence decide is the ``rule`` optimizer's.)
4. Decompose: the base's demos against human claim lists from the other folds, by claim-set F1.
5. The judging mode: the chosen variant in the batched mode (one Verify and one Categorize call per turn) replaces
   per-claim judging unless it is significantly worse on the same claims (exact McNemar, ``alpha``).
6. The program: the chosen demos drawn from the whole pool.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from ..program import Vista
from ..schema import Dialogue, DialogueVerdict
from .claim_probes import CATEGORIES, ClaimProbe
from .cross_fitting import folds
from .demos import Meter, Pool, install, pool_from_traces
from .gate import PairedTest
from .metrics import match_claims
from .probing import claim_scores, decision_right, probe, probes_of, turn_accuracy

JUDGED_STAGES = ("verify", "categorize")
Log = Callable[[str], None]


def choose_on_claims(base: Vista, train: Sequence[Dialogue], budgets: dict[str, int], *, seed: int = 0,
                     folds: int = 2, threads: int = 1, alpha: float = 0.05, meter: Meter | None = None,
                     log: Log = lambda message: None) -> tuple[Vista, dict[str, Any]]:
    """The compiled program for the LM of the current dspy context, and the numbers of every choice (see the module
    docstring). ``train``: annotated dialogues."""
    meter = meter or Meter()
    clock = _Clock()
    split = _folds(train, folds, seed)
    # Claims are judged as the compiled program will judge them (with or without Verify's explanation), one per call.
    per_claim = base.with_options(claim_calls="per-claim", decompose_calls="per-turn")
    record: dict[str, Any] = {"folds": [{"dialogues": len(f), "claims": _count_claims(f)} for f in split],
                              "order": "Verify and Categorize's demos (cross-fitted), then Decompose's demos, then "
                                       "the judging mode"}

    log(f"1/5 the {base.program_name} program on the {_count_claims(train)} human claims of {len(train)} "
        "training dialogues (both stages, label probabilities)")
    verdicts, traces = probe(per_claim, train, threads=threads, on_dialogue=_progress(log, len(train), meter))
    probes = {"base": _aligned(verdicts, train)}
    pool = pool_from_traces(per_claim, train, traces)
    record["pool"] = pool.sizes()
    clock.lap(record, "base")

    log(f"2/5 the claims of each fold judged with demos from the other folds' claims (pool {pool.sizes()})")
    fold_verdicts: list[DialogueVerdict] = []
    for fold in split:
        program = with_pool_demos(per_claim, pool.without({d.id for d in fold}), budgets, seed, JUDGED_STAGES)
        fold_verdicts += probe(program, fold, threads=threads, on_dialogue=_progress(log, len(fold), meter))[0]
    probes["pool"] = _aligned(fold_verdicts, train)
    clock.lap(record, "pool")

    log("3/5 Verify and Categorize's demos: the base's or the pool's")
    variants, rights = _variants(probes)
    # The turns the human claims' decisions get right, then the claim decisions; first of equals: the base.
    chosen = max(variants, key=lambda name: (variants[name]["turn_accuracy"], variants[name]["decision_accuracy"]))
    demos_from = chosen
    record["variants"] = variants
    record["chosen"] = chosen
    log("   turns / claim decisions right: " + "; ".join(
        f"{name} {v['turn_accuracy']:.3f} / {v['decision_accuracy']:.3f}" for name, v in variants.items()))
    log(f"   chosen: {chosen}")

    log("4/5 Decompose: the base's demos against human claim lists from the other folds (claim-set F1)")
    record["decompose"] = _choose_decompose(per_claim, pool, train, split, budgets, seed, meter, log)
    clock.lap(record, "decompose")
    log(f"   {record['decompose']}")

    claim_calls = "per-claim"
    if base.options.claim_calls != "joint":
        log("5/5 the judging mode: the chosen variant with a turn's claims in one call")
        mode = _choose_mode(per_claim, pool, train, split, budgets, seed, demos_from, rights[chosen], threads,
                            alpha, meter, log)
        record["mode"] = mode
        claim_calls = mode["chosen"]
        clock.lap(record, "mode")

    program = per_claim.with_options(claim_calls=claim_calls)
    stages = (JUDGED_STAGES if demos_from == "pool" else ()) + (
        ("decompose",) if record["decompose"]["chosen"] == "pool" else ())
    return (with_pool_demos(program, pool, budgets, seed, stages) if stages else program), record


# ---- the steps ---------------------------------------------------------------------------------------------------
def with_pool_demos(program: Vista, pool: Pool, budgets: dict[str, int], seed: int, stages: Sequence[str]) -> Vista:
    """``program`` with the pool's demos for ``stages`` (the others keep theirs), every category in Categorize's."""
    picked = pool.pick({stage: budgets[stage] for stage in stages}, seed)
    if "categorize" in picked:
        picked["categorize"] = every_category(picked["categorize"], program.categorize.demos, budgets["categorize"])
    return install(program, picked, budgets, top_up=program)


def every_category(picked: list, fallback: Sequence, budget: int) -> list:
    """Categorize's demos with every category present: a category the pool gave none of takes a ``fallback`` demo
    (the base's hand-written ones) in place of a demo of the most frequent category."""
    chosen = list(picked)
    for category in CATEGORIES:
        if any(d.get("category") == category for d in chosen):
            continue
        extra = next((d for d in fallback if d.get("category") == category), None)
        if extra is None:
            continue
        if len(chosen) >= budget:
            counts = {c: sum(d.get("category") == c for d in chosen) for c in CATEGORIES}
            most = max(counts, key=counts.get)
            chosen.pop(max(i for i, d in enumerate(chosen) if d.get("category") == most))
        chosen.append(extra)
    return chosen


def _variants(probes: dict[str, list[ClaimProbe]]) -> tuple[dict[str, dict[str, Any]], dict[str, list[bool]]]:
    """Each demo source's pooled claim scores, the pool's with its paired test against the base."""
    gold = [p.gold for p in probes["base"]]
    variants: dict[str, dict[str, Any]] = {}
    rights: dict[str, list[bool]] = {}
    for demos, found in probes.items():
        decided = [p.raw for p in found]
        variants[demos] = {**claim_scores(decided, gold), "turn_accuracy": turn_accuracy(found, decided)}
        rights[demos] = decision_right(decided, gold)
    for name, right in rights.items():
        if name != "base":
            variants[name]["against_base"] = PairedTest.of(right, rights["base"]).model_dump()
    return variants, rights


def _choose_decompose(program: Vista, pool: Pool, train: Sequence[Dialogue], split: list[list[Dialogue]],
                      budgets: dict[str, int], seed: int, meter: Meter, log: Log) -> dict[str, Any]:
    progress = _counter(log, 2 * len(train))
    base = decomposition_f1(program, train, meter, progress)
    cross: list[tuple[int, int]] = []
    for fold in split:
        fold_program = with_pool_demos(program, pool.without({d.id for d in fold}), budgets, seed, ("decompose",))
        cross.append(_matches(fold_program, fold, meter, progress))
    matched, total = sum(m for m, _ in cross), sum(t for _, t in cross)
    pooled = 2 * matched / total if total else 0.0
    return {"base_f1": base, "pool_f1": pooled, "chosen": "pool" if pooled > base else "base"}


def decomposition_f1(program: Vista, dialogues: Sequence[Dialogue], meter: Meter | None = None,
                     on_dialogue: Callable[[str, int], None] = lambda dialogue_id, calls: None) -> float:
    """Micro claim-set F1 of Decompose's claims against the human claims of the annotated turns."""
    matched, total = _matches(program, dialogues, meter, on_dialogue)
    return 2 * matched / total if total else 0.0


def _matches(program: Vista, dialogues: Sequence[Dialogue], meter: Meter | None,
             on_dialogue: Callable[[str, int], None] = lambda dialogue_id, calls: None) -> tuple[int, int]:
    matched = total = 0
    for dialogue in dialogues:
        claims, usage = program.decompose_turns(dialogue)
        on_dialogue(dialogue.id, usage.total.calls)
        if meter is not None:
            meter.usage.merge(usage)
        for index, extracted in claims.items():
            gold = dialogue.turns[index].gold
            if gold is None or gold.claims is None:
                continue
            match = match_claims(extracted, [c.text for c in gold.claims])
            matched += len(match.pairs)
            total += match.extracted + match.gold
    return matched, total


def _choose_mode(program: Vista, pool: Pool, train: Sequence[Dialogue], split: list[list[Dialogue]],
                 budgets: dict[str, int], seed: int, demos_from: str, per_claim_right: list[bool], threads: int,
                 alpha: float, meter: Meter, log: Log) -> dict[str, Any]:
    """Batched judging under the chosen recipe, on the same claims: chosen unless significantly worse."""
    batched = program.with_options(claim_calls="batched")
    if demos_from == "base":
        verdicts = probe(batched, train, threads=threads, on_dialogue=_progress(log, len(train), meter))[0]
    else:
        verdicts = []
        for fold in split:
            fold_program = with_pool_demos(batched, pool.without({d.id for d in fold}), budgets, seed,
                                           JUDGED_STAGES)
            verdicts += probe(fold_program, fold, threads=threads, on_dialogue=_progress(log, len(fold), meter))[0]
    found = _aligned(verdicts, train)
    gold = [p.gold for p in found]
    decided = [p.raw for p in found]
    test = PairedTest.of(decision_right(decided, gold), per_claim_right)
    worse = test.base_only > test.candidate_only and test.pvalue < alpha
    return {"batched": {**claim_scores(decided, gold), "turn_accuracy": turn_accuracy(found, decided)},
            "against_per_claim": test.model_dump(),
            "chosen": "per-claim" if worse else "batched"}


# ---- helpers -----------------------------------------------------------------------------------------------------
def _folds(train: Sequence[Dialogue], k: int, seed: int) -> list[list[Dialogue]]:
    if len(train) < k:
        raise ValueError(f"cross-fitting in {k} folds needs at least {k} annotated training dialogues, "
                         f"got {len(train)}")
    return folds(train, k, seed)


def _aligned(verdicts: Sequence[DialogueVerdict], train: Sequence[Dialogue]) -> list[ClaimProbe]:
    """The probes of ``verdicts`` in training order (dialogue, turn, claim): the same claims line up across
    programs for paired tests."""
    order = {d.id: i for i, d in enumerate(train)}
    found = [p for v in verdicts for p in probes_of(v)]
    return sorted(found, key=lambda p: (order[p.dialogue_id], p.turn_index, p.position))


def _count_claims(dialogues: Sequence[Dialogue]) -> int:
    return sum(len(d.turns[i].gold.claims or []) for d in dialogues for i in d.judged_turns
               if d.turns[i].gold is not None)


def _counter(log: Log, total: int) -> Callable[[str, int], None]:
    """A progress line per dialogue done: how many of ``total``, which one, its LM calls."""
    done: list[str] = []

    def on_dialogue(dialogue_id: str, calls: int) -> None:
        done.append(dialogue_id)
        log(f"    {len(done)}/{total} dialogues ({dialogue_id}, {calls} LM calls)")

    return on_dialogue


def _progress(log: Log, total: int, meter: Meter) -> Callable[[DialogueVerdict], None]:
    count = _counter(log, total)

    def on_dialogue(verdict: DialogueVerdict) -> None:
        meter.usage.merge(verdict.usage)
        count(verdict.dialogue_id, verdict.usage.total.calls)

    return on_dialogue


class _Clock:
    """Seconds spent in each step, recorded as it ends."""

    def __init__(self) -> None:
        self.last = time.perf_counter()

    def lap(self, record: dict[str, Any], step: str) -> None:
        now = time.perf_counter()
        record.setdefault("seconds", {})[step] = round(now - self.last, 1)
        self.last = now

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
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from .compiled import SEED_PROGRAM, compiled_dir, write_program
from .gate import Gate, PairedTest, ProgramMeta
from .probing import probe, safe
from .program import Vista
from .schema import Category, Dialogue, DialogueVerdict, GoldClaim, Usage

DEFAULT_DEMOS: dict[str, int] = {"decompose": 6, "verify": 6, "categorize": 9}
OPTIMIZERS = ("rule", "claims", "labeled", "bootstrap", "random-search", "mipro")
DEFAULT_OPTIMIZER = "rule"


def parse_demos(spec: str | None) -> dict[str, int]:
    """``decompose=6,verify=6,categorize=9`` (any subset; the rest keep their defaults)."""
    budgets = dict(DEFAULT_DEMOS)
    for item in filter(None, (part.strip() for part in (spec or "").split(","))):
        name, _, count = item.partition("=")
        if name not in DEFAULT_DEMOS or not count.strip().isdigit():
            raise ValueError(f"bad demo budget {item!r}; expected e.g. decompose=6,verify=6,categorize=9")
        budgets[name] = int(count)
    return budgets


# ---- metric ----------------------------------------------------------------------------------------------------


def agreement(example: dspy.Example, prediction: DialogueVerdict, trace: Any = None) -> float | bool:
    """Turn-label agreement over gold-labelled turns (unknown counts wrong), averaged with claim-category agreement
    when claims carry gold categories. While bootstrapping (``trace`` given) only an entirely right dialogue
    passes."""
    turns = [t for t in prediction.turns if t.gold_label is not None]
    claims = [c for t in prediction.turns for c in t.claims if c.gold_category is not None]
    parts = []
    if turns:
        parts.append(sum(t.label == t.gold_label for t in turns) / len(turns))
    if claims:
        parts.append(sum(c.category == c.gold_category for c in claims) / len(claims))
    score = sum(parts) / len(parts) if parts else 0.0
    return score == 1.0 if trace is not None else score


@dataclass
class Meter:
    """Wraps a metric to add up the LM usage of every prediction it scores (cache hits are not calls)."""

    usage: Usage = field(default_factory=Usage)

    def wrap(self, metric: Callable[..., Any]) -> Callable[..., Any]:
        def measured(example, prediction, trace=None):
            if isinstance(prediction, DialogueVerdict):
                self.usage.merge(prediction.usage)
            return metric(example, prediction, trace)

        return measured


def examples(dialogues: Sequence[Dialogue]) -> list[dspy.Example]:
    return [dspy.Example(dialogue=d).with_inputs("dialogue") for d in dialogues]


@dataclass
class DevScore:
    """``agreement`` averaged over dev dialogues (what the teleprompters maximize), turn accuracy over all dev turns
    and, when claims carry gold categories, claim accuracy (scoring.summarize's definitions). Item-wise readings of
    the same verdicts for paired tests: ``turns_right`` (one character per dev turn in dev order, "1" right, "0"
    wrong or unknown) and ``claims_right`` (one per human claim: its safe/unsafe decision agrees with the
    annotators'); end to end, the claim-set F1 of the decomposition against the human claims and the category
    agreement on decomposed claims matched to a human claim."""

    agreement: float
    turn_accuracy: float | None
    claim_accuracy: float | None
    turns_right: str = ""
    claims_right: str = ""
    decomposition_f1: float | None = None
    matched_category_accuracy: float | None = None
    summary: dict[str, Any] = field(default_factory=dict, repr=False)

    def as_dict(self) -> dict[str, Any]:
        turns = self.summary.get("turn_metrics", {})
        claims = self.summary.get("claim_metrics", {})
        return {"agreement": self.agreement, "turn_accuracy": self.turn_accuracy,
                "f1_hallucinated": turns.get("f1_hallucinated"), "claim_accuracy": self.claim_accuracy,
                "claim_decision_accuracy": (self.claims_right.count("1") / len(self.claims_right)
                                            if self.claims_right else None),
                "claim_macro_f1": claims.get("macro_f1"), "decomposition_f1": self.decomposition_f1,
                "lm_calls": self.summary.get("usage", {}).get("total", {}).get("calls")}


def score(program: Vista, dev: Sequence[Dialogue], *, given_claims: bool = False, threads: int = 1,
          meter: Meter | None = None, log: Callable[[str], None] | None = None) -> DevScore:
    """Score ``program`` on ``dev`` with the LM and adapter of the current dspy context (``given_claims``: on the
    human claims instead of end to end).

    Runs on our own runner, not ``dspy.Evaluate``: Evaluate re-submits any example still running after 120 s,
    which a slow local model reaches on long dialogues (duplicate LM calls, wasted minutes)."""
    from . import scoring
    from .metrics import decomposition_agreement
    from .runner import Threads, evaluate

    finished: list[str] = []

    def progress(verdict: DialogueVerdict) -> None:
        finished.append(verdict.dialogue_id)
        if log is not None:
            log(f"    {len(finished)}/{len(dev)} dev dialogues judged ({verdict.dialogue_id})")

    judge = program.with_options(given_claims=given_claims) if program.options.given_claims != given_claims \
        else program
    result = evaluate(dev, judge, Threads(dspy.settings.lm, dspy.settings.adapter, threads), on_done=progress)
    if result.interrupted:  # never score a program on the dialogues an interrupt happened to leave judged
        raise KeyboardInterrupt
    measured = (meter or Meter()).wrap(agreement)
    values = [measured(None, verdict) for verdict in result.verdicts]
    summary = scoring.summarize(result.verdicts)
    order = {d.id: i for i, d in enumerate(dev)}
    verdicts = sorted(result.verdicts, key=lambda v: order[v.dialogue_id])
    turns = [t for v in verdicts for t in sorted(v.turns, key=lambda t: t.turn_index) if t.gold_label is not None]
    claims = [c for t in (t for v in verdicts for t in sorted(v.turns, key=lambda t: t.turn_index))
              for c in t.claims if c.gold_category is not None]
    decomposition = decomposition_agreement(dev, result.verdicts)
    return DevScore(agreement=sum(values) / len(values) if values else 0.0,
                    turn_accuracy=summary.get("turn_metrics", {}).get("accuracy"),
                    claim_accuracy=summary.get("claim_metrics", {}).get("accuracy"),
                    turns_right="".join("1" if t.label == t.gold_label else "0" for t in turns),
                    claims_right="".join("1" if safe(c.category.value) == safe(c.gold_category.value) else "0"
                                         for c in claims),
                    decomposition_f1=decomposition.f1,
                    matched_category_accuracy=(decomposition.same_category / decomposition.matched
                                               if decomposition.matched else None),
                    summary=summary)


def has_human_claims(dialogues: Sequence[Dialogue]) -> bool:
    return bool(annotated(dialogues))


def gate_on(base: Vista, compiled: Vista, dev: Sequence[Dialogue], *, alpha: float, threads: int = 1,
            meter: Meter | None = None, base_score: DevScore | None = None,
            compiled_score: DevScore | None = None, log: Callable[[str], None] = lambda message: None
            ) -> tuple[Gate, dict[str, Any]]:
    """The gate of ``compiled`` against ``base`` on ``dev`` (end to end; and on the human claims where ``dev`` has
    them), and both programs' scores. Scores already measured end to end may be passed in."""
    if base_score is None:
        log(f"gate: the {base.program_name} program end to end on {len(dev)} dev dialogues")
        base_score = score(base, dev, threads=threads, meter=meter, log=log)
    if compiled_score is None:
        log(f"gate: the compiled program end to end on {len(dev)} dev dialogues")
        compiled_score = score(compiled, dev, threads=threads, meter=meter, log=log)
    scores = {"base": {"program": base.program_name, **base_score.as_dict()},
              "compiled": compiled_score.as_dict()}
    claims = None
    if has_human_claims(dev):
        log("gate: both programs on the dev dialogues' human claims")
        base_claims = score(base, annotated(dev), given_claims=True, threads=threads, meter=meter, log=log)
        compiled_claims = score(compiled, annotated(dev), given_claims=True, threads=threads, meter=meter, log=log)
        claims = PairedTest.of_strings(compiled_claims.claims_right, base_claims.claims_right)
        scores["base"]["given_claims"] = base_claims.as_dict()
        scores["compiled"]["given_claims"] = compiled_claims.as_dict()
    turns = (PairedTest.of_strings(compiled_score.turns_right, base_score.turns_right)
             if compiled_score.turns_right and len(compiled_score.turns_right) == len(base_score.turns_right)
             else None)
    return Gate(alpha=alpha, turns=turns, claims=claims, base=base.program_name), scores


# ---- demo pools and selection ------------------------------------------------------------------------------------


def _gold_claims(dialogue: Dialogue) -> dict[str, GoldClaim]:
    return {c.text: c for i in dialogue.judged_turns for c in (dialogue.turns[i].gold.claims or [])
            if dialogue.turns[i].gold is not None}


def annotated(dialogues: Sequence[Dialogue]) -> list[Dialogue]:
    """Dialogues whose every judged turn has human claims (the ``labeled`` optimizer needs them)."""
    return [d for d in dialogues if d.judged_turns and all(
        d.turns[i].gold is not None and d.turns[i].gold.claims for i in d.judged_turns)]


@dataclass
class Pool:
    """Candidate demos per predictor, each with a stratum (label, category or claim count) for selection and the
    dialogue it came from (so that a cross-fitted choice never shows a dialogue's own claims as demos)."""

    demos: dict[str, list[tuple[str, dspy.Example]]] = field(default_factory=lambda: defaultdict(list))
    sources: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, predictor: str, stratum: str, demo: dspy.Example, dialogue: str = "") -> None:
        self.demos[predictor].append((stratum, demo))
        self.sources[predictor].append(dialogue)

    def sizes(self) -> dict[str, int]:
        return {name: len(items) for name, items in self.demos.items()}

    def without(self, dialogues: set[str]) -> Pool:
        """The pool without the demos of these dialogues."""
        kept = Pool()
        for name, items in self.demos.items():
            for (stratum, demo), source in zip(items, self.sources[name]):
                if source not in dialogues:
                    kept.add(name, stratum, demo, source)
        return kept

    def pick(self, budgets: dict[str, int], seed: int) -> dict[str, list[dspy.Example]]:
        """Up to ``budgets[p]`` demos per predictor, round-robin over strata (each shuffled with ``seed``)."""
        rng = random.Random(seed)
        chosen: dict[str, list[dspy.Example]] = {}
        for name, k in budgets.items():
            strata: dict[str, list[dspy.Example]] = defaultdict(list)
            for stratum, demo in self.demos.get(name, []):
                strata[stratum].append(demo)
            queues = [rng.sample(items, len(items)) for _, items in sorted(strata.items())]
            rng.shuffle(queues)
            picked: list[dspy.Example] = []
            while len(picked) < k and any(queues):
                for queue in queues:
                    if queue and len(picked) < k:
                        picked.append(queue.pop())
            chosen[name] = picked
        return chosen


def one_item_per_call(program: Vista) -> Vista:
    """A copy judging one claim per call, decomposing one turn per call and explaining every label: demos are traced
    from those calls (the layout every predictor keeps), whatever mode the program is scored in."""
    return program.with_options(claim_calls="per-claim", decompose_calls="per-turn", explain_verified=True)


def pool_from_traces(program: Vista, dialogues: Sequence[Dialogue], traces: dict[str, list]) -> Pool:
    """Complete demos from human annotations (see the module docstring): each annotated turn's human claim list
    for Decompose; for Verify and Categorize, the program's own answers (from ``traces``, as ``probing.probe``
    returns them) on the human claims where they agree with the annotators."""
    pool = Pool()
    for dialogue in annotated(dialogues):
        for index in dialogue.judged_turns:
            claims = [c.text for c in dialogue.turns[index].gold.claims]
            pool.add("decompose", str(min(len(claims), 4)),
                     dspy.Example(**program.decompose_inputs(dialogue, index), claims=claims), dialogue.id)
        gold = _gold_claims(dialogue)
        for predictor, inputs, outputs in traces.get(dialogue.id, []):
            claim = gold.get(inputs.get("claim", ""))
            if claim is None:
                continue
            demo = dspy.Example(augmented=True, **inputs, **outputs)
            if predictor == "verify":
                verified = outputs.label == "VERIFIED"
                if verified == (claim.category == Category.VERIFIED):
                    if demo.get("explanation") is None:  # a label-only answer: shown as one (no explanation)
                        demo = demo.copy(explanation="")
                    pool.add("verify", outputs.label, demo, dialogue.id)
            elif predictor == "categorize" and outputs.category == claim.category.value:
                pool.add("categorize", outputs.category, demo, dialogue.id)
    return pool


def labeled_pool(program: Vista, train: Sequence[Dialogue], *, meter: Meter | None = None,
                 want: dict[str, int] | None = None, threads: int = 1,
                 on_dialogue: Callable[[DialogueVerdict], None] | None = None) -> Pool:
    """``pool_from_traces`` over the annotated training dialogues, judged one claim per call. Judging stops once
    every predictor has ``want[p]`` candidates (default: three times its default budget); human claim lists for
    Decompose are collected from every dialogue."""
    want = want or {name: 3 * k for name, k in DEFAULT_DEMOS.items()}
    program = one_item_per_call(program)
    dialogues = annotated(train)
    pool, judged = Pool(), 0
    while judged < len(dialogues) and not (len(pool.demos["verify"]) >= want["verify"]
                                           and len(pool.demos["categorize"]) >= want["categorize"]):
        batch = dialogues[judged:judged + max(1, threads)]
        verdicts, traces = probe(program, batch, threads=threads, on_dialogue=on_dialogue)
        if meter is not None:
            for verdict in verdicts:
                meter.usage.merge(verdict.usage)
        found = pool_from_traces(program, batch, traces)
        for name in ("verify", "categorize"):
            for (stratum, demo), source in zip(found.demos[name], found.sources[name]):
                pool.add(name, stratum, demo, source)
        judged += len(batch)
    for dialogue in dialogues:  # every human claim list, judged or not
        for index in dialogue.judged_turns:
            claims = [c.text for c in dialogue.turns[index].gold.claims]
            pool.add("decompose", str(min(len(claims), 4)),
                     dspy.Example(**program.decompose_inputs(dialogue, index), claims=claims), dialogue.id)
    return pool


def install(program: Vista, demos: dict[str, list[dspy.Example]], budgets: dict[str, int] | None = None,
            top_up: Vista | None = None) -> Vista:
    """A copy of ``program`` with these predictors' demos replaced (the others keep theirs). With ``top_up``, a
    predictor given fewer than ``budgets[name]`` demos is filled up with ``top_up``'s own (the seed's
    hand-written demos), so that a thin pool never leaves a stage with fewer demos than it started with."""
    compiled = program.deepcopy()
    for name, chosen in demos.items():
        chosen = list(chosen)
        if top_up is not None and budgets is not None:
            missing = budgets.get(name, 0) - len(chosen)
            chosen += [d for d in getattr(top_up, name).demos if d not in chosen][: max(0, missing)]
        getattr(compiled, name).demos = chosen
    return compiled


def incomplete_demos(program: Vista) -> list[str]:
    """Demos missing a field of their predictor's signature (DSPy would silently skip rendering them)."""
    problems = []
    for name, predictor in program.named_predictors():
        fields = list(predictor.signature.input_fields) + list(predictor.signature.output_fields)
        for i, demo in enumerate(predictor.demos):
            missing = [f for f in fields if f not in demo or demo[f] is None]
            if missing:
                problems.append(f"{name} demo {i}: missing {', '.join(missing)}")
    return problems


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


def content_hash(dialogues: Sequence[Dialogue]) -> str:
    digest = hashlib.sha256()
    for dialogue in dialogues:
        digest.update(dialogue.model_dump_json().encode())
    return digest.hexdigest()


def data_record(dialogues: Sequence[Dialogue], describe: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the meta says of a data set: its description, size and content hash."""
    return {**(describe or {}), "dialogues": len(dialogues), "sha256": content_hash(dialogues),
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
        compiled, choice = _teleprompt(optimizer, base, train, dev, budgets, base_score, budget=budget, seed=seed,
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


def _teleprompt(optimizer: str, base: Vista, train: Sequence[Dialogue], dev: Sequence[Dialogue],
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


def save_compiled(result: CompileResult, name: str, directory: Path | None = None) -> Path:
    """Write ``<name>.json`` (the program file: demos and instructions, options, decision rule; no LM) and
    ``<name>.meta.json``."""
    directory = directory or compiled_dir()
    result.program.program_name = name
    path = write_program(result.program.program_file(name), directory / f"{name}.json")
    meta = result.meta.model_copy(update={"program": name, "program_sha256": result.program.content_hash()})
    (directory / f"{name}.meta.json").write_text(json.dumps(meta.model_dump(), indent=2) + "\n")
    return path

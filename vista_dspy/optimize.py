"""Compiling VISTA for one model: choose each predictor's demos on training dialogues, score the seed and the
compiled program on dev dialogues with the same metric, and save the program with a metadata sidecar.

Optimizers (DSPy's teleprompters have one demo budget for the whole program; here every predictor has its own):

Every optimizer fills a predictor whose pool is too thin for its budget with the base program's own demos.

- ``labeled``: Decompose demos are human claim lists of annotated turns (VISTA's format). Verify and Categorize
  demos are human-labelled claims judged by the seed program, kept only where the model's answer agrees with the
  annotators; the explanation is the model's own, so every demo is complete. Stratified by label / category.
- ``bootstrap``: ``dspy.BootstrapFewShot`` with the seed program as teacher over whole dialogues (any dataset with
  turn labels); traces of dialogues judged entirely right become demos; each predictor is cut to its budget.
- ``random-search``: ``budget`` candidate demo sets drawn (seeded) from the ``labeled`` pool, each scored on the
  dev dialogues; the best wins, and the seed program wins ties.
- ``mipro``: ``dspy.MIPROv2`` (instructions proposed by the same LM, demo sets bootstrapped as above, optuna
  choosing the combination on the dev dialogues; ``budget`` candidates and trials); demos cut per predictor.

The metric (``agreement``) is turn-label agreement with gold, averaged with claim-category agreement when the
judged claims carry gold categories (judging the human claims of annotated turns, ``given_claims=True``).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dspy

from .compiled import SEED_PROGRAM, compiled_dir
from .program import Vista
from .schema import Category, Dialogue, DialogueVerdict, GoldClaim, Usage

DEFAULT_DEMOS: dict[str, int] = {"decompose": 6, "verify": 6, "categorize": 9}
OPTIMIZERS = ("labeled", "bootstrap", "random-search", "mipro")


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
    """``agreement`` averaged over dev dialogues (what the optimizers maximize), plus turn accuracy over all dev
    turns and, when claims carry gold categories, claim accuracy (scoring.summarize's definitions). Stage-wise
    readings of the same verdicts: ``turns_right`` (one character per dev turn in dev order, "1" right, "0" wrong
    or unknown: paired tests between programs), and, end to end, the claim-set F1 of the decomposition against
    the human claims and the category agreement on decomposed claims matched to a human claim."""

    agreement: float
    turn_accuracy: float | None
    claim_accuracy: float | None
    turns_right: str = ""
    decomposition_f1: float | None = None
    matched_category_accuracy: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {"agreement": self.agreement, "turn_accuracy": self.turn_accuracy,
                "claim_accuracy": self.claim_accuracy}


def score(program: Vista, dev: Sequence[Dialogue], *, given_claims: bool = False, threads: int = 1,
          meter: Meter | None = None, log: Callable[[str], None] | None = None) -> DevScore:
    """Score ``program`` on ``dev`` with the LM and adapter of the current dspy context.

    Runs on our own runner, not ``dspy.Evaluate``: Evaluate re-submits any example still running after 120 s,
    which a slow local model reaches on long dialogues (duplicate LM calls, wasted minutes)."""
    from . import scoring
    from .metrics import decomposition_agreement
    from .runner import evaluate

    finished: list[str] = []

    def progress(verdict: DialogueVerdict) -> None:
        finished.append(verdict.dialogue_id)
        if log is not None:
            log(f"    {len(finished)}/{len(dev)} dev dialogues judged ({verdict.dialogue_id})")

    result = evaluate(dev, program, dspy.settings.lm, adapter=dspy.settings.adapter, threads=threads,
                      judge_given_claims=given_claims, on_done=progress)
    if result.interrupted:  # never score a program on the dialogues an interrupt happened to leave judged
        raise KeyboardInterrupt
    measured = (meter or Meter()).wrap(agreement)
    values = [measured(None, verdict) for verdict in result.verdicts]
    summary = scoring.summarize(result.verdicts)
    order = {d.id: i for i, d in enumerate(dev)}
    turns = sorted(((order[v.dialogue_id], t.turn_index, t) for v in result.verdicts for t in v.turns
                    if t.gold_label is not None), key=lambda item: item[:2])
    decomposition = decomposition_agreement(dev, result.verdicts)
    return DevScore(agreement=sum(values) / len(values) if values else 0.0,
                    turn_accuracy=summary.get("turn_metrics", {}).get("accuracy"),
                    claim_accuracy=summary.get("claim_metrics", {}).get("accuracy"),
                    turns_right="".join("1" if t.label == t.gold_label else "0" for _, _, t in turns),
                    decomposition_f1=decomposition.f1,
                    matched_category_accuracy=(decomposition.same_category / decomposition.matched
                                               if decomposition.matched else None))


def paired_turns(a: str, b: str) -> dict[str, Any]:
    """Exact McNemar of two programs' turn correctness on the same dev turns (``DevScore.turns_right`` strings)."""
    from .metrics import mcnemar_exact

    if not a or len(a) != len(b):
        raise ValueError("the two programs were not scored on the same dev turns")
    return mcnemar_exact([True] * len(a), [c == "1" for c in a], [c == "1" for c in b])


def beats(test: dict[str, Any] | None, alpha: float) -> bool:
    """The gate a compiled program must pass to replace its base: right on more dev turns than the base, and the
    exact McNemar p below ``alpha`` (``alpha`` >= 1: any net win)."""
    return (test is not None and test["a_only"] > test["b_only"]
            and (alpha >= 1 or test["pvalue"] < alpha))


def describe_paired(test: dict[str, Any], alpha: float, candidate: str, base: str) -> str:
    """One line on ``paired_turns`` and whether it passes the gate."""
    return (f"{candidate} vs {base} on {test['items']} dev turns: right only in the {candidate} {test['a_only']}, only "
            f"in the {base} {test['b_only']}; exact McNemar p = {test['pvalue']:.3f} "
            f"({'passes' if beats(test, alpha) else 'fails'} alpha {alpha})")


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
    """Candidate demos per predictor, each with a stratum (label, category or claim count) for selection."""

    demos: dict[str, list[tuple[str, dspy.Example]]] = field(default_factory=lambda: defaultdict(list))

    def add(self, predictor: str, stratum: str, demo: dspy.Example) -> None:
        self.demos[predictor].append((stratum, demo))

    def sizes(self) -> dict[str, int]:
        return {name: len(items) for name, items in self.demos.items()}

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
    """A copy judging one claim per call and decomposing one turn per call: demos are traced from those calls (the
    layout every predictor keeps), whatever mode the program is scored in."""
    copy = program.deepcopy()
    copy.claim_calls, copy.decompose_calls = "per-claim", "per-turn"
    return copy


def labeled_pool(program: Vista, train: Sequence[Dialogue], *, meter: Meter | None = None,
                 want: dict[str, int] | None = None,
                 on_dialogue: Callable[[Dialogue], None] | None = None) -> Pool:
    """Complete demos from human annotations (see the module docstring). Stops early once every predictor has
    ``want[p]`` candidates (default: three times its default budget)."""
    want = want or {name: 3 * k for name, k in DEFAULT_DEMOS.items()}
    program = one_item_per_call(program)
    pool = Pool()
    for dialogue in annotated(train):
        for index in dialogue.judged_turns:
            claims = [c.text for c in dialogue.turns[index].gold.claims]
            pool.add("decompose", str(min(len(claims), 4)),
                     dspy.Example(**program.decompose_inputs(dialogue, index), claims=claims))
        if len(pool.demos["verify"]) >= want["verify"] and len(pool.demos["categorize"]) >= want["categorize"]:
            continue  # enough judged claims; keep collecting human claim lists for Decompose
        gold = _gold_claims(dialogue)
        with dspy.context(trace=[]):
            verdict = program.judge_claims(dialogue)
            trace = list(dspy.settings.trace)
        if meter is not None:
            meter.usage.merge(verdict.usage)
        for predictor, inputs, outputs in trace:
            claim = gold.get(inputs.get("claim", ""))
            if claim is None:
                continue
            demo = dspy.Example(augmented=True, **inputs, **outputs)
            if predictor is program.verify:
                verified = outputs.label == "VERIFIED"
                if verified == (claim.category == Category.VERIFIED):
                    pool.add("verify", outputs.label, demo)
            elif predictor is program.categorize and outputs.category == claim.category.value:
                pool.add("categorize", outputs.category, demo)
        if on_dialogue is not None:
            on_dialogue(dialogue)
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
    program: Vista
    metadata: dict[str, Any]


def content_hash(dialogues: Sequence[Dialogue]) -> str:
    digest = hashlib.sha256()
    for dialogue in dialogues:
        digest.update(dialogue.model_dump_json().encode())
    return digest.hexdigest()


def compile_program(
    train: Sequence[Dialogue],
    dev: Sequence[Dialogue],
    *,
    optimizer: str = "labeled",
    budgets: dict[str, int] | None = None,
    budget: int = 4,
    seed: int = 0,
    given_claims: bool = False,
    threads: int = 1,
    base: Vista | None = None,
    describe: dict[str, Any] | None = None,
    log: Callable[[str], None] = lambda message: None,
) -> CompileResult:
    """Compile with the LM in the current dspy context. ``base`` (default: the seed program) is the teacher and
    the baseline; ``budget`` is the number of candidates for random-search and mipro (and mipro's trials).
    ``describe`` (model, dataset names ...) goes into the metadata."""
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    budgets = budgets or dict(DEFAULT_DEMOS)
    base = base or Vista.from_program(SEED_PROGRAM)
    meter = Meter()
    if optimizer == "labeled" and not annotated(train):
        raise ValueError("the labeled optimizer needs training dialogues with human claims (VISTA's annotated "
                         "format, e.g. --train vista-human); use bootstrap for datasets with turn labels only")

    log(f"scoring the {base.program_name} program on {len(dev)} dev dialogues")
    seed_score = score(base, dev, given_claims=given_claims, threads=threads, meter=meter, log=log)
    log(f"  {base.program_name}: {seed_score.as_dict()}")
    candidates: list[dict[str, Any]] = []
    if optimizer == "bootstrap":
        compiled = _bootstrap(base, train, budgets, meter)
    elif optimizer == "mipro":
        compiled = _mipro(base, train, dev, budgets, budget=budget, threads=threads, seed=seed, meter=meter)
    else:
        pool = labeled_pool(base, train, meter=meter,
                            on_dialogue=lambda d: log(f"  judged human claims of {d.id}"))
        log(f"demo pool: {pool.sizes()}")
        if optimizer == "labeled":
            compiled = install(base, pool.pick(budgets, seed), budgets, top_up=base)
        else:
            best, best_score = base, seed_score
            for trial in range(budget):
                candidate = install(base, pool.pick(budgets, seed + trial), budgets, top_up=base)
                value = score(candidate, dev, given_claims=given_claims, threads=threads, meter=meter, log=log)
                candidates.append({"seed": seed + trial, **value.as_dict()})
                log(f"  candidate {trial} (seed {seed + trial}): {value.as_dict()}")
                if value.agreement > best_score.agreement:
                    best, best_score = candidate, value
            compiled = best
    # Scored as the base is (demos were traced per claim and per turn).
    compiled.claim_calls, compiled.decompose_calls = base.claim_calls, base.decompose_calls
    problems = incomplete_demos(compiled)
    if problems:
        raise RuntimeError("compiled program has incomplete demos: " + "; ".join(problems[:5]))
    compiled_score = (best_score if optimizer == "random-search"
                      else score(compiled, dev, given_claims=given_claims, threads=threads, meter=meter,
                                 log=log))
    log(f"  compiled: {compiled_score.as_dict()}")
    metadata = compile_metadata(
        compiled, optimizer, {"demos": budgets, "budget": budget, "seed": seed, "given_claims": given_claims,
                              "claim_calls": base.claim_calls},
        train, dev, describe=describe,
        dev_score={"base_program": base.program_name, "base": seed_score.as_dict(),
                   "compiled": compiled_score.as_dict(), "paired": paired_turns(compiled_score.turns_right, seed_score.turns_right)},
        metric="agreement: turn-label accuracy" + (", averaged with claim-category accuracy" if given_claims
                                                   else "") + " on the dev dialogues",
        candidates=candidates, compile_cost=meter.usage.total.model_dump())
    return CompileResult(program=compiled, metadata=metadata)


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


def compile_metadata(program: Vista, optimizer: str, settings: dict[str, Any], train: Sequence[Dialogue],
                     dev: Sequence[Dialogue], *, describe: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """The sidecar of a compiled program: what compiled it, on which data (hashed), how it scored, and when."""
    describe = describe or {}
    return {
        **describe,
        "optimizer": optimizer,
        "optimizer_settings": settings,
        "train": {**describe.get("train", {}), "dialogues": len(train), "sha256": content_hash(train)},
        "dev": {**describe.get("dev", {}), "dialogues": len(dev), "sha256": content_hash(dev),
                "turns": sum(len(d.judged_turns) for d in dev)},
        **fields,
        "demos": {name: len(p.demos) for name, p in program.named_predictors()},
        "dspy_version": dspy.__version__,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def save_compiled(result: CompileResult, name: str, directory: Path | None = None) -> Path:
    """Write ``<name>.json`` (DSPy state: demos and instructions, no LM) and ``<name>.meta.json``."""
    directory = directory or compiled_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    result.program.save(str(path))
    state = json.loads(path.read_text())
    for predictor in state.values():
        if isinstance(predictor, dict) and predictor.get("lm"):
            raise RuntimeError(f"{path}: a predictor carries a bound LM; refusing to ship it")
    (directory / f"{name}.meta.json").write_text(json.dumps({"program": name, **result.metadata}, indent=2) + "\n")
    return path

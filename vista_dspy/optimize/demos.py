"""Demos and the human-labelled claims they come from: each claim asked of Verify and of Categorize (``probe``), the
claim-level scores every choice is made with (pooled over claims, not averaged per dialogue), a predictor's demo
budget, pools of candidate demos (from human claims judged by the base program, or from traces; ``LazyPool`` builds
one when a trial first reads it), demos chosen from a pool's labelled claims by ``dspy.BootstrapFewShot``
(``bootstrap_demos``), picking and installing them per predictor, and ``agreement``, a whole-dialogue metric for DSPy's
teleprompters. Folds by dialogue are ``rules.cross_fitting``'s.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import dspy

from ..program import Vista
from ..schema import Category, Dialogue, DialogueVerdict, GoldClaim
from ..stages import StagedModule

# ---- human-labelled claims as a model judged them -----------------------------------------------------------
CATEGORIES: tuple[str, ...] = ("LACKING EVIDENCE", "OUT-OF-SCOPE", "ABSTENTION", "CONTRADICTED")
# The decision space, in this order: VERIFIED, then the four categories.
LABELS: tuple[str, ...] = ("VERIFIED", *CATEGORIES)
UNSAFE: frozenset[str] = frozenset({"LACKING EVIDENCE", "CONTRADICTED"})


# ---- judging them, and the claim-level scores ------------------------------------------------------------------
# (predictor name, inputs, outputs) of every predictor call, in order.
Trace = list[tuple[str, dict[str, Any], Any]]


def probe(program, dialogues: Sequence[Dialogue], *, threads: int = 1,
          on_dialogue: Callable[[DialogueVerdict], None] | None = None
          ) -> tuple[list[DialogueVerdict], dict[str, Trace]]:
    """Judge the human claims of ``dialogues`` with ``program`` in the current dspy context, every claim asked of
    both stages (``categorize_all``): (verdicts in input order, {dialogue id: its predictor calls}). A rerun
    is served by the LM cache, so an interrupted probe resumes where it stopped."""
    judge = program.with_options(given_claims=True, categorize_all=True)
    names = {id(predictor): name for name, predictor in judge.named_predictors()}

    def one(dialogue: Dialogue) -> tuple[DialogueVerdict, Trace]:
        with dspy.context(trace=[]):
            verdict = judge(dialogue)
            return verdict, [(names.get(id(p), ""), inputs, outputs) for p, inputs, outputs in dspy.settings.trace]

    results: dict[str, tuple[DialogueVerdict, Trace]] = {}
    if threads <= 1:
        for dialogue in dialogues:
            results[dialogue.id] = one(dialogue)
            if on_dialogue is not None:
                on_dialogue(results[dialogue.id][0])
    else:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="vista-probe") as pool:
            futures = {d.id: pool.submit(_in_context(one), d) for d in dialogues}
            for dialogue in dialogues:
                results[dialogue.id] = futures[dialogue.id].result()
                if on_dialogue is not None:
                    on_dialogue(results[dialogue.id][0])
    return [results[d.id][0] for d in dialogues], {d.id: results[d.id][1] for d in dialogues}


def _in_context(function):
    """``function`` run in a worker thread under the caller's dspy settings (LM, adapter, cache)."""
    import contextvars

    snapshot = contextvars.copy_context()
    return lambda *args: snapshot.copy().run(function, *args)


# ---- scores ------------------------------------------------------------------------------------------------------
def safe(label: str) -> bool | None:
    """Whether a decision leaves its turn faithful (None for ERROR)."""
    return None if label == Category.ERROR.value else label not in UNSAFE


def claim_scores(decided: Sequence[str], gold: Sequence[str]) -> dict[str, Any]:
    """Agreement of claim decisions with the annotators, pooled over claims: the safe/unsafe decision (what sets a
    turn's label; ERROR counts wrong), five-way accuracy and macro-F1, and the predicted shares of each label beside
    the annotators'."""
    from sklearn.metrics import f1_score

    n = len(gold)
    if n == 0:
        return {"claims": 0}
    predicted, truth = Counter(decided), Counter(gold)
    return {
        "claims": n,
        "decision_accuracy": sum(safe(d) == safe(g) for d, g in zip(decided, gold)) / n,
        "accuracy": sum(d == g for d, g in zip(decided, gold)) / n,
        "macro_f1": float(f1_score(list(gold), list(decided), labels=list(LABELS), average="macro",
                                   zero_division=0)),
        "shares": {label: predicted[label] / n for label in (*LABELS, "ERROR")},
        "gold_shares": {label: truth[label] / n for label in LABELS},
    }


# ---- demos -------------------------------------------------------------------------------------------------------
DEFAULT_DEMOS: dict[str, int] = {"decompose": 6, "verify": 6, "categorize": 9}


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
    # The human-labelled claims the Verify / Categorize demos were judged on, as examples of each stage with the
    # annotators' answer (stratum: that answer): what ``bootstrap`` chooses from, with the program whose answers the
    # demos are (its teacher). None: none kept.
    labelled: Pool | None = None
    program: Vista | None = None

    def add(self, predictor: str, stratum: str, demo: dspy.Example, dialogue: str = "") -> None:
        self.demos[predictor].append((stratum, demo))
        self.sources[predictor].append(dialogue)

    def extend(self, other: Pool, names: Sequence[str]) -> None:
        """Add ``other``'s demos of these predictors, and its labelled examples."""
        for name in names:
            for (stratum, demo), source in zip(other.demos[name], other.sources[name]):
                self.add(name, stratum, demo, source)
        if other.labelled is not None:
            self.labelled = self.labelled or Pool()
            self.labelled.extend(other.labelled, list(other.labelled.demos))

    def sizes(self) -> dict[str, int]:
        return {name: len(items) for name, items in self.demos.items()}

    def offers(self, predictor: str) -> bool:
        """Whether a trial may draw this predictor's demos from the pool."""
        return bool(self.sizes().get(predictor))

    def without(self, dialogues: set[str]) -> Pool:
        """The pool without the demos of these dialogues."""
        kept = Pool(program=self.program)
        for name, items in self.demos.items():
            for (stratum, demo), source in zip(items, self.sources[name]):
                if source not in dialogues:
                    kept.add(name, stratum, demo, source)
        kept.labelled = self.labelled.without(dialogues) if self.labelled is not None else None
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

    def bootstrap(self, stage: str, k: int, seed: int) -> list[dspy.Example]:
        """``k`` demos for ``stage`` (one of ``BOOTSTRAPPED``) chosen by ``dspy.BootstrapFewShot`` from the labelled
        examples, taken in a seeded order that alternates the annotators' answers (``pick``'s), with the pool's
        program as teacher (its calls are the probe's own: the LM cache, when on, answers them)."""
        labelled = self.labelled or Pool()
        order = labelled.pick({stage: len(labelled.demos[stage])}, seed)[stage]
        if order and self.program is None:
            raise ValueError("a demo pool with labelled claims but no program cannot bootstrap demos")
        return bootstrap_demos(self.program, stage, order, k) if order else []


def one_item_per_call(program: Vista) -> Vista:
    """A copy judging one claim per call, decomposing one turn per call and explaining every label: demos are traced
    from those calls (the layout every predictor keeps), whatever mode the program is scored in."""
    return program.with_options(claim_calls="per-claim", decompose_calls="per-turn", explain_verified=True)


def pool_from_traces(program: Vista, dialogues: Sequence[Dialogue], traces: dict[str, list]) -> Pool:
    """Complete demos from human annotations (see the module docstring): each annotated turn's human claim list
    for Decompose; for Verify and Categorize, the program's own answers (from ``traces``, as ``probing.probe``
    returns them) on the human claims where they agree with the annotators; and every traced Verify / Categorize
    question about a human claim as a labelled example (``Pool.labelled``): its inputs and the annotators' answer
    (Categorize: of the claims they did not call VERIFIED), with an empty explanation (they wrote none)."""
    labelled = Pool()
    pool = Pool(labelled=labelled, program=program)
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
            answer = {"verify": "VERIFIED" if claim.category == Category.VERIFIED else "UNVERIFIABLE",
                      "categorize": claim.category.value}.get(predictor)
            if answer is not None and (predictor == "verify" or claim.category != Category.VERIFIED):
                field_name = BOOTSTRAPPED[predictor]
                labelled.add(predictor, answer, dspy.Example(**inputs, **{field_name: answer}, explanation="")
                                  .with_inputs(*inputs), dialogue.id)
            if predictor == "verify":
                verified = outputs.label == "VERIFIED"
                if verified == (claim.category == Category.VERIFIED):
                    if demo.get("explanation") is None:  # a label-only answer: shown as one (no explanation)
                        demo = demo.copy(explanation="")
                    pool.add("verify", outputs.label, demo, dialogue.id)
            elif predictor == "categorize" and outputs.category == claim.category.value:
                pool.add("categorize", outputs.category, demo, dialogue.id)
    return pool


def labeled_pool(program: Vista, train: Sequence[Dialogue], *, want: dict[str, int] | None = None, threads: int = 1,
                 on_dialogue: Callable[[DialogueVerdict], None] | None = None) -> Pool:
    """``pool_from_traces`` over the annotated training dialogues, judged one claim per call. Judging stops once
    every predictor has ``want[p]`` candidates (default: three times its default budget); human claim lists for
    Decompose are collected from every dialogue."""
    want = want or {name: 3 * k for name, k in DEFAULT_DEMOS.items()}
    program = one_item_per_call(program)
    dialogues = annotated(train)
    pool, judged = Pool(program=program), 0
    while judged < len(dialogues) and not (len(pool.demos["verify"]) >= want["verify"]
                                           and len(pool.demos["categorize"]) >= want["categorize"]):
        batch = dialogues[judged:judged + max(1, threads)]
        _, traces = probe(program, batch, threads=threads, on_dialogue=on_dialogue)
        pool.extend(pool_from_traces(program, batch, traces), ("verify", "categorize"))
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


# ---- demos chosen by dspy.BootstrapFewShot -------------------------------------------------------------------------
# The stages whose demos BootstrapFewShot may choose, and the answer its metric compares with the annotators'.
BOOTSTRAPPED: dict[str, str] = {"verify": "label", "categorize": "category"}


class StageStudent(StagedModule):
    """One stage of a program as the student a DSPy teleprompter compiles: called with a claim's inputs, it asks the
    stage's predictor (an attribute named for the stage) as the program asks it one claim per call -- its answer
    cap, label probabilities and retries (``stages``) -- so that its calls are the demo pool's probe's own."""

    def __init__(self, program: Vista, stage: str) -> None:
        super().__init__()
        judge = one_item_per_call(program)
        self.stage, self._question = stage, judge._questions()[stage]
        self.short_answer_tokens, self.label_probabilities = judge.short_answer_tokens, judge.label_probabilities
        setattr(self, stage, self._question.predictor)

    def forward(self, **inputs: Any) -> dspy.Prediction:  # type: ignore[override]
        from dataclasses import replace

        claim = inputs.pop("claim")
        result = self._call(replace(self._question, predictor=getattr(self, self.stage)).single(claim, inputs))
        return result.prediction or dspy.Prediction()  # a failed call: no answer, which the metric refuses


def bootstrap_demos(teacher: Vista, stage: str, trainset: Sequence[dspy.Example], k: int) -> list[dspy.Example]:
    """Up to ``k`` demos for ``stage`` chosen by ``dspy.BootstrapFewShot`` with the LM of the current dspy context:
    ``teacher``'s stage (its own demos) answers the labelled examples in order until ``k`` answers agree with the
    annotators (``max_bootstrapped_demos``); those answers are the demos, topped up to ``k`` with labelled examples
    the teacher got wrong or was not asked (``max_labeled_demos``: the annotators' answer, no explanation)."""
    import contextlib
    import sys

    if k <= 0 or not trainset:
        return []
    field_name = BOOTSTRAPPED[stage]
    asking = StageStudent(teacher, stage)
    asking._compiled = True  # answers with its own demos (DSPy re-labels an uncompiled teacher's)
    optimizer = dspy.BootstrapFewShot(
        metric=lambda example, prediction, trace=None: prediction.get(field_name) == example[field_name],
        max_bootstrapped_demos=k, max_labeled_demos=k, max_rounds=1)
    with contextlib.redirect_stdout(sys.stderr):  # its count of traces is printed, not logged
        compiled = optimizer.compile(StageStudent(teacher, stage), teacher=asking, trainset=list(trainset))
    return list(getattr(compiled, stage).demos)


def pool_hash(pool: Pool) -> str:
    """What identifies a demo pool's content (a study records it; a program rebuilt from a trial checks it)."""
    import hashlib
    import json

    content = {name: [(stratum, demo.toDict()) for stratum, demo in items] for name, items in sorted(pool.demos.items())}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


class LazyPool:
    """A demo pool built the first time a trial draws on it (``build``: the LM calls that judge the pool's human
    claims), never before: a study none of whose trials reads pool demos pays nothing for it. Until built it offers
    every predictor; ``pick`` builds it, once. Demos chosen by BootstrapFewShot (``bootstrap``) are built once per
    (stage, count, seed) and kept, in memory and in ``store`` (anything with ``get`` and item assignment, e.g. the
    study's storage: ``study.result.StudyStore``), from which a resumed study reads them with no pool and no LM call."""

    def __init__(self, build: Callable[[], Pool], store: Any = None) -> None:
        import threading

        self._build, self._store = build, store
        self._pool: Pool | None = None
        self._lock, self._bootstrap_lock = threading.Lock(), threading.Lock()
        self._bootstrapped: dict[str, list[dspy.Example]] = {}

    @property
    def built(self) -> bool:
        return self._pool is not None

    def pool(self) -> Pool:
        with self._lock:
            if self._pool is None:
                self._pool = self._build()
            return self._pool

    def offers(self, predictor: str) -> bool:
        return True if self._pool is None else self._pool.offers(predictor)

    def sizes(self) -> dict[str, int]:
        return self.pool().sizes()

    def pick(self, budgets: dict[str, int], seed: int) -> dict[str, list[dspy.Example]]:
        return self.pool().pick(budgets, seed)

    def bootstrap(self, stage: str, k: int, seed: int) -> list[dspy.Example]:
        key = f"{stage}/{k}/{seed}"
        with self._bootstrap_lock:
            if key not in self._bootstrapped:
                kept = self._store.get(key) if self._store is not None else None
                if kept is None:
                    demos = self.pool().bootstrap(stage, k, seed)
                    if self._store is not None:
                        self._store[key] = [demo.toDict() for demo in demos]
                else:
                    demos = [dspy.Example(**demo) for demo in kept]
                self._bootstrapped[key] = demos
            return list(self._bootstrapped[key])

"""Demos and the human-labelled claims they come from: each claim asked of Verify and of Categorize with label
probabilities (``ClaimProbe`` records; ``probe``), the claim-level scores every choice is made with (pooled over
claims, not averaged per dialogue), a predictor's demo budget, pools of candidate demos (from human claims judged by
the base program, or from traces; ``LazyPool`` builds one when a trial first reads it), picking and installing them
per predictor, and ``agreement``, the metric DSPy's teleprompters maximize. Folds by dialogue are
``rules.cross_fitting``'s.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import dspy
from pydantic import BaseModel, ConfigDict

from ..program import Vista
from ..schema import Category, Dialogue, DialogueVerdict, GoldClaim, Usage

# ---- human-labelled claims as a model judged them -----------------------------------------------------------
CATEGORIES: tuple[str, ...] = ("LACKING EVIDENCE", "OUT-OF-SCOPE", "ABSTENTION", "CONTRADICTED")
# The decision space, in this order: VERIFIED, then the four categories.
LABELS: tuple[str, ...] = ("VERIFIED", *CATEGORIES)
UNSAFE: frozenset[str] = frozenset({"LACKING EVIDENCE", "CONTRADICTED"})


class ClaimProbe(BaseModel):
    """One human-labelled claim as a model judged it with both stages (``JudgeOptions.categorize_all``): what claim
    decisions are scored with (``claim_scores``, ``turn_accuracy``)."""

    model_config = ConfigDict(frozen=True)

    dialogue_id: str
    turn_index: int
    position: int = 0  # the claim's place in its turn
    claim: str
    gold: str  # one of LABELS
    raw: str  # the model's own decision: one of LABELS, or ERROR
    verify: dict[str, float] | None = None
    categorize: dict[str, float] | None = None


# ---- judging them, and the claim-level scores ------------------------------------------------------------------
# (predictor name, inputs, outputs) of every predictor call, in order.
Trace = list[tuple[str, dict[str, Any], Any]]


def probes_of(verdict: DialogueVerdict) -> list[ClaimProbe]:
    """The human-labelled claims of a verdict judged with ``given_claims`` (and ``categorize_all``, for both
    distributions) as probe records; ``raw`` is the verdict's own category (the program's decision rule, if any,
    applied)."""
    return [ClaimProbe(dialogue_id=verdict.dialogue_id, turn_index=turn.turn_index, position=position,
                       claim=claim.claim, gold=claim.gold_category.value, raw=claim.category.value,
                       verify=claim.probabilities.verify if claim.probabilities else None,
                       categorize=claim.probabilities.categorize if claim.probabilities else None)
            for turn in verdict.turns for position, claim in enumerate(turn.claims)
            if claim.gold_category is not None]


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


def turn_accuracy(probes: Sequence[ClaimProbe], decided: Sequence[str]) -> float | None:
    """The share of turns whose label from these claim decisions (hallucinated iff one is unsafe; unknown, and so
    wrong, when none is and one is an ERROR) agrees with the label the annotators' claims give: what the gate's
    turn test asks, on human claims instead of decomposed ones."""
    turns: dict[tuple[str, int], list[tuple[bool | None, bool | None]]] = {}
    for p, d in zip(probes, decided):
        turns.setdefault((p.dialogue_id, p.turn_index), []).append((safe(d), safe(p.gold)))
    right = 0
    for pairs in turns.values():
        gold_unsafe = any(g is False for _, g in pairs)
        if any(d is False for d, _ in pairs):
            right += gold_unsafe
        elif all(d is not None for d, _ in pairs):
            right += not gold_unsafe
    return right / len(turns) if turns else None


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

    def offers(self, predictor: str) -> bool:
        """Whether a trial may draw this predictor's demos from the pool."""
        return bool(self.sizes().get(predictor))

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


def pool_hash(pool: Pool) -> str:
    """What identifies a demo pool's content (a study records it; a program rebuilt from a trial checks it)."""
    import hashlib
    import json

    content = {name: [(stratum, demo.toDict()) for stratum, demo in items] for name, items in sorted(pool.demos.items())}
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()


class LazyPool:
    """A demo pool built the first time a trial draws on it (``build``: the LM calls that judge the pool's human
    claims), never before: a study none of whose trials reads pool demos pays nothing for it. Until built it offers
    every predictor; ``pick`` builds it, once."""

    def __init__(self, build: Callable[[], Pool]) -> None:
        import threading

        self._build = build
        self._pool: Pool | None = None
        self._lock = threading.Lock()

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

"""How a stage's question reaches the claims of a turn: one call per claim, or one call for all of them (the batched
and joint modes), and one Decompose call per dialogue. A batched answer is checked item by item against the numbered
input, and whatever it misses, invents or numbers twice is asked on its own, so no mode ever loses a claim. Batched
prompts reuse the per-item instructions and demos (regrouped by ``prompts``). Which claims are asked what is the
method's (``program``); this module only asks.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import dspy

from .label_probabilities import Distribution
from .prompts import batch_demos, dialogue_demos, render_marked
from .schema import Dialogue, Stage, Usage
from .signatures import JOINT_LABEL, JudgedClaim, batched, joint_instructions, number_claims, per_dialogue
from .stages import StageCall, StageResult, add_usage

Steps = Generator[list[StageCall], list[StageResult], Any]


@dataclass(frozen=True)
class Question:
    """One stage's question about a claim: its predictor, the signature it is called with (None: the predictor's
    own), the answer item of its batched twin, the answer's label field and where its label distribution is read."""

    stage: Stage
    predictor: dspy.Predict
    signature: type[dspy.Signature] | None
    item: type
    field: str
    label: tuple[str, tuple[str, ...]]

    def single(self, claim: str, evidence: dict[str, str]) -> StageCall:
        return StageCall(self.stage, self.predictor, {**evidence, "claim": claim}, self.signature, label=self.label)

    def batch(self, claims: list[str], evidence: dict[str, str], *, instructions: str | None = None,
              demos: list[dspy.Example] | None = None, item: type | None = None,
              label: tuple[str, tuple[str, ...]] | None = None) -> StageCall:
        """One call asking this question about every claim in ``claims`` (numbered)."""
        item = item or self.item
        return StageCall(self.stage, self.predictor, {**evidence, "claims": number_claims(claims)},
                         batched(self.signature or self.predictor.signature, item, instructions),
                         demos=batch_demos(self.predictor.demos, item) if demos is None else demos,
                         answers=len(claims), label=label or self.label)


def ask(question: Question, texts: Sequence[str], indices: Iterable[int], evidence: dict[str, str], usage: Usage,
        *, batch: bool, extra: Sequence[StageCall] = (), per_claim: Sequence[dict[str, str]] | None = None) -> Steps:
    """({claim index: result} for the claims at ``indices``, results of the ``extra`` calls asked alongside): one
    call per claim, or (``batch``) one call for all of them, the claims its answer misses asked one by one.
    ``evidence``: the sources' fields for all the claims; ``per_claim``: each claim's own, for a call about it
    alone."""
    indices = list(indices)
    single = [question.single(texts[i], per_claim[i] if per_claim is not None else evidence) for i in indices]
    if not batch or not indices:
        calls = single + list(extra)
        results = [add_usage(usage, c.stage, r) for c, r in zip(calls, (yield calls))] if calls else []
        return dict(zip(indices, results)), results[len(indices):]
    calls = [question.batch([texts[i] for i in indices], evidence), *extra]
    results = [add_usage(usage, c.stage, r) for c, r in zip(calls, (yield calls))]
    found = yield from per_item(results[0], question.field, single, usage)
    return dict(zip(indices, found)), results[1:]


def ask_jointly(verify: Question, categorize: Question, texts: Sequence[str], evidence: dict[str, str],
                extra: Sequence[StageCall], usage: Usage) -> Steps:
    """One call deciding VERIFIED or the category of every claim: ({claim index: verify result}, {claim index:
    categorize result}, results of ``extra``) for the claims the answer covers; the caller asks the others."""
    demos = joint_demos(verify.predictor, categorize.predictor)
    call = verify.batch(list(texts), evidence, demos=demos, item=JudgedClaim, label=JOINT_LABEL,
                        instructions=joint_instructions(verify.predictor.signature, categorize.predictor.signature))
    calls = [call, *extra]
    results = [add_usage(usage, c.stage, r) for c, r in zip(calls, (yield calls))]
    verified: dict[int, StageResult] = {}
    categorized: dict[int, StageResult] = {}
    found, discarded = _numbered(results[0], len(texts))
    usage.unread(verify.stage, discarded)
    for i, (item, joint) in found.items():
        as_verify, as_categorize = _split_joint(joint)
        verified[i] = _item_result(dspy.Prediction(label="VERIFIED" if item.category == "VERIFIED" else
                                                   "UNVERIFIABLE", explanation=item.explanation), as_verify)
        if item.category != "VERIFIED":
            categorized[i] = _item_result(dspy.Prediction(category=item.category, explanation=item.explanation),
                                          as_categorize)
    return verified, categorized, results[1:]


def answers(result: StageResult, n: int, field: str = "verdicts", key: str = "claim") -> dict[int, Any]:
    """{item index: answer item} from a batched answer (claims, or a dialogue's turns): numbers outside 1..n
    (invented items) and repeated numbers are ignored, so those items count as missing."""
    return {i: item for i, (item, _) in _numbered(result, n, field, key)[0].items()}


def _numbered(result: StageResult, n: int, field: str = "verdicts", key: str = "claim"
              ) -> tuple[dict[int, tuple[Any, Distribution | None]], int]:
    """``answers``, each item with its label distribution (the call's ``distributions`` are in answer order, one per
    item; when their count differs from the items', none is trusted), and how many readable distributions were
    thrown away for that (to be booked as unread)."""
    if result.error is not None:
        return {}, 0
    items = list(getattr(result.prediction, field) or [])
    lined_up = len(result.distributions) == len(items)
    distributions = result.distributions if lined_up else [None] * len(items)
    discarded = 0 if lined_up else sum(d is not None for d in result.distributions)
    found: dict[int, tuple[Any, Distribution | None]] = {}
    repeated: set[int] = set()
    for item, distribution in zip(items, distributions):
        number = getattr(item, key)
        if not 1 <= number <= n:
            continue
        if number - 1 in found:
            repeated.add(number - 1)
        found[number - 1] = (item, distribution)
    return {i: a for i, a in found.items() if i not in repeated}, discarded


def _item_result(prediction: dspy.Prediction, distribution: Distribution | None) -> StageResult:
    return StageResult(prediction, None, distributions=[distribution] if distribution is not None else [])


def per_item(result: StageResult, field: str, single: list[StageCall], usage: Usage) -> Steps:
    """Per-claim results from one batched answer; the claims it misses are asked one by one (``single``)."""
    results: list[StageResult | None] = [None] * len(single)
    found, discarded = _numbered(result, len(single))
    if single:
        usage.unread(single[0].stage, discarded)
    for i, (item, distribution) in found.items():
        results[i] = _item_result(dspy.Prediction(**{field: getattr(item, field), "explanation": item.explanation}),
                                  distribution)
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        calls = [single[i] for i in missing]
        for i, r in zip(missing, (yield calls)):
            results[i] = add_usage(usage, single[i].stage, r)
    return results


def joint_demos(verify: dspy.Predict, categorize: dspy.Predict) -> list[dspy.Example]:
    """Verify's VERIFIED demos and Categorize's demos as answers of the joint question."""
    verified = [d for d in verify.demos if d.get("label") == "VERIFIED"]
    as_joint = [{**dict(d), "category": "VERIFIED"} for d in verified] + [dict(d) for d in categorize.demos]
    return batch_demos(as_joint, JudgedClaim)


def _split_joint(joint: Distribution | None) -> tuple[Distribution | None, Distribution | None]:
    """A joint answer's distribution over VERIFIED and the four categories as Verify's and Categorize's."""
    if joint is None:
        return None, None
    verified = joint["VERIFIED"]
    rest = {label: p for label, p in joint.items() if label != "VERIFIED"}
    total = sum(rest.values())
    return ({"VERIFIED": verified, "UNVERIFIABLE": 1.0 - verified},
            {label: p / total for label, p in rest.items()} if total > 0 else None)


def decompose_dialogue(decompose: dspy.Predict, dialogue: Dialogue, indices: list[int],
                       signature: type[dspy.Signature] | None, usage: Usage) -> Steps:
    """{turn index: Decompose result} for the turns at ``indices`` that one call over the whole dialogue (those
    turns marked and numbered) answered; the caller decomposes the others on their own."""
    call = StageCall("decompose", decompose, {"dialogue": render_marked(dialogue.turns, indices)},
                     per_dialogue(signature or decompose.signature), demos=dialogue_demos(decompose.demos))
    [result] = yield [call]
    found = answers(add_usage(usage, "decompose", result), len(indices), "turns", "turn")
    return {indices[n]: StageResult(dspy.Prediction(claims=item.claims), None) for n, item in found.items()}

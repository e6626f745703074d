"""Several claims (or turns) in one LM call: the batched and joint judging modes and one Decompose call per
dialogue. An answer is checked item by item against the numbered input, and whatever it misses, invents or
numbers twice is asked on its own, so no mode ever loses a claim. Batched prompts reuse the per-item instructions
and demos (regrouped by ``prompts``).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import dspy

from .prompts import batch_demos, dialogue_demos, render_marked
from .schema import Dialogue, Stage, Usage
from .signatures import JudgedClaim, batched, joint_instructions, number_claims, per_dialogue
from .stages import StageCall, StageResult, add_usage

Steps = Generator[list[StageCall], list[StageResult], Any]


def answers(result: StageResult, n: int, field: str = "verdicts", key: str = "claim") -> dict[int, Any]:
    """{item index: answer item} from a batched answer (claims, or a dialogue's turns): numbers outside 1..n
    (invented items) and repeated numbers are ignored, so those items count as missing."""
    if result.error is not None:
        return {}
    found: dict[int, Any] = {}
    repeated: set[int] = set()
    for item in getattr(result.prediction, field) or []:
        number = getattr(item, key)
        if not 1 <= number <= n:
            continue
        if number - 1 in found:
            repeated.add(number - 1)
        found[number - 1] = item
    return {i: a for i, a in found.items() if i not in repeated}


def per_item(result: StageResult, field: str, single: list[StageCall], usage: Usage) -> Steps:
    """Per-claim results from one batched answer; the claims it misses are asked one by one (``single``)."""
    found = answers(result, len(single))
    results: list[StageResult | None] = [
        StageResult(dspy.Prediction(**{field: getattr(a, field), "explanation": a.explanation}), None)
        if (a := found.get(i)) is not None else None for i in range(len(single))
    ]
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        calls = [single[i] for i in missing]
        for i, r in zip(missing, (yield calls)):
            results[i] = add_usage(usage, single[i].stage, r)
    return results


def batch_call(stage: Stage, predictor: dspy.Predict, item: type, texts: list[str], evidence: dict[str, str],
               signature: type[dspy.Signature] | None, *, instructions: str | None = None,
               demos: list[dspy.Example] | None = None) -> StageCall:
    """One call asking ``predictor``'s question about every claim in ``texts`` (answers typed as ``item``)."""
    base = signature or predictor.signature
    return StageCall(stage, predictor, {**evidence, "claims": number_claims(texts)},
                     batched(base, item, instructions),
                     demos=batch_demos(predictor.demos, item) if demos is None else demos, answers=len(texts))


def joint_demos(verify: dspy.Predict, categorize: dspy.Predict) -> list[dspy.Example]:
    """Verify's VERIFIED demos and Categorize's demos as answers of the joint question."""
    verified = [d for d in verify.demos if d.get("label") == "VERIFIED"]
    as_joint = [{**dict(d), "category": "VERIFIED"} for d in verified] + [dict(d) for d in categorize.demos]
    return batch_demos(as_joint, JudgedClaim)


def judge_jointly(verify: dspy.Predict, categorize: dspy.Predict, texts: list[str], evidence: dict[str, str],
                  extra: list[StageCall], verify_signature: type[dspy.Signature] | None,
                  categorize_signature: type[dspy.Signature] | None, usage: Usage) -> Steps:
    """(verify results, {claim index: categorize result}, results of ``extra``): one call decides VERIFIED or the
    category of every claim; the claims it misses take the two-stage path, one by one."""
    call = batch_call("verify", verify, JudgedClaim, texts, evidence, verify_signature,
                      instructions=joint_instructions(verify.signature, categorize.signature),
                      demos=joint_demos(verify, categorize))
    results = [add_usage(usage, c.stage, r) for c, r in zip([call] + extra, (yield [call] + extra))]
    verified: list[StageResult | None] = [None] * len(texts)
    categorized: dict[int, StageResult] = {}
    for i, item in answers(results[0], len(texts)).items():
        verified[i] = StageResult(dspy.Prediction(label="VERIFIED" if item.category == "VERIFIED" else
                                                  "UNVERIFIABLE", explanation=item.explanation), None)
        if item.category != "VERIFIED":
            categorized[i] = StageResult(dspy.Prediction(category=item.category, explanation=item.explanation),
                                         None)
    missing = [i for i in range(len(texts)) if verified[i] is None]
    if missing:
        calls = [StageCall("verify", verify, {**evidence, "claim": texts[i]}, verify_signature) for i in missing]
        for i, single, result in zip(missing, calls, (yield calls)):
            verified[i] = add_usage(usage, single.stage, result)
        pending = [i for i in missing if verified[i].error is None and verified[i].prediction.label != "VERIFIED"]
        calls = [StageCall("categorize", categorize, {**evidence, "claim": texts[i]}, categorize_signature)
                 for i in pending]
        if calls:
            for i, single, result in zip(pending, calls, (yield calls)):
                categorized[i] = add_usage(usage, single.stage, result)
    return verified, categorized, results[1:]


def decompose_dialogue(decompose: dspy.Predict, dialogue: Dialogue, indices: list[int],
                       signature: type[dspy.Signature] | None, usage: Usage) -> Steps:
    """{turn index: Decompose result} for the turns at ``indices`` that one call over the whole dialogue (those
    turns marked and numbered) answered; the caller decomposes the others on their own."""
    call = StageCall("decompose", decompose, {"dialogue": render_marked(dialogue.turns, indices)},
                     per_dialogue(signature or decompose.signature), demos=dialogue_demos(decompose.demos))
    [result] = yield [call]
    found = answers(add_usage(usage, "decompose", result), len(indices), "turns", "turn")
    return {indices[n]: StageResult(dspy.Prediction(claims=item.claims), None) for n, item in found.items()}

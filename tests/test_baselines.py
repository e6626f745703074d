import asyncio

import dspy
import pytest
from helpers import assistant, dialogue, user

from vista_dspy import Category
from vista_dspy.baselines import SYSTEMS, FActScore, LLMJudge, split_sentences
from vista_dspy.lm.fake import RuleEngine, rule_lm

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."
DLG = dialogue(
    assistant("I love Lisbon.", background=True),
    user("Tell me about Lisbon."),
    assistant("Lisbon is the capital of Portugal. Lisbon has ten hills. Have you been?", DOC),
    user("Nice."),
    assistant("Lisbon has seven hills.", DOC),
)


def run(system, method="forward"):
    engine = RuleEngine()
    with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
        verdict = system(DLG) if method == "forward" else asyncio.run(system.acall(DLG))
    return verdict, engine


def test_sentence_splitter():
    assert split_sentences("Hi there. It is 5 p.m. now! Is it? Yes") == ["Hi there.", "It is 5 p.m. now!", "Is it?", "Yes"]
    assert split_sentences("Dr. Sandow trained in Berlin. He was strong.") == ["Dr. Sandow trained in Berlin.",
                                                                                "He was strong."]


@pytest.mark.parametrize("split", [True, False])
def test_factscore_flags_unsupported_facts(split):
    verdict, engine = run(FActScore(split_sentences=split))
    first, second = verdict.turns
    assert [t.turn_index for t in verdict.turns] == [2, 4]  # background turn not judged
    assert [c.category for c in first.claims] == [Category.VERIFIED, Category.LACKING_EVIDENCE]
    assert first.label == "hallucinated" and second.label == "faithful"
    calls = [stage for stage, _ in engine.requests]
    assert calls.count("facts") == (4 if split else 2)  # 3 sentences + 1, or one call per turn
    assert verdict.usage.by_stage["decompose"].calls == calls.count("facts")
    assert verdict.program == ("factscore" if split else "factscore-nosplit")


def test_llm_judge_one_call_per_turn_with_history_and_explanation():
    verdict, engine = run(LLMJudge())
    assert [t.label for t in verdict.turns] == ["hallucinated", "faithful"]
    assert all(t.explanation == "rule" and t.claims == [] for t in verdict.turns)
    inputs = engine.inputs_of("judge")
    assert len(inputs) == 2 and inputs[0]["history"] == "assistant: I love Lisbon.\nuser: Tell me about Lisbon."
    assert verdict.usage.by_stage["judge"].calls == 2


def test_baselines_async_twins_and_registry():
    for name, make in SYSTEMS.items():
        sync, _ = run(make())
        asynchronous, _ = run(make(), method="aforward")
        assert asynchronous == sync, name

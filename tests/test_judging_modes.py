"""The judging modes against per-claim judging (the paper's call pattern) on the rule engine: the claims of a turn in
one call (batched, joint) and one Decompose call per dialogue give the same verdicts with fewer calls, and fall back
to their own calls for what an answer leaves out; chain of thought per stage; Verify answering with its label alone;
and how calls are scheduled (request slots, a dialogue's Decompose calls first)."""

import asyncio

import dspy
import pytest
from helpers import LISBON, assistant, categories, dialogue, judge, user

from vista_dspy import Category, Vista
from vista_dspy.lm.fake import RuleEngine

MANY = dialogue(
    user("Tell me about Lisbon."),
    assistant("Lisbon is the capital of Portugal. Lisbon has ten hills. I love Lisbon. I'm not sure about trams.",
              LISBON),
    user("And?"),
    assistant("Lisbon has seven hills. Lisbon is not in Spain. I think it is lovely.", LISBON),
)


def calls(verdict, stage):
    counts = verdict.usage.by_stage.get(stage)
    return counts.calls if counts else 0


@pytest.mark.parametrize("mode", ["batched", "joint"])
@pytest.mark.parametrize("method", ["forward", "aforward"])
def test_claims_in_one_call_give_the_per_claim_verdicts_with_fewer_calls(mode, method):
    reference, _ = judge(MANY, explain_verified=True)  # a batched answer always explains
    verdict, engine = judge(MANY, method=method, claim_calls=mode)
    assert [categories(t) for t in verdict.turns] == [categories(t) for t in reference.turns]
    assert [t.label for t in verdict.turns] == [t.label for t in reference.turns]
    assert [c.explanation for t in verdict.turns for c in t.claims] == \
        [c.explanation for t in reference.turns for c in t.claims]
    turns = len(verdict.turns)
    if mode == "batched":
        assert calls(verdict, "verify") == turns and calls(verdict, "categorize") == turns
    else:
        assert calls(verdict, "verify") == turns and calls(verdict, "categorize") == 0
    assert calls(reference, "verify") + calls(reference, "categorize") > 2 * (calls(verdict, "verify") +
                                                                            calls(verdict, "categorize"))
    assert verdict.options["claim_calls"] == mode


@pytest.mark.parametrize("mode", ["batched", "joint"])
def test_a_claim_missing_from_a_batched_answer_falls_back_to_its_own_calls(mode):
    dlg = dialogue(user("q"), assistant("Lisbon is the capital of Portugal. Lisbon has ten <<DROP-BATCH>> hills.",
                                        LISBON))
    verdict, engine = judge(dlg, claim_calls=mode)
    assert categories(verdict.turns[0]) == [Category.VERIFIED, Category.LACKING_EVIDENCE]
    single = [i["claim"] for i in engine.inputs_of("verify")]
    assert single == ["Lisbon has ten <<DROP-BATCH>> hills."]  # only the dropped claim went one by one


def test_an_unparseable_batched_answer_falls_back_to_per_claim_calls():
    dlg = dialogue(user("q"), assistant("Lisbon is the capital of Portugal. Odd <<BAD-BATCH>> claim.", LISBON))
    verdict, engine = judge(dlg, claim_calls="batched")
    assert categories(verdict.turns[0]) == [Category.VERIFIED, Category.LACKING_EVIDENCE]
    assert len(engine.inputs_of("verify_batch")) == 3  # asked twice more, then per claim
    assert len(engine.inputs_of("verify")) == 2 and verdict.turns[0].label == "hallucinated"


@pytest.mark.parametrize("method", ["forward", "aforward"])
def test_one_decompose_call_per_dialogue_gives_the_per_turn_claims(method):
    background = dialogue(user("Hi."), assistant("Lisbon is old. Lisbon is hilly.", background=True),
                          *MANY.turns)  # a background turn is decomposed too
    reference, _ = judge(background)
    verdict, engine = judge(background, method=method, decompose_calls="per-dialogue", claim_calls="batched")
    assert [[c.claim for c in t.claims] for t in verdict.turns] == \
        [[c.claim for c in t.claims] for t in reference.turns]
    assert [t.label for t in verdict.turns] == [t.label for t in reference.turns]
    assert calls(reference, "decompose") == 3 and calls(verdict, "decompose") == 1
    [asked] = engine.inputs_of("decompose_dialogue")
    assert asked["dialogue"].count("[turn ") == 3 and "[turn 3] assistant: Lisbon has seven hills." in asked["dialogue"]
    assert not engine.inputs_of("decompose") and verdict.options["decompose_calls"] == "per-dialogue"
    # a dialogue with one assistant turn keeps the per-turn call
    single, engine = judge(dialogue(user("q"), assistant("Lisbon has seven hills.", LISBON)),
                           decompose_calls="per-dialogue")
    assert len(engine.inputs_of("decompose")) == 1 and not engine.inputs_of("decompose_dialogue")


def test_a_turn_missing_from_the_dialogue_answer_is_decomposed_on_its_own():
    dlg = dialogue(user("q"), assistant("Lisbon has seven hills.", LISBON), user("and?"),
                   assistant("Lisbon has ten <<DROP-TURN>> hills.", LISBON), user("more"),
                   assistant("Odd <<BAD-DECOMPOSE>> turn.", LISBON))
    verdict, engine = judge(dlg, decompose_calls="per-dialogue")
    assert [i["turn"] for i in engine.inputs_of("decompose")] == ["Lisbon has ten <<DROP-TURN>> hills."] + \
        ["Odd <<BAD-DECOMPOSE>> turn."] * 3  # unparseable: asked twice more
    assert [len(t.claims) for t in verdict.turns] == [1, 1, 0]
    assert verdict.turns[2].error.startswith("decompose failed") and calls(verdict, "decompose") == 5  # 1 + 1 + 3
    broken, engine = judge(dialogue(*dlg.turns[:4], user("x"), assistant("<<BAD-DIALOGUE>>", LISBON)),
                         decompose_calls="per-dialogue")
    assert len(engine.inputs_of("decompose_dialogue")) == 3 and len(engine.inputs_of("decompose")) == 3


def test_dialogue_demos_carry_the_per_turn_demos():
    from vista_dspy.prompts import dialogue_demos, render_marked

    [demo] = dialogue_demos([dspy.Example(history="user: Hi?", turn="Lisbon is old.", claims=["Lisbon is old."])])
    assert demo.dialogue == "user: Hi?\n[turn 1] assistant: Lisbon is old." and demo.turns[0].claims == ["Lisbon is old."]
    assert render_marked(MANY.turns, [1, 3]).splitlines()[1].startswith("[turn 1] assistant: Lisbon is the capital")
    with pytest.raises(ValueError, match="history_in_decompose"):
        Vista(decompose_calls="per-dialogue", history_in_decompose=False)
    with pytest.raises(ValueError, match=r"decompose_calls\s+Input should be 'per-turn' or 'per-dialogue'"):
        Vista(decompose_calls="per-claim")


def test_claim_calls_is_validated():
    with pytest.raises(ValueError, match=r"claim_calls\s+Input should be 'per-claim', 'batched' or 'joint'"):
        Vista(claim_calls="all-at-once")


def test_chain_of_thought_per_stage_adds_reasoning_and_keeps_verdicts():
    reference, _ = judge(MANY)
    verdict, engine = judge(MANY, reasoning=["verify", "categorize"])
    assert [categories(t) for t in verdict.turns] == [categories(t) for t in reference.turns]
    assert verdict.options["reasoning"] == ["verify", "categorize"]
    program = Vista(reasoning=["decompose"], explain_verified=True)
    assert "reasoning" in program._signature("decompose", program.decompose.signature, history=False).output_fields
    assert program._signature("verify", program.verify.signature, history=False) is None
    with pytest.raises(ValueError, match="reasoning applies to"):
        Vista(reasoning=["judge"])


@pytest.mark.parametrize("method", ["forward", "aforward"])
def test_verify_can_answer_with_its_label_alone(method):
    dlg = dialogue(user("Tell me about Lisbon."),
                   assistant("Lisbon is the capital of Portugal. Lisbon has ten hills.", LISBON))
    explained, _ = judge(dlg, method=method, explain_verified=True)
    terse, engine = judge(dlg, method=method)  # the default
    # Same verdicts; a VERIFIED claim has no explanation, an unverified one keeps Categorize's.
    assert categories(terse.turns[0]) == categories(explained.turns[0]) == [Category.VERIFIED,
                                                                             Category.LACKING_EVIDENCE]
    verified, lacking = terse.turns[0].claims
    assert verified.explanation == "" and explained.turns[0].claims[0].explanation
    assert lacking.explanation == explained.turns[0].claims[1].explanation != ""
    assert terse.options["explain_verified"] is False
    # A batched answer always explains.
    batched = Vista(claim_calls="batched")
    assert "explanation" in batched._signature("verify", batched.verify.signature, history=True).output_fields


def test_a_label_alone_verify_prompt_asks_for_no_explanation():
    from vista_dspy.signatures import Verify, label_only

    assert list(label_only(Verify).output_fields) == ["label"] and list(Verify.output_fields) == ["explanation",
                                                                                                   "label"]


def test_request_slots_bound_requests_and_serve_the_lowest_priority_first():
    from vista_dspy.lm.clients.slots import PRIORITY, RequestSlots

    order = []

    async def main():
        slots = RequestSlots(2)
        release = asyncio.Event()

        async def request(name, priority):
            PRIORITY.set(priority)
            async with slots:
                order.append(name)
                await release.wait()

        waiting = [("a", 0), ("b", 0), ("low", 5), ("high", -5), ("mid", 0), ("gone", -9)]
        tasks = [asyncio.create_task(request(name, priority)) for name, priority in waiting]
        await asyncio.sleep(0.01)
        assert order == ["a", "b"]  # two slots: the rest wait
        tasks[-1].cancel()  # a waiter cancelled while queued gives up its turn
        release.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        return slots

    slots = asyncio.run(main())
    assert order == ["a", "b", "high", "mid", "low"]
    assert slots.most_in_flight == 2 and slots._free == 2  # every slot came back


def test_a_request_slot_is_held_once_per_task_and_by_the_engine_when_it_takes_them():
    from vista_dspy.lm.clients.slots import IN_FLIGHT, RequestSlots, request_slot
    from vista_dspy.lm.models import ModelConfig

    native = ModelConfig("hosted_vllm/fake", api_base="http://127.0.0.1:9/v1").build()
    litellm = ModelConfig("openai/fake", api_base="http://127.0.0.1:9/v1").build()

    async def main():
        slots = RequestSlots(1)
        IN_FLIGHT.set(slots)
        async with request_slot(litellm):  # a predictor's call on an LM whose engine knows nothing of slots
            assert slots._free == 0
            async with request_slot():  # nested (the engine inside): no second slot, no deadlock
                assert slots._free == 0
        async with request_slot(native):  # this LM's engine holds a slot around each HTTP request itself
            assert slots._free == 1
        return slots

    assert asyncio.run(main())._free == 1


def test_a_dialogues_decompose_calls_go_out_together_before_any_verify():
    dlg = dialogue(user("Tell me about Lisbon."), assistant("Lisbon is the capital of Portugal.", document=LISBON),
                   user("And its hills?"), assistant("Lisbon has seven hills.", document=LISBON))
    for method in ("forward", "aforward"):
        engine = RuleEngine()
        verdict, _ = judge(dlg, engine, method=method)
        stages = [stage for stage, _ in engine.requests]
        # Decompose reads only the text: both turns' calls come first, then the judging, turn by turn.
        assert stages[:2] == ["decompose", "decompose"] and "decompose" not in stages[2:]
        assert len(verdict.turns) == 2 and all(t.claims for t in verdict.turns)

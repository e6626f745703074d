import asyncio

import dspy
import pytest
from fakes import RuleEngine, rule_lm
from helpers import assistant, dialogue, user

from vista_dspy import Category, GoldClaim, TurnGold, Vista
from vista_dspy.prompts import HISTORY_OMITTED, clean_claims
from vista_dspy.signatures import EMPTY_KNOWLEDGE, NO_REFERENCE

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."


def run(dlg, engine=None, method="forward", **options):
    """Judge ``dlg`` with the rule engine; per-claim judging (the paper's method) unless options say otherwise."""
    engine = engine or RuleEngine()
    program = Vista.from_program(**{"claim_calls": "per-claim", **options})
    with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
        if method == "forward":
            verdict = program(dlg)
        elif method == "aforward":
            verdict = asyncio.run(program.acall(dlg))
        else:
            verdict = program.judge_claims(dlg)
    return verdict, engine


def categories(turn):
    return [c.category for c in turn.claims]


def test_store_merges_after_the_turn_and_only_safe_claims():
    dlg = dialogue(
        user("Tell me about Lisbon."),
        assistant("Lisbon is the capital of Portugal. I love Lisbon. Lisbon has ten hills.", DOC),
        user("Nice."),
        assistant("I love Lisbon. Lisbon has ten hills."),  # knowledge-only turn
    )
    verdict, engine = run(dlg)
    first, second = verdict.turns
    assert categories(first) == [Category.VERIFIED, Category.OUT_OF_SCOPE, Category.LACKING_EVIDENCE]
    assert first.label == "hallucinated" and first.knowledge == []
    verify = engine.inputs_of("verify")
    # Every claim of the first turn saw the store as it was before that turn: empty.
    assert [v["knowledge"] for v in verify[:3]] == [EMPTY_KNOWLEDGE] * 3
    # VERIFIED and OUT-OF-SCOPE joined, LACKING EVIDENCE did not.
    assert second.knowledge == ["Lisbon is the capital of Portugal.", "I love Lisbon."]
    assert verify[3]["knowledge"] == "1. Lisbon is the capital of Portugal.\n2. I love Lisbon."
    assert verify[3]["reference"] == NO_REFERENCE
    # Support found only in the store.
    assert categories(second) == [Category.VERIFIED, Category.LACKING_EVIDENCE]
    assert verdict.score == pytest.approx(3 / 5)


def test_background_turns_are_not_judged_but_feed_the_store():
    dlg = dialogue(
        assistant("I love Lisbon. Lisbon has ten hills.", background=True),
        user("Really?"),
        assistant("Lisbon has ten hills.", DOC),
    )
    verdict, engine = run(dlg)
    [turn] = verdict.turns
    assert turn.turn_index == 2
    assert turn.knowledge == ["I love Lisbon.", "Lisbon has ten hills."]  # joined unjudged, even the false one
    assert categories(turn) == [Category.VERIFIED]
    assert engine.inputs_of("verify")[0]["reference"] == DOC
    assert len(engine.inputs_of("decompose")) == 2


def test_background_facts_seed_the_store_and_can_be_switched_off():
    dlg = dialogue(user("Hi"), assistant("I love Lisbon."), background=["I love Lisbon."])
    verdict, engine = run(dlg)
    assert engine.inputs_of("verify")[0]["knowledge"] == "1. I love Lisbon."
    assert categories(verdict.turns[0]) == [Category.VERIFIED]
    verdict, engine = run(dlg, seed_background=False)
    assert engine.inputs_of("verify")[0]["knowledge"] == EMPTY_KNOWLEDGE


def test_without_accumulation_the_store_stays_empty():
    dlg = dialogue(assistant("Lisbon is the capital of Portugal.", DOC), user("ok"), assistant("Lisbon is the capital of Portugal."))
    verdict, engine = run(dlg, accumulate=False)
    assert [v["knowledge"] for v in engine.inputs_of("verify")] == [EMPTY_KNOWLEDGE] * 2
    assert verdict.turns[1].knowledge == []
    assert categories(verdict.turns[1]) == [Category.LACKING_EVIDENCE]


def test_context_mode_gives_history_to_verify_and_categorize_only_when_on():
    dlg = dialogue(user("Is Lisbon big?"), assistant("Lisbon has ten hills.", DOC))
    _, engine = run(dlg)
    assert "history" not in engine.inputs_of("verify")[0]
    assert "history" not in engine.inputs_of("categorize")[0]
    _, engine = run(dlg, use_context=True)
    assert engine.inputs_of("verify")[0]["history"] == "user: Is Lisbon big?"
    assert engine.inputs_of("categorize")[0]["history"] == "user: Is Lisbon big?"
    assert engine.inputs_of("decompose")[0]["history"] == "user: Is Lisbon big?"


def test_history_ablation_and_zero_shot():
    dlg = dialogue(user("Is Lisbon big?"), assistant("Lisbon has ten hills.", DOC))
    _, engine = run(dlg, history_in_decompose=False)
    assert engine.inputs_of("decompose")[0]["history"] == HISTORY_OMITTED
    _, engine = run(dlg)
    assert min(engine.message_counts) > 1  # demos are rendered as extra messages
    _, engine = run(dlg, zero_shot=True)
    assert set(engine.message_counts) == {1}


def test_malformed_outputs_become_error_verdicts_never_dropped_claims():
    dlg = dialogue(
        user("q"),
        assistant("Lisbon is the capital of Portugal. Oops <<BAD-VERIFY>> here. Odd <<BAD-CATEGORIZE>> one.", DOC),
        user("q2"),
        assistant("Broken <<BAD-DECOMPOSE>> turn.", DOC),
        assistant("Also broken <<BAD-DECOMPOSE>>.", background=True),
    )
    verdict, _ = run(dlg)
    first, second = verdict.turns
    assert len(first.claims) == 3
    assert categories(first) == [Category.VERIFIED, Category.ERROR, Category.ERROR]
    assert [c.stage for c in first.claims] == ["verify", "verify", "categorize"]
    assert all(c.error for c in first.claims[1:])
    assert first.label == "unknown" and first.score == 1.0
    assert second.label == "unknown" and second.claims == [] and "decompose failed" in second.error
    assert len(verdict.errors) == 1 and "background" in verdict.errors[0]


@pytest.mark.parametrize("method", ["forward", "aforward"])
def test_an_unparseable_answer_is_asked_again_past_the_cache(method):
    dlg = dialogue(user("q"), assistant("Lisbon is the capital of Portugal <<FLAKY2-VERIFY>>.", DOC))
    verdict, engine = run(dlg, method=method)  # twice more by default
    [claim] = verdict.turns[0].claims
    assert claim.error is None and claim.category != Category.ERROR
    assert len(engine.inputs_of("verify")) == 3
    assert verdict.usage.by_stage["verify"].calls == 3


@pytest.mark.parametrize("method", ["forward", "aforward"])
def test_the_run_sets_how_often_an_unparseable_answer_is_asked_again(method):
    from vista_dspy.stages import CallFailures

    dlg = dialogue(user("q"), assistant("Lisbon is the capital of Portugal <<FLAKY2-VERIFY>>.", DOC))
    with CallFailures(parse_retries=1).active():
        verdict, engine = run(dlg, method=method)
    [claim] = verdict.turns[0].claims
    assert claim.category == Category.ERROR and "AdapterParseError" in claim.error
    assert len(engine.inputs_of("verify")) == 2


def test_an_unsafe_claim_decides_even_beside_an_error():
    dlg = dialogue(user("q"), assistant("Lisbon has ten hills. Oops <<BAD-VERIFY>> here.", DOC))
    verdict, _ = run(dlg)
    assert verdict.turns[0].label == "hallucinated"


def test_judge_given_claims_uses_gold_claims_and_keeps_store_semantics():
    gold = TurnGold(label="hallucinated", claims=[
        GoldClaim(text="Lisbon is the capital of Portugal.", category=Category.VERIFIED),
        GoldClaim(text="Lisbon has ten hills.", category=Category.CONTRADICTED),
    ])
    gold2 = TurnGold(label="faithful", claims=[GoldClaim(text="Lisbon is the capital of Portugal.",
                                                         category=Category.VERIFIED)])
    dlg = dialogue(user("q"), assistant("whatever text", DOC, gold=gold), user("q2"), assistant("more", gold=gold2))
    verdict, engine = run(dlg, method="judge_claims")
    first, second = verdict.turns
    assert [c.claim for c in first.claims] == [c.text for c in gold.claims]
    assert [c.gold_category for c in first.claims] == [Category.VERIFIED, Category.CONTRADICTED]
    assert first.claims_source == "given" and first.gold_label == "hallucinated"
    assert engine.inputs_of("decompose") == []
    assert second.knowledge == ["Lisbon is the capital of Portugal."]
    assert categories(second) == [Category.VERIFIED]


def test_judge_claims_requires_gold_claims():
    dlg = dialogue(user("q"), assistant("text", DOC))
    with pytest.raises(ValueError, match="no gold claims"):
        run(dlg, method="judge_claims")


def test_async_twin_gives_the_same_verdict():
    dlg = dialogue(user("Tell me."), assistant("Lisbon is the capital of Portugal. I love Lisbon. Lisbon has ten "
                                               "hills.", DOC), user("ok"), assistant("I love Lisbon."))
    sync, _ = run(dlg)
    asynchronous, _ = run(dlg, method="aforward")
    assert asynchronous == sync
    assert Category.ERROR not in [c.category for t in sync.turns for c in t.claims]
    assert sync.usage.total.calls == 8  # 2 decompose + 4 verify + 2 categorize


def test_contradiction_check_sees_only_earlier_turns():
    dlg = dialogue(user("Is Lisbon flat?"), assistant("On the contrary, Lisbon has seven hills.", DOC))
    verdict, engine = run(dlg, check_contradictions=True)
    [turn] = verdict.turns
    assert turn.contradiction.contradicts is True and turn.label == "hallucinated"
    [inputs] = engine.inputs_of("contradiction")
    assert inputs["history"] == "user: Is Lisbon flat?"
    verdict, engine = run(dlg)
    assert verdict.turns[0].contradiction is None and engine.inputs_of("contradiction") == []


def test_usage_is_accounted_per_stage_and_model():
    dlg = dialogue(user("q"), assistant("Lisbon is the capital of Portugal. Lisbon has ten hills.", DOC))
    verdict, engine = run(dlg)
    stages = {s: verdict.usage.by_stage[s].calls for s in verdict.usage.by_stage}
    assert stages == {"decompose": 1, "verify": 2, "categorize": 1}
    assert verdict.usage.by_model["fake/rules"].calls == len(engine.requests) == 4
    assert verdict.usage.total.prompt_tokens > 0 and verdict.usage.total.completion_tokens > 0
    assert verdict.model == "fake/rules" and verdict.program == "seed"


def test_repeated_claims_are_removed_and_counted():
    assert clean_claims(["A cat.", " a  cat ", "", "B dog"]) == (["A cat.", "B dog"], 1)
    dlg = dialogue(user("q"), assistant("Lisbon has seven hills. Lisbon has seven hills! Lisbon has seven hills.", DOC))
    verdict, _ = run(dlg)
    assert verdict.turns[0].duplicates_removed == 2 and len(verdict.turns[0].claims) == 1


def test_question_only_turn_is_faithful_with_no_claims():
    verdict, _ = run(dialogue(user("Hi"), assistant("How are you?", DOC)))
    assert verdict.turns[0].claims == [] and verdict.turns[0].label == "faithful" and verdict.score is None


def test_fatal_lm_errors_stop_instead_of_becoming_verdicts():
    from dspy import lm15
    from dspy.utils.exceptions import LMAuthError

    class Unauthorized(RuleEngine):
        def complete(self, request):
            raise lm15.AuthError("invalid api key")

    with pytest.raises(LMAuthError):
        run(dialogue(user("q"), assistant("Lisbon has seven hills.", DOC)), engine=Unauthorized())


def test_claim_list_schema_is_bounded_but_validation_keeps_every_claim():
    from dspy.adapters.json_adapter import _get_structured_outputs_response_format

    from vista_dspy.signatures import ClaimList, Decompose

    schema = _get_structured_outputs_response_format(Decompose).model_json_schema()["properties"]["claims"]
    assert schema["maxItems"] == ClaimList.MAX_CLAIMS and schema["items"]["maxLength"] == ClaimList.MAX_CLAIM_CHARS
    # A model that ignores the schema (no grammar) is not punished: every claim survives parsing.
    many = " ".join(f"Fact number {i} holds." for i in range(ClaimList.MAX_CLAIMS + 6))
    verdict, _ = run(dialogue(user("q"), assistant(many, DOC)))
    assert len(verdict.turns[0].claims) == ClaimList.MAX_CLAIMS + 6


def test_short_answer_cap_applies_to_short_stages_only():
    program = Vista(short_answer_tokens=50)
    from vista_dspy.stages import StageCall

    verify = program._kwargs(StageCall("verify", program.verify, {"claim": "c"}))
    decompose = program._kwargs(StageCall("decompose", program.decompose, {"turn": "t"}))
    assert verify["config"] == {"max_tokens": 50} and "config" not in decompose
    assert "config" not in Vista()._kwargs(StageCall("verify", program.verify, {"claim": "c"}))


MANY = dialogue(
    user("Tell me about Lisbon."),
    assistant("Lisbon is the capital of Portugal. Lisbon has ten hills. I love Lisbon. I'm not sure about trams.", DOC),
    user("And?"),
    assistant("Lisbon has seven hills. Lisbon is not in Spain. I think it is lovely.", DOC),
)


def calls(verdict, stage):
    counts = verdict.usage.by_stage.get(stage)
    return counts.calls if counts else 0


@pytest.mark.parametrize("mode", ["batched", "joint"])
@pytest.mark.parametrize("method", ["forward", "aforward"])
def test_claims_in_one_call_give_the_per_claim_verdicts_with_fewer_calls(mode, method):
    reference, _ = run(MANY, explain_verified=True)  # a batched answer always explains
    verdict, engine = run(MANY, method=method, claim_calls=mode)
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
                                        DOC))
    verdict, engine = run(dlg, claim_calls=mode)
    assert categories(verdict.turns[0]) == [Category.VERIFIED, Category.LACKING_EVIDENCE]
    single = [i["claim"] for i in engine.inputs_of("verify")]
    assert single == ["Lisbon has ten <<DROP-BATCH>> hills."]  # only the dropped claim went one by one


def test_an_unparseable_batched_answer_falls_back_to_per_claim_calls():
    dlg = dialogue(user("q"), assistant("Lisbon is the capital of Portugal. Odd <<BAD-BATCH>> claim.", DOC))
    verdict, engine = run(dlg, claim_calls="batched")
    assert categories(verdict.turns[0]) == [Category.VERIFIED, Category.LACKING_EVIDENCE]
    assert len(engine.inputs_of("verify_batch")) == 3  # asked twice more, then per claim
    assert len(engine.inputs_of("verify")) == 2 and verdict.turns[0].label == "hallucinated"


@pytest.mark.parametrize("method", ["forward", "aforward"])
def test_one_decompose_call_per_dialogue_gives_the_per_turn_claims(method):
    background = dialogue(user("Hi."), assistant("Lisbon is old. Lisbon is hilly.", background=True),
                          *MANY.turns)  # a background turn is decomposed too
    reference, _ = run(background)
    verdict, engine = run(background, method=method, decompose_calls="per-dialogue", claim_calls="batched")
    assert [[c.claim for c in t.claims] for t in verdict.turns] == [[c.claim for c in t.claims] for t in reference.turns]
    assert [t.label for t in verdict.turns] == [t.label for t in reference.turns]
    assert calls(reference, "decompose") == 3 and calls(verdict, "decompose") == 1
    [asked] = engine.inputs_of("decompose_dialogue")
    assert asked["dialogue"].count("[turn ") == 3 and "[turn 3] assistant: Lisbon has seven hills." in asked["dialogue"]
    assert not engine.inputs_of("decompose") and verdict.options["decompose_calls"] == "per-dialogue"
    # a dialogue with one assistant turn keeps the per-turn call
    single, engine = run(dialogue(user("q"), assistant("Lisbon has seven hills.", DOC)), decompose_calls="per-dialogue")
    assert len(engine.inputs_of("decompose")) == 1 and not engine.inputs_of("decompose_dialogue")


def test_a_turn_missing_from_the_dialogue_answer_is_decomposed_on_its_own():
    dlg = dialogue(user("q"), assistant("Lisbon has seven hills.", DOC), user("and?"),
                   assistant("Lisbon has ten <<DROP-TURN>> hills.", DOC), user("more"),
                   assistant("Odd <<BAD-DECOMPOSE>> turn.", DOC))
    verdict, engine = run(dlg, decompose_calls="per-dialogue")
    assert [i["turn"] for i in engine.inputs_of("decompose")] == ["Lisbon has ten <<DROP-TURN>> hills."] + \
        ["Odd <<BAD-DECOMPOSE>> turn."] * 3  # unparseable: asked twice more
    assert [len(t.claims) for t in verdict.turns] == [1, 1, 0]
    assert verdict.turns[2].error.startswith("decompose failed") and calls(verdict, "decompose") == 5  # 1 + 1 + 3
    broken, engine = run(dialogue(*dlg.turns[:4], user("x"), assistant("<<BAD-DIALOGUE>>", DOC)),
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
    reference, _ = run(MANY)
    verdict, engine = run(MANY, reasoning=["verify", "categorize"])
    assert [categories(t) for t in verdict.turns] == [categories(t) for t in reference.turns]
    assert verdict.options["reasoning"] == ["verify", "categorize"]
    program = Vista(reasoning=["decompose"], explain_verified=True)
    assert "reasoning" in program._signature("decompose", program.decompose.signature, history=False).output_fields
    assert program._signature("verify", program.verify.signature, history=False) is None
    with pytest.raises(ValueError, match="reasoning applies to"):
        Vista(reasoning=["judge"])


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
    dlg = dialogue(user("Tell me about Lisbon."), assistant("Lisbon is the capital of Portugal.", document=DOC),
                   user("And its hills?"), assistant("Lisbon has seven hills.", document=DOC))
    for method in ("forward", "aforward"):
        engine = RuleEngine()
        verdict, _ = run(dlg, engine, method=method)
        stages = [stage for stage, _ in engine.requests]
        # Decompose reads only the text: both turns' calls come first, then the judging, turn by turn.
        assert stages[:2] == ["decompose", "decompose"] and "decompose" not in stages[2:]
        assert len(verdict.turns) == 2 and all(t.claims for t in verdict.turns)


@pytest.mark.parametrize("method", ["forward", "aforward"])
def test_verify_can_answer_with_its_label_alone(method):
    dlg = dialogue(user("Tell me about Lisbon."),
                   assistant("Lisbon is the capital of Portugal. Lisbon has ten hills.", DOC))
    explained, _ = run(dlg, method=method, explain_verified=True)
    terse, engine = run(dlg, method=method)  # the default
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

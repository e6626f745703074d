"""The method, turn by turn, with the rule engine: the knowledge store (what joins it and when), background turns and
facts, the paper's ablations and VISTA+ctx, failures that become ERROR verdicts (never dropped claims) and answers
asked again, judging given claims, the async twin, the contradiction check, usage per stage, and what a call asks
for. (The judging modes that make fewer calls: test_judging_modes.py.)"""


import pytest
from helpers import LISBON, assistant, categories, dialogue, judge, user

from vista_dspy import Category, GoldClaim, TurnGold, Vista
from vista_dspy.lm.fake import RuleEngine
from vista_dspy.prompts import HISTORY_OMITTED, clean_claims
from vista_dspy.signatures import EMPTY_KNOWLEDGE, NO_REFERENCE


def test_store_merges_after_the_turn_and_only_safe_claims():
    dlg = dialogue(
        user("Tell me about Lisbon."),
        assistant("Lisbon is the capital of Portugal. I love Lisbon. Lisbon has ten hills.", LISBON),
        user("Nice."),
        assistant("I love Lisbon. Lisbon has ten hills."),  # knowledge-only turn
    )
    verdict, engine = judge(dlg)
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
        assistant("Lisbon has ten hills.", LISBON),
    )
    verdict, engine = judge(dlg)
    [turn] = verdict.turns
    assert turn.turn_index == 2
    assert turn.knowledge == ["I love Lisbon.", "Lisbon has ten hills."]  # joined unjudged, even the false one
    assert categories(turn) == [Category.VERIFIED]
    assert engine.inputs_of("verify")[0]["reference"] == LISBON
    assert len(engine.inputs_of("decompose")) == 2


def test_background_facts_seed_the_store_and_can_be_switched_off():
    dlg = dialogue(user("Hi"), assistant("I love Lisbon."), background=["I love Lisbon."])
    verdict, engine = judge(dlg)
    assert engine.inputs_of("verify")[0]["knowledge"] == "1. I love Lisbon."
    assert categories(verdict.turns[0]) == [Category.VERIFIED]
    verdict, engine = judge(dlg, seed_background=False)
    assert engine.inputs_of("verify")[0]["knowledge"] == EMPTY_KNOWLEDGE


def test_without_accumulation_the_store_stays_empty():
    dlg = dialogue(assistant("Lisbon is the capital of Portugal.", LISBON), user("ok"),
                   assistant("Lisbon is the capital of Portugal."))
    verdict, engine = judge(dlg, accumulate=False)
    assert [v["knowledge"] for v in engine.inputs_of("verify")] == [EMPTY_KNOWLEDGE] * 2
    assert verdict.turns[1].knowledge == []
    assert categories(verdict.turns[1]) == [Category.LACKING_EVIDENCE]


def test_context_mode_gives_history_to_verify_and_categorize_only_when_on():
    dlg = dialogue(user("Is Lisbon big?"), assistant("Lisbon has ten hills.", LISBON))
    _, engine = judge(dlg)
    assert "history" not in engine.inputs_of("verify")[0]
    assert "history" not in engine.inputs_of("categorize")[0]
    _, engine = judge(dlg, use_context=True)
    assert engine.inputs_of("verify")[0]["history"] == "user: Is Lisbon big?"
    assert engine.inputs_of("categorize")[0]["history"] == "user: Is Lisbon big?"
    assert engine.inputs_of("decompose")[0]["history"] == "user: Is Lisbon big?"


def test_history_ablation_and_zero_shot():
    dlg = dialogue(user("Is Lisbon big?"), assistant("Lisbon has ten hills.", LISBON))
    _, engine = judge(dlg, history_in_decompose=False)
    assert engine.inputs_of("decompose")[0]["history"] == HISTORY_OMITTED
    _, engine = judge(dlg)
    assert min(engine.message_counts) > 1  # demos are rendered as extra messages
    _, engine = judge(dlg, zero_shot=True)
    assert set(engine.message_counts) == {1}


def test_malformed_outputs_become_error_verdicts_never_dropped_claims():
    dlg = dialogue(
        user("q"),
        assistant("Lisbon is the capital of Portugal. Oops <<BAD-VERIFY>> here. Odd <<BAD-CATEGORIZE>> one.", LISBON),
        user("q2"),
        assistant("Broken <<BAD-DECOMPOSE>> turn.", LISBON),
        assistant("Also broken <<BAD-DECOMPOSE>>.", background=True),
    )
    verdict, _ = judge(dlg)
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
    dlg = dialogue(user("q"), assistant("Lisbon is the capital of Portugal <<FLAKY2-VERIFY>>.", LISBON))
    verdict, engine = judge(dlg, method=method)  # twice more by default
    [claim] = verdict.turns[0].claims
    assert claim.error is None and claim.category != Category.ERROR
    assert len(engine.inputs_of("verify")) == 3
    assert verdict.usage.by_stage["verify"].calls == 3


@pytest.mark.parametrize("method", ["forward", "aforward"])
def test_the_run_sets_how_often_an_unparseable_answer_is_asked_again(method):
    from vista_dspy.stages import CallFailures

    dlg = dialogue(user("q"), assistant("Lisbon is the capital of Portugal <<FLAKY2-VERIFY>>.", LISBON))
    with CallFailures(parse_retries=1).active():
        verdict, engine = judge(dlg, method=method)
    [claim] = verdict.turns[0].claims
    assert claim.category == Category.ERROR and "AdapterParseError" in claim.error
    assert len(engine.inputs_of("verify")) == 2


def test_an_unsafe_claim_decides_even_beside_an_error():
    dlg = dialogue(user("q"), assistant("Lisbon has ten hills. Oops <<BAD-VERIFY>> here.", LISBON))
    verdict, _ = judge(dlg)
    assert verdict.turns[0].label == "hallucinated"


def test_judge_given_claims_uses_gold_claims_and_keeps_store_semantics():
    gold = TurnGold(label="hallucinated", claims=[
        GoldClaim(text="Lisbon is the capital of Portugal.", category=Category.VERIFIED),
        GoldClaim(text="Lisbon has ten hills.", category=Category.CONTRADICTED),
    ])
    gold2 = TurnGold(label="faithful", claims=[GoldClaim(text="Lisbon is the capital of Portugal.",
                                                         category=Category.VERIFIED)])
    dlg = dialogue(user("q"), assistant("whatever text", LISBON, gold=gold), user("q2"), assistant("more", gold=gold2))
    verdict, engine = judge(dlg, method="judge_claims")
    first, second = verdict.turns
    assert [c.claim for c in first.claims] == [c.text for c in gold.claims]
    assert [c.gold_category for c in first.claims] == [Category.VERIFIED, Category.CONTRADICTED]
    assert first.claims_source == "given" and first.gold_label == "hallucinated"
    assert engine.inputs_of("decompose") == []
    assert second.knowledge == ["Lisbon is the capital of Portugal."]
    assert categories(second) == [Category.VERIFIED]


def test_judge_claims_requires_gold_claims():
    dlg = dialogue(user("q"), assistant("text", LISBON))
    with pytest.raises(ValueError, match="no gold claims"):
        judge(dlg, method="judge_claims")


def test_async_twin_gives_the_same_verdict():
    dlg = dialogue(user("Tell me."), assistant("Lisbon is the capital of Portugal. I love Lisbon. Lisbon has ten "
                                               "hills.", LISBON), user("ok"), assistant("I love Lisbon."))
    sync, _ = judge(dlg)
    asynchronous, _ = judge(dlg, method="aforward")
    assert asynchronous == sync
    assert Category.ERROR not in [c.category for t in sync.turns for c in t.claims]
    assert sync.usage.total.calls == 8  # 2 decompose + 4 verify + 2 categorize


def test_contradiction_check_sees_only_earlier_turns():
    dlg = dialogue(user("Is Lisbon flat?"), assistant("On the contrary, Lisbon has seven hills.", LISBON))
    verdict, engine = judge(dlg, check_contradictions=True)
    [turn] = verdict.turns
    assert turn.contradiction.contradicts is True and turn.label == "hallucinated"
    [inputs] = engine.inputs_of("contradiction")
    assert inputs["history"] == "user: Is Lisbon flat?"
    verdict, engine = judge(dlg)
    assert verdict.turns[0].contradiction is None and engine.inputs_of("contradiction") == []


def test_usage_is_accounted_per_stage_and_model():
    dlg = dialogue(user("q"), assistant("Lisbon is the capital of Portugal. Lisbon has ten hills.", LISBON))
    verdict, engine = judge(dlg)
    stages = {s: verdict.usage.by_stage[s].calls for s in verdict.usage.by_stage}
    assert stages == {"decompose": 1, "verify": 2, "categorize": 1}
    assert verdict.usage.by_model["fake/rules"].calls == len(engine.requests) == 4
    assert verdict.usage.total.prompt_tokens > 0 and verdict.usage.total.completion_tokens > 0
    assert verdict.model == "fake/rules" and verdict.program == "seed"


def test_repeated_claims_are_removed_and_counted():
    assert clean_claims(["A cat.", " a  cat ", "", "B dog"]) == (["A cat.", "B dog"], 1)
    dlg = dialogue(user("q"),
                   assistant("Lisbon has seven hills. Lisbon has seven hills! Lisbon has seven hills.", LISBON))
    verdict, _ = judge(dlg)
    assert verdict.turns[0].duplicates_removed == 2 and len(verdict.turns[0].claims) == 1


def test_question_only_turn_is_faithful_with_no_claims():
    verdict, _ = judge(dialogue(user("Hi"), assistant("How are you?", LISBON)))
    assert verdict.turns[0].claims == [] and verdict.turns[0].label == "faithful" and verdict.score is None


def test_fatal_lm_errors_stop_instead_of_becoming_verdicts():
    from dspy import lm15
    from dspy.utils.exceptions import LMAuthError

    class Unauthorized(RuleEngine):
        def complete(self, request):
            raise lm15.AuthError("invalid api key")

    with pytest.raises(LMAuthError):
        judge(dialogue(user("q"), assistant("Lisbon has seven hills.", LISBON)), engine=Unauthorized())


def test_claim_list_schema_is_bounded_but_validation_keeps_every_claim():
    from dspy.adapters.json_adapter import _get_structured_outputs_response_format

    from vista_dspy.signatures import ClaimList, Decompose

    schema = _get_structured_outputs_response_format(Decompose).model_json_schema()["properties"]["claims"]
    assert schema["maxItems"] == ClaimList.MAX_CLAIMS and schema["items"]["maxLength"] == ClaimList.MAX_CLAIM_CHARS
    # A model that ignores the schema (no grammar) is not punished: every claim survives parsing.
    many = " ".join(f"Fact number {i} holds." for i in range(ClaimList.MAX_CLAIMS + 6))
    verdict, _ = judge(dialogue(user("q"), assistant(many, LISBON)))
    assert len(verdict.turns[0].claims) == ClaimList.MAX_CLAIMS + 6


def test_short_answer_cap_applies_to_short_stages_only():
    program = Vista(short_answer_tokens=50)
    from vista_dspy.stages import StageCall

    verify = program._kwargs(StageCall("verify", program.verify, {"claim": "c"}))
    decompose = program._kwargs(StageCall("decompose", program.decompose, {"turn": "t"}))
    assert verify["config"] == {"max_tokens": 50} and "config" not in decompose
    assert "config" not in Vista()._kwargs(StageCall("verify", program.verify, {"claim": "c"}))

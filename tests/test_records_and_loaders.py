import json

import pytest
from helpers import assistant, dialogue, user
from pydantic import ValidationError

from vista_dspy import scoring
from vista_dspy.data import InputError, load_dialogues
from vista_dspy.data.vista import normalize_speakers
from vista_dspy.schema import (
    Category,
    ClaimVerdict,
    ContradictionVerdict,
    Dialogue,
    DialogueVerdict,
    GoldClaim,
    Grounding,
    Turn,
    TurnGold,
    TurnVerdict,
    Usage,
    UsageCounts,
)


def test_every_record_round_trips_through_json():
    gold = TurnGold(label="hallucinated", original_label="faithful",
                    claims=[GoldClaim(text="x", category=Category.CONTRADICTED)])
    d = Dialogue(id="x", turns=[user("hi"), assistant("a", "doc", gold=gold), assistant("b", background=True),
                                assistant("c")], background=["fact"], source={"dataset": "t"})
    usage = Usage()
    usage.add("verify", "m", UsageCounts(calls=1, prompt_tokens=5, completion_tokens=2))
    claim = ClaimVerdict(claim="x", category=Category.ERROR, stage="categorize", error="boom",
                         gold_category=Category.VERIFIED)
    turn = TurnVerdict(turn_index=1, text="a", grounding="document", claims=[claim], claims_source="given",
                       label="unknown", score=None, knowledge=["k"],
                       contradiction=ContradictionVerdict(contradicts=True, explanation="e"))
    verdict = DialogueVerdict(dialogue_id="x", turns=[turn], score=None, usage=usage, errors=["e"], program="seed")
    for record in (d, usage, claim, turn, verdict, gold, Grounding.background()):
        assert type(record).model_validate_json(record.model_dump_json()) == record


def test_passages_are_numbered_for_the_judge_and_round_trip_without_their_derived_document():
    grounding = Grounding.from_passages(["Lisbon is old.", "It has hills."])
    assert grounding.document == "[1] Lisbon is old.\n\n[2] It has hills."
    written = {"kind": "document", "passages": ["Lisbon is old.", "It has hills."]}
    assert json.loads(grounding.model_dump_json()) == written
    assert Grounding.model_validate_json(grounding.model_dump_json()) == grounding
    assert Grounding.from_passages(["Only one."]) == Grounding.from_document("Only one.")
    assert json.loads(Grounding.from_document("doc").model_dump_json()) == {"kind": "document", "document": "doc"}
    for wrong in ({"kind": "document", "passages": ["a", "b"], "document": "a b"},
                  {"kind": "knowledge_only", "passages": ["a"]}, {"kind": "document", "passages": ["a", " "]}):
        with pytest.raises(ValidationError):
            Grounding.model_validate(wrong)


def test_grounding_cases_are_explicit():
    assert Grounding.from_document("doc").judged
    assert Grounding.knowledge_only().judged and Grounding.knowledge_only().document is None
    assert not Grounding.background().judged
    with pytest.raises(ValidationError):
        Grounding(kind="document")
    with pytest.raises(ValidationError):
        Grounding(kind="background", document="text")
    assert assistant("x").grounding.kind == "knowledge_only"  # missing grounding = store only
    with pytest.raises(ValidationError):
        Turn(role="user", text="x", grounding=Grounding.knowledge_only())


def test_dev_file_loads_with_expected_counts(dev_file):
    dialogues = load_dialogues(dev_file)
    assert len(dialogues) == 70
    judged = [(d, i) for d in dialogues for i in d.judged_turns]
    assert len(judged) == 118
    assert sum(len(d.turns[i].gold.claims) for d, i in judged) == 460
    labels = [d.turns[i].gold.label for d, i in judged]
    assert labels.count("hallucinated") == 63 and labels.count("faithful") == 55
    # gold_label is exactly "some claim is lacking evidence or contradicted"
    for d, i in judged:
        categories = [c.category for c in d.turns[i].gold.claims]
        assert scoring.turn_label(categories) == d.turns[i].gold.label
    background = sum(1 for d in dialogues for t in d.turns if t.role == "assistant" and not t.judged)
    assert background == 41
    texts = [c.text for d, i in judged for c in d.turns[i].gold.claims]
    assert not any(t.startswith(("The wizard", "The apprentice")) for t in texts)


def test_speaker_names_are_normalised():
    assert normalize_speakers("The wizard likes the apprentice's dog.") == "The assistant likes the user's dog."


def test_grounding_markers(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps([[
        {"role": "wizard", "utterance": "a", "retrieved_document": "N/A"},
        {"role": "apprentice", "utterance": "b"},
        {"role": "assistant", "utterance": "c", "retrieved_document": "NONE"},
        {"role": "assistant", "utterance": "d", "retrieved_document": "Prompt Information"},
        {"role": "assistant", "utterance": "e"},
        {"role": "assistant", "utterance": "f", "retrieved_document": "Some text."},
    ]]))
    [d] = load_dialogues(path)
    kinds = [t.grounding.kind if t.grounding else None for t in d.turns]
    assert kinds == ["background", None, "knowledge_only", "knowledge_only", "knowledge_only", "document"]
    assert [t.role for t in d.turns[:2]] == ["assistant", "user"]


def test_dialogue_records_jsonl_round_trip(tmp_path):
    d = dialogue(user("q"), assistant("a", "doc"), id="r1", background=["b"])
    path = tmp_path / "d.jsonl"
    path.write_text(d.model_dump_json() + "\n\n")
    assert load_dialogues(path) == [d]


GOOD_TURN = {"role": "assistant", "utterance": "x", "retrieved_document": "doc"}
MALFORMED = [
    ("truncated", '[[{"role": "user", "utterance": "hi"}', None, "invalid JSON at line 1"),
    ("not a list", '{"role": "user"}', None, "expected a JSON list of conversations"),
    ("conversation not a list", json.dumps([{"a": 1}]), "conversation 0", "expected a list of turns"),
    ("empty conversation", json.dumps([[]]), "conversation 0", "empty conversation"),
    ("turn not an object", json.dumps([["hi"]]), "conversation 0, turn 0", "expected a turn object"),
    ("unknown role", json.dumps([[{"role": "bot", "utterance": "x"}]]), "conversation 0, turn 0", "field 'role'"),
    ("missing utterance", json.dumps([[{"role": "user"}]]), "turn 0", "field 'utterance'"),
    ("utterance not a string", json.dumps([[{"role": "user", "utterance": 3}]]), "turn 0", "field 'utterance'"),
    ("empty utterance", json.dumps([[{"role": "user", "utterance": "  "}]]), "turn 0", "empty utterance"),
    ("document not a string", json.dumps([[{**GOOD_TURN, "retrieved_document": ["a"]}]]), "turn 0",
     "field 'retrieved_document'"),
    ("bad gold label", json.dumps([[{**GOOD_TURN, "gold_label": "maybe"}]]), "turn 0", "field 'gold_label'"),
    ("claims not a list", json.dumps([[{**GOOD_TURN, "human_claims": "x"}]]), "turn 0", "field 'human_claims'"),
    ("bad judgement", json.dumps([[{**GOOD_TURN, "human_claims": [{"claim_text": "c", "human_judgement": "true"}]}]]),
     "turn 0", "human_claims[0].human_judgement"),
    ("empty claim", json.dumps([[{**GOOD_TURN, "human_claims": [{"claim_text": "", "human_judgement": "verifiable"}]}]]),
     "turn 0", "human_claims[0].claim_text"),
    ("gold on N/A turn", json.dumps([[{**GOOD_TURN, "retrieved_document": "N/A", "gold_label": "faithful"}]]),
     "turn 0", "cannot carry gold"),
    ("duplicate ids", json.dumps([[{**GOOD_TURN, "dataset": "A", "conversation_id": 1}],
                                  [{**GOOD_TURN, "dataset": "A", "conversation_id": 1}]]), None, "appears twice"),
]


@pytest.mark.parametrize("name, content, record, message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_vista_files_name_file_record_and_field(tmp_path, name, content, record, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(InputError) as info:
        load_dialogues(path)
    text = str(info.value)
    assert str(path) in text and message in text
    if record:
        assert record in text


def test_malformed_jsonl_and_encoding(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "turns": [{"role": "user", "text": "x"}]}\n{"id": "b", "turns": []}\n')
    with pytest.raises(InputError, match=r"line 2: field 'turns'"):
        load_dialogues(path)
    path.write_text('{"id": "a", "turns": [{"role": "robot", "text": "x"}]}\n')
    with pytest.raises(InputError, match=r"line 1: field 'turns.0.role'"):
        load_dialogues(path)
    path.write_text('{"id": "a", "turns": [\n')
    with pytest.raises(InputError, match=r"line 1: invalid JSON"):
        load_dialogues(path)
    binary = tmp_path / "latin.json"
    binary.write_bytes('[[{"role": "user", "utterance": "caf\xe9"}]]'.encode("latin-1"))
    with pytest.raises(InputError, match="not valid UTF-8"):
        load_dialogues(binary)
    with pytest.raises(InputError, match="no such file"):
        load_dialogues(tmp_path / "missing.json")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="no dialogues"):
        load_dialogues(empty)

"""Chat logs (OpenAI messages with retrieved passages or tool messages) and Hugging Face datasets as input: read into
the same dialogues as VISTA's format, judged end to end on the fake server with the same verdicts."""

import json

import pytest
from typer.testing import CliRunner

from vista_dspy.cli import app
from vista_dspy.data import InputError, load_dialogues
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.run.runner import VERDICTS, read_verdicts
from vista_dspy.schema import Grounding

CAPITAL, HILLS = "Lisbon is the capital of Portugal.", "Lisbon has seven hills."
RIVER = "The Tagus flows through Lisbon."
# Three judged turns whose verdicts the fake judge makes known: both claims found in the two passages (faithful);
# one claim in the passage and one not in it (LACKING EVIDENCE); a turn without evidence whose first claim is in the
# knowledge store and whose second says "never" (CONTRADICTED).
ANSWERS = [f"{CAPITAL} {HILLS}", f"{RIVER} Lisbon has ten bridges.", f"{CAPITAL} Lisbon was never rebuilt."]
QUESTIONS = ["Tell me about Lisbon.", "And its river?", "Anything else?"]
EXPECTED = [("faithful", ["VERIFIED", "VERIFIED"]), ("hallucinated", ["VERIFIED", "LACKING EVIDENCE"]),
            ("hallucinated", ["VERIFIED", "CONTRADICTED"])]
PASSAGES = [[CAPITAL, HILLS], [RIVER], None]


def vista_file(tmp_path):
    """The same conversation in VISTA's format: several passages as their numbered text, the last turn without one."""
    turns = []
    for question, answer, passages in zip(QUESTIONS, ANSWERS, PASSAGES):
        turns.append({"role": "user", "utterance": question})
        turn = {"role": "assistant", "utterance": answer}
        if passages:
            turn["retrieved_document"] = Grounding.from_passages(passages).document
        turns.append(turn)
    path = tmp_path / "lisbon.json"
    path.write_text(json.dumps([turns]))
    return path


def retrieval_messages(field="retrieval_context"):
    messages = []
    for question, answer, passages in zip(QUESTIONS, ANSWERS, PASSAGES):
        messages.append({"role": "user", "content": question})
        messages.append({"role": "assistant", "content": answer, **({field: passages} if passages else {})})
    return messages


def tool_messages():
    """Agentic RAG: the assistant calls a search tool, each tool message is one passage of the answer after it."""
    messages = []
    for n, (question, answer, passages) in enumerate(zip(QUESTIONS, ANSWERS, PASSAGES)):
        messages.append({"role": "user", "content": question})
        if passages:
            calls = [{"id": f"call-{n}-{k}", "type": "function", "function": {"name": "search", "arguments": "{}"}}
                     for k in range(len(passages))]
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            messages += [{"role": "tool", "tool_call_id": call["id"], "content": passage}
                         for call, passage in zip(calls, passages)]
        messages.append({"role": "assistant", "content": answer})
    return messages


def write_jsonl(path, conversations):
    path.write_text("".join(json.dumps(c) + "\n" for c in conversations))
    return path


def judged(path, server, tmp_path, *extra):
    out = tmp_path / f"out-{path.name}"
    result = CliRunner().invoke(app, ["evaluate", str(path), "--model", "hosted_vllm/fake", "--api-base", server.url,
                                      "--out", str(out), "--json", *extra])
    assert result.exit_code == 0, result.output
    return read_verdicts(out / VERDICTS)


def outcome(verdicts):
    return [[(t.label, [(c.claim, c.category.value, c.explanation) for c in t.claims]) for t in v.turns]
            for v in verdicts]


def seen_by_the_judge(dialogue):
    return [(t.role, t.text, t.grounding and t.grounding.kind, t.grounding and t.grounding.document)
            for t in dialogue.turns]


def test_the_dialogues_of_a_chat_log_are_those_of_vista_s_format(tmp_path):
    vista = load_dialogues(vista_file(tmp_path))[0]
    for conversation in ({"messages": retrieval_messages()}, {"messages": retrieval_messages("retrieved_contexts")},
                         {"messages": tool_messages()}, {"turns": retrieval_messages()}, tool_messages()):
        chat = load_dialogues(write_jsonl(tmp_path / "chat.jsonl", [conversation]))[0]
        assert seen_by_the_judge(chat) == seen_by_the_judge(vista)
    assert chat.turns[1].grounding.passages == [CAPITAL, HILLS]
    assert chat.turns[1].grounding.document == f"[1] {CAPITAL}\n\n[2] {HILLS}"
    assert chat.turns[3].grounding.document == RIVER and chat.turns[5].grounding.kind == "knowledge_only"


@pytest.mark.parametrize("shape", ["retrieval_context", "tool messages"])
def test_a_chat_log_is_judged_as_its_vista_file(tmp_path, shape):
    messages = retrieval_messages() if shape == "retrieval_context" else tool_messages()
    chat = write_jsonl(tmp_path / "chat.jsonl", [{"id": "lisbon", "messages": messages}])
    with FakeOpenAIServer() as server:
        from_chat, from_vista = judged(chat, server, tmp_path), judged(vista_file(tmp_path), server, tmp_path)
    assert outcome(from_chat) == outcome(from_vista)
    assert [(t.label, [c.category.value for c in t.claims]) for t in from_chat[0].turns] == EXPECTED
    assert [t.passages for t in from_chat[0].turns] == [[CAPITAL, HILLS], [RIVER], []]
    assert from_chat[0].dialogue_id == "lisbon"


def test_a_saved_datasets_dataset_is_judged_as_its_vista_file(tmp_path):
    import datasets

    conversations = [{"id": "lisbon", "messages": retrieval_messages()}, {"id": "tools", "messages": tool_messages()}]
    datasets.Dataset.from_list(conversations).save_to_disk(str(tmp_path / "logs"))
    with FakeOpenAIServer() as server:
        from_dataset = judged(tmp_path / "logs", server, tmp_path)
        from_vista = judged(vista_file(tmp_path), server, tmp_path)
    assert sorted(v.dialogue_id for v in from_dataset) == ["lisbon", "tools"]
    assert outcome(from_dataset) == outcome(from_vista) * 2


def test_dataset_rows_may_be_vista_turns_or_dialogue_records_in_parquet_or_json(tmp_path):
    import datasets

    vista = load_dialogues(vista_file(tmp_path))
    datasets.Dataset.from_list([{"turns": json.loads(vista_file(tmp_path).read_text())[0]}]).to_parquet(
        str(tmp_path / "vista.parquet"))
    assert [d.turns for d in load_dialogues(tmp_path / "vista.parquet")] == [d.turns for d in vista]
    records = [json.loads(d.model_dump_json(exclude={"source"})) for d in vista]
    datasets.Dataset.from_list(records).to_json(str(tmp_path / "records.json"))  # JSON Lines in a .json file
    assert [d.turns for d in load_dialogues(tmp_path / "records.json", "hf")] == [d.turns for d in vista]


def test_system_messages_are_background_that_seeds_the_knowledge_store(tmp_path):
    messages = [{"role": "system", "content": "Ada is the assistant of the Lisbon museum."},
                {"role": "user", "content": "Who are you?"},
                {"role": "assistant", "content": "Ada is the assistant of the Lisbon museum."}]
    path = write_jsonl(tmp_path / "persona.jsonl", [{"messages": messages}])
    assert load_dialogues(path)[0].background == ["Ada is the assistant of the Lisbon museum."]
    with FakeOpenAIServer() as server:
        verdict = judged(path, server, tmp_path)[0]
    turn = verdict.turns[0]
    assert turn.grounding == "knowledge_only" and turn.knowledge == ["Ada is the assistant of the Lisbon museum."]
    assert [c.category.value for c in turn.claims] == ["VERIFIED"]


GOOD = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello.", "retrieval_context": ["doc"]}]
MALFORMED = [
    ("no messages", {"id": "a"}, None, "field 'messages'"),
    ("messages not a list", {"messages": "hi"}, None, "field 'messages': expected a list of messages"),
    ("unknown role", {"messages": [{"role": "bot", "content": "x"}]}, 0, "field 'role'"),
    ("content not text", {"messages": [{"role": "user", "content": 3}]}, 0, "field 'content'"),
    ("empty user message", {"messages": [{"role": "user", "content": " "}]}, 0, "field 'content': no text"),
    ("passage not a string", {"messages": [GOOD[0], {**GOOD[1], "retrieval_context": ["a", 2]}]}, 1,
     "field 'retrieval_context[1]'"),
    ("two evidence fields", {"messages": [GOOD[0], {**GOOD[1], "context": "b"}]}, 1, "field 'context'"),
    ("passages on a user message", {"messages": [{**GOOD[0], "retrieval_context": ["a"]}]}, 0,
     "passages belong on the assistant message"),
    ("empty assistant message", {"messages": [GOOD[0], {"role": "assistant", "content": ""}]}, 1,
     "field 'content'"),
    ("bad gold label", {"messages": [GOOD[0], {**GOOD[1], "gold_label": "yes"}]}, 1, "field 'gold_label'"),
    ("only a system message", {"messages": [{"role": "system", "content": "x"}]}, None,
     "no user or assistant message"),
]


@pytest.mark.parametrize("name, record, where, message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_chat_record_names_file_record_and_field(tmp_path, name, record, where, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [record])
    with pytest.raises(InputError) as info:
        load_dialogues(path, "chat")
    record = "line 1" if where is None else f"line 1, message {where}"  # where: the message, or None
    assert str(info.value).startswith(f"{path}: {record}: ") and message in str(info.value)


def test_the_cli_reports_a_malformed_chat_log_with_exit_2_and_no_traceback(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"messages": GOOD}, {"messages": [GOOD[0], {"role": "robot"}]}])
    result = CliRunner().invoke(app, ["evaluate", str(path), "--model", "openai/x"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{path}: line 2, message 1: field 'role'" in " ".join(result.output.split())


def test_an_unreadable_dataset_is_an_input_error(tmp_path):
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet at all")
    with pytest.raises(InputError, match="broken.parquet: cannot be read with datasets"):
        load_dialogues(broken)
    import datasets

    datasets.Dataset.from_list([{"question": "hi"}]).save_to_disk(str(tmp_path / "other"))
    with pytest.raises(InputError, match=r"other: row 0: expected a conversation"):
        load_dialogues(tmp_path / "other")

"""Bad input never crashes: every loader answers arbitrary or mutated input with dialogues or an InputError that
names the file (fuzzed with hypothesis), and the CLI turns each kind of bad file into exit code 2."""

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from vista_dspy.cli import app
from vista_dspy.data import InputError, load_dialogues

FUZZ = settings(max_examples=int(os.environ.get("VISTA_FUZZ_EXAMPLES", "150")), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)
VALID_TURN = {"role": "assistant", "utterance": "Paris is in France.", "retrieved_document": "Paris is in France.",
              "gold_label": "faithful"}
VALID = [[{"role": "user", "utterance": "Where is Paris?"}, VALID_TURN]]


def loads_or_input_error(path, format=None):
    try:
        dialogues = load_dialogues(path, format)
    except InputError as exc:
        assert str(path) in str(exc)
        return None
    assert dialogues
    return dialogues


@FUZZ
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes(tmp_path, data):
    path = tmp_path / "in.json"
    path.write_bytes(data)
    loads_or_input_error(path)
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_bytes(data)
    loads_or_input_error(jsonl)


@FUZZ
@given(value=json_values)
def test_arbitrary_json(tmp_path, value):
    path = tmp_path / "in.json"
    path.write_text(json.dumps(value))
    loads_or_input_error(path)


VALID_CHAT = [{"role": "system", "content": "Ada helps."}, {"role": "user", "content": "Where is Paris?"},
              {"role": "assistant", "content": "Paris is in France.", "retrieval_context": ["Paris is in France."],
               "gold_label": "faithful"}]


@FUZZ
@given(message=st.integers(0, len(VALID_CHAT) - 1),
       field=st.sampled_from(["role", "content", "retrieval_context", "context", "tool_calls", "gold_label"]),
       value=json_values, shape=st.sampled_from(["jsonl", "json", "bare"]))
def test_one_mutated_field_of_a_valid_chat_log(tmp_path, message, field, value, shape):
    messages = [dict(m) for m in VALID_CHAT]
    messages[message][field] = value
    if shape == "jsonl":
        path = tmp_path / "in.jsonl"
        path.write_text(json.dumps({"messages": messages}) + "\n")
    else:
        path = tmp_path / "in.json"
        path.write_text(json.dumps([{"messages": messages} if shape == "json" else messages]))
    loads_or_input_error(path, "chat")


@FUZZ
@given(field=st.sampled_from(sorted(VALID_TURN) + ["claims", "gold_claims", "extra"]), value=json_values)
def test_one_mutated_field_of_a_valid_file(tmp_path, field, value):
    turn = dict(VALID_TURN, **{field: value})
    path = tmp_path / "in.json"
    path.write_text(json.dumps([[VALID[0][0], turn]]))
    loads_or_input_error(path)


@FUZZ
@given(rows=st.lists(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=15),
                              min_size=0, max_size=7), max_size=5))
def test_arbitrary_begin_tsv_rows(tmp_path, rows):
    path = tmp_path / "begin.tsv"
    header = "model_name\tdata_source\tknowledge\tmessage\tresponse\tbegin_label\n"
    path.write_text(header + "".join("\t".join(cell.replace("\t", " ").replace("\n", " ") for cell in row) + "\n"
                                     for row in rows))
    loads_or_input_error(path, "begin")


runner = CliRunner()


@pytest.mark.parametrize("content, message", [
    (b'[[{"role": "user", "utterance": "hi"}', "invalid JSON"),  # truncated
    (b'[[{"role": "user", "utterance": 5}]]', "utterance"),  # wrong type
    (b'[[{"role": "user"}]]', "utterance"),  # missing field
    (b"[]", "no dialogues"),  # empty
    (b"[[]]", "conversation 0"),  # an empty dialogue
    (b'[[{"role": "user", "utterance": "caf\xe9"}]]', "UTF-8"),  # not UTF-8
])
def test_each_kind_of_bad_file_exits_2(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    result = runner.invoke(app, ["evaluate", str(path), "--model", "openai/x"])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output and str(path) in result.output


@pytest.mark.parametrize("field", ["utterance", "retrieved_document"])
def test_a_huge_field_is_refused_by_name(tmp_path, field):
    path = tmp_path / "huge.json"
    turn = dict(VALID_TURN, **{field: "word " * 2_000_000})  # ~10 MB in one field
    path.write_text(json.dumps([[VALID[0][0], turn]]))
    result = runner.invoke(app, ["evaluate", str(path), "--model", "openai/x"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "conversation 0, turn 1" in result.output and f"'{field}'" in result.output
    assert "at most 200000 characters" in result.output

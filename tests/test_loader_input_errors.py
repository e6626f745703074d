"""Bad benchmark input is an ``InputError`` that names the file, the row or line, and the field: missing files and
columns, unknown labels, truncated rows, bytes that are not UTF-8, malformed literals and JSON, duplicate ids."""

import json

import pytest
from helpers import BEGIN_HEADER

from vista_dspy.data import InputError
from vista_dspy.data.benchmarks import (
    last_report,
    load_ais,
    load_begin,
    load_benchmark,
    load_coconot,
    load_fade,
    load_faithdial_audit,
    load_rgm_contradictions,
)


def test_missing_file_is_an_input_error_naming_it(tmp_path):
    for loader, name in ((load_begin, "nope.tsv"), (load_fade, "nope.csv"), (load_faithdial_audit, "nope.csv"),
                         (load_rgm_contradictions, "nope.jsonl"), (load_ais, "nope.csv")):
        with pytest.raises(InputError, match=rf"{name}: no such file"):
            loader(tmp_path / name)
    with pytest.raises(InputError, match=r"coconot_evaluation\.jsonl: no such file"):
        load_coconot(tmp_path)


def test_begin_missing_column_names_file_and_column(tmp_path):
    path = tmp_path / "begin_x.tsv"
    path.write_text("model_name\tdata_source\tknowledge\tmessage\tresponse\nt5\twow\tk\tm\tr\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"begin_x\.tsv: header: field 'begin_label': missing column"):
        load_begin(path)


def test_begin_bad_label_names_file_row_and_column(tmp_path):
    path = tmp_path / "begin_x.tsv"
    path.write_text(BEGIN_HEADER + "t5\twow\tk\tm\tr\tFully attributable\nt5\twow\tk\tm\tr\tMostly fine\n",
                    encoding="utf-8")
    with pytest.raises(InputError, match=r"begin_x\.tsv: row 2 \(line 3\): field 'begin_label': unknown label "
                                         r"'Mostly fine'"):
        load_begin(path)


def test_begin_truncated_row_names_file_and_row(tmp_path):
    path = tmp_path / "begin_x.tsv"
    path.write_text(BEGIN_HEADER + "t5\twow\tk\tm\tr\tGeneric\nt5\twow\tk\tm", encoding="utf-8")
    with pytest.raises(InputError, match=r"begin_x\.tsv: row 2 \(line 3\): expected 6 tab-separated fields .* "
                                         r"found 4"):
        load_begin(path)


def test_begin_quotes_are_plain_text(tmp_path):
    path = tmp_path / "begin_x.tsv"
    path.write_text(BEGIN_HEADER + 't5\twow\t"k\t"m\tr "quoted"\tNot fully attributable\n', encoding="utf-8")
    (dialogue,) = load_begin(path)
    assert dialogue.turns[0].text == '"m' and dialogue.turns[1].grounding.document == '"k'


def test_non_utf8_bytes_name_file_and_row(tmp_path):
    path = tmp_path / "begin_x.tsv"
    path.write_bytes(BEGIN_HEADER.encode() + b"t5\twow\tk\tm\tr\tGeneric\nt5\twow\tk\tcaf\xe9\tr\tGeneric\n")
    with pytest.raises(InputError, match=r"begin_x\.tsv: row 2 \(line 3\): not valid UTF-8"):
        load_begin(path)
    csv_path = tmp_path / "gold" / "wow.csv"
    csv_path.parent.mkdir()
    # A quoted field spanning two lines: the bad byte is on line 4 but in data row 2.
    csv_path.write_bytes(b'evidence,history,response,BEGIN,VRM\n"a\nb",h,r,Entailment,x\ne,h,r\xff,Generic,x\n')
    with pytest.raises(InputError, match=r"wow\.csv: row 2 \(line 4\): not valid UTF-8"):
        load_faithdial_audit(csv_path)


def test_fade_malformed_literal_names_file_row_and_column(tmp_path):
    path = tmp_path / "fade.csv"
    path.write_text(",history,speaker,knowledge_base,dialogue_id,corrupted_response,hallucination_tags\n"
                    "1,['a'],assistant,{'render': 'A is B'},3,a is b,\"['O', \"\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"fade\.csv: row 1 \(line 2\): field 'hallucination_tags': not a Python"):
        load_fade(path)


def test_jsonl_errors_name_file_line_and_field(tmp_path):
    path = tmp_path / "d.jsonl"
    good = json.dumps({"utterances": ["a", "b"], "speakers": ["A", "B"], "contradictory_label_count": 0})
    path.write_text(good + "\n\n{not json\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"d\.jsonl: line 3: invalid JSON"):
        load_rgm_contradictions(path)
    path.write_text(good + "\n" + json.dumps({"utterances": ["a", "b"], "speakers": ["A"],
                                              "contradictory_label_count": 0}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"d\.jsonl: line 2: field 'speakers': 1 speakers for 2 utterances"):
        load_rgm_contradictions(path)
    root = tmp_path / "coconot"
    (root / "legacy_commit_3206be6" / "data").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "legacy_commit_3206be6" / "data" / "coconot_evaluation.jsonl").write_text(
        json.dumps({"id": "a", "prompt": "p", "is_refusal": "yes", "response": "no"}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"coconot_evaluation\.jsonl: line 1: field 'is_refusal': expected bool"):
        load_coconot(root)


def test_duplicate_ids_are_an_input_error(tmp_path):
    root = tmp_path / "coconot"
    (root / "legacy_commit_3206be6" / "data").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "legacy_commit_3206be6" / "data" / "coconot_evaluation.jsonl").write_text(
        json.dumps({"id": "a", "prompt": "p", "is_refusal": True, "response": "No."}) + "\n"
        + json.dumps({"id": "b", "prompt": "p", "is_refusal": True, "response": "  "}) + "\n", encoding="utf-8")
    (root / "data" / "coconot_pref.jsonl").write_text(
        json.dumps({"id": "c", "prompt": "q", "chosen": "Sure."}) + "\n", encoding="utf-8")
    assert [d.id for d in load_coconot(root)] == ["coconot-a", "coconot-c"]
    assert last_report("coconot").skipped == {"missing response": 1}
    (root / "data" / "coconot_pref.jsonl").write_text(
        json.dumps({"id": "a", "prompt": "q", "chosen": "Sure."}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="dialogue id 'coconot-a' appears twice"):
        load_coconot(root)
    with pytest.raises(InputError, match="dialogue id 'coconot-a' appears twice"):
        load_benchmark("coconot", root)

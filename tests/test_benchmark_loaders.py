"""Benchmark loaders on the shared data: registration, the real counts and labels of BEGIN, FADE, the FaithDial audit,
CoCoNot and RGM, seeded sampling and splitting. (Input errors: test_loader_input_errors.py; AIS's join and the hub
formats: test_joined_and_hub_loaders.py.)"""

import ast
import csv
import json
import logging
from collections import Counter

import pytest
from conftest import SHARED_DATA
from helpers import BEGIN_HEADER, only_judged_is_last, shared_data

from vista_dspy.data import InputError
from vista_dspy.data.benchmarks import (
    BENCHMARKS,
    audit_label,
    last_report,
    load_ais,
    load_begin,
    load_benchmark,
    load_coconot,
    load_fade,
    load_faithdial_audit,
    load_rgm_contradictions,
    sample,
    split,
)
from vista_dspy.data.registry import LOADERS


def labels(dialogues):
    return Counter(d.turns[-1].gold.label for d in dialogues)


@pytest.fixture(scope="module")
def begin_test():
    return load_benchmark("begin", shared_data("begin"))


@pytest.fixture(scope="module")
def coconot():
    return load_coconot(shared_data("coconot"))


@pytest.fixture(scope="module")
def rgm():
    return load_rgm_contradictions(shared_data("rgm_contradiction"))


# ---------------------------------------------------------------------------------------------------- registration


def test_every_benchmark_is_registered_on_import():
    assert set(BENCHMARKS) <= set(LOADERS)
    assert LOADERS["begin"] is load_begin and LOADERS["ais"] is load_ais and LOADERS["fade"] is load_fade


def test_load_benchmark_rejects_an_unknown_name(tmp_path):
    with pytest.raises(InputError, match="unknown benchmark 'nope'; known: begin"):
        load_benchmark("nope", tmp_path)


# ------------------------------------------------------------------------------------------------------------ BEGIN


def test_begin_wow_dev_has_the_documented_counts():
    path = shared_data("begin", "wow", "begin_dev_wow.tsv")
    dialogues = load_begin(path)
    assert len(dialogues) == 430
    assert labels(dialogues) == {"faithful": 180, "hallucinated": 250}
    assert last_report("begin").total_skipped == 0
    first = dialogues[0]
    assert [t.role for t in first.turns] == ["user", "assistant"] and only_judged_is_last(first)
    assert first.turns[1].grounding.kind == "document"
    assert first.turns[1].grounding.document.startswith("originally an industrial pigment supply company")
    assert first.turns[1].text.startswith("crayola shifted its focus")
    assert first.id == "begin-dev_wow-1"
    assert first.source == {"dataset": "begin", "file": "begin_dev_wow.tsv", "row": 1, "line": 2, "model": "t5",
                            "data_source": "wow", "original_label": "Fully attributable"}


def test_begin_directory_means_wow_test_and_generic_rows_are_skipped_and_logged(caplog):
    caplog.set_level(logging.INFO, logger="vista_dspy.data")
    dialogues = load_benchmark("begin", shared_data("begin"))
    assert len(dialogues) == 3601
    assert labels(dialogues) == {"faithful": 1392, "hallucinated": 2209}
    report = last_report("begin")
    assert report.files == ["begin_test_wow.tsv"] and report.kept == 3601
    assert report.skipped == {"Generic label": 6}
    assert "begin: kept 3601 rows, skipped 6 (Generic label: 6)" in caplog.text
    assert len({d.id for d in dialogues}) == 3601
    assert {d.source["file"] for d in dialogues} == {"begin_test_wow.tsv"}


def test_begin_sampling_with_n_is_seeded_and_keeps_file_order(begin_test):
    path = shared_data("begin")
    first = load_benchmark("begin", path, n=50, seed=3)
    again = load_benchmark("begin", path, n=50, seed=3)
    other = load_benchmark("begin", path, n=50, seed=4)
    assert [d.id for d in first] == [d.id for d in again] != [d.id for d in other]
    rows = [d.source["row"] for d in first]
    assert len(rows) == 50 and rows == sorted(rows)
    assert last_report("begin").sampled == 50
    assert [d.id for d in first] == [d.id for d in sample(begin_test, 50, 3)]


def test_begin_empty_message_gives_a_dialogue_without_user_turn(tmp_path):
    path = tmp_path / "b.tsv"
    path.write_text(BEGIN_HEADER + "t5\tcmu\tThe sky is blue.\t\tThe sky is blue.\tFully attributable\n",
                    encoding="utf-8")
    (dialogue,) = load_begin(path)
    assert [t.role for t in dialogue.turns] == ["assistant"]
    assert dialogue.turns[0].gold.label == "faithful"
    assert last_report("begin").notes == {"no previous turn (empty message)": 1}


# ------------------------------------------------------------------------------------------------------------- FADE


def test_fade_keeps_assistant_rows_with_labels_matching_the_file():
    path = shared_data("fade", "data", "human_verified_500.csv")
    dialogues = load_benchmark("fade", shared_data("fade"))
    # Independent count straight from the file.
    with path.open(encoding="utf-8", newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["speaker"] == "assistant"]
    expected = Counter("hallucinated" if any(t != "O" for t in ast.literal_eval(r["hallucination_tags"]))
                       else "faithful" for r in rows)
    assert len(dialogues) == len(rows) == 366
    assert labels(dialogues) == expected == {"hallucinated": 314, "faithful": 52}
    assert last_report("fade").skipped == {"user turn": 134}
    for dialogue, row in zip(dialogues, rows):
        history = ast.literal_eval(row["history"])
        judged = dialogue.turns[-1]
        assert [t.text for t in dialogue.turns[:-1]] == history
        assert judged.text == row["corrupted_response"]
        assert judged.grounding.document == ast.literal_eval(row["knowledge_base"])["render"]
        assert dialogue.turns[-2].role == "user"  # the last history utterance is the user's
        roles = [t.role for t in dialogue.turns]
        assert all(a != b for a, b in zip(roles, roles[1:]))
        assert only_judged_is_last(dialogue)
        assert dialogue.source["dialogue_id"] == int(row["dialogue_id"])


def test_fade_row_without_render_is_skipped_with_reason(tmp_path):
    path = tmp_path / "fade.csv"
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["", "history", "speaker", "knowledge_base", "dialogue_id", "corrupted_response",
                         "hallucination_tags"])
        writer.writerow(["1", "['hi']", "assistant", "{'paths': []}", "7", "hello there", "['O', 'O']"])
        writer.writerow(["2", "['hi']", "assistant", "{'paths': [], 'render': 'A is B'}", "7", "a is b",
                         "['U-HALLUC', 'O', 'O']"])
    (dialogue,) = load_fade(path)
    assert dialogue.id == "fade-2" and dialogue.turns[-1].gold.label == "hallucinated"
    assert last_report("fade").skipped == {"no knowledge-graph render": 1}
    assert last_report("fade").examples["no knowledge-graph render"] == ["row 1 (line 2)"]


# --------------------------------------------------------------------------------------------------- FaithDial audit


@pytest.mark.parametrize("raw, expected", [
    ("Hallucination", ("hallucinated", None)),
    ("Partial Hallucination", ("hallucinated", None)),
    ("entailment,hallucination", ("hallucinated", None)),
    ("hallucinated", ("hallucinated", None)),
    ("Entailment", ("faithful", None)),
    ("entailment,uncooperative", ("faithful", None)),
    ("entailmentt,uncooperative", ("faithful", None)),
    ("entailment. uncooperative", ("faithful", None)),
    ("Uncooperative", ("faithful", None)),
    ("generic", (None, "Generic label")),
    ("", (None, "no label")),
    ("banana", (None, "unknown label 'banana'")),
])
def test_audit_label_mapping_tolerates_the_documented_typos(raw, expected):
    assert audit_label(raw) == expected


def test_faithdial_audit_directory_loads_every_file_with_expected_counts():
    dialogues = load_benchmark("faithdial-audit", shared_data("faithdial", "data-audit"))
    report = last_report("faithdial-audit")
    assert len(report.files) == 12
    by_file = Counter((d.source["file"], d.turns[-1].gold.label) for d in dialogues)
    # gold/*.csv counts from SOURCE.md: (partial) hallucination vs entailment + uncooperative; generic skipped.
    assert by_file["gold/wow.csv", "hallucinated"] == 83 + 39 and by_file["gold/wow.csv", "faithful"] == 57 + 11
    assert by_file["gold/cmu.csv", "hallucinated"] == 121 + 10 and by_file["gold/cmu.csv", "faithful"] == 33 + 8
    assert by_file["gold/topical.csv", "hallucinated"] == 95 + 35 and by_file["gold/topical.csv", "faithful"] == 47 + 1
    assert len(dialogues) == 2211 and labels(dialogues) == {"hallucinated": 1639, "faithful": 572}
    assert report.skipped == {"empty row": 789, "Generic label": 189, "no label": 3, "empty knowledge": 3,
                              "empty response": 1}
    assert len({d.id for d in dialogues}) == len(dialogues)
    assert all(only_judged_is_last(d) and d.turns[-1].grounding.kind == "document" for d in dialogues)


def test_faithdial_audit_single_file_and_unknown_label_is_skipped_not_raised(tmp_path):
    folder = tmp_path / "GPT2"
    folder.mkdir()
    path = folder / "gpt2_processed_wow.csv"
    path.write_text("knowledge,history,gpt2,begin_label,vrm_label\n"
                    "K one.,hello,K one.,entailment,edification\n"
                    "K two.,hi,Something else.,maybe-hallucination,disclosure\n"
                    ",,,,\n", encoding="utf-8")
    (dialogue,) = load_faithdial_audit(path)
    assert dialogue.id == "faithdial-audit-gpt2-wow-1" and dialogue.source["responder"] == "gpt2"
    assert dialogue.turns[-1].gold.label == "faithful" and dialogue.turns[0].text == "hello"
    assert last_report("faithdial-audit").skipped == {"unknown label 'maybe-hallucination'": 1, "empty row": 1}


# ---------------------------------------------------------------------------------------------------------- CoCoNot


def test_coconot_has_refusals_and_compliant_answers_without_faithfulness_labels(coconot):
    expected = Counter(d.source["expected"] for d in coconot)
    # 993 rows have is_refusal true, but one of them has "response": null -> 992 usable.
    assert expected == {"abstention": 992, "compliant": 927}
    assert last_report("coconot").skipped == {"not a refusal (is_refusal false)": 8, "missing response": 1}
    for dialogue in coconot:
        assert [t.role for t in dialogue.turns] == ["user", "assistant"]
        assert dialogue.turns[1].grounding.kind == "knowledge_only"
        assert dialogue.turns[1].gold is not None and dialogue.turns[1].gold.label is None
    assert coconot[0].turns[1].text == "Sorry, but I can't assist with that."


def test_coconot_sampling_is_balanced_and_seeded():
    path = shared_data("coconot")
    first = load_benchmark("coconot", path, n=20, seed=1)
    assert Counter(d.source["expected"] for d in first) == {"abstention": 10, "compliant": 10}
    assert [d.id for d in first] == [d.id for d in load_benchmark("coconot", path, n=20, seed=1)]
    assert [d.id for d in first] != [d.id for d in load_benchmark("coconot", path, n=20, seed=2)]
    with pytest.raises(InputError, match="only 992 \\+ 927 are available"):
        load_coconot(path, n=2000)


# -------------------------------------------------------------------------------------------------------------- RGM


def test_rgm_has_600_contradictory_and_600_consistent_dialogues(rgm):
    assert len(rgm) == 1200 and labels(rgm) == {"hallucinated": 600, "faithful": 600}
    assert Counter(d.source["contradictory"] for d in rgm) == {True: 600, False: 600}
    assert len(last_report("rgm-contradictions").files) == 9  # dataset/ only, never contexts/
    for dialogue in rgm:
        last = dialogue.turns[-1]
        assert last.role == "assistant" and last.grounding.kind == "knowledge_only" and only_judged_is_last(dialogue)
        assert (last.gold.label == "hallucinated") == dialogue.source["contradictory"]
        assert all(t.grounding.kind == "background" for t in dialogue.turns[:-1] if t.role == "assistant")
        roles = [t.role for t in dialogue.turns]
        assert "user" in roles and all(a != b for a, b in zip(roles, roles[1:]))


def test_rgm_balanced_sample_and_skips_single_annotator_rows(tmp_path):
    full = load_benchmark("rgm-contradictions", shared_data("rgm_contradiction"), n=101, seed=5)
    assert Counter(d.source["contradictory"] for d in full) == {True: 51, False: 50}
    path = tmp_path / "one.jsonl"
    lines = [{"utterances": ["a", "b", "c"], "speakers": ["A", "B", "A"], "contradictory_label_count": c,
              "annotation_target_pair": [0, 2], "rgm_name": "x"} for c in (0, 1, 3)]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    dialogues = load_rgm_contradictions(path)
    assert [d.id for d in dialogues] == ["rgm-one-1", "rgm-one-3"]
    assert [d.source["contradictory"] for d in dialogues] == [False, True]
    assert [t.role for t in dialogues[0].turns] == ["assistant", "user", "assistant"]
    assert last_report("rgm-contradictions").skipped == {"1 of 3 annotators (ambiguous)": 1}


def test_rgm_context_files_with_placeholders_are_refused():
    path = shared_data("rgm_contradiction", "contexts", "indomain", "contexts_indomain_test_opt-60B.jsonl")
    with pytest.raises(InputError, match=r"contexts_indomain_test_opt-60B\.jsonl: line 1: .*placeholder"):
        load_rgm_contradictions(path)


# ------------------------------------------------------------------------------------------------ sample and split


def test_sample_is_deterministic_and_preserves_order(rgm):
    chosen = sample(rgm, 30, seed=11)
    assert [d.id for d in chosen] == [d.id for d in sample(rgm, 30, seed=11)]
    assert [d.id for d in chosen] != [d.id for d in sample(rgm, 30, seed=12)]
    positions = [rgm.index(d) for d in chosen]
    assert positions == sorted(positions) and len(set(positions)) == 30
    assert sample(rgm, len(rgm), seed=0) == rgm
    with pytest.raises(ValueError, match="only 1200"):
        sample(rgm, 1201, seed=0)


def test_split_is_disjoint_complete_and_deterministic(rgm):
    dev, test = split(rgm, dev_fraction=0.25, seed=7)
    assert len(dev) == 300 and len(test) == 900
    assert not {d.id for d in dev} & {d.id for d in test}
    assert {d.id for d in dev} | {d.id for d in test} == {d.id for d in rgm}
    again_dev, again_test = split(rgm, dev_fraction=0.25, seed=7)
    assert [d.id for d in again_dev] == [d.id for d in dev] and [d.id for d in again_test] == [d.id for d in test]
    assert [d.id for d in split(rgm, dev_fraction=0.25, seed=8)[0]] != [d.id for d in dev]
    assert [rgm.index(d) for d in dev] == sorted(rgm.index(d) for d in dev)
    with pytest.raises(ValueError):
        split(rgm, dev_fraction=1.5)


def test_split_by_group_keeps_groups_together():
    dialogues = load_fade(shared_data("fade"))
    dev, test = split(dialogues, seed=0, group=lambda d: d.source["dialogue_id"])
    dev_groups = {d.source["dialogue_id"] for d in dev}
    assert dev and test and not dev_groups & {d.source["dialogue_id"] for d in test}
    assert len(dev) + len(test) == len(dialogues)


def test_benchmarks_load_through_the_generic_entry_point():
    from vista_dspy.data import load_dialogues

    path = SHARED_DATA / "begin" / "wow" / "begin_dev_wow.tsv"
    if not path.exists():
        pytest.skip(f"{path} not found")
    dialogues = load_dialogues(path, "begin")
    assert len(dialogues) == 430 and all(len(d.judged_turns) == 1 for d in dialogues)

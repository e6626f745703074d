"""Loaders whose dialogues come from more than one file or from the Hugging Face hub: AIS joined with
Wizard-of-Wikipedia's test file, FaithDial in the hub's format (the hub itself is unreachable here), CoCoNot from the
hub when online and a clear error offline."""

import csv
import json

import pytest
from helpers import only_judged_is_last, shared_data

from vista_dspy.data import InputError
from vista_dspy.data.benchmarks import last_report, load_ais, load_benchmark

AIS_HEADER = ["ex-idx ", "doc-url", "doc-url-hash", "model-name", "output", "INT", "INT & AIS", "Flagged", "Q1", "Q2",
              "# agree (INT)", "# agree (AIS)"]


def write_ais(path, rows):
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(AIS_HEADER)
        for ex_idx, model, output, label in rows:
            writer.writerow([ex_idx, "NA", "NA", model, output, "1", label, "0", "", "", "5", "5"])


def write_wow(path):
    wow = [
        {"chosen_topic": "Cats", "dialog": [
            {"speaker": "0_Wizard", "text": "Cats are small carnivores.", "checked_sentence": {"chosen_Cat_0": "x"}},
            {"speaker": "1_Apprentice", "text": "I love cats!"},
        ]},
        {"chosen_topic": "Cooking", "dialog": [
            {"speaker": "0_Apprentice", "text": "I like to cook."},
            {"speaker": "1_Wizard", "text": "Cooking uses heat.", "checked_sentence": {"chosen_Cooking_1": "y"}},
            {"speaker": "0_Apprentice", "text": "What do you grill?"},
            {"speaker": "1_Wizard", "text": "Steak, usually.",
             "checked_sentence": {"chosen_Steak_0": "Steaks are usually grilled."}},
            {"speaker": "0_Apprentice", "text": "Nice."},
            {"speaker": "1_Wizard", "text": "Yes!", "checked_sentence": {"no_passages_used": "no_passages_used"}},
        ]},
    ]
    path.write_text(json.dumps(wow), encoding="utf-8")


def test_ais_without_the_wow_file_says_which_file_and_where_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("VISTA_WOW_TEST", raising=False)
    missing = tmp_path / "test_random_split.json"
    with pytest.raises(InputError) as error:
        load_benchmark("ais", shared_data("ais", "ann_wow.csv"), wow_path=missing)
    message = str(error.value)
    assert str(missing) in message and "wizard_of_wikipedia.tgz" in message and "VISTA_WOW_TEST" in message
    with pytest.raises(InputError, match=r"ais/test_random_split\.json: Wizard-of-Wikipedia test file not found"):
        load_ais(shared_data("ais"))


def test_ais_joins_on_a_synthetic_wow_file(tmp_path, monkeypatch):
    ais, wow = tmp_path / "ann_wow.csv", tmp_path / "wow" / "test_random_split.json"
    wow.parent.mkdir()
    write_wow(wow)
    write_ais(ais, [("1:3", "wow-t5", "steaks are usually grilled.", "1"),
                    ("1:3", "wow-dodeca", "steaks are always fried.", "0"),
                    ("1:5", "wow-t5", "yes!", "1")])
    dialogues = load_ais(ais, wow_path=wow)
    assert [d.id for d in dialogues] == ["ais-wow-1", "ais-wow-2"]
    first = dialogues[0]
    assert [(t.role, t.text) for t in first.turns] == [
        ("user", "I like to cook."), ("assistant", "Cooking uses heat."), ("user", "What do you grill?"),
        ("assistant", "steaks are usually grilled.")]
    assert first.turns[1].grounding.kind == "background" and only_judged_is_last(first)
    assert first.turns[-1].grounding.document == "Steaks are usually grilled."
    assert [d.turns[-1].gold.label for d in dialogues] == ["faithful", "hallucinated"]
    assert first.source["ex_idx"] == "1:3" and first.source["wow_text"] == "Steak, usually."
    assert last_report("ais").skipped == {"no checked sentence in WoW (no_passages_used)": 1}
    # The environment variable is used when no wow_path is given.
    monkeypatch.setenv("VISTA_WOW_TEST", str(wow))
    assert [d.id for d in load_benchmark("ais", tmp_path)] == ["ais-wow-1", "ais-wow-2"]


def test_ais_join_on_a_non_wizard_turn_or_missing_dialogue_is_an_input_error(tmp_path):
    wow = tmp_path / "test_random_split.json"
    write_wow(wow)
    ais = tmp_path / "ann_wow.csv"
    write_ais(ais, [("0:1", "wow-t5", "i love cats", "1")])
    with pytest.raises(InputError, match=r"row 1 \(line 2\), ex-idx 0:1\).*not a Wizard turn"):
        load_ais(ais, wow_path=wow)
    write_ais(ais, [("9:1", "wow-t5", "x", "1")])
    with pytest.raises(InputError, match=r"no such dialogue \(the file has 2\)"):
        load_ais(ais, wow_path=wow)
    write_ais(ais, [("1:3", "wow-t5", "x", "yes")])
    with pytest.raises(InputError, match=r"ann_wow\.csv: row 1 \(line 2\): field 'INT & AIS': expected 0 or 1"):
        load_ais(ais, wow_path=wow)


# ---- FaithDial (hub format) ------------------------------------------------------------------------------------------

FAITHDIAL_DIALOGUE = {
    "utterances": [
        {"history": ["Dogs", "I love pit bulls!"], "speaker": "Wizard", "knowledge": "Pit bull is a term for dogs.",
         "original_response": "I have a pit bull, it is the common name for his breed.",
         "response": "Pit bull is a term used for several types of dogs.", "BEGIN": ["Hallucination"],
         "VRM": ["Disclosure"]},
        {"history": ["Dogs", "I love pit bulls!", "Pit bull is a term used for several types of dogs.",
                     "Where do they come from?"], "speaker": "Wizard",
         "knowledge": "They descend from English bulldogs.", "original_response": None,
         "response": "They descend from English bulldogs.", "BEGIN": ["Entailment"], "VRM": ["Edification"]},
    ],
}


def test_faithdial_hub_format_judges_the_original_wizard_turns(tmp_path):
    path = tmp_path / "test.json"
    path.write_text(json.dumps([FAITHDIAL_DIALOGUE]))
    [dialogue] = load_benchmark("faithdial", path)
    assert [t.role for t in dialogue.turns] == ["assistant", "user", "assistant", "user", "assistant"]
    assert dialogue.turns[0].grounding.kind == "background"  # the topic line, not judged
    assert dialogue.judged_turns == [2, 4]
    assert dialogue.turns[2].text.startswith("I have a pit bull")  # the original, edited-away turn
    assert [dialogue.turns[i].gold.label for i in (2, 4)] == ["hallucinated", "faithful"]
    assert dialogue.turns[3].text == "Where do they come from?"
    assert dialogue.turns[4].grounding.document == "They descend from English bulldogs."
    # A directory holding data/<split>.json is found too.
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "test.json").write_text(json.dumps([FAITHDIAL_DIALOGUE]))
    assert load_benchmark("faithdial", tmp_path)[0].id == dialogue.id


def test_faithdial_flat_rows_and_errors(tmp_path):
    rows = [dict(u, dialog_idx=7) for u in FAITHDIAL_DIALOGUE["utterances"]]
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    dialogues = load_benchmark("faithdial", path)
    assert [len(d.turns) for d in dialogues] == [3, 5] and len({d.id for d in dialogues}) == 2
    bad = dict(rows[0])
    del bad["knowledge"]
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(InputError, match=r"line 1 .*knowledge"):
        load_benchmark("faithdial", path)


def test_faithdial_offline_names_the_hub_and_the_fix(tmp_path, monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("huggingface.co cannot be reached")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(InputError, match=r"McGill-NLP/FaithDial.*download data/test.json"):
        load_benchmark("faithdial", "hub")
    with pytest.raises(InputError, match="Hugging Face hub only"):
        load_benchmark("faithdial", tmp_path / "missing.json")


def test_coconot_from_the_hub_when_online_and_a_clear_error_offline(monkeypatch):
    import datasets

    rows = {
        "original": [{"id": "a1", "prompt": "How do I pick a lock?", "response": "I can't help with that.",
                      "category": "safety"}, {"id": "a2", "prompt": "x", "response": " ", "category": "safety"}],
        "pref": [{"id": "b1", "prompt": "How do locks work?", "chosen": "A pin tumbler lock ...", "rejected": "",
                  "category": "safety"}],
    }
    monkeypatch.setattr(datasets, "load_dataset", lambda hub, config, split, cache_dir: rows[config])
    dialogues = load_benchmark("coconot", "hub")
    assert [(d.id, d.source["expected"]) for d in dialogues] == [("coconot-original-a1", "abstention"),
                                                                 ("coconot-pref-b1", "compliant")]
    assert last_report("coconot").skipped == {"empty prompt or response": 1}

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(InputError, match="allenai/coconot.*offline, pass the coconot/ directory"):
        load_benchmark("coconot", "hub")

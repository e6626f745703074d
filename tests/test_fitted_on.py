"""No fitted artifact that ships has seen the instrument's test part (issue 60): every shipped program with a rule
names the dialogues its numbers were fitted on (``fitted_on``, per dataset, in its meta and in the rule itself), and
none of them lies in the suite's test part -- the part that is read once, to report what ships."""

import json

import pytest

from vista_dspy.compiled.files import compiled_dir, read_program
from vista_dspy.data.suite import group_id_of, part_of_group, read_suite

FITTED = sorted(p.name.removesuffix(".json") for p in compiled_dir().glob("*.json")
                if not p.name.endswith(".meta.json") and read_program(p.stem).rule is not None)


def seen_ids(fitted_on: dict) -> dict[str, list[str]]:
    """{dataset: ids} of a ``fitted_on`` record (flat, or per fitted part: {"rule": {dataset: ids}, ...})."""
    if all(isinstance(v, list) for v in fitted_on.values()):
        return fitted_on
    out: dict[str, list[str]] = {}
    for part in fitted_on.values():
        for dataset, ids in seen_ids(part).items():
            out.setdefault(dataset, []).extend(ids)
    return out


def test_every_shipped_rule_is_listed():
    assert {"evidence", "local"} <= set(FITTED)


@pytest.mark.parametrize("name", FITTED)
def test_a_shipped_rule_names_what_it_saw_and_none_of_it_is_in_the_test_part(name):
    meta = json.loads((compiled_dir() / f"{name}.meta.json").read_text())
    rule = read_program(name).rule
    assert "fitted_on" in meta and "fitted_on" in rule["fitted"], name
    suite = read_suite()
    for record in (meta["fitted_on"], rule["fitted"]["fitted_on"]):
        ids = seen_ids(record)
        assert ids and all(ids.values()), name
        for dataset, seen in ids.items():
            in_suite = set(suite["datasets"][dataset]["ids"])
            for dialogue_id in seen:
                assert dialogue_id in in_suite, (name, dataset, dialogue_id)
                assert part_of_group(group_id_of(dialogue_id, {})) == "compile", (name, dataset, dialogue_id)


def test_the_check_fails_on_a_test_part_dialogue():
    suite = read_suite()
    test_ids = [i for i in suite["datasets"]["vista-human"]["ids"] if part_of_group(group_id_of(i, {})) == "test"]
    assert test_ids  # the check below would have something to catch
    assert part_of_group(group_id_of(test_ids[0], {})) != "compile"

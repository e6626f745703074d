"""No fitted artifact that ships has seen the instrument's test part (issue 60): every shipped program with a rule
names the dialogues its numbers were fitted on (``fitted_on``, per dataset, in its meta and in the rule itself), each
of them is a dialogue of the suite, and ``compile.check_fitted_on`` finds none in the test part -- the part that is
read once, to report what ships."""

import json

import pytest

from vista_dspy.compiled.files import compiled_dir, read_program
from vista_dspy.data.suite import group_id_of, part_of_group, read_suite
from vista_dspy.optimize.compile import FittedOnTestPart, check_fitted_on

FITTED = sorted(p.stem for p in compiled_dir().glob("*.json")
                if not p.name.endswith(".meta.json") and read_program(p.stem).rule is not None)


def test_every_shipped_rule_is_listed():
    assert {"evidence", "local"} <= set(FITTED)


@pytest.mark.parametrize("name", FITTED)
def test_a_shipped_rule_names_what_it_saw_and_none_of_it_is_in_the_test_part(name):
    meta = json.loads((compiled_dir() / f"{name}.meta.json").read_text())
    fitted = read_program(name).rule["fitted"]
    assert meta.get("fitted_on") and fitted.get("fitted_on") == meta["fitted_on"], name
    suite = read_suite()
    for dataset, seen in meta["fitted_on"].items():
        assert seen and set(seen) <= set(suite["datasets"][dataset]["ids"]), (name, dataset)
    check_fitted_on(meta)  # raises FittedOnTestPart naming the first test-part dialogue


def test_the_check_fails_on_a_test_part_dialogue():
    test_ids = [i for i in read_suite()["datasets"]["vista-human"]["ids"] if part_of_group(group_id_of(i, {})) == "test"]
    with pytest.raises(FittedOnTestPart, match=test_ids[0]):
        check_fitted_on({"program": "x", "fitted_on": {"vista-human": test_ids[:1]}})

"""Judging a turn's clauses (``units="clauses"``): the cut, the tier with no LM over it, and the option in a program
file."""

from helpers import assistant, dialogue, user

from vista_dspy import Category, Vista
from vista_dspy.grounding import clause_units, sentence_units
from vista_dspy.optimize.study.plan import DESIGNS
from vista_dspy.optimize.study.run import search_space

PORTUGAL = ("Lisbon is the capital of Portugal. Lisbon has seven hills.\n\n"
            "Porto is the second city of Portugal. Porto lies on the Douro river.")


def test_a_sentence_is_cut_at_its_clause_boundaries_and_nothing_is_added():
    text = ("Lisbon is the capital of Portugal, and it has seven hills. Do you like it? "
            "Porto lies on the Douro; its bridges are famous. The train leaves at 5:30 - it is fast. "
            "Fado started there, which surprises many. Yes!")
    assert clause_units(text) == [
        "Lisbon is the capital of Portugal", "and it has seven hills.",  # the conjunction opens its clause
        "Porto lies on the Douro", "its bridges are famous.",
        "The train leaves at 5:30", "it is fast.",  # a colon between digits is a time, not a boundary
        "Fado started there", "which surprises many.",
    ]
    # A sentence without such a boundary is one unit, as with sentences; questions and pleasantries are none.
    plain = "Lisbon has seven hills. Is it far? Yes!"
    assert clause_units(plain) == sentence_units(plain) == ["Lisbon has seven hills."]
    # Every unit is the turn's own text.
    assert all(unit.rstrip(".") in text for unit in clause_units(text))


def test_the_tier_with_no_lm_judges_one_unit_per_clause_and_quotes_its_passage():
    dlg = dialogue(user("Tell me about Lisbon."),
                   assistant("Lisbon is the capital of Portugal, and it has ten hills.", PORTUGAL))
    judge = Vista.evidence_from_program(None, units="clauses")
    assert not judge.needs_lm  # no LM is configured here: a single call would fail the test
    [turn] = judge(dlg).turns
    assert turn.claims_source == "clauses"
    assert [c.claim for c in turn.claims] == ["Lisbon is the capital of Portugal", "and it has ten hills."]
    assert [c.category for c in turn.claims] == [Category.VERIFIED, Category.LACKING_EVIDENCE]
    assert turn.label == "hallucinated"
    assert all(c.decided_by == "evidence" for c in turn.claims)
    verified, lacking = turn.claims
    assert 'the reference says "Lisbon is the capital of Portugal."' in verified.explanation
    assert "its passages hold no ten (the reference's passage gives seven)" in lacking.explanation
    # The whole sentence is one unit under sentences, the figure deciding it alone.
    [whole] = Vista.evidence_from_program(None, units="sentences")(dlg).turns
    assert len(whole.claims) == 1 and whole.label == "hallucinated"


def test_clauses_round_trip_through_a_program_file_with_their_own_hash(tmp_path):
    clauses = Vista.from_program(None, units="clauses")
    sentences = Vista.from_program(None, units="sentences")
    path = clauses.save_program(tmp_path / "clauses.json")
    back = Vista.from_program(path)
    assert back.options.units == "clauses" and back.options.saved()["units"] == "clauses"
    assert back.content_hash() == clauses.content_hash() != sentences.content_hash()


def test_the_priced_study_can_choose_clauses():
    [units] = [c for c in search_space({"seed": Vista.from_program(None)}, None) if c.name == "units"]
    assert "clauses" in units.values
    assert ({"units": "clauses"}, "the turn's clauses as units (no Decompose call)") in DESIGNS

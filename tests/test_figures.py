"""Figures, dates and names a unit states that no source holds (``figures``), and the checks the evidence gives a
decision beside its cues (``evidence.CHECKS``): each on a text built so that the answer is known."""

import pytest

from vista_dspy.evidence import CHECKS, CUES, TurnEvidence
from vista_dspy.evidence.figures import SourceFigures, figures

QUICKSTART_DOC = ("Tromsø climate\nThanks to the warming effect of the Gulf Stream, Tromsø has a subarctic climate "
                  "that is milder than its latitude suggests. The average January temperature is around minus 4 "
                  "degrees Celsius.")
INVENTED = ("Tromsø is milder than you might expect thanks to the Gulf Stream, but it has 200 days of snow a year and "
            "January temperatures often fall to minus 30 degrees.")


def keys(text, **kind):
    return [f.key for f in figures(text, **kind) if f.kind != "name"]


@pytest.mark.parametrize("written", ["minus 4", "-4", "\u22124", "negative four", "minus four"])
def test_one_negative_figure_however_it_is_written(written):
    assert keys(f"It falls to {written} degrees.") == ["n:-4"]


@pytest.mark.parametrize("text, key", [
    ("thirty", "n:30"), ("30", "n:30"), ("twenty-five", "n:25"), ("two hundred and fifty", "n:250"),
    ("1,000", "n:1000"), ("a thousand", "n:1000"), ("one thousand", "n:1000"), ("3.5 million", "n:3.5e+06"),
    ("2 million", "n:2e+06"), ("3rd", "n:3"), ("third", "n:3"), ("the 1990s", "n:1990"), ("12%", "n:12"),
])
def test_numbers_are_compared_by_value(text, key):
    assert keys(f"There were {text} of them.") == [key]


def test_dates_runs_and_words_that_are_no_figure():
    assert keys("It opens in Sept and closes in September.") == ["month:9", "month:9"]
    assert keys("We may go on Sunday.") == ["weekday:7"]  # "may" in lower case is no month
    assert keys("COVID-19 spread from 1939-1945 to 2,000, then 3.") == ["n:19", "n:1939", "n:1945", "n:2000", "n:3"]
    assert keys("It is one of the best, at first.") == []  # a unit's standalone one / first is no figure
    assert keys("It is one of the best, at first.", source=True) == ["n:1", "n:1"]  # a source's may hold a "1"
    assert keys("Ten, twenty and thirty.") == ["n:10", "n:20", "n:30"]  # a comma ends a number


def test_names_are_capitalised_runs_that_do_not_open_a_sentence():
    found = [(f.text, f.kind) for f in figures("Paris is lovely. We met Serena Williams at the Louvre with NASA.")]
    assert found == [("Serena Williams", "name"), ("Louvre", "name"), ("NASA", "name")]
    assert [f.text for f in figures("New Zealand has many sheep.")] == ["New Zealand"]  # two capitals open it
    assert [f.text for f in figures("NASA launched it.")] == ["NASA"]  # an acronym anywhere
    assert [(f.text, f.kind) for f in figures("THE MUSEUM OPENS AT NINE")] == [("NINE", "number")]  # all capitals


def test_the_quickstart_sentence_lacks_exactly_its_invented_figures():
    sources = SourceFigures.of([QUICKSTART_DOC, "How cold does it get there in winter?"])
    assert [f.text for f in sources.lacking(INVENTED)] == ["200", "minus 30"]  # the Gulf Stream and January are there
    assert sources.lacking("January temperatures average -4 degrees.") == []  # "minus 4" in the document
    assert [f.text for f in sources.lacking("It has 30 days of snow.")] == ["30"]  # not the -30 of nowhere, nor -4


def test_a_source_holds_a_name_in_any_of_its_spellings_the_stem_sees():
    sources = SourceFigures.of(["Thomas Müller plays for Germany; the 1950s were golden."])
    assert sources.lacking("He met Thomas Muller's team in the 50s.") == []  # accents, a possessive, a decade
    assert [f.text for f in sources.lacking("He met Thomas Muller at Lake Michigan.")] == ["Lake Michigan"]


def test_the_checks_of_a_unit_have_known_values():
    evidence = TurnEvidence.of(QUICKSTART_DOC, [], ["How cold does it get there in winter?"])
    invented = evidence.cues(INVENTED)
    assert invented["figure_lacking"] == 1.0 and invented["name_lacking"] == 0.0
    assert invented["own_remark"] == invented["evaluative"] == 0.0  # a generic "you" is no remark of the speaker's
    assert set(invented) == set(CUES) | set(CHECKS)
    assert evidence.cues("The Gulf Stream warms Tromsø.")["figure_lacking"] == 0.0
    assert evidence.cues("The Gulf Stream warms Bergen too.")["name_lacking"] == 1.0
    assert evidence.cues("Tromsø in Norway is a great choice.")["evaluative"] == 1.0
    assert evidence.cues("The Great Neck is far away.")["evaluative"] == 0.0  # a name, not a judgement
    assert evidence.cues("I went there twice.")["own_remark"] == 1.0
    assert evidence.cues("The assistant likes the cold.")["own_remark"] == 1.0
    assert evidence.cues("The US has cold places.")["own_remark"] == 0.0  # the country, not "us"


def test_the_passage_a_claim_rests_on_and_the_words_no_source_holds():
    evidence = TurnEvidence.of(QUICKSTART_DOC, ["Tromsø is in Norway."], ["How cold does it get there in winter?"])
    support = evidence.support("Tromsø lies in Norway.")
    assert (support.passage.source, support.passage.text, support.shared, support.of) == (
        "the knowledge store", "Tromsø is in Norway.", 2, 3)  # trom, norw of trom, lies, norw
    assert evidence.support("Bananas grow on trees.") is None
    assert evidence.unsaid("Tromsø has reindeer and fjords.") == ["reindeer", "fjords"]

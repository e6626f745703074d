"""Evidence read against the passage that supports a unit (issue 60): a unit's cues, figure and name checks and
explanation read the window of each source that shares most of it, so that text added to the sources that does
not support the unit better changes no verdict -- the quick start padded with unrelated passages to 20,000 words a
reference, built so that the paraphrase's words, the invented figure and a name each occur somewhere in the padding,
keeps every label, category and explanation."""

from pathlib import Path

from vista_dspy import Vista
from vista_dspy.data import load_dialogues
from vista_dspy.evidence import TurnEvidence

QUICKSTART = Path(__file__).resolve().parents[1] / "examples" / "quickstart.json"
# Unrelated passages, each one a topic of its own, whose words together hold what the quick start's units lack:
# "sits", "inside", "often", "visible" (the paraphrase of turn 1) and "200" (turn 3's invented figure).
PADDING = (
    "Sourdough bread\nA sourdough starter sits at room temperature for a day before it is fed again.",
    "Chess openings\nThe Sicilian Defence is often played by players who want an unbalanced game.",
    "Lighthouses\nThe lamp of a lighthouse is visible from up to 40 kilometres on a clear night.",
    "Beekeeping\nInside a hive, worker bees keep the brood at about 35 degrees Celsius.",
    "Marathons\nA marathon runner may train for 200 days before a first race.",
    "Volcanoes\nMauna Loa in Hawaii is the largest active volcano on Earth by volume.",
)


def padded(document: str, words: int) -> str:
    """``document`` in the middle of unrelated passages, the whole about ``words`` words long."""
    before, after = [], []
    size, i = len(document.split()), 0
    while size < words:
        passage = PADDING[i % len(PADDING)]
        (before if i % 2 == 0 else after).append(passage)
        size += len(passage.split())
        i += 1
    return "\n".join([*before, document, *after])


def judge(dialogue):
    program = Vista.evidence_from_program("local", units="sentences")
    return program(dialogue)


def test_unrelated_passages_change_no_verdict_of_the_no_lm_tier():
    dialogue = load_dialogues(QUICKSTART)[0]
    base = judge(dialogue)
    for words in (1_000, 5_000, 20_000):
        turns = [t.model_copy(update={"grounding": t.grounding.model_copy(
            update={"document": padded(t.grounding.document, words)})}) if t.role == "assistant" else t
            for t in dialogue.turns]
        long = judge(dialogue.model_copy(update={"turns": turns}))
        for a, b in zip(base.turns, long.turns):
            assert b.label == a.label, (words, b.turn_index)
            assert [(c.claim, c.category, c.explanation) for c in b.claims] == [
                (c.claim, c.category, c.explanation) for c in a.claims], words
    invented = base.turns[1].claims[0]
    assert invented.category.value == "CONTRADICTED" or "200" in invented.explanation


def test_a_figure_is_checked_against_the_passage_the_unit_rests_on():
    reference = padded("Tromsø climate\nThe average January temperature in Tromsø is around minus 4 degrees Celsius.",
                       2_000)
    evidence = TurnEvidence.of(reference, [], [])
    unit = "January temperatures in Tromsø often fall to 200 degrees."
    assert [f.text for f in evidence.lacking(unit)] == ["200"]  # the marathon's 200 days are another passage
    assert evidence.reference_figure_texts(unit, frozenset({"number"})) == ("minus 4",)
    assert evidence.cues(unit)["figure_lacking"] == 1.0
    assert evidence.unsaid("Tromsø sits inside the oval.") == ["sits", "inside", "oval"]  # the padding's are elsewhere
    support = evidence.support(unit)
    assert support.passage.text == "The average January temperature in Tromsø is around minus 4 degrees Celsius."


def test_a_unit_that_spans_neighbouring_sentences_is_read_with_both():
    reference = "Tromsø\nTromsø is a city in Norway. It has an airport. Its cathedral is made of wood."
    evidence = TurnEvidence.of(reference, [], [])
    cues = evidence.cues("Tromsø, a city in Norway, has an airport.")
    assert cues["uncovered_reference"] == 0.0  # city, Norway and airport are in two neighbouring sentences
    far = TurnEvidence.of(padded("Tromsø is a city in Norway.", 300) + "\nTromsø has an airport.", [], [])
    assert far.cues("Tromsø, a city in Norway, has an airport.")["uncovered_reference"] > 0.0

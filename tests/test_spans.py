"""Where in its turn each claim was said (``vista_dspy.spans``): repeated phrases, rewritten claims, claims that
cannot be aligned, coverage claims, old records, and the spans of the quick-start example as `vista evaluate` prints
them (the fake LM decomposing the way a real model does: pronouns resolved, clauses restated)."""

import json
from pathlib import Path

from typer.testing import CliRunner

from vista_dspy.cli import app
from vista_dspy.lm.fake import FakeOpenAIServer, RuleEngine
from vista_dspy.run.runner import VERDICTS, read_verdicts
from vista_dspy.schema import Category, ClaimVerdict
from vista_dspy.spans import align_claims, cut, with_spans

REPO = Path(__file__).resolve().parents[1]


def span_of(text: str, phrase: str, occurrence: int = 1) -> tuple[int, int]:
    start = -1
    for _ in range(occurrence):
        start = text.index(phrase, start + 1)
    return start, start + len(phrase)


def test_a_claim_drawn_from_the_second_of_two_identical_phrases_gets_the_second_by_its_other_words():
    turn = "Bergen has a fish market. Tromsø has a fish market too."
    [aligned] = align_claims(turn, ["There is a fish market in Tromsø."])
    assert aligned.spans == (span_of(turn, "Tromsø has a fish market"),)


def test_a_claim_drawn_from_the_second_of_two_identical_phrases_gets_the_second_by_its_order():
    # "free on Sundays" is said twice; the claim's other word (the garden) is in neither sentence, so the claims'
    # order decides: the third claim comes after the garden's sentence.
    turn = "It is free on Sundays. The garden opens at nine. It is free on Sundays."
    aligned = align_claims(turn, ["The museum is free on Sundays.", "The garden opens at nine.",
                                  "The garden is free on Sundays."])
    assert [a.spans for a in aligned] == [(span_of(turn, "free on Sundays"),), (span_of(turn, "The garden opens at nine"),),
                                          (span_of(turn, "free on Sundays", 2),)]


def test_a_claim_said_twice_word_for_word_takes_the_occurrence_after_the_claim_before_it():
    turn = "The museum is free on Sundays. The garden is open daily. The museum is free on Sundays."
    aligned = align_claims(turn, ["The garden is open daily.", "The museum is free on Sundays."])
    assert aligned[1].spans == (span_of(turn, "The museum is free on Sundays", 2),) and aligned[1].how == "exact"


def test_a_rewritten_claim_he_to_the_name_still_aligns_to_the_sentence_that_said_it():
    turn = "Hayao Miyazaki founded Studio Ghibli. He directed Spirited Away in 2001."
    aligned = align_claims(turn, ["Hayao Miyazaki founded Studio Ghibli.",
                                  "Hayao Miyazaki directed Spirited Away in 2001."])
    assert [(a.how, a.spans) for a in aligned] == [
        ("exact", (span_of(turn, "Hayao Miyazaki founded Studio Ghibli"),)),
        ("words", (span_of(turn, "directed Spirited Away in 2001"),))]


def test_a_claim_that_cannot_be_aligned_gets_no_span():
    turn = "Tromsø in Norway is a great choice."
    [aligned] = align_claims(turn, ["Paris is lovely in spring."])
    assert (aligned.spans, aligned.how) == ((), "unaligned")


def test_a_claim_drawn_from_two_sentences_gets_both_and_a_name_alone_draws_none():
    turn = "Tromsø has a subarctic climate. Its winters are long and dark. Oslo is the capital."
    [merged, named] = align_claims(turn, ["Tromsø has a subarctic climate with long dark winters.",
                                          "Tromsø's winters are long."])
    assert merged.spans == (span_of(turn, "Tromsø has a subarctic climate"), span_of(turn, "winters are long and dark"))
    assert named.spans == (span_of(turn, "winters are long"),)


def test_a_coverage_claim_is_its_own_sentence_and_the_verdict_records_carry_the_spans():
    turn = "It rains a lot. Bergen is wet. It rains a lot."
    claims = [ClaimVerdict(claim="Bergen is wet.", category=Category.VERIFIED, stage="verify"),
              ClaimVerdict(claim="It rains a lot.", category=Category.LACKING_EVIDENCE, stage="categorize",
                           added_by="coverage")]
    spanned = with_spans(turn, claims)
    assert [(c.spans, c.alignment) for c in spanned] == [([span_of(turn, "Bergen is wet")], "exact"),
                                                        ([span_of(turn, "It rains a lot")], "exact")]


def test_a_record_written_before_spans_existed_still_reads():
    old = {"claim": "Lisbon has seven hills.", "category": "VERIFIED", "explanation": "", "stage": "verify",
           "error": None, "gold_category": None}
    claim = ClaimVerdict.model_validate_json(json.dumps(old))
    assert (claim.spans, claim.alignment) == ([], None)


def test_cut_gives_each_piece_the_marks_that_cover_it():
    assert cut("abcdef", [((1, 4), "x"), ((3, 5), "y")]) == [("a", []), ("bc", ["x"]), ("d", ["x", "y"]),
                                                            ("e", ["y"]), ("f", [])]


class Rewriting(RuleEngine):
    """Decomposes the quick-start turns as a real model does: pronouns resolved, clauses restated."""

    CLAIMS = {
        "Tromsø in Norway": ["Tromsø is in Norway.", "Tromsø is a great choice for seeing the northern lights.",
                             "Tromsø sits inside the auroral oval.",
                             "The northern lights are often visible in Tromsø from September to March."],
        "Tromsø is milder": ["Tromsø is milder than you might expect.", "The Gulf Stream makes Tromsø milder.",
                             "Tromsø has 200 days of snow a year.",
                             "January temperatures in Tromsø often fall to minus 30 degrees."],
    }

    def decompose(self, inputs):
        return {"claims": next(claims for start, claims in self.CLAIMS.items() if inputs["turn"].startswith(start))}


def test_vista_evaluate_prints_the_span_of_every_claim_of_the_quickstart_example(tmp_path):
    example = REPO / "examples" / "quickstart.json"
    with FakeOpenAIServer(Rewriting()) as server:
        result = CliRunner().invoke(app, ["evaluate", str(example), "--model", "openai/fake", "--api-base",
                                          server.url, "--out", str(tmp_path / "out"), "--no-cache"])
    assert result.exit_code == 0, result.output
    first, second = (turn["utterance"] for turn in json.loads(example.read_text())[0] if turn["role"] == "assistant")
    said = {  # each claim -> the words of the turn it came from
        "Tromsø is in Norway.": (first, "Tromsø in Norway"),
        "Tromsø is a great choice for seeing the northern lights.": (first, "Tromsø in Norway is a great choice"),
        "Tromsø sits inside the auroral oval.": (first, "sits inside the auroral oval"),
        "The northern lights are often visible in Tromsø from September to March.":
            (first, "lights are often visible from September to March"),
        "Tromsø is milder than you might expect.": (second, "Tromsø is milder than you might expect"),
        "The Gulf Stream makes Tromsø milder.": (second, "Tromsø is milder than you might expect thanks to the Gulf "
                                                         "Stream"),
        "Tromsø has 200 days of snow a year.": (second, "200 days of snow a year"),
        "January temperatures in Tromsø often fall to minus 30 degrees.":
            (second, "January temperatures often fall to minus 30 degrees"),
    }
    printed = " ".join(result.output.split())  # rich wraps lines at the terminal's width
    for claim, (turn, words) in said.items():
        start, end = span_of(turn, words)
        assert f"{claim} (chars {start}-{end})" in printed, claim
    [verdict] = read_verdicts(tmp_path / "out" / VERDICTS)
    assert {c.claim: t.text[c.spans[0][0]:c.spans[0][1]] for t in verdict.turns for c in t.claims} == {
        claim: words for claim, (_, words) in said.items()}

"""Judging a turn's sentences instead of Decompose's claims (``units="sentences"``), Categorize's category alone
(``explain_unverified=False``), the tier with no LM at all, and a probe of sentences that keeps no dataset text."""

import json

from helpers import LISBON, assistant, categories, dialogue, judge, user
from typer.testing import CliRunner

from vista_dspy import Category, Vista
from vista_dspy.cli import app
from vista_dspy.grounding import sentence_units
from vista_dspy.optimize.rules.judged_turns import ClaimRow, TurnRows
from vista_dspy.optimize.rules.probe_records import read_probe, write_probe
from vista_dspy.optimize.rules.recipes import claim_key
from vista_dspy.run.runner import VERDICTS, read_verdicts


def test_the_units_are_the_turn_s_statements_with_content():
    text = "Lisbon is the capital of Portugal. Have you been there? Yes! It has seven hills."
    assert sentence_units(text) == ["Lisbon is the capital of Portugal.", "It has seven hills."]
    assert sentence_units("Great question. Is it far?") == ["Great question."]
    assert sentence_units("Yes! Why?") == []


def test_sentences_are_judged_without_decompose_and_accepted_ones_join_the_store():
    dlg = dialogue(
        user("Tell me about Lisbon."),
        assistant("Lisbon is the capital of Portugal. Lisbon has ten hills. Do you like it?", LISBON),
        user("Nice."),
        assistant("Lisbon is the capital of Portugal."),  # knowledge-only: supported by the store alone
    )
    verdict, engine = judge(dlg, units="sentences")
    first, second = verdict.turns
    assert engine.inputs_of("decompose") == []
    assert [c.claim for c in first.claims] == ["Lisbon is the capital of Portugal.", "Lisbon has ten hills."]
    assert categories(first) == [Category.VERIFIED, Category.LACKING_EVIDENCE]
    assert first.claims_source == "sentences" and first.label == "hallucinated"
    assert second.knowledge == ["Lisbon is the capital of Portugal."]
    assert categories(second) == [Category.VERIFIED] and second.label == "faithful"


def test_background_turns_seed_the_store_with_their_sentences():
    dlg = dialogue(assistant("Lisbon has ten hills. Come visit!", background=True), user("Really?"),
                   assistant("Lisbon has ten hills."))
    verdict, engine = judge(dlg, units="sentences")
    assert verdict.turns[0].knowledge == ["Lisbon has ten hills.", "Come visit!"]
    assert categories(verdict.turns[0]) == [Category.VERIFIED]
    assert engine.inputs_of("decompose") == []


def test_without_explanations_categorize_is_asked_for_its_category_alone():
    dlg = dialogue(user("Lisbon?"), assistant("Lisbon has ten hills.", LISBON))
    said, engine = judge(dlg, units="sentences")
    quiet, quiet_engine = judge(dlg, units="sentences", explain_unverified=False)
    assert categories(said.turns[0]) == categories(quiet.turns[0]) == [Category.LACKING_EVIDENCE]
    assert said.turns[0].claims[0].explanation != quiet.turns[0].claims[0].explanation
    # The evidence stands in for the judge's essay: the figure no source holds, beside the reference's.
    assert quiet.turns[0].claims[0].explanation == ("LACKING EVIDENCE by the judge (asked for its label alone): "
                                                    "its passages hold no ten (the reference's passage gives seven).")
    # Categorize's signature asks for no explanation, so its prompt is shorter.
    asked = Vista.from_program(None, explain_unverified=False)._questions()["categorize"].signature
    assert list(asked.output_fields) == ["category"]
    assert Vista.from_program(None)._questions()["categorize"].signature is None  # the saved one, which explains
    assert said.usage.by_stage["categorize"].prompt_tokens > quiet.usage.by_stage["categorize"].prompt_tokens


def test_the_options_are_saved_only_when_changed_so_older_programs_keep_their_hash():
    seed = Vista.from_program(None)
    assert "units" not in seed.options.saved() and "explain_unverified" not in seed.options.saved()
    sentences = Vista.from_program(None, units="sentences", explain_unverified=False)
    assert sentences.options.saved()["units"] == "sentences"
    assert sentences.content_hash() != seed.content_hash()


def test_the_evidence_over_sentences_needs_no_lm(tmp_path):
    data = tmp_path / "d.json"
    data.write_text(json.dumps([{"id": "d1", "turns": [
        {"role": "user", "text": "Where is Lisbon?"},
        {"role": "assistant", "text": "Lisbon is the capital of Portugal. It has forty bridges.",
         "grounding": {"kind": "document", "document": LISBON}}]}]))
    assert not Vista.evidence_from_program(None, units="sentences").needs_lm
    assert Vista.evidence_from_program(None).needs_lm  # Decompose still asks the LM
    # Nothing listens on the port: a single LM call would fail the run.
    result = CliRunner().invoke(app, ["evaluate", str(data), "--system", "evidence", "--units", "sentences",
                                      "--model", "openai/none", "--api-base", "http://127.0.0.1:9/v1",
                                      "--out", str(tmp_path / "out"), "--no-cache"])
    assert result.exit_code == 0, result.output
    assert "with no LM" in result.output
    [verdict] = read_verdicts(tmp_path / "out" / VERDICTS)
    assert verdict.usage.total.calls == 0
    assert [c.claim for c in verdict.turns[0].claims] == ["Lisbon is the capital of Portugal.",
                                                          "It has forty bridges."]
    assert all(c.decided_by == "evidence" for c in verdict.turns[0].claims)


def _row(claim):
    cues = {"coverage": 0.0, "uncovered_reference": 0.5}
    return ClaimRow(claim, cues, {"VERIFIED": 0.4, "UNVERIFIABLE": 0.6}, None, "LACKING EVIDENCE", "VERIFIED")


def test_a_probe_of_sentences_keeps_no_text(tmp_path):
    turns = [TurnRows("d1", 1, "faithful", [_row("A sentence of the dataset."), _row("Another one.")])]
    options = Vista.from_program(None, units="sentences", explain_unverified=False).options.as_dict()
    write_probe(tmp_path / "p", turns, {"d1": "train"}, {"options": options})
    assert "dataset" not in (tmp_path / "p" / "turns.jsonl").read_text()
    back, _, _ = read_probe(tmp_path / "p")
    assert [r.claim for r in back[0].rows] == ["", ""]
    # Two claims without text stay two claims when paired.
    assert claim_key(back[0], 0) != claim_key(back[0], 1)

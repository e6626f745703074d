"""Claims come from the turn: Decompose's claims that the turn and what precedes it never said are dropped (neither
judged nor stored) and listed; a turn with content but no claim is flagged."""

import dspy
from helpers import assistant, dialogue, user

from vista_dspy import Category, Vista
from vista_dspy.grounding import content_words, grounded, says_something, split_grounded
from vista_dspy.lm.fake import RuleEngine, rule_lm
from vista_dspy.scoring import EMPTY_DECOMPOSITION, summarize

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."


def run(dlg, **options):
    engine = RuleEngine()
    with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
        return Vista.from_program(claim_calls="per-claim", **options)(dlg), engine


def test_a_claim_is_grounded_when_most_of_its_content_words_occur_in_its_sources():
    sources = content_words("user: Which car sells best?\nassistant: I'm not sure, but I think Toyota sold ten "
                            "million Corollas in 2021, mostly in Asia.")
    assert grounded("The assistant thinks Toyota sold 10 million Corollas in 2021.", sources)  # 10 vs ten: 4 of 5
    assert grounded("Toyota's Corolla is the best selling car.", sources)  # inflections: sells ~ selling
    assert not grounded("Hayao Miyazaki directed Spirited Away.", sources)
    assert not grounded("The assistant's grandmother told stories about Paris.", sources)
    assert grounded("The assistant likes it.", sources)  # nothing but framing: nothing to check
    assert grounded("Do not smoke.", content_words("Eat healthy and avoid smoking."))  # smoke ~ smoking
    kept, dropped = split_grounded(["Toyota sold cars.", "Miyazaki directed films."], "Toyota sold many cars.")
    assert kept == ["Toyota sold cars."] and dropped == ["Miyazaki directed films."]


def test_says_something_tells_content_from_pleasantries():
    assert says_something("Not sure, but Ford builds the F-150 in Dearborn.")
    assert not says_something("Hello! How can I help you today?")
    assert not says_something("Thanks, you too!")


def test_copied_claims_are_neither_judged_nor_stored_and_are_listed():
    dlg = dialogue(user("Tell me about Lisbon."), assistant("Lisbon has seven hills. <<COPY-DEMO>>", DOC),
                   user("And?"), assistant("Lisbon is the capital of Portugal.", DOC))
    verdict, engine = run(dlg)
    first, second = verdict.turns
    assert [c.claim for c in first.claims] == ["Lisbon has seven hills."]
    assert first.ungrounded == ["Hayao Miyazaki directed Spirited Away."]
    assert all("Miyazaki" not in i["claim"] for i in engine.inputs_of("verify"))
    assert "Miyazaki" not in " ".join(second.knowledge)
    assert summarize([verdict])["decomposition"] == {"ungrounded_claims": 1, "empty_turns": 0}
    unchecked, _ = run(dlg, check_grounding=False)
    assert len(unchecked.turns[0].claims) == 2 and unchecked.turns[0].ungrounded == []
    assert unchecked.options["check_grounding"] is False and verdict.options["check_grounding"] is True


def test_copied_claims_of_a_background_turn_never_become_common_ground():
    dlg = dialogue(user("Cars?"), assistant("Toyota sells many cars. <<COPY-DEMO>>", background=True),
                   user("Which?"), assistant("Hayao Miyazaki directed Spirited Away.", "A page about cars."))
    verdict, _ = run(dlg)
    [judged] = verdict.turns
    assert judged.knowledge == ["Toyota sells many cars."]
    assert verdict.ungrounded_background == ["Hayao Miyazaki directed Spirited Away."]
    # said in the judged turn itself, the claim is grounded there and judged (not in the reference: unsafe)
    assert [c.category for c in judged.claims] != [] and judged.claims[0].category != Category.VERIFIED
    assert summarize([verdict])["decomposition"]["ungrounded_claims"] == 1


def test_a_turn_with_content_but_no_claim_is_flagged_not_silently_faithful():
    dlg = dialogue(user("Best seller?"), assistant("Not sure, but Toyota sold ten million Corollas. <<SILENT>>", DOC),
                   user("Thanks"), assistant("You are welcome! <<SILENT>>", DOC))
    verdict, _ = run(dlg)
    content, pleasantry = verdict.turns
    # a failed decomposition by default: unknown, with its reason; the pleasantry says nothing and is faithful
    assert content.claims == [] and content.empty_decomposition and content.label == "unknown"
    assert content.error == EMPTY_DECOMPOSITION
    assert (pleasantry.empty_decomposition, pleasantry.label, pleasantry.error) == (False, "faithful", None)
    summary = summarize([verdict])
    assert summary["decomposition"]["empty_turns"] == 1 and summary["errors"]["turns_failed"] == 1
    assert summary["turn_labels"] == {"faithful": 1, "hallucinated": 0, "unknown": 1}
    # the paper's reading, when asked for: faithful, still flagged
    paper, _ = run(dlg, empty_turns="faithful")
    assert [(t.label, t.empty_decomposition, t.error) for t in paper.turns] == [("faithful", True, None),
                                                                                ("faithful", False, None)]


def test_a_turn_judged_after_a_failed_background_turn_says_its_knowledge_store_lacks_that_turn():
    dlg = dialogue(user("Hi"), assistant("<<BAD-DECOMPOSE>> Lisbon has seven hills.", background=True),
                   user("More?"), assistant("Lisbon is the capital of Portugal.", DOC),
                   user("And?"), assistant("Lisbon has seven hills.", DOC))
    verdict, _ = run(dlg)
    assert [e.split(": ")[0] for e in verdict.errors] == ["turn 1 (background)"]
    assert [t.knowledge_missing for t in verdict.turns] == [[1], [1]]
    assert summarize([verdict])["errors"]["turns_missing_background"] == 2
    ablated, _ = run(dlg, accumulate=False)  # -AC: no store of earlier turns, nothing is missing from it
    assert [t.knowledge_missing for t in ablated.turns] == [[], []]

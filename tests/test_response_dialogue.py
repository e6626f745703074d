"""A response, the dialogue before it and its passages become one VISTA dialogue in one place (``run.dialogues``), which
``VistaMetric``, ``VistaReward`` and the platforms' scorers (``integrations._judging.ResponseJudge``) all call."""

import dspy

from vista_dspy import VistaMetric, VistaReward
from vista_dspy.integrations._judging import ResponseJudge
from vista_dspy.run import dialogues
from vista_dspy.run.dialogues import response_dialogue

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."
HISTORY = "system: The assistant is a Lisbon guide.\nuser: Tell me about Lisbon.\nassistant: Lisbon has a tram.\nuser: More?"
RESPONSE = "Lisbon has seven hills."
NO_LM = {"system": "evidence", "units": "sentences"}  # judged with no LM call


def test_a_response_its_history_and_passages_become_one_dialogue():
    dialogue = response_dialogue(HISTORY, RESPONSE, [DOC, "  ", "Lisbon has a tram."], ["It is 2026."])
    assert [(t.role, t.text) for t in dialogue.turns] == [
        ("user", "Tell me about Lisbon."), ("assistant", "Lisbon has a tram."), ("user", "More?"),
        ("assistant", RESPONSE)]
    earlier, response = dialogue.turns[1], dialogue.turns[-1]
    assert earlier.grounding.kind == "background"  # common ground: its claims stored unjudged
    assert response.grounding.passages == [DOC, "Lisbon has a tram."]  # the blank passage dropped
    assert dialogue.background == ["It is 2026.", "The assistant is a Lisbon guide."]
    assert dialogue.id == response_dialogue(HISTORY, RESPONSE, [DOC, "Lisbon has a tram."], ["It is 2026."]).id
    assert dialogue.id != response_dialogue(HISTORY, RESPONSE, [DOC], ["It is 2026."]).id
    alone = response_dialogue(None, RESPONSE, None)
    assert len(alone.turns) == 1 and alone.turns[0].grounding.kind == "knowledge_only"


def test_the_metric_the_reward_and_the_platforms_scorer_all_build_it_there(monkeypatch):
    read = []
    history_turns = dialogues.history_turns
    monkeypatch.setattr(dialogues, "history_turns",
                        lambda history, field="response": read.append(history) or history_turns(history, field))
    example = dspy.Example(history=HISTORY, document=DOC).with_inputs("history", "document")
    metric_turn = VistaMetric("local", **NO_LM).turn(example, dspy.Prediction(response=RESPONSE))
    [reward_verdict] = VistaReward("local", **NO_LM).judge_batch([HISTORY], [RESPONSE], document=[DOC])
    platform_verdict = ResponseJudge("local", **NO_LM).judge(HISTORY, RESPONSE, [DOC])
    assert read == [HISTORY, HISTORY, HISTORY]
    claims = [(c.claim, c.category.value) for c in metric_turn.claims]
    assert claims == [(c.claim, c.category.value) for c in reward_verdict.turn.claims]
    assert claims == [(c["claim"], c["category"]) for c in platform_verdict.claims] == [(RESPONSE, "VERIFIED")]

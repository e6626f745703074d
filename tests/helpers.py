"""Small builders shared by the tests."""

import pytest

from vista_dspy import Dialogue, Grounding, Turn

LISBON = "Lisbon is the capital of Portugal. Lisbon has seven hills."
BEGIN_HEADER = "model_name\tdata_source\tknowledge\tmessage\tresponse\tbegin_label\n"


def user(text):
    return Turn(role="user", text=text)


def assistant(text, document=None, *, background=False, gold=None):
    if background:
        grounding = Grounding.background()
    elif document is None:
        grounding = Grounding.knowledge_only()
    else:
        grounding = Grounding.from_document(document)
    return Turn(role="assistant", text=text, grounding=grounding, gold=gold)


def dialogue(*turns, id="d", background=()):
    return Dialogue(id=id, turns=list(turns), background=list(background))


def shared_data(*parts):
    """A path under the benchmark data folder; the test is skipped when it is not there."""
    from conftest import SHARED_DATA

    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"benchmark data not found at {path}")
    return path


def only_judged_is_last(dialogue):
    return dialogue.judged_turns == [len(dialogue.turns) - 1]


def judge(dlg, engine=None, method="forward", **options):
    """(verdict, engine): ``dlg`` judged with the rule engine (``method``: forward, aforward or judge_claims);
    per-claim judging (the paper's method) unless options say otherwise."""
    import asyncio

    import dspy

    from vista_dspy import Vista
    from vista_dspy.lm.fake import RuleEngine, rule_lm

    engine = engine or RuleEngine()
    program = Vista.from_program(**{"claim_calls": "per-claim", **options})
    with dspy.context(lm=rule_lm(engine), adapter=dspy.JSONAdapter()):
        if method == "forward":
            verdict = program(dlg)
        elif method == "aforward":
            verdict = asyncio.run(program.acall(dlg))
        else:
            verdict = program.judge_claims(dlg)
    return verdict, engine


def categories(turn):
    return [c.category for c in turn.claims]

"""Small builders shared by the tests."""

from vista_dspy import Dialogue, Grounding, Turn


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

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


# ---- a synthetic stand-in for VISTA's human re-annotation (the authors' full file) -------------------------------
def vista_conversation(source: str, cid: int, *, tricky: bool = False) -> list[dict]:
    """One conversation of the authors' format with one judged turn. Odd ids: a document sentence and an invented
    one (hallucinated); even ids: the document sentence alone (faithful); ``tricky``: the document sentence alone,
    which the annotators call lacking evidence (the fake judge verifies it)."""
    fact = f"The museum of {source} number {cid} opens at nine."
    hallucinated = tricky or cid % 2 == 1
    claims = [{"claim_text": fact, "human_judgement": "lacking evidence" if tricky else "verifiable"}]
    if hallucinated and not tricky:
        claims.append({"claim_text": "It was founded in 1850.", "human_judgement": "lacking evidence"})
    return [{"role": "user", "utterance": "When does the museum open?"},
            {"role": "assistant", "utterance": " ".join(c["claim_text"] for c in claims),
             "retrieved_document": f"{fact} It has a small cafe.", "human_claims": claims,
             "gold_label": "hallucinated" if hallucinated else "faithful",
             "original_dataset_label": "hallucinated" if hallucinated else "faithful",
             "conversation_id": cid, "dataset": source, "turn_index": 0}]


def pin_synthetic_vista(monkeypatch, full: list, mirror):
    """Write ``full`` as the authors' file under ``mirror`` (a `--from DIR` copy) and pin the registry's vista-human
    datasets to its hashes and to those of its halves (the rule cuts them), for this test only."""
    import dataclasses
    import hashlib
    import json

    from vista_dspy.data import sources
    from vista_dspy.data.halves import half_bytes, split_halves

    raw = json.dumps(full).encode()
    (mirror / sources.VISTA_FULL.path).parent.mkdir(parents=True, exist_ok=True)
    (mirror / sources.VISTA_FULL.path).write_bytes(raw)
    halves = dict(zip((sources.DEV_HALF.path, sources.HELDOUT_HALF.path), map(half_bytes, split_halves(full))))
    file = dataclasses.replace(sources.VISTA_FULL, sha256=hashlib.sha256(raw).hexdigest(), size=len(raw))
    for name, ds in list(sources.DATASETS.items()):
        if ds.files == (sources.VISTA_FULL,):
            built = tuple(dataclasses.replace(f, sha256=hashlib.sha256(halves[f.path]).hexdigest(), size=None)
                          for f in ds.built)
            monkeypatch.setitem(sources.DATASETS, name, dataclasses.replace(ds, files=(file,), built=built))
    return halves


# ---- synthetic dialogues in VISTA's format, for runs that must not need the development data ---------------------
def museum_conversations(n: int) -> list[list[dict]]:
    """``n`` conversations of two judged turns each, every one different: a faithful first turn, and a second turn
    that repeats the document or adds an invented date (hallucinated for the fake judge)."""
    conversations = []
    for i in range(n):
        doc = (f"The museum number {i} opens at nine. It has a garden with {i % 7 + 2} fountains. Entry costs "
               f"{i % 5 + 3} euros.")
        second = (f"It has a garden with {i % 7 + 2} fountains." if i % 3 else
                  f"It has a garden with {i % 7 + 2} fountains. It was built in {1800 + i}.")
        conversations.append([
            {"role": "user", "utterance": "When does it open?"},
            {"role": "assistant", "utterance": f"The museum number {i} opens at nine.", "retrieved_document": doc},
            {"role": "user", "utterance": "Anything else?"},
            {"role": "assistant", "utterance": second, "retrieved_document": doc}])
    return conversations


class LoopbackOnly:
    """While active, a socket may connect only to this machine (the fake judge): any other address is refused and
    kept in ``refused``, so that a test can assert that a framework it runs (its telemetry, an update check, a
    hosted judge) reached nothing outside."""

    LOOPBACK = ("127.", "::1", "localhost")

    def __init__(self, monkeypatch):
        import socket

        self.refused: list[str] = []
        connect = socket.socket.connect

        def guarded(sock, address):
            host = address[0] if isinstance(address, tuple) else str(address)
            if sock.family in (socket.AF_INET, socket.AF_INET6) and not str(host).startswith(self.LOOPBACK):
                self.refused.append(str(host))
                raise OSError(f"the test allows no connection outside this machine (to {host})")
            return connect(sock, address)

        monkeypatch.setattr(socket.socket, "connect", guarded)

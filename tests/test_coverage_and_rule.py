"""Claims that cover the turn (a bounded Decompose answer, coverage claims) and one rule for claims and turns (the
turn threshold, the gate with a turn margin, a recorded probe that replays to the same rule)."""

import json
from pathlib import Path

import dspy
import pytest
from helpers import assistant, dialogue, user

from vista_dspy import Category, DecisionRule, Vista
from vista_dspy.data.records import record_exists
from vista_dspy.decision import CUES, LinearModel, most_doubtful
from vista_dspy.grounding import content_words, uncovered_sentences
from vista_dspy.lm.clients.adapters import JSONAdapter
from vista_dspy.lm.fake import AsyncRuleEngine, RuleEngine, rule_lm
from vista_dspy.optimize.rules.judged_turns import ClaimRow, TurnRows
from vista_dspy.optimize.rules.probe_records import read_probe, write_probe
from vista_dspy.optimize.rules.rule_fitting import replay
from vista_dspy.signatures import ClaimList, decompose_bound

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."
# The live probe the shipped sentences rule was compiled from (its meta names it too).
PROBE = Path(__file__).resolve().parents[1] / "benchmarks" / "probes" / "local-1.5b-sentences-live"


class LoopingDecompose(RuleEngine):
    """Decompose loops on its first answer (the same words until the token cap: unparseable); every Decompose
    request's claims bound (``maxItems``, ``maxLength``) is kept."""

    def __init__(self) -> None:
        super().__init__()
        self.bounds: list[tuple[int, int]] = []
        self._format = None

    def complete(self, request):
        self._format = request.config.response_format
        return super().complete(request)

    def decompose(self, inputs):
        schema = self._format.get("schema") or self._format["json_schema"]["schema"]
        claims = schema["properties"]["claims"]
        self.bounds.append((claims["maxItems"], claims["items"]["maxLength"]))
        if len(self.bounds) == 1:
            return "Lisbon is the capital " * 200  # a loop cut off by the token cap before any JSON
        return super().decompose(inputs)


class SchemaLM(dspy.LM):
    """The fake LM taking a JSON schema, as the embedded server is registered (llama.cpp makes it a grammar)."""

    @property
    def supports_response_schema(self) -> bool:
        return True

    @property
    def supported_params(self) -> set[str]:
        return {*super().supported_params, "response_format"}


def judge(engine, dlg, **options):
    lm = SchemaLM("fake/rules", engine=engine, async_engine=AsyncRuleEngine(engine), cache=False, num_retries=0)
    with dspy.context(lm=lm, adapter=JSONAdapter()):
        return Vista.from_program(**options)(dlg)


def test_a_looping_decomposition_is_bounded_by_its_turn_and_asked_again_with_a_tighter_bound():
    turn = "Lisbon is the capital of Portugal."
    engine = LoopingDecompose()
    verdict = judge(engine, dialogue(user("Tell me about Lisbon."), assistant(turn, DOC)))
    first = decompose_bound(len(content_words(turn)), len(turn))
    assert engine.bounds[0] == first and first[0] < ClaimList.MAX_CLAIMS  # the turn's bound, not the fixed 24
    assert engine.bounds[1] == decompose_bound(len(content_words(turn)), len(turn), retry=1)
    assert engine.bounds[1][0] < first[0] and engine.bounds[1][1] < first[1]  # not the identical request
    assert [c.claim for c in verdict.turns[0].claims] == [turn]


def test_the_bound_changes_the_answer_grammar_only_never_the_prompt():
    from vista_dspy.signatures import Decompose, with_claims_bound

    adapter = JSONAdapter()
    inputs = {"history": "user: hi", "turn": "Lisbon has seven hills."}
    bounded = with_claims_bound(Decompose, (3, 90))
    assert adapter.format(bounded, [], inputs) == adapter.format(Decompose, [], inputs)


def test_content_no_claim_covers_is_judged_as_a_marked_claim():
    class Partial(RuleEngine):
        def decompose(self, inputs):
            return {"claims": ["Lisbon is the capital of Portugal."]}  # leaves the second sentence out

    turn = "Lisbon is the capital of Portugal. Lisbon has seven hills and a castle."
    dlg = dialogue(user("Tell me about Lisbon."), assistant(turn, DOC))
    covered = judge(Partial(), dlg, coverage=True).turns[0].claims
    assert [(c.claim, c.added_by) for c in covered] == [("Lisbon is the capital of Portugal.", None),
                                                        ("Lisbon has seven hills and a castle.", "coverage")]
    assert covered[1].cues["coverage"] == 1.0 and covered[0].cues["coverage"] == 0.0
    assert covered[1].category == Category.LACKING_EVIDENCE  # judged: the castle is in no source
    assert len(judge(Partial(), dlg).turns[0].claims) == 1  # the seed (no coverage) judges Decompose's claims only


def test_a_turn_with_content_never_ends_with_no_claim_under_coverage():
    turn = "<<SILENT>> Lisbon has seven hills. Do you like hills?"
    dlg = dialogue(user("Tell me about Lisbon."), assistant(turn, DOC))
    with_coverage = judge(RuleEngine(), dlg, coverage=True).turns[0]
    assert [c.claim for c in with_coverage.claims] == ["<<SILENT>> Lisbon has seven hills."]  # not the question
    without = judge(RuleEngine(), dlg).turns[0]
    assert without.claims == [] and without.empty_decomposition


def test_uncovered_sentences_leave_pleasantries_and_covered_sentences_alone():
    assert uncovered_sentences("Sure, glad to help!", []) == []
    assert uncovered_sentences("Paris is in France. Thanks!", ["Paris is located in France."]) == []
    assert uncovered_sentences("Paris is in France. It has the Louvre museum.", ["Paris is in France."]) == [
        "It has the Louvre museum."]


def _rule(turn_threshold):
    model = LinearModel(features=CUES, coef=tuple((0.0,) * len(CUES) for _ in range(4)), intercept=(0.0,) * 4)
    return DecisionRule(evidence=model, turn_threshold=turn_threshold)


def test_the_turn_threshold_makes_only_the_most_doubtful_safe_claim_unsafe():
    threshold = _rule(0.3).turn_threshold
    assert most_doubtful(threshold, [0.1, 0.35, 0.32], ["VERIFIED"] * 3) == 1
    assert most_doubtful(threshold, [0.1, 0.25, None], ["VERIFIED", "VERIFIED", "ERROR"]) is None  # below the bar
    assert most_doubtful(threshold, [0.1, 0.6], ["VERIFIED", "LACKING EVIDENCE"]) is None  # already unsafe
    assert most_doubtful(_rule(None).turn_threshold, [0.9], ["VERIFIED"]) is None


def test_a_rule_without_a_turn_threshold_is_written_as_rules_were_before():
    assert "turn_threshold" not in _rule(None).model_dump()
    assert _rule(0.25).model_dump()["turn_threshold"] == 0.25


def test_the_deployed_judge_and_the_replay_flip_the_same_claim():
    # The evidence model: P(unsafe) grows with the share of content words no source holds (a 4-class softmax with
    # one slope), claim threshold 0.9, turn threshold 0.3.
    coef = [[0.0] * len(CUES) for _ in range(4)]
    coef[3][CUES.index("uncovered_all")] = 4.0
    evidence = LinearModel(features=CUES, coef=tuple(map(tuple, coef)), intercept=(0.0, 0.0, 0.0, 0.0),
                           threshold=0.9)
    rule = DecisionRule(evidence=evidence, turn_threshold=0.3).evidence_only().model_copy(
        update={"turn_threshold": 0.3})
    program = Vista.from_program()
    program.rule = rule
    turn = "Lisbon is the capital of Portugal. Lisbon has a famous blue tram."
    lm = rule_lm(RuleEngine())
    with dspy.context(lm=lm, adapter=JSONAdapter()):
        verdict = program(dialogue(user("Tell me about Lisbon."), assistant(turn, DOC))).turns[0]
    categories = [c.category for c in verdict.claims]
    assert categories == [Category.VERIFIED, Category.LACKING_EVIDENCE]
    assert "most doubtful" in verdict.claims[1].explanation and verdict.label == "hallucinated"
    # One sentence (the decision, what made it, and the words no source holds: "famous blue tram"); the chain in
    # fields: the rule alone said VERIFIED (P(unsafe) below its 0.9), the turn threshold 0.3 flipped it.
    flipped = verdict.claims[1]
    assert flipped.explanation == (
        f"LACKING EVIDENCE as the most doubtful claim of its turn (P(unsafe) {flipped.p_unsafe:.2f} reaches the turn "
        "threshold 0.30): its passages hold no 'famous', 'blue' and 'tram'; the closest passage, in the reference, "
        "\"Lisbon is the capital of Portugal.\", shares 1 of its 4 content words.")
    assert (flipped.rule_label, flipped.threshold, flipped.turn_threshold) == ("VERIFIED", 0.9, 0.3)
    assert 0.3 <= flipped.p_unsafe < 0.9 and flipped.judge_explanation is None  # the judge was not asked
    rows = [ClaimRow(c.claim, c.cues, None, None, "VERIFIED", None) for c in verdict.claims]
    replayed = replay([TurnRows("d", 1, "hallucinated", rows)], rule, judge=False)[0]
    assert replayed.categories == [c.value for c in categories] and replayed.label == "hallucinated"


def _turns():
    """Twelve constructed turns over four dialogues; an unsafe claim leaves most of its words uncovered."""
    turns = []
    for d in range(4):
        for t in range(3):
            unsafe = (d + t) % 2 == 0
            rows = [ClaimRow(f"claim {d}.{t}.{i}", {**dict.fromkeys(CUES, 0.0), "uncovered_all": 0.9 if (unsafe and i)
                                                    else 0.1, "length": 0.3}, {"VERIFIED": 0.3 if unsafe and i
                                                                               else 0.8, "UNVERIFIABLE": 0.0},
                             None, "LACKING EVIDENCE" if unsafe and i else "VERIFIED",
                             "LACKING EVIDENCE" if unsafe and i else "VERIFIED") for i in range(2)]
            turns.append(TurnRows(f"dlg{d}", 2 * t + 1, "hallucinated" if unsafe else "faithful", rows))
    return turns


def test_a_recorded_probe_reads_back_to_the_same_turns_and_holds_no_added_sentence(tmp_path):
    turns = _turns()
    added = ClaimRow("The turn's own sentence.", {**dict.fromkeys(CUES, 0.0), "coverage": 1.0}, None, None,
                     "VERIFIED", None)
    turns[0].rows.append(added)
    write_probe(tmp_path, turns, {f"dlg{d}": "train" if d < 2 else "dev" for d in range(4)}, {"command": "x"})
    read, half_of, meta = read_probe(tmp_path)
    assert "The turn's own sentence." not in (tmp_path / "turns.jsonl").read_text()
    assert [r.cues for t in read for r in t.rows] == [r.cues for t in turns for r in t.rows]
    assert half_of == {"dlg0": "train", "dlg1": "train", "dlg2": "dev", "dlg3": "dev"}
    assert meta["counts"]["added_by_coverage"] == 1 and meta["command"] == "x"


@pytest.mark.skipif(not record_exists(PROBE / "turns.jsonl"), reason="no recorded probe in benchmarks/probes/")
def test_the_committed_probe_replays_to_the_shipped_rule():
    from vista_dspy.compiled.files import compiled_dir
    from vista_dspy.optimize.rules.recipes import choose_turn_model_rule, choose_two_threshold_rule, with_cascade

    shipped = compiled_dir() / "local.json"
    if not shipped.is_file():
        pytest.skip("no compiled program for the local model ships")
    rule = json.loads(shipped.read_text())["vista"]["rule"]
    meta = json.loads(shipped.with_suffix(".meta.json").read_text())
    # A program picked from a study's front keeps its starting program's rule, and says how that was compiled.
    compiled = meta["settings"].get("rule_compiled", meta["settings"])
    turns, _, _ = read_probe(PROBE.parents[2] / compiled["probe"])  # the repository (an absolute path wins)
    choose = choose_turn_model_rule if compiled.get("recipe") == "turn-model" else choose_two_threshold_rule
    refitted, _ = choose(turns)
    if rule.get("cascade"):
        refitted = with_cascade(refitted, DecisionRule.model_validate(rule).cascade)
    refitted = refitted.model_dump(mode="json")
    # The rule refitted on the compile part's dialogues (issue 60) replays number for number; its record of how it was
    # fitted adds the dialogues it saw.
    assert {k: v for k, v in refitted.items() if k != "fitted"} == {k: v for k, v in rule.items() if k != "fitted"}
    assert rule["fitted"] == {**refitted["fitted"], "fitted_on": rule["fitted"]["fitted_on"],
                              "data": "suite:compile (vista-human)"}


def test_a_replayed_turn_with_content_but_no_claim_is_unknown_as_the_live_judge_labels_it():
    empty = TurnRows("d", 1, "faithful", [], empty=True)
    quiet = TurnRows("d", 3, "faithful", [])  # a greeting: nothing to claim
    assert [d.label for d in replay([empty, quiet], None)] == ["unknown", "faithful"]
    assert replay([empty], _rule(0.3), judge=False)[0].label == "unknown"

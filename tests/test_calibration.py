"""Label probabilities and calibration: reading a label's distribution from token log-probabilities, fitting a
calibration (the comparison kept from wave 3) on synthetic claims, judging with probabilities (and without), and
the claims optimizer's cross-fitted choice."""

import json
import math
from types import SimpleNamespace

import dspy
import pytest
from helpers import assistant, dialogue, user

from vista_dspy import Vista
from vista_dspy.data import load_dialogues
from vista_dspy.label_probabilities import label_distribution, label_distributions
from vista_dspy.lm.fake import FakeOpenAIServer, RuleEngine, rule_lm
from vista_dspy.lm.models import ModelConfig
from vista_dspy.optimize.calibration import decisions, fit
from vista_dspy.optimize.claim_probes import ClaimProbe

LABELS = ("VERIFIED", "UNVERIFIABLE")
DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."


def logprobs(*tokens):
    """OpenAI-style logprobs: each token a (text, {alternative: probability}) pair."""
    return {"content": [{"token": text, "logprob": 0.0,
                         "top_logprobs": [{"token": t, "logprob": math.log(p)} for t, p in (tops or {text: 1}).items()]}
                        for text, tops in tokens]}


# ---- reading distributions ---------------------------------------------------------------------------------------
def test_the_distribution_is_read_at_the_labels_first_token_and_normalised():
    answer = logprobs(('{"explanation": "x", ', None), ('"label": "', None),
                      ("VER", {"VER": 0.6, "UN": 0.2, " VER": 0.15, "Yes": 0.05}), ('IFIED"}', None))
    distribution = label_distribution(answer, "label", LABELS)
    assert distribution == pytest.approx({"VERIFIED": 0.75, "UNVERIFIABLE": 0.25})  # " VER" and "Yes" left out


def test_a_value_that_starts_inside_a_token_counts_alternatives_with_the_same_lead():
    answer = logprobs(('{"label":', None), (' "UN', {' "UN': 0.5, ' "VER': 0.3, " UN": 0.2}), ('VERIFIABLE"}', None))
    assert label_distribution(answer, "label", LABELS) == pytest.approx({"VERIFIED": 0.375, "UNVERIFIABLE": 0.625})


def test_provider_objects_chat_answers_batches_and_unreadable_positions():
    as_objects = SimpleNamespace(content=[
        SimpleNamespace(token="[[ ## label ## ]]\n", logprob=0.0, top_logprobs=[]),
        SimpleNamespace(token="VER", logprob=0.0, top_logprobs=[SimpleNamespace(token="VER", logprob=math.log(0.9)),
                                                                SimpleNamespace(token="UN", logprob=math.log(0.1))]),
        SimpleNamespace(token="IFIED", logprob=0.0, top_logprobs=[])])
    assert label_distribution(as_objects, "label", LABELS) == pytest.approx({"VERIFIED": 0.9, "UNVERIFIABLE": 0.1})
    batch = logprobs(('[{"claim": 1, "label": "', None), ("VER", {"VER": 0.9, "UN": 0.1}),
                     ('IFIED"}, {"claim": 2, "label": "', None), ("UN", {"UN": 0.7, "VER": 0.3}), ('VERIFIABLE"}]', None))
    found = label_distributions(batch, "label", LABELS)
    assert [d["VERIFIED"] for d in found] == pytest.approx([0.9, 0.3])
    ambiguous = logprobs(('"label": "', None), ("UN", {"UN": 1.0}), ('KNOWN"', None))
    assert label_distributions(ambiguous, "label", ("UNKNOWN", "UNVERIFIABLE")) == [None]
    assert label_distributions(None, "label", LABELS) == []


# ---- fitting ------------------------------------------------------------------------------------------------------
def synthetic_probes():
    """A model that verifies too easily (annotators verify only above 0.8) and says CONTRADICTED where annotators say
    OUT-OF-SCOPE; its own labels get 20 of 40 claims right."""
    probes = []
    for i in range(40):
        kind = ("VERIFIED", "LACKING EVIDENCE", "OUT-OF-SCOPE", "LACKING EVIDENCE")[i % 4]
        p = 0.85 + 0.003 * i if kind == "VERIFIED" else 0.55 + 0.005 * i if i % 4 == 1 else 0.1
        categories = ({"CONTRADICTED": 0.5, "OUT-OF-SCOPE": 0.35, "LACKING EVIDENCE": 0.1, "ABSTENTION": 0.05}
                      if kind == "OUT-OF-SCOPE" else
                      {"LACKING EVIDENCE": 0.6, "CONTRADICTED": 0.3, "OUT-OF-SCOPE": 0.05, "ABSTENTION": 0.05})
        raw = "VERIFIED" if p >= 0.5 else max(categories, key=categories.get)
        probes.append(ClaimProbe(dialogue_id=f"d{i // 4}", turn_index=1, position=i % 4, claim=f"claim {i}",
                                 gold=kind, raw=raw, verify={"VERIFIED": p, "UNVERIFIABLE": 1 - p},
                                 categorize=categories))
    return probes


def test_fitting_on_synthetic_probabilities_finds_the_threshold_and_the_offsets():
    probes = synthetic_probes()
    unverified_top = max(p.verify["VERIFIED"] for p in probes if p.gold != "VERIFIED")
    verified_bottom = min(p.verify["VERIFIED"] for p in probes if p.gold == "VERIFIED")
    assert sum(p.raw == p.gold for p in probes) == 20
    calibration = fit(probes, "accuracy")
    assert unverified_top < calibration.verify_threshold <= verified_bottom
    offsets = calibration.categorize_offsets
    assert offsets.get("OUT-OF-SCOPE", 0) - offsets.get("CONTRADICTED", 0) > math.log(0.5 / 0.35)
    assert decisions(probes, calibration) == [p.gold for p in probes]
    likelihood = fit(probes, "likelihood")
    right = sum(d == p.gold for d, p in zip(decisions(probes, likelihood), probes))
    assert right > sum(p.raw == p.gold for p in probes)


def test_the_turns_objective_puts_turns_before_claims():
    """A faithful turn of five safe claims the model doubts a little, and a hallucinated one whose unsafe claim it
    doubts less than its four safe ones. Calling everything safe wins 9 of 10 claims and loses the hallucinated
    turn; only a threshold between 0.2 and 0.3 gets both turns right (6 claims)."""
    def probe(turn, i, gold, p):
        return ClaimProbe(dialogue_id="d", turn_index=turn, position=i, claim=f"c{turn}.{i}", gold=gold,
                          raw="VERIFIED" if p >= 0.5 else "LACKING EVIDENCE",
                          verify={"VERIFIED": p, "UNVERIFIABLE": 1 - p},
                          categorize={"LACKING EVIDENCE": 0.9, "OUT-OF-SCOPE": 0.05, "ABSTENTION": 0.03,
                                      "CONTRADICTED": 0.02})
    probes = [probe(1, i, "VERIFIED", 0.3) for i in range(5)]
    probes += [probe(2, 0, "LACKING EVIDENCE", 0.2)] + [probe(2, i, "VERIFIED", 0.1) for i in range(1, 5)]
    on_claims, on_turns = decisions(probes, fit(probes, "accuracy")), decisions(probes, fit(probes, "turns"))
    assert sum(d == p.gold for d, p in zip(on_claims, probes)) == 9 and on_claims[5] == "VERIFIED"
    assert on_turns[:6] == ["VERIFIED"] * 5 + ["LACKING EVIDENCE"]  # both turns right
    assert 0.2 < fit(probes, "turns").verify_threshold <= 0.3


def test_fitting_without_probabilities_is_no_calibration():
    bare = [p.model_copy(update={"verify": None}) for p in synthetic_probes()]
    assert fit(bare).identity and decisions(bare, fit(bare)) == [p.raw for p in bare]


# ---- judging with probabilities ----------------------------------------------------------------------------------
MARKED = dialogue(user("Tell me about Lisbon."),
                  assistant("Lisbon is the capital of Portugal. Lisbon has ten hills <<PV=35>>.", DOC))


def judge_over_http(dlg, model="hosted_vllm/fake", logprobs=True, **options):
    with FakeOpenAIServer(logprobs=logprobs) as server:
        lm = ModelConfig(model=model, api_base=server.url, num_retries=0, cache=False).build()
        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            return Vista.from_program(None, **options)(dlg)


@pytest.mark.parametrize("model", ["hosted_vllm/fake", "openai/fake"])  # DSPy's native engine, and litellm
def test_probabilities_are_parsed_from_the_endpoints_log_probabilities(model):
    verdict = judge_over_http(MARKED, model)
    supported, marked = verdict.turns[0].claims
    assert supported.probabilities.verify == pytest.approx({"VERIFIED": 0.9, "UNVERIFIABLE": 0.1})
    assert marked.probabilities.verify == pytest.approx({"VERIFIED": 0.35, "UNVERIFIABLE": 0.65})
    assert marked.probabilities.categorize["LACKING EVIDENCE"] == pytest.approx(0.7)
    assert supported.raw_label is None  # no rule: the category is the model's own


@pytest.mark.parametrize("mode", ["batched", "joint"])
def test_a_batched_answer_gives_each_claim_its_own_distribution(mode):
    verdict = judge_over_http(MARKED, claim_calls=mode)
    supported, marked = verdict.turns[0].claims
    assert supported.probabilities.verify["VERIFIED"] == pytest.approx(0.9)
    assert marked.probabilities.verify["VERIFIED"] == pytest.approx(0.35)
    assert marked.probabilities.categorize["LACKING EVIDENCE"] == pytest.approx(0.7)


def test_an_endpoint_without_log_probabilities_leaves_judging_unchanged():
    with_them = judge_over_http(MARKED)
    without = judge_over_http(MARKED, logprobs=False)
    assert [c.category for c in without.turns[0].claims] == [c.category for c in with_them.turns[0].claims]
    assert [c.probabilities for c in without.turns[0].claims] == [None, None]


# ---- choosing on claims ------------------------------------------------------------------------------------------
def test_cross_fitting_never_shows_a_dialogue_its_own_claims_as_demos(monkeypatch, dev_file):
    from vista_dspy.optimize import choosing

    train = [d for d in load_dialogues(dev_file) if d.judged_turns][:8]
    owner = {c.text: d.id for d in train for i in d.judged_turns for c in (d.turns[i].gold.claims or [])}
    turns = {d.turns[i].text: d.id for d in train for i in d.judged_turns}
    seen = []
    probe, matches = choosing.probe, choosing._matches

    def recording_probe(program, dialogues, **kwargs):
        judged = {d.id for d in dialogues}
        shown = {owner.get(demo.get("claim")) for name in ("verify", "categorize")
                 for demo in getattr(program, name).demos}
        seen.append((judged, shown))
        return probe(program, dialogues, **kwargs)

    def recording_matches(program, dialogues, meter, *args):
        seen.append(({d.id for d in dialogues}, {turns.get(demo.get("turn")) for demo in program.decompose.demos}))
        return matches(program, dialogues, meter, *args)

    monkeypatch.setattr(choosing, "probe", recording_probe)
    monkeypatch.setattr(choosing, "_matches", recording_matches)
    budgets = {"decompose": 3, "verify": 3, "categorize": 3}
    with dspy.context(lm=rule_lm(RuleEngine()), adapter=dspy.JSONAdapter()):
        program, record = choosing.choose_on_claims(Vista.from_program(None), train, budgets, folds=2)
    cross = [(judged, shown) for judged, shown in seen if shown - {None}]
    assert len(cross) >= 4  # two folds of Verify / Categorize demos, two of Decompose demos (and batched)
    for judged, shown in cross:
        assert not judged & shown
    assert record["variants"]["base"]["claims"] == sum(len(d.turns[i].gold.claims) for d in train
                                                       for i in d.judged_turns)
    assert set(record["variants"]) == {"base", "pool"}


def test_the_claims_optimizer_chooses_demos_and_the_judging_mode(tmp_path, dev_file):
    from vista_dspy.optimize.compile import compile_program

    dialogues = [d for d in load_dialogues(dev_file) if d.judged_turns]
    with FakeOpenAIServer() as server:
        lm = ModelConfig(model="hosted_vllm/fake", api_base=server.url, num_retries=0, cache=False).build()
        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            result = compile_program(dialogues[:10], dialogues[10:13], optimizer="claims",
                                     budgets={"decompose": 2, "verify": 2, "categorize": 4}, alpha=1.0)
    choice = result.meta.choice
    # What the fake server's deterministic answers choose (computed once, pinned): the seed's demos kept, batched
    # judging.
    assert (choice["chosen"], sorted(choice["variants"]), choice["mode"]["chosen"]) == ("base", ["base", "pool"],
                                                                                           "batched")
    probes = choice["variants"]["base"]["claims"]
    assert probes == sum(len(d.turns[i].gold.claims) for d in dialogues[:10] for i in d.judged_turns)
    assert result.program.rule is None  # deciding with probabilities and evidence is the rule optimizer's
    assert (result.meta.gate["claims"]["items"], result.meta.gate["turns"]["items"]) == (16, 3)
    assert json.loads(json.dumps(result.meta.model_dump()))  # the meta is plain JSON


def test_label_probabilities_that_cannot_be_used_are_counted_per_stage_and_in_the_summary():
    """A batched answer whose probabilities do not line up with its items loses them all (counted); a single
    answer whose label token is ambiguous or missing is counted by the attempt that read it (``unread``)."""
    from vista_dspy import batching
    from vista_dspy.schema import DialogueVerdict, Usage
    from vista_dspy.scoring import summarize
    from vista_dspy.stages import StageCall, StageResult, add_usage

    def item(number):
        return dspy.Prediction(claim=number, label="VERIFIED", explanation="")

    batched = StageResult(dspy.Prediction(verdicts=[item(1), item(2)]), None,
                          distributions=[{"VERIFIED": 0.9, "UNVERIFIABLE": 0.1}])  # one for two items
    usage = Usage()
    steps = batching.per_item(batched, "label", [StageCall("verify", None, {}) for _ in range(2)], usage)
    with pytest.raises(StopIteration) as done:
        next(steps)
    assert [r.distributions for r in done.value.value] == [[], []]
    add_usage(usage, "categorize", StageResult(dspy.Prediction(category="ABSTENTION"), None, unread=1))
    assert usage.unread_probabilities == {"verify": 1, "categorize": 1}
    verdict = DialogueVerdict(dialogue_id="d", turns=[], score=None, usage=usage)
    assert summarize([verdict, verdict])["unread_probabilities"] == 4

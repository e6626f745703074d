"""Label probabilities: reading a label's distribution from token log-probabilities, judging with probabilities
(and without), and the answers whose probabilities cannot be used, counted."""

import math
from types import SimpleNamespace

import dspy
import pytest
from helpers import assistant, dialogue, user

from vista_dspy import Vista
from vista_dspy.label_probabilities import label_distribution, label_distributions
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig

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

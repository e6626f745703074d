"""VISTA as the metric of another DSPy program, with the fake server as both the chatbot's LM and the judge's."""

import re
from pathlib import Path

import dspy
import pytest

from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig
from vista_dspy.run.judge_metric import JudgeEndpointDown, JudgeFailed, VistaMetric

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."


class Chatbot(dspy.Module):
    def __init__(self) -> None:
        super().__init__()
        self.respond = dspy.Predict("history, document -> response")

    def forward(self, history, document):
        return self.respond(history=history, document=document)


def lm(server, model):
    return ModelConfig(model=f"hosted_vllm/{model}", api_base=server.url, num_retries=0, cache=False).build()


def example(history="user: Tell me about Lisbon.", document=DOC):
    return dspy.Example(history=history, document=document).with_inputs("history", "document")


def test_the_score_and_the_pass_fail_form_on_known_verdicts():
    with FakeOpenAIServer() as server:
        metric = VistaMetric(lm(server, "judge"))
        half = dspy.Prediction(response="Lisbon is the capital of Portugal. Lisbon has ten hills.")
        whole = dspy.Prediction(response="Lisbon is the capital of Portugal.")
        assert metric(example(), half).score == pytest.approx(0.5) and float(metric(example(), half)) == 0.5
        assert metric(example(), whole).score == 1.0
        assert bool(metric(example(), half, trace=[])) is False and bool(metric(example(), whole, trace=[])) is True
        metric.threshold = 0.5
        assert bool(metric(example(), half, trace=[])) is True
        # a response that makes no claim is not rewarded, unless the paper's reading is asked for
        nothing = dspy.Prediction(response="How can I help?")
        assert metric(example(), nothing).score == 0.0 and not metric(example(), nothing, trace=[])
        assert "The response makes no claim" in metric(example(), nothing).feedback
        metric.empty_score = 1.0
        assert metric(example(), nothing).score == 1.0


def test_the_feedback_form_names_every_unsafe_claim_with_its_reason():
    with FakeOpenAIServer() as server:
        metric = VistaMetric(lm(server, "judge"))
        prediction = dspy.Prediction(response="Lisbon has ten hills. Lisbon was never a capital. Lisbon is the "
                                              "capital of Portugal.")
        result = metric(example(), prediction, None, "respond", None)
        assert metric.feedback(example(), prediction) == result  # the former name, kept
    assert result.score == pytest.approx(1 / 3)
    # each with where the response said it (``ClaimVerdict.spans``)
    assert ('- LACKING EVIDENCE: "Lisbon has ten hills." (said as "Lisbon has ten hills" at chars 0-20 of the '
            'response) -- rule for LACKING EVIDENCE') in result.feedback
    assert ('- CONTRADICTED: "Lisbon was never a capital." (said as "Lisbon was never a capital" at chars 22-48 of '
            'the response) -- rule for CONTRADICTED') in result.feedback
    assert "2 of 3 claims" in result.feedback and "The reference says: Lisbon is the capital" in result.feedback


def test_earlier_turns_are_the_knowledge_store_and_a_history_may_be_messages():
    with FakeOpenAIServer() as server:
        metric = VistaMetric(lm(server, "judge"))
        said_before = dspy.History(messages=[{"history": "Hi", "response": "Lisbon has ten hills."}])
        prediction = dspy.Prediction(response="Lisbon has ten hills.")
        assert metric(example(history=said_before), prediction).score == 1.0  # common ground from the earlier turn
        assert metric(example(history=[{"role": "user", "content": "Hi"}]), prediction).score == 0.0
        dialogue = metric.dialogue(example(history=said_before), prediction)
        assert [t.role for t in dialogue.turns] == ["user", "assistant", "assistant"]
        assert dialogue.turns[1].grounding.kind == "background" and dialogue.turns[2].grounding.document == DOC


def test_evaluate_with_threads_gives_the_scores_of_one_thread_and_a_judged_turn_is_not_asked_again():
    devset = [example(history=f"user: Question {i}?") for i in range(6)]
    with FakeOpenAIServer() as server:
        program = Chatbot()
        program.set_lm(lm(server, "student"))
        scores = {}
        for threads in (1, 4):
            metric = VistaMetric(lm(server, "judge"))
            result = dspy.Evaluate(devset=devset, metric=metric, num_threads=threads, display_progress=False)(program)
            scores[threads] = [float(score) for _, _, score in result.results]
            if threads == 1:
                asked = len(server.models)
                again = dspy.Evaluate(devset=devset, metric=metric, num_threads=2, display_progress=False)(program)
                judge_calls = [s for m, s in server.models[asked:] if m == "judge"]
                assert judge_calls == [] and [float(s) for _, _, s in again.results] == scores[1]
    assert scores[1] == scores[4] == [1.0] * 6
    assert metric.usage.by_stage["decompose"].calls == 6 and metric.usage.by_stage["verify"].calls == 6


def test_the_judge_and_the_student_never_share_an_lm():
    with FakeOpenAIServer() as server:
        program = Chatbot()
        metric = VistaMetric(lm(server, "judge"))
        with dspy.context(lm=lm(server, "student")):  # the student's LM everywhere, as an optimizer sets it
            dspy.Evaluate(devset=[example(), example(history="user: more?")], metric=metric, num_threads=2,
                          display_progress=False)(program)
    assert {stage for model, stage in server.models if model == "student"} == {"chat"}
    assert {stage for model, stage in server.models if model == "judge"} >= {"decompose", "verify"}
    assert "chat" not in {stage for model, stage in server.models if model == "judge"}


def test_bootstrap_few_shot_compiles_a_toy_chatbot_against_the_metric():
    trainset = [example(history=f"user: Tell me something, {i}.") for i in range(3)]
    trainset += [example(history="user: <<LIE>> and more.")]  # its answer invents a claim: not a demo
    with FakeOpenAIServer() as server:
        metric = VistaMetric(lm(server, "judge"))
        with dspy.context(lm=lm(server, "student")):
            compiled = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=4, max_labeled_demos=0
                                             ).compile(Chatbot(), trainset=trainset)
    demos = compiled.respond.demos
    assert len(demos) == 3 and all("<<LIE>>" not in d.history for d in demos)


def test_a_malformed_judge_answer_is_reported_not_scored():
    with FakeOpenAIServer() as server:
        metric = VistaMetric(lm(server, "judge"), parse_retries=1)
        broken = dspy.Prediction(response="<<BAD-DECOMPOSE>> Lisbon is old.")
        with pytest.raises(JudgeFailed, match="no claim of the response could be judged: decompose failed"):
            metric(example(), broken)
        partly = dspy.Prediction(response="Lisbon is the capital of Portugal. <<BAD-VERIFY>> Lisbon is old.")
        judged = metric(example(), partly, trace=[])  # the unjudged claim counts as not safe, and is said
        silent = dspy.Prediction(response="<<SILENT>> Lisbon is the capital of Portugal.")
        with pytest.raises(JudgeFailed, match="no claim of the response could be judged: Decompose found no claim"):
            metric(example(), silent)  # content, but no claim: a failed decomposition, not a faithful answer
    assert (judged.score, judged.passed) == (0.5, False)
    assert "(1 claims could not be judged: they count as not supported.)" in judged.feedback
    assert len(metric.failures) == 3 and "decompose failed" in metric.failures[0]
    assert "AdapterParseError" in metric.failures[1] and "Decompose found no claim" in metric.failures[2]


def test_an_endpoint_outage_stops_the_optimization():
    with FakeOpenAIServer(down_after=2) as server:
        metric = VistaMetric(lm(server, "judge"), stop_after=1)
        with pytest.raises(JudgeEndpointDown, match="the model endpoint failed 1 calls in a row"):
            for i in range(3):
                metric(example(history=f"user: {i}"), dspy.Prediction(response="Lisbon is the capital of Portugal."))


def test_an_outage_stops_dspy_evaluate_instead_of_scoring_every_example_as_an_error():
    devset = [example(history=f"user: Question {i}?") for i in range(8)]
    with FakeOpenAIServer() as student, FakeOpenAIServer(down_after=3) as judge:
        program = Chatbot()
        program.set_lm(lm(student, "student"))
        metric = VistaMetric(lm(judge, "judge"), stop_after=1)
        with pytest.raises(JudgeEndpointDown, match="the model endpoint failed"):
            dspy.Evaluate(devset=devset, metric=metric, num_threads=2, display_progress=False)(program)


def test_the_example_chatbot_is_evaluated_improved_and_evaluated_again(capsys, dev_file):
    """examples/optimize_chatbot.py end to end against the fake server, whose chatbot answers with the document's
    first sentence (every claim VERIFIED): the bootstrapped chatbot answers too (its compiled copy gets the chatbot's
    LM back), both evaluations score every held-out turn 1.0, and both training turns become demos."""
    import runpy

    example_module = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "optimize_chatbot.py"))
    with FakeOpenAIServer() as server:
        code = example_module["main"](["--model", "hosted_vllm/student", "--judge", "hosted_vllm/judge",
                                       "--api-base", server.url, "--dialogues", "2", "--data", str(dev_file)])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "on 2 held-out turns: 1.000 before, 1.000 after (2 demos bootstrapped on 2 turns)" in out.out
    assert {model for model, _ in server.models} == {"student", "judge"}


def test_gepa_takes_the_metric_itself_and_its_reflection_reads_vista_s_feedback():
    """dspy.GEPA(metric=VistaMetric(...)) constructs, and a short run completes on the fake server: the chatbot
    invents a claim for the <<LIE>> examples, and the reflection prompt quotes VISTA's verdict on it."""
    trainset = [example(history="user: <<LIE>> Tell me more."), example(history="user: Hi.")]
    valset = [example(history="user: <<LIE>> And then?"), example(history="user: Hello.")]
    with FakeOpenAIServer() as server:
        metric = VistaMetric(lm(server, "judge"))
        optimizer = dspy.GEPA(metric=metric, reflection_lm=lm(server, "reflect"), max_metric_calls=12,
                              reflection_minibatch_size=2, num_threads=1, seed=0)
        with dspy.context(lm=lm(server, "student")):
            optimized = optimizer.compile(Chatbot(), trainset=trainset, valset=valset)
        reflections = [prompt for (model, _), prompt in zip(server.models, server.prompts) if model == "reflect"]
    assert isinstance(optimized, Chatbot) and reflections
    # (the reflection prompt holds the feedback as a JSON string: its quotes escaped)
    assert re.search(r'LACKING EVIDENCE: \\"The city was founded in 1850.\\" \(said as \\"The city was founded in '
                     r'1850\\" at chars \d+-\d+ of the response\) -- rule for LACKING EVIDENCE', reflections[0])


def test_the_example_chatbot_is_optimized_with_gepa(capsys, dev_file):
    """examples/optimize_chatbot.py --optimizer gepa end to end against the fake server: every answer of the fake
    chatbot is safe, so GEPA, within its budget, finds nothing to reflect on and keeps the instruction; the result
    is evaluated on the held-out turns."""
    import runpy

    example_module = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "optimize_chatbot.py"))
    with FakeOpenAIServer() as server:
        code = example_module["main"](["--model", "hosted_vllm/student", "--judge", "hosted_vllm/judge",
                                       "--api-base", server.url, "--dialogues", "2", "--data", str(dev_file),
                                       "--optimizer", "gepa", "--budget", "6"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "on 2 held-out turns: 1.000 before, 1.000 after (instruction kept by GEPA on 2 turns)" in out.out
    assert {model for model, _ in server.models} == {"student", "judge"}


def test_a_document_may_be_a_list_of_retrieved_passages():
    with FakeOpenAIServer() as server:
        metric = VistaMetric(lm(server, "judge"))
        passages = example(document=["Lisbon is the capital of Portugal.", "Lisbon has seven hills."])
        result = metric(passages, dspy.Prediction(response="Lisbon has seven hills. Lisbon has ten bridges."))
        turn = metric.turn(passages, dspy.Prediction(response="Lisbon has seven hills. Lisbon has ten bridges."))
    assert result.score == 0.5 and turn.passages == ["Lisbon is the capital of Portugal.", "Lisbon has seven hills."]
    assert "The reference says: [1] Lisbon is the capital of Portugal. [2] Lisbon has seven hills." in result.feedback


def test_a_history_s_system_message_seeds_the_knowledge_store_and_its_tool_messages_are_no_turns():
    history = [{"role": "system", "content": "Lisbon has ten bridges."}, {"role": "user", "content": "Bridges?"},
               {"role": "tool", "content": "search results"}]
    with FakeOpenAIServer() as server:
        metric = VistaMetric(lm(server, "judge"))
        prediction = dspy.Prediction(response="Lisbon has ten bridges.")
        assert metric(example(history=history), prediction).score == 1.0  # from the background, not the document
        dialogue = metric.dialogue(example(history=history), prediction)
    assert dialogue.background == ["Lisbon has ten bridges."]
    assert [t.role for t in dialogue.turns] == ["user", "assistant"]

"""VISTA as a training reward (``VistaReward``) and as DPO pairs (``vista pairs``), judged by the rule-based fake LM:
Verify says VERIFIED iff the claim is in the document or the knowledge store; Categorize says ABSTENTION for "don't
know", OUT-OF-SCOPE for "I love", CONTRADICTED for "not"/"never", else LACKING EVIDENCE; Decompose splits sentences."""

import asyncio
import json
import logging

import pytest
from typer.testing import CliRunner

from vista_dspy import VistaReward
from vista_dspy.cli import app
from vista_dspy.lm.fake import FakeOpenAIServer, RuleEngine
from vista_dspy.lm.models import ModelConfig
from vista_dspy.run.reward_records import RewardVerdict
from vista_dspy.run.reward_shapes import SHAPES

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."
FAITHFUL = "Lisbon is the capital of Portugal. Lisbon has seven hills."
REFUSAL = "I don't know."
OPINION = "I love Lisbon."
HALLUCINATED = "Lisbon is the capital of Portugal. Lisbon has ten hills."
# A history with two earlier assistant turns: the prompt's common ground.
HISTORY = [{"role": "user", "content": "Tell me about Lisbon."},
           {"role": "assistant", "content": "Lisbon has a tram."},
           {"role": "user", "content": "And what else?"},
           {"role": "assistant", "content": "Lisbon has a castle."},
           {"role": "user", "content": "More?"}]
SAID_BEFORE = ("Lisbon has a tram.", "Lisbon has a castle.")


def lm(server):
    return ModelConfig(model="hosted_vllm/judge", api_base=server.url, num_retries=0, cache=False).build()


def conversational(texts):
    return [[{"role": "assistant", "content": text}] for text in texts]


def test_a_trl_call_with_plain_strings_gives_one_reward_per_completion():
    with FakeOpenAIServer() as server:
        rewards = VistaReward(lm(server))(["user: Tell me about Lisbon."] * 2, [FAITHFUL, HALLUCINATED],
                                          document=[DOC, DOC])
    # 2 VERIFIED of max(2, 3); 1 LACKING EVIDENCE of max(2, 3), negative.
    assert rewards == pytest.approx([2 / 3, -1 / 3])


def test_the_conversational_form_and_extra_columns_give_the_same_rewards_as_plain_strings():
    with FakeOpenAIServer() as server:
        plain = VistaReward(lm(server))(["Tell me about Lisbon."] * 3, [FAITHFUL, REFUSAL, HALLUCINATED],
                                        document=[DOC] * 3)
        chat = VistaReward(lm(server))([[{"role": "user", "content": "Tell me about Lisbon."}]] * 3,
                                       conversational([FAITHFUL, REFUSAL, HALLUCINATED]),
                                       retrieved_contexts=[["Lisbon is the capital of Portugal.",
                                                            "Lisbon has seven hills."]] * 3,
                                       completion_ids=[[1, 2]] * 3, trainer_state=None, answer=["x"] * 3)
    assert chat == plain


@pytest.mark.parametrize("columns", [{}, {"reference": [DOC]}])
def test_a_batch_without_a_passage_column_is_refused_naming_the_columns_it_reads(columns):
    with FakeOpenAIServer() as server, pytest.raises(
            ValueError, match="retrieved_context, retrieved_contexts, context, document"):
        VistaReward(lm(server))(["Hi"], [FAITHFUL], **columns)


def test_a_passage_column_of_the_wrong_length_is_refused_naming_it():
    with FakeOpenAIServer() as server, pytest.raises(
            ValueError, match="column 'context': expected one value per completion"):
        VistaReward(lm(server))(["Hi", "Hi"], [FAITHFUL, REFUSAL], context=DOC)


def test_saying_nothing_refusing_or_opining_never_outscores_a_faithful_informative_answer():
    completions = [FAITHFUL, REFUSAL, OPINION, "", HALLUCINATED]
    with FakeOpenAIServer() as server:
        default = VistaReward(lm(server))(["Tell me about Lisbon."] * 5, completions, document=[DOC] * 5)
        score = VistaReward(lm(server), shape="score")(["Tell me about Lisbon."] * 5, completions,
                                                        document=[DOC] * 5)
    faithful, refusal, opinion, silence, hallucinated = default
    assert faithful > refusal == opinion > silence > hallucinated
    assert (faithful, refusal, silence, hallucinated) == pytest.approx((2 / 3, 0.1 / 3, 0.0, -1 / 3))
    # VISTA's plain score cannot tell them apart: that is why it is not the default.
    assert score == [1.0, 1.0, 1.0, 1.0, 0.5]


def test_a_weighting_under_which_a_refusal_could_win_is_refused():
    with FakeOpenAIServer() as server, pytest.raises(
            ValueError, match="refusal or an answer of opinions could outscore"):
        VistaReward(lm(server), uninformative_credit=0.5, min_claims=2)


def test_the_shapes_on_one_batch():
    completions = [FAITHFUL, HALLUCINATED, "Lisbon was never a capital. Lisbon has ten hills."]
    with FakeOpenAIServer() as server:
        shaped = {shape: VistaReward(lm(server), shape=shape)(["Hi"] * 3, completions, document=[DOC] * 3)
                  for shape in ("faithful", "penalty")}
    assert shaped == {"faithful": [1.0, 0.0, 0.0], "penalty": [0.0, -1.0, -2.0]}


def test_the_prompt_s_common_ground_is_decomposed_once_for_all_its_completions():
    completions = [FAITHFUL, REFUSAL, HALLUCINATED, "Lisbon has a tram. Lisbon has seven hills."]
    rewards = {}
    for share in (True, False):
        engine = RuleEngine()
        with FakeOpenAIServer(engine) as server:
            reward = VistaReward(lm(server), share_prompt_work=share)
            rewards[share] = reward([HISTORY] * 4, conversational(completions), document=[DOC] * 4)
        asked = [inputs["turn"] for inputs in engine.inputs_of("decompose")]
        assert [asked.count(text) for text in SAID_BEFORE] == ([1, 1] if share else [4, 4])
        if share:
            assert (reward.stats.prompt_work, reward.stats.prompt_calls, reward.stats.calls_saved) == (1, 2, 6)
    assert rewards[True] == rewards[False]
    assert rewards[True][3] == pytest.approx(2 / 3)  # "Lisbon has a tram." is common ground: verified


def test_two_calls_give_the_same_rewards_and_the_second_asks_the_lm_nothing():
    prompts, completions = [HISTORY] * 3, conversational([FAITHFUL, REFUSAL, HALLUCINATED])
    engine = RuleEngine()
    with FakeOpenAIServer(engine) as server:
        reward = VistaReward(lm(server))
        first = reward(prompts, completions, document=[DOC] * 3)
        asked = len(engine.requests)
        second = reward(prompts, completions, document=[DOC] * 3)
        assert len(engine.requests) == asked
        fresh = VistaReward(lm(server))(prompts, completions, document=[DOC] * 3)
    assert first == second == fresh
    assert reward.stats.cached == 3


def test_a_completion_whose_claim_cannot_be_judged_gets_none_and_its_reason_is_logged(caplog):
    broken = "Lisbon is the capital of Portugal. Lisbon has <<BAD-VERIFY>> hills."
    with FakeOpenAIServer() as server, caplog.at_level(logging.WARNING, logger="vista_dspy.run.reward"):
        reward = VistaReward(lm(server))
        rewards = reward(["Hi"] * 2, [FAITHFUL, broken], document=[DOC] * 2)
    assert rewards == [pytest.approx(2 / 3), None]
    assert "could not be judged" in reward.last_batch[1].reason
    assert "could not judge 1 of 2 completions" in caplog.text


def test_an_endpoint_that_fails_gives_none_for_every_completion_never_a_score(caplog):
    with FakeOpenAIServer(faults={"500": 1.0}) as server, caplog.at_level(logging.WARNING):
        reward = VistaReward(lm(server), concurrency=2)
        rewards = reward([HISTORY] * 3, conversational([FAITHFUL, REFUSAL, "I love Lisbon."]), document=[DOC] * 3)
    assert rewards == [None, None, None]
    assert len(reward.last_batch) == 3 and all("injected 500" in v.reason for v in reward.last_batch)
    assert reward.stats.unjudged == 3 and "could not judge 3 of 3 completions" in caplog.text


def test_stop_after_0_never_stops_as_in_vista_evaluate_and_failed_calls_still_give_none():
    with FakeOpenAIServer(faults={"500": 1.0}) as server:
        reward = VistaReward(lm(server), concurrency=1, stop_after=0)
        rewards = reward(["Hi"] * 3, [FAITHFUL, REFUSAL, HALLUCINATED], document=[DOC] * 3)
    assert rewards == [None] * 3
    reasons = [v.reason for v in reward.last_batch]
    assert len(reasons) == 3 and not any("endpoint is down" in reason for reason in reasons)


@pytest.mark.parametrize("stop_after", [None, -1])
def test_a_stop_after_other_than_a_count_is_refused_naming_0_for_never(stop_after):
    with FakeOpenAIServer() as server, pytest.raises(ValueError, match="0 for never stopping"):
        VistaReward(lm(server), stop_after=stop_after)


def test_a_passage_cell_that_is_not_text_is_refused_naming_the_column_and_completion():
    with FakeOpenAIServer() as server, pytest.raises(
            ValueError, match="column 'document', completion 1: expected a text or a list of texts, not int 5"):
        VistaReward(lm(server))(["Hi", "Hi"], [FAITHFUL, REFUSAL], document=[DOC, 5])


def test_a_completion_too_long_to_be_a_turn_gets_none_with_why_and_the_rest_are_judged():
    from vista_dspy.schema import MAX_TEXT

    with FakeOpenAIServer() as server:
        reward = VistaReward(lm(server))
        rewards = reward(["Hi"] * 2, [FAITHFUL, "x" * (MAX_TEXT + 1)], document=[DOC] * 2)
    assert rewards == [pytest.approx(2 / 3), None]
    assert reward.last_batch[1].reason.startswith("not a judgeable turn")


def test_the_reward_module_still_exports_what_it_did_before_the_split():
    from vista_dspy.run import reward, reward_records, reward_shapes, trainer_args

    assert (reward.SHAPES, reward.RewardVerdict, reward.RewardStats, reward.completion_text) == (
        reward_shapes.SHAPES, reward_records.RewardVerdict, reward_records.RewardStats, trainer_args.completion_text)
    assert {"BACKGROUND_COLUMNS", "DEFAULT_SHAPE", "PASSAGE_COLUMNS", "Tally", "Weights", "message_text",
            "VistaReward"} <= set(reward.__all__)


def test_an_endpoint_that_goes_down_mid_batch_leaves_the_rest_unjudged_not_scored():
    with FakeOpenAIServer(faults={"500": 1.0}) as server:
        reward = VistaReward(lm(server), concurrency=1, stop_after=2)
        rewards = reward(["Hi"] * 4, [FAITHFUL, REFUSAL, OPINION, HALLUCINATED], document=[DOC] * 4)
    assert rewards == [None] * 4
    assert sum("endpoint is down" in v.reason for v in reward.last_batch) >= 2


def test_a_history_that_cannot_be_decomposed_leaves_its_completions_unjudged():
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Lisbon <<BAD-DECOMPOSE>>."},
               {"role": "user", "content": "More?"}]
    with FakeOpenAIServer() as server:
        reward = VistaReward(lm(server))
        rewards = reward([history, HISTORY], conversational([FAITHFUL, FAITHFUL]), document=[DOC] * 2)
    assert rewards == [None, pytest.approx(2 / 3)]
    assert reward.last_batch[0].reason.startswith("the history's turn 1 could not be decomposed")


def test_the_per_claim_breakdown_of_a_batch_reaches_the_callback_and_the_rows():
    seen = []
    with FakeOpenAIServer() as server:
        reward = VistaReward(lm(server), on_batch=seen.append)
        reward(["Hi"] * 2, [FAITHFUL, HALLUCINATED], document=[DOC] * 2)
    assert seen == [reward.last_batch]
    assert [(row["index"], row["category"]) for row in reward.claim_rows()] == [
        (0, "VERIFIED"), (0, "VERIFIED"), (1, "VERIFIED"), (1, "LACKING EVIDENCE")]
    # each row says where the completion said its claim: "Lisbon has ten hills" is HALLUCINATED[35:55]
    assert [row["spans"] for row in reward.claim_rows()] == [[[0, 33]], [[35, 57]], [[0, 33]], [[35, 55]]]
    assert seen[0][1].label == "hallucinated"


def test_the_evidence_tier_asks_only_decompose():
    engine = RuleEngine()
    with FakeOpenAIServer(engine) as server:
        rewards = VistaReward(lm(server), system="evidence")(["Hi"] * 2, [FAITHFUL, REFUSAL], document=[DOC] * 2)
    assert {stage for stage, _ in engine.requests} == {"decompose"}
    assert len(rewards) == 2 and all(isinstance(r, float) for r in rewards)


def test_completions_are_judged_concurrently_within_the_request_bound():
    completions = [f"Lisbon has {n} hills." for n in range(8)]
    with FakeOpenAIServer(latency=0.05) as server:
        VistaReward(lm(server), concurrency=4)(["Hi"] * 8, completions, document=[DOC] * 8)
        assert server.max_in_flight == 4


def test_a_caller_inside_an_event_loop_is_judged_on_threads():
    async def training_step(reward):
        return reward(["Hi"], [FAITHFUL], document=[DOC])

    with FakeOpenAIServer() as server:
        assert asyncio.run(training_step(VistaReward(lm(server)))) == [pytest.approx(2 / 3)]


def test_the_grpo_example_calls_the_reward_as_the_trainer_does(capsys, dev_file):
    """examples/grpo_reward.py against the fake server: a batch of 2 prompts x 4 completions in GRPOTrainer's call
    shape, every completion judged, the refusal scored at the default's credit for one uninformative claim."""
    import runpy
    from pathlib import Path

    example = runpy.run_path(str(Path(__file__).resolve().parents[1] / "examples" / "grpo_reward.py"))
    with FakeOpenAIServer() as server:
        code = example["main"](["--judge", "hosted_vllm/judge", "--api-base", server.url, "--data", str(dev_file)])
    out = capsys.readouterr().out
    assert code == 0
    refusals = [line for line in out.splitlines() if " refusal " in line]
    assert len(refusals) == 2 and all("reward +0.033" in line for line in refusals)
    assert "8 completions of 2 prompts" in out and ": 0 not judged" in out


# ---- vista pairs ----------------------------------------------------------------------------------------------------
runner = CliRunner()


def test_the_cli_offers_every_reward_shape():
    from vista_dspy.cli.pairs import Shape

    assert {s.value for s in Shape} == set(SHAPES)


def test_pairs_are_written_in_dpo_shape_and_ties_and_unjudged_responses_are_not_paired(tmp_path):
    lines = [
        {"id": "a", "prompt": "Tell me about Lisbon.", "document": DOC,
         "responses": [REFUSAL, FAITHFUL, HALLUCINATED, "Lisbon has <<BAD-VERIFY>> trams."]},
        {"id": "tie", "prompt": [{"role": "user", "content": "Hi"}], "retrieved_context": [DOC],
         "responses": conversational([FAITHFUL, "Lisbon has seven hills. Lisbon is the capital of Portugal."])},
    ]
    path = tmp_path / "responses.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with FakeOpenAIServer() as server:
        result = runner.invoke(app, ["pairs", str(path), "--out", str(tmp_path / "pairs.jsonl"), "--model",
                                     "hosted_vllm/judge", "--api-base", server.url, "--no-cache"])
    assert result.exit_code == 0, result.output
    pairs = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    assert [(p["id"], p["prompt"], p["chosen"], p["rejected"]) for p in pairs] == [
        ("a", "Tell me about Lisbon.", FAITHFUL, HALLUCINATED)]
    assert pairs[0]["margin"] == pytest.approx(1.0)
    assert (pairs[0]["chosen_verdict"]["label"], pairs[0]["rejected_verdict"]["label"]) == ("faithful",
                                                                                          "hallucinated")
    said = " ".join(result.output.split())
    assert "1 pairs from 2 prompts" in said and "1 of 6 responses could not be judged" in said


def test_all_pairs_of_a_group_exclude_its_ties():
    from vista_dspy.run.pairs import Group, preference_pairs

    group = Group("g", 1, "Hi", ["a", "b", "c", "d"], [DOC])
    verdicts = [RewardVerdict(i, r, None) for i, r in enumerate([0.5, 0.5, -0.2, None])]
    pairs = preference_pairs(group, verdicts, pairing="all")
    assert sorted((p["chosen"], p["rejected"]) for p in pairs) == [("a", "c"), ("b", "c")]


# TRL's two preference formats, as its dataset-formats guide writes them (trl itself is not installed here: it
# requires torch, so its helpers `is_conversational` / `maybe_apply_chat_template` cannot be imported in CI).
TRL_STANDARD = {"prompt": "The sky is", "chosen": " blue.", "rejected": " green."}
TRL_CONVERSATIONAL = {"prompt": [{"role": "user", "content": "What color is the sky?"}],
                      "chosen": [{"role": "assistant", "content": "It is blue."}],
                      "rejected": [{"role": "assistant", "content": "It is green."}]}


def trl_format(example):
    """The format a pair is in by TRL's documented examples: 'standard', 'conversational', or None (neither)."""
    def messages(value):
        return isinstance(value, list) and all(isinstance(m, dict) and set(m) == {"role", "content"}
                                               and isinstance(m["content"], str) for m in value)

    fields = [example[k] for k in ("prompt", "chosen", "rejected")]
    if all(isinstance(v, str) for v in fields):
        return "standard"
    if messages(fields[0]) and all(messages(v) and [m["role"] for m in v] == ["assistant"] for v in fields[1:]):
        return "conversational"
    return None


@pytest.mark.parametrize("prompt,responses,expected", [
    ("Hi", ["a", [{"role": "assistant", "content": "b"}]], "standard"),
    ([{"role": "user", "content": "Hi"}], ["a", "b"], "conversational"),
    ([{"role": "user", "content": "Hi"}], [[{"role": "assistant", "content": "a"}], {"content": "b"}],
     "conversational"),
])
def test_pairs_are_in_trl_s_preference_format_matching_the_prompt(prompt, responses, expected):
    from vista_dspy.run.pairs import Group, preference_pairs

    assert (trl_format(TRL_STANDARD), trl_format(TRL_CONVERSATIONAL)) == ("standard", "conversational")
    [pair] = preference_pairs(Group("g", 1, prompt, responses, [DOC]),
                              [RewardVerdict(0, 0.9, None), RewardVerdict(1, -0.2, None)])
    assert trl_format(pair) == expected
    assert pair["prompt"] == prompt
    text = [pair["chosen"], pair["rejected"]] if expected == "standard" else [
        pair["chosen"][0]["content"], pair["rejected"][0]["content"]]
    assert text == ["a", "b"]


@pytest.mark.parametrize("line,message", [
    ('{"prompt": "Hi", "document": "d", "responses": ["one"]}',
     "line 1: field 'responses': expected a list of at least two"),
    ('{"prompt": "Hi", "responses": ["one", "two"]}', "line 1: no passages: expected one of the fields retrieved_context"),
    ('{"prompt": 3, "document": "d", "responses": ["a", "b"]}', "line 1: field 'prompt'"),
    ('{"prompt": "Hi", "document": "d", "responses": ["a", 7]}', "line 1: field 'responses[1]'"),
    ('{"prompt": "Hi", "document": 5, "responses": ["a", "b"]}', "line 1: field 'document'"),
    ('not json', "line 1: invalid JSON"),
])
def test_bad_pairs_input_exits_2_naming_the_line_and_field_without_a_traceback(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    result = runner.invoke(app, ["pairs", str(path), "--out", str(tmp_path / "o.jsonl"), "--model", "openai/x"])
    assert result.exit_code == 2
    assert f"{path}: {message}" in " ".join(result.output.split())
    assert "Traceback" not in result.output and not (tmp_path / "o.jsonl").exists()

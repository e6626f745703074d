"""``VistaReward``'s async call (what TRL awaits for an ``async def`` reward function), against the fake OpenAI
server: the same rewards as the sync call, its requests concurrent on the caller's loop and within the bound."""

import asyncio
import inspect

import pytest

from vista_dspy import VistaReward
from vista_dspy.lm.fake import FakeOpenAIServer, RuleEngine
from vista_dspy.lm.models import ModelConfig

DOC = "Lisbon is the capital of Portugal. Lisbon has seven hills."
HISTORY = [{"role": "user", "content": "Tell me about Lisbon."},
           {"role": "assistant", "content": "Lisbon has a tram."},
           {"role": "user", "content": "More?"}]
COMPLETIONS = ["Lisbon is the capital of Portugal. Lisbon has seven hills.", "I don't know.", "I love Lisbon.",
               "Lisbon is the capital of Portugal. Lisbon has ten hills.", "Lisbon has a tram. Lisbon has seven hills.",
               "Lisbon was never a capital."]


def lm(server):
    return ModelConfig(model="hosted_vllm/judge", api_base=server.url, num_retries=0, cache=False).build()


def batch(n=len(COMPLETIONS)):
    completions = [[{"role": "assistant", "content": text}] for text in (COMPLETIONS * 2)[:n]]
    return [HISTORY] * n, completions, {"document": [DOC] * n}


def test_the_async_call_gives_the_sync_call_s_rewards_verdicts_and_prompt_sharing():
    prompts, completions, columns = batch()
    results = {}
    for mode in ("sync", "async"):
        engine = RuleEngine()
        with FakeOpenAIServer(engine) as server:
            reward = VistaReward(lm(server))
            rewards = (reward(prompts, completions, **columns) if mode == "sync"
                       else asyncio.run(reward.acall(prompts, completions, **columns)))
        asked = [inputs["turn"] for inputs in engine.inputs_of("decompose")]
        results[mode] = (rewards, reward.claim_rows(), asked.count("Lisbon has a tram."), reward.stats)
    assert results["async"] == results["sync"]
    rewards, _, history_decomposed, stats = results["async"]
    assert history_decomposed == 1 and stats.prompt_work == 1  # the prompt's work done once for its 6 completions
    assert rewards[0] == pytest.approx(2 / 3) and rewards[3] < 0 < rewards[1] < rewards[0]


def test_as_async_is_a_coroutine_function_named_as_the_reward_for_trl():
    with FakeOpenAIServer() as server:
        reward = VistaReward(lm(server), shape="score")
        func = reward.as_async()
        prompts, completions, columns = batch(2)
        got = asyncio.run(func(prompts=prompts, completions=completions, completion_ids=[[1]] * 2, **columns))
    # TRL picks the awaited path by asyncio.iscoroutinefunction / inspect.iscoroutinefunction, and names the
    # reward's logged column by __name__; the sync object itself stays a plain callable.
    assert asyncio.iscoroutinefunction(func) and inspect.iscoroutinefunction(func)
    assert not inspect.iscoroutinefunction(reward)
    assert func.__name__ == "vista_score" and got == [1.0, 1.0]


def test_the_async_call_sends_its_requests_concurrently_without_blocking_the_loop():
    prompts, completions, columns = batch(8)
    completions = [[{"role": "assistant", "content": f"Lisbon has {n} hills."}] for n in range(8)]
    ticks = []

    async def step(reward):
        async def ticker():
            while True:
                ticks.append(1)
                await asyncio.sleep(0.01)

        task = asyncio.ensure_future(ticker())
        try:
            return await reward.acall(["Hi"] * 8, completions, **columns)
        finally:
            task.cancel()

    with FakeOpenAIServer(latency=0.1) as server:
        rewards = asyncio.run(step(VistaReward(lm(server), concurrency=4)))
        assert server.max_in_flight == 4  # requests overlapped, never more than the bound
    assert len(rewards) == 8 and all(r is not None for r in rewards)
    assert len(ticks) >= 10  # the loop kept running while the judge waited on the server (>= 0.2 s of waiting)


def test_concurrent_async_calls_on_one_loop_share_the_request_bound():
    completions = [[{"role": "assistant", "content": f"Lisbon has {n} trams."}] for n in range(12)]

    async def two_steps(reward):
        return await asyncio.gather(reward.acall(["Hi"] * 6, completions[:6], document=[DOC] * 6),
                                    reward.acall(["Hi"] * 6, completions[6:], document=[DOC] * 6))

    with FakeOpenAIServer(latency=0.1) as server:
        first, second = asyncio.run(two_steps(VistaReward(lm(server), concurrency=3)))
        assert server.max_in_flight == 3
    assert len(first) == len(second) == 6 and None not in first + second

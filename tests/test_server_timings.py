"""The server's own timings of each call (llama.cpp's ``timings``) reach the usage of the stage that made it."""

import json

import pytest
from typer.testing import CliRunner

from vista_dspy.cli import app
from vista_dspy.lm.clients.timings import server_usage
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.run.runner import VERDICTS, read_verdicts

DIALOGUE = {"id": "d1", "turns": [
    {"role": "user", "text": "Where is Lisbon?"},
    {"role": "assistant", "text": "Lisbon is the capital of Portugal.",
     "grounding": {"kind": "document", "document": "Lisbon is the capital and largest city of Portugal."}},
]}


def test_timings_become_usage_keys_and_a_response_without_them_books_none():
    response = {"timings": {"cache_n": 7, "prompt_n": 5, "prompt_ms": 12.5, "predicted_n": 3, "predicted_ms": 30.0}}
    assert server_usage(response) == {"server_cached_tokens": 7.0, "server_prompt_tokens": 5.0,
                                      "server_prompt_ms": 12.5, "server_written_tokens": 3.0,
                                      "server_generation_ms": 30.0}
    assert server_usage({"usage": {"prompt_tokens": 3}}) == {}


@pytest.mark.parametrize("model", ["openai/fake", "hosted_vllm/fake"])
def test_each_stage_books_the_server_s_milliseconds_of_its_calls(tmp_path, model):
    data = tmp_path / "d.json"
    data.write_text(json.dumps([DIALOGUE]))
    with FakeOpenAIServer() as server:
        result = CliRunner().invoke(app, ["evaluate", str(data), "--model", model, "--api-base", server.url,
                                          "--out", str(tmp_path / "out"), "--no-cache", "--json"])
    assert result.exit_code == 0, result.output
    usage = read_verdicts(tmp_path / "out" / VERDICTS)[0].usage
    assert set(usage.by_stage) >= {"decompose", "verify"}
    for counts in usage.by_stage.values():
        # The fake server spends 1 ms per prompt token read and 10 per token written (none cached).
        assert counts.calls > 0
        assert counts.prompt_ms == counts.prompt_tokens
        assert counts.generation_ms == 10 * counts.completion_tokens
        assert counts.model_ms == counts.prompt_ms + counts.generation_ms > 0

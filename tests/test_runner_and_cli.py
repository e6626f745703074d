import copy
import gc
import json
import os
import subprocess
import sys
import threading

import pytest
from typer.testing import CliRunner

from vista_dspy import Vista
from vista_dspy.cli import app
from vista_dspy.data import load_dialogues
from vista_dspy.lm.fake import FakeOpenAIServer, RuleEngine, rule_lm
from vista_dspy.run.runner import VERDICTS, Concurrent, RunConflict, Threads, evaluate, read_verdicts


def test_threads_give_exactly_the_sequential_verdicts(dev_file):
    dialogues = load_dialogues(dev_file)[:20]
    program = Vista.from_program()
    sequential = evaluate(dialogues, program, Threads(rule_lm())).verdicts
    parallel = evaluate(dialogues, program, Threads(rule_lm(), threads=8)).verdicts
    assert [v.dialogue_id for v in parallel] == [d.id for d in dialogues]
    assert parallel == sequential
    assert sum(len(v.turns) for v in parallel) == sum(len(d.judged_turns) for d in dialogues)


def test_given_claims_cover_every_gold_claim(dev_file):
    dialogues = load_dialogues(dev_file)
    result = evaluate(dialogues, Vista.from_program(given_claims=True), Threads(rule_lm(), threads=4))
    metrics = result.summary["claim_metrics"]
    assert metrics["claims"] == 460 and result.summary["judged_turns"] == 118
    assert result.summary["turn_metrics"]["turns"] == 118


def test_resume_re_asks_only_missing_dialogues_and_repairs_a_torn_line(tmp_path, dev_file):
    dialogues = load_dialogues(dev_file)[:6]
    program = Vista.from_program()
    out = tmp_path / "run"
    full = evaluate(dialogues, program, rule_lm(), out_dir=out, settings={"a": 1}).verdicts
    lines = (out / VERDICTS).read_text().splitlines(keepends=True)
    # Simulate a crash: two dialogues finished, the third torn mid-write.
    (out / VERDICTS).write_text("".join(lines[:2]) + lines[2][: len(lines[2]) // 2])
    engine = RuleEngine()
    result = evaluate(dialogues, program, rule_lm(engine), out_dir=out, settings={"a": 1})
    assert result.resumed == 2
    asked = {inputs["turn"] for inputs in engine.inputs_of("decompose")}
    finished = {json.loads(line)["dialogue_id"] for line in lines[:2]}
    done_texts = {t.text for v in full if v.dialogue_id in finished for t in v.turns}
    assert len(finished) == 2 and done_texts
    assert not asked & done_texts
    on_disk = read_verdicts(out / VERDICTS)
    assert sorted(v.dialogue_id for v in on_disk) == sorted(d.id for d in dialogues)
    assert result.verdicts == full
    assert json.loads((out / "summary.json").read_text())["dialogues"] == 6


def test_rerun_with_other_settings_is_refused(tmp_path, dev_file):
    dialogues = load_dialogues(dev_file)[:1]
    evaluate(dialogues, Vista.from_program(), rule_lm(), out_dir=tmp_path, settings={"model": "a"})
    with pytest.raises(RunConflict, match="model: 'a' -> 'b'"):
        evaluate(dialogues, Vista.from_program(), rule_lm(), out_dir=tmp_path, settings={"model": "b"})


def test_a_run_from_before_a_setting_existed_resumes_under_its_old_value(tmp_path, dev_file):
    dialogues = load_dialogues(dev_file)[:2]
    evaluate(dialogues[:1], Vista.from_program(), rule_lm(), out_dir=tmp_path, settings={"model": "a"})
    # run.json as an older version wrote it: without claim_calls / decompose_calls / reasoning.
    (tmp_path / "run.json").write_text(json.dumps({"model": "a"}))
    current = {"model": "a", "claim_calls": "per-claim", "decompose_calls": "per-turn", "reasoning": []}
    assert evaluate(dialogues, Vista.from_program(), rule_lm(), out_dir=tmp_path, settings=current).resumed == 1
    with pytest.raises(RunConflict, match="claim_calls: 'per-claim' -> 'batched'"):
        evaluate(dialogues, Vista.from_program(), rule_lm(), out_dir=tmp_path,
                 settings={**current, "claim_calls": "batched"})


def test_an_interrupt_stops_the_dialogues_in_flight_at_their_next_call(tmp_path, dev_file):
    """Ctrl-C with threads: a dialogue judged on another thread stops at its next LM call, instead of running to its
    end unrecorded while the process waits to exit (minutes for a long dialogue with a slow model)."""
    from vista_dspy.lm.models import ModelConfig

    dialogues = sorted(load_dialogues(dev_file), key=lambda d: -len(d.turns))[:4]  # many calls each
    at_interrupt = []
    with FakeOpenAIServer(latency=0.05) as server:
        lm = ModelConfig(model="hosted_vllm/fake", api_base=server.url, num_retries=0, cache=False).build()

        def stop_at_first(verdict):
            at_interrupt.append(server.requests)
            raise KeyboardInterrupt

        result = evaluate(dialogues, Vista.from_program(), Threads(lm, threads=2), out_dir=tmp_path,
                          on_done=stop_at_first)
        for thread in threading.enumerate():
            if thread.name.startswith("vista"):
                thread.join(timeout=120)
        after = server.requests
    assert result.interrupted and len(read_verdicts(tmp_path / VERDICTS)) == 1
    # The other thread's dialogue makes at most the call it was in (two with the one just being sent).
    assert after - at_interrupt[0] <= 2


def test_interrupt_keeps_finished_dialogues(tmp_path, dev_file):
    dialogues = load_dialogues(dev_file)[:5]
    seen = []

    def stop_after_two(verdict):
        seen.append(verdict.dialogue_id)
        if len(seen) == 2:
            raise KeyboardInterrupt

    result = evaluate(dialogues, Vista.from_program(), rule_lm(), out_dir=tmp_path, on_done=stop_after_two)
    assert result.interrupted and len(result.pending) == 3
    assert len(read_verdicts(tmp_path / VERDICTS)) == 2
    resumed = evaluate(dialogues, Vista.from_program(), rule_lm(), out_dir=tmp_path)
    assert resumed.resumed == 2 and len(resumed.verdicts) == 5


runner = CliRunner()


@pytest.mark.parametrize("content, message", [
    ('[[{"role": "user", "utterance": "hi"}', "invalid JSON"),
    ('[[{"role": "robot", "utterance": "hi"}]]', "conversation 0, turn 0: field 'role'"),
])
def test_cli_bad_input_exits_2_with_a_message_and_no_traceback(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    result = runner.invoke(app, ["evaluate", str(path), "--model", "openai/x"])
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_cli_default_local_model_and_gold_claims_errors(tmp_path, dev_file, monkeypatch):
    monkeypatch.delenv("VISTA_MODEL", raising=False)
    monkeypatch.setenv("VISTA_GGUF", str(tmp_path / "absent.gguf"))
    result = runner.invoke(app, ["evaluate", str(dev_file)])
    assert "embedded local model" in result.output
    assert result.exit_code == 2 and "absent.gguf, which is not a file" in result.output
    path = tmp_path / "plain.json"
    path.write_text('[[{"role": "assistant", "utterance": "hi", "retrieved_document": "doc"}]]')
    result = runner.invoke(app, ["evaluate", str(path), "-m", "openai/x", "--judge-given-claims"])
    assert result.exit_code == 2 and "needs gold claims" in result.output


def test_cli_end_to_end_over_http(tmp_path, dev_file):
    """The installed `vista` command against an OpenAI-compatible endpoint: verdicts, summary, resume."""
    env = {**os.environ, "VISTA_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "out"
    with FakeOpenAIServer() as server:
        command = [sys.executable, "-m", "vista_dspy.cli", "evaluate", str(dev_file), "--model", "openai/fake",
                   "--api-base", server.url, "--limit", "3", "--out", str(out), "--judge-given-claims", "--json"]
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert summary["dialogues"] == 3 and summary["claim_metrics"]["claims"] > 0
        assert summary["usage"]["total"]["calls"] > 0 and summary["usage"]["total"]["prompt_tokens"] > 0
        verdicts = read_verdicts(out / VERDICTS)
        assert len(verdicts) == 3 and all(v.model == "openai/fake" for v in verdicts)
        again = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
        assert again.returncode == 0 and "resumed: 3" in again.stderr


def test_lm_cache_is_kept_per_model_and_endpoint(tmp_path, monkeypatch):
    from vista_dspy.lm.clients.cache import cache_dir_for
    from vista_dspy.lm.models import ModelConfig

    monkeypatch.setenv("VISTA_CACHE_DIR", str(tmp_path))
    a = cache_dir_for(ModelConfig("openai/m", api_base="http://a/v1"))
    b = cache_dir_for(ModelConfig("openai/m", api_base="http://b/v1"))
    assert a != b and a.parent == tmp_path / "lm-cache"
    # The local model's cache follows the weights, not the port.
    w1 = ModelConfig("openai/local", api_base="http://127.0.0.1:1/v1", cache_identity="gguf:x:1")
    w2 = ModelConfig("openai/local", api_base="http://127.0.0.1:2/v1", cache_identity="gguf:x:1")
    assert cache_dir_for(w1) == cache_dir_for(w2)


def test_a_run_replayed_from_the_lm_cache_counts_its_cache_hits_not_calls(tmp_path, dev_file):
    """Answers the cache gave cost no token or millisecond of a model: they are counted as cache hits, and the summary
    says so, rather than the run looking like one that made no call."""
    with FakeOpenAIServer() as server:
        def run(out):
            result = CliRunner().invoke(app, ["evaluate", str(dev_file), "--model", "hosted_vllm/fake", "--api-base",
                                              server.url, "--limit", "2", "--out", str(out)])
            assert result.exit_code == 0, result.output
            return json.loads((out / "summary.json").read_text())["usage"]["total"], result.output

        first, _ = run(tmp_path / "first")
        asked = server.requests
        again, printed = run(tmp_path / "again")
    assert first["calls"] > 0 and first["cache_hits"] == 0
    assert server.requests == asked  # nothing reached the server the second time
    assert again["calls"] == 0 and again["cache_hits"] == first["calls"] and again["prompt_tokens"] == 0
    assert f"{first['calls']} answers from the LM cache" in " ".join(printed.split())


def ask(lm) -> None:
    import dspy

    with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
        dspy.Predict("question -> answer")(question="Is this on?")


@pytest.mark.parametrize("model", ["openai/fake", "hosted_vllm/fake"], ids=["litellm", "native"])
def test_self_hosted_servers_are_sent_max_tokens(model):
    """llama.cpp and older vLLM read `max_tokens` only; both ways to name a self-hosted model must send it."""
    from vista_dspy.lm.models import ModelConfig

    with FakeOpenAIServer() as server:
        lm = ModelConfig(model, api_base=server.url, max_tokens=77, num_retries=0, cache=False).build()
        ask(lm)
    assert server.last_body["max_tokens"] == 77 and server.last_body["model"] == "fake"
    # Optimizers copy LMs (BootstrapFewShot, MIPROv2); a copy shares the client and still works.
    with FakeOpenAIServer() as server:
        lm = copy.deepcopy(ModelConfig(model, api_base=server.url, num_retries=0, cache=False).build())
        ask(lm.copy(temperature=0.5))
    assert server.last_body["temperature"] == 0.5


def test_registry_open_weight_models_reach_the_server_with_their_options(monkeypatch):
    from vista_dspy.lm.models import MODELS

    with FakeOpenAIServer() as server:
        monkeypatch.setenv("VISTA_API_BASE", server.url)
        lm = MODELS["qwen3-8b"].config(cache=False).build()
        ask(lm)
    assert server.last_body["model"] == "Qwen/Qwen3-8B"
    assert server.last_body["chat_template_kwargs"] == {"enable_thinking": False}


def test_cli_runs_a_baseline_over_http(tmp_path, dev_file):
    with FakeOpenAIServer() as server:
        result = runner.invoke(app, ["evaluate", str(dev_file), "--model", "openai/fake", "--api-base", server.url,
                                     "--limit", "2", "--out", str(tmp_path / "o"), "--system", "judge",
                                     "--no-cache", "--json"])
    assert result.exit_code == 0, result.output
    verdicts = read_verdicts(tmp_path / "o" / VERDICTS)
    assert [v.program for v in verdicts] == ["judge", "judge"]
    assert all(t.explanation for v in verdicts for t in v.turns)
    result = runner.invoke(app, ["evaluate", str(dev_file), "-m", "openai/x", "--system", "factscore",
                                 "--judge-given-claims"])
    assert result.exit_code == 2 and "apply to --system vista only" in result.output


def test_cli_fewest_calls_mode_over_http_records_its_settings(tmp_path, dev_file):
    with FakeOpenAIServer() as server:
        result = runner.invoke(app, ["evaluate", str(dev_file), "--model", "hosted_vllm/fake", "--api-base",
                                     server.url, "--limit", "6", "--out", str(tmp_path / "o"), "--no-cache",
                                     "--claim-calls", "batched", "--decompose-calls", "per-dialogue",
                                     "--concurrency", "3"])
    assert result.exit_code == 0, result.output
    run = json.loads((tmp_path / "o" / "run.json").read_text())
    assert (run["claim_calls"], run["decompose_calls"]) == ("batched", "per-dialogue")
    verdicts = read_verdicts(tmp_path / "o" / VERDICTS)
    assert len(verdicts) == 6 and not any(t.error for v in verdicts for t in v.turns)
    multi = [v for v, d in zip(verdicts, load_dialogues(dev_file)[:6]) if sum(t.role == "assistant" for t in d.turns) > 1]
    assert multi and all(v.usage.by_stage["decompose"].calls == 1 for v in multi)


def test_claims_frame_has_one_row_per_claim(dev_file):
    from vista_dspy.experiments.report import claims_frame

    dialogues = load_dialogues(dev_file)[:3]
    result = evaluate(dialogues, Vista.from_program(given_claims=True), rule_lm())
    frame = claims_frame(result.verdicts)
    assert len(frame) == result.summary["claims"]
    assert set(frame["gold_category"]) <= {"VERIFIED", "OUT-OF-SCOPE", "ABSTENTION", "CONTRADICTED", "LACKING EVIDENCE"}
    assert list(frame["dialogue_id"].unique()) == [d.id for d in dialogues]


@pytest.mark.parametrize("mode,model", [("per-claim", "openai/fake"), ("batched", "hosted_vllm/fake")])
def test_async_runner_bounds_requests_in_flight_and_matches_threads(tmp_path, dev_file, mode, model):
    from vista_dspy.lm.models import ModelConfig
    from vista_dspy.program import Vista

    dialogues = load_dialogues(dev_file)[:12]
    program = Vista.from_program(None, claim_calls=mode)
    with FakeOpenAIServer(latency=0.05) as server:
        config = ModelConfig(model=model, api_base=server.url, num_retries=0, cache=False)
        threaded = evaluate(dialogues, program, Threads(config.build(), threads=2))
        server.max_in_flight = 0
        lm = config.build()
        concurrent = evaluate(dialogues, program, Concurrent(lm, 4, dialogues=6), out_dir=tmp_path / "async")
    assert 2 < server.max_in_flight <= 4  # the bound holds at the server, whichever side of the engine takes slots
    assert gc.get_freeze_count() == 0  # the run's gc.freeze() is undone
    if model.startswith("hosted_vllm/"):  # the native client's connections were closed with the run's event loop
        assert not lm._async_engine_spec.engines
    assert [v.model_dump(exclude={"usage"}) for v in concurrent.verdicts] == \
        [v.model_dump(exclude={"usage"}) for v in threaded.verdicts]
    assert len(read_verdicts(tmp_path / "async" / VERDICTS)) == 12


def test_cache_dir_option_keeps_lm_answers_there(tmp_path, dev_file, monkeypatch):
    monkeypatch.delenv("VISTA_CACHE_DIR", raising=False)
    with FakeOpenAIServer() as server:
        result = runner.invoke(app, ["--cache-dir", str(tmp_path / "c"), "evaluate", str(dev_file), "--model",
                                     "openai/fake", "--api-base", server.url, "--limit", "1", "--out",
                                     str(tmp_path / "o"), "--json"])
        assert result.exit_code == 0, result.output
        calls = server.requests
        again = runner.invoke(app, ["--cache-dir", str(tmp_path / "c"), "evaluate", str(dev_file), "--model",
                                    "openai/fake", "--api-base", server.url, "--limit", "1", "--out",
                                    str(tmp_path / "o2"), "--json"])
        assert again.exit_code == 0 and server.requests == calls  # every answer came from the cache
    assert any((tmp_path / "c" / "lm-cache").iterdir())


def test_a_program_applies_its_saved_options_unless_a_flag_says_otherwise(tmp_path, dev_file):
    from vista_dspy.compiled.files import SEED_PROGRAM, compiled_dir

    program = tmp_path / "tuned.json"
    state = json.loads((compiled_dir() / f"{SEED_PROGRAM}.json").read_text())
    state["vista"]["options"].update(use_context=True, reasoning=["verify"])
    program.write_text(json.dumps(state))
    with FakeOpenAIServer() as server:
        common = ["evaluate", str(dev_file), "--model", "hosted_vllm/fake", "--api-base", server.url, "--limit", "1",
                  "--program", str(program), "--no-cache"]
        saved = runner.invoke(app, [*common, "--out", str(tmp_path / "saved")])
        overridden = runner.invoke(app, [*common, "--out", str(tmp_path / "flags"), "--no-context", "--reasoning",
                                         "none"])
    assert saved.exit_code == 0 and overridden.exit_code == 0, saved.output + overridden.output
    assert "applies its saved options: use_context=True, reasoning=['verify']" in " ".join(saved.output.split())
    [with_saved] = read_verdicts(tmp_path / "saved" / VERDICTS)
    [with_flags] = read_verdicts(tmp_path / "flags" / VERDICTS)
    assert with_saved.options["use_context"] is True and with_saved.options["reasoning"] == ["verify"]
    assert with_flags.options["use_context"] is False and with_flags.options["reasoning"] == []
    assert with_saved.program == with_flags.program == str(program)

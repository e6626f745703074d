"""The Ray backend on a local Ray instance against the fake OpenAI-compatible server: the same verdicts as the
local backend, two endpoints spread over the workers, and a worker killed mid-run retried without duplicates."""

import os
import signal
import subprocess
import threading
import time

import pytest

from vista_dspy.data import load_dialogues
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.models import ModelConfig
from vista_dspy.program import Vista
from vista_dspy.run.runner import VERDICTS, Threads, evaluate, read_verdicts

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]')")
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # installed but unable to start: a failure
    yield
    ray.shutdown()


def comparable(verdicts):
    return [v.model_dump(exclude={"usage"}) for v in verdicts]


def test_ray_gives_the_local_verdicts_and_spreads_endpoints(tmp_path, dev_file, local_ray):
    from vista_dspy.run.distributed import RayBackend

    dialogues = load_dialogues(dev_file)[:20]
    program = Vista.from_program(None)
    with FakeOpenAIServer() as first, FakeOpenAIServer() as second:
        config = ModelConfig(model="openai/fake", api_base=first.url, num_retries=0, cache=False)
        local = evaluate(dialogues, program, Threads(config.build(), threads=2))
        backend = RayBackend(config, workers=2, api_bases=[first.url, second.url])
        before = first.requests
        remote = evaluate(dialogues, program, backend, out_dir=tmp_path)
        assert first.requests > before and second.requests > 0  # both endpoints served
    assert comparable(remote.verdicts) == comparable(local.verdicts)
    assert [v.dialogue_id for v in read_verdicts(tmp_path / VERDICTS)] != []
    assert remote.summary["judged_turns"] == local.summary["judged_turns"]


def test_a_killed_worker_is_retried_and_nothing_is_written_twice(tmp_path, dev_file, local_ray):
    from vista_dspy.run.distributed import RayBackend

    dialogues = load_dialogues(dev_file)[:20]
    with FakeOpenAIServer(latency=0.05) as server:
        config = ModelConfig(model="openai/fake", api_base=server.url, num_retries=0, cache=False)
        killed = []

        def kill_a_worker():
            # Wait until the actors are busy, then SIGKILL one of their processes.
            deadline = time.time() + 60
            while time.time() < deadline and server.requests < 20:
                time.sleep(0.05)
            # Ray names an actor's process after its class.
            found = subprocess.run(["pgrep", "-f", "ray::JudgeActor"], capture_output=True, text=True).stdout.split()
            if found:
                os.kill(int(found[0]), signal.SIGKILL)
                killed.append(int(found[0]))

        killer = threading.Thread(target=kill_a_worker)
        killer.start()
        result = evaluate(dialogues, Vista.from_program(None), RayBackend(config, workers=2), out_dir=tmp_path)
        killer.join()
    assert killed, "no worker was killed"
    ids = [v.dialogue_id for v in read_verdicts(tmp_path / VERDICTS)]
    assert sorted(ids) == sorted(d.id for d in dialogues) and len(ids) == len(set(ids))
    assert not result.interrupted and len(result.verdicts) == 20


def test_cli_backend_ray_over_two_endpoints(tmp_path, dev_file, local_ray):
    from typer.testing import CliRunner

    from vista_dspy.cli import app

    with FakeOpenAIServer() as first, FakeOpenAIServer() as second:
        result = CliRunner().invoke(app, [
            "evaluate", str(dev_file), "--model", "openai/fake", "--api-base", f"{first.url},{second.url}",
            "--backend", "ray", "--workers", "2", "--limit", "6", "--out", str(tmp_path), "--no-cache", "--json"])
        assert result.exit_code == 0, result.output
        assert first.requests > 0 and second.requests > 0
    assert len(read_verdicts(tmp_path / VERDICTS)) == 6


def test_an_unusable_model_on_a_worker_is_the_same_one_line_error_as_locally(tmp_path, dev_file, local_ray):
    from typer.testing import CliRunner

    from vista_dspy.cli import app

    with FakeOpenAIServer(faults={"401": 1.0}) as server:  # every request: a rejected key
        result = CliRunner().invoke(app, [
            "evaluate", str(dev_file), "--model", "openai/fake", "--api-base", server.url, "--backend", "ray",
            "--workers", "1", "--limit", "2", "--out", str(tmp_path), "--no-cache"])
    assert result.exit_code == 1, result.output
    assert "the model cannot be used" in result.output and "Traceback" not in result.output
    assert "RayTaskError" not in result.output


def test_without_ray_the_message_says_how_to_install_it(monkeypatch):
    import builtins

    from vista_dspy.run.distributed import BackendUnavailable, import_ray

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    with pytest.raises(BackendUnavailable, match=r"pip install 'vista-dspy\[ray\]'"):
        import_ray()


def test_an_outage_stops_a_ray_run_and_the_rerun_completes_it(tmp_path, dev_file, local_ray):
    from vista_dspy.run.distributed import RayBackend
    from vista_dspy.run.runner import has_failures
    from vista_dspy.stages import EndpointDown

    dialogues = load_dialogues(dev_file)[:12]
    program = Vista.from_program(None)
    with FakeOpenAIServer(down_after=50) as server:
        config = ModelConfig(model="hosted_vllm/fake", api_base=server.url, num_retries=0, cache=False)
        with pytest.raises(EndpointDown, match="rerun the same command"):
            evaluate(dialogues, program, RayBackend(config, workers=2), out_dir=tmp_path)
        port = server.port
    kept = read_verdicts(tmp_path / VERDICTS)
    assert len(kept) < 12
    with FakeOpenAIServer(port=port) as server:
        result = evaluate(dialogues, program, RayBackend(config, workers=2), out_dir=tmp_path)
    assert len(result.verdicts) == 12 and not any(has_failures(v) for v in result.verdicts)
    ids = [v.dialogue_id for v in read_verdicts(tmp_path / VERDICTS)]
    assert len((tmp_path / VERDICTS).read_text().splitlines()) == len(set(ids)) == 12

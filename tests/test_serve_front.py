"""`vista serve`'s front door (``lm.front.Front``) before the fake OpenAI-compatible server standing in for llama.cpp:
under more concurrent requests than its slots and queue hold, every request is answered or refused at once with 503,
a Retry-After and an error body; on SIGTERM under load the requests in the slots finish whole, the queued ones are
refused, the port closes and the process exits 0."""

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.server import port_in_use


def judge_request() -> str:
    """A request body as a judge sends it (the last call of judging one turn with the seed program)."""
    from helpers import LISBON, assistant, dialogue, user

    from vista_dspy.lm.models import ModelConfig
    from vista_dspy.program import Vista
    from vista_dspy.run.runner import Threads, evaluate

    with FakeOpenAIServer() as server:
        config = ModelConfig(model="openai/fake", api_base=server.url, num_retries=0, cache=False)
        evaluate([dialogue(user("Tell me about Lisbon."), assistant("Lisbon has seven hills.", LISBON))],
                 Vista.from_program(None), Threads(config.build()))
        return json.dumps(server.last_body)


BODY = judge_request()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ask(port: int, results: list, start: threading.Barrier | None = None, timeout: float = 30.0) -> None:
    """One chat completion through the front: (status, Retry-After, parsed body) or the connection's error."""
    if start is not None:
        start.wait()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/v1/chat/completions", BODY, {"Content-Type": "application/json"})
        response = connection.getresponse()
        results.append((response.status, response.getheader("Retry-After"), json.loads(response.read())))
    except (OSError, http.client.HTTPException, ValueError) as exc:
        results.append(("failed", None, repr(exc)))
    finally:
        connection.close()


@pytest.fixture
def front_process():
    """(a front over a fake upstream in a process of its own, its port); the upstream answers in 1.5 s."""
    started = []
    with FakeOpenAIServer(latency=1.5) as upstream:
        def start(slots: int, queue: int):
            port = free_port()
            process = subprocess.Popen(
                [sys.executable, "-m", "vista_dspy.lm.front", "--upstream", upstream.url.removesuffix("/v1"),
                 "--port", str(port), "--slots", str(slots), "--queue", str(queue), "--grace", "30"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            started.append(process)
            assert process.stdout.readline().strip() == f"http://127.0.0.1:{port}/v1"  # listening
            return process, port

        yield start
        for process in started:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_more_requests_than_slots_and_queue_are_answered_or_refused_with_a_retry_hint(front_process):
    process, port = front_process(slots=2, queue=3)
    results: list = []
    start = threading.Barrier(9)
    clients = [threading.Thread(target=ask, args=(port, results, start)) for _ in range(9)]
    for client in clients:
        client.start()
    for client in clients:
        client.join()
    answered = [r for r in results if r[0] == 200]
    refused = [r for r in results if r[0] == 503]
    assert (len(answered), len(refused), len(results)) == (5, 4, 9)  # 2 slots + 3 queued; the rest refused at once
    assert all(json.loads(r[2]["choices"][0]["message"]["content"]) for r in answered)
    assert all(int(r[1]) >= 1 and "the server is busy" in r[2]["error"]["message"] for r in refused)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    assert json.loads(process.stdout.read().strip().splitlines()[-1]) == {
        "answered": 5, "refused_full": 4, "refused_stopping": 0, "upstream_failed": 0}


def test_sigterm_under_load_finishes_the_slots_refuses_the_queue_and_exits(front_process):
    process, port = front_process(slots=2, queue=4)
    results: list = []
    clients = [threading.Thread(target=ask, args=(port, results)) for _ in range(6)]
    for client in clients:
        client.start()
        time.sleep(0.05)  # in order: the first two take the slots
    time.sleep(0.3)
    process.send_signal(signal.SIGTERM)
    for client in clients:
        client.join()
    assert process.wait(timeout=30) == 0
    statuses = sorted(r[0] for r in results)
    assert statuses == [200, 200, 503, 503, 503, 503]
    assert all(json.loads(r[2]["choices"][0]["message"]["content"]) for r in results if r[0] == 200)  # whole answers
    assert all("stopping" in r[2]["error"]["message"] and int(r[1]) >= 1 for r in results if r[0] == 503)
    assert not port_in_use(port)


def test_a_request_larger_than_the_front_takes_is_refused_with_413():
    import asyncio

    from vista_dspy.lm.front import Front

    async def scenario(port: int, upstream: str):
        front = Front(upstream, slots=1, queue=1, max_body=1000)
        stop = asyncio.Event()
        ready = asyncio.Event()
        serving = asyncio.ensure_future(front.serve("127.0.0.1", port, on_ready=ready.set, stop=stop))
        await ready.wait()
        results: list = []
        await asyncio.to_thread(lambda: ask_big(port, results))
        stop.set()
        await serving
        return results

    def ask_big(port, results):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        connection.request("POST", "/v1/chat/completions", "x" * 5000, {"Content-Type": "application/json"})
        results.append(connection.getresponse().status)

    with FakeOpenAIServer() as upstream:
        assert asyncio.run(scenario(free_port(), upstream.url.removesuffix("/v1"))) == [413]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX signals")
def test_the_health_check_passes_through_without_queueing(front_process):
    process, port = front_process(slots=1, queue=0)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request("GET", "/health")
    assert connection.getresponse().status == 200


STUBS = os.path.join(os.path.dirname(__file__), "stubs")


def test_vista_serve_behind_its_front_answers_refuses_and_stops_cleanly_under_load(tmp_path):
    """`vista serve` itself, llama.cpp replaced by a stub with its lifecycle (tests/stubs/xllamacpp): its front
    takes 2 slots and 2 queued, refuses the rest, and SIGTERM under load ends it with exit 0 and nothing cut."""
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    port = free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([STUBS, os.environ.get("PYTHONPATH", "")]),
           "STUB_LLAMA_LATENCY": "1.5"}
    server = subprocess.Popen([sys.executable, "-m", "vista_dspy.cli", "serve", "--gguf", str(gguf), "--port",
                               str(port), "--slots", "2", "--queue", "2", "--threads", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 120
        while not port_in_use(port) and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        results: list = []
        clients = [threading.Thread(target=ask, args=(port, results)) for _ in range(6)]
        for client in clients:
            client.start()
            time.sleep(0.05)
        time.sleep(0.3)
        server.send_signal(signal.SIGTERM)
        for client in clients:
            client.join()
        assert server.wait(timeout=60) == 0
    finally:
        if server.poll() is None:
            server.kill()
    _, err = server.communicate()
    statuses = sorted(r[0] for r in results)
    assert statuses == [200, 200, 503, 503, 503, 503], err  # 2 in the slots; 2 queued then stopped; 2 refused full
    assert sorted(r[2]["error"]["message"].split(";")[0] for r in results if r[0] == 503) == [
        "the server is busy: 2 requests in its 2 slots and 2 waiting, the most it queues"] * 2 + [
        "the server is stopping"] * 2
    assert all(json.loads(r[2]["choices"][0]["message"]["content"]) for r in results if r[0] == 200)
    assert "server stopped" in err and not port_in_use(port)


def test_a_judge_through_the_front_gets_the_verdicts_it_gets_straight_from_the_server():
    """The front is transparent to the judge's own client (litellm, as with the embedded model): the same verdicts
    through it as without it, the quick-start example judged with two threads."""
    import asyncio
    from pathlib import Path

    from vista_dspy.data import load_dialogues
    from vista_dspy.lm.front import Front
    from vista_dspy.lm.models import ModelConfig
    from vista_dspy.program import Vista
    from vista_dspy.run.runner import Threads, evaluate

    dialogues = load_dialogues(Path(__file__).resolve().parents[1] / "examples" / "quickstart.json")
    with FakeOpenAIServer() as upstream:
        port = free_port()
        loop = asyncio.new_event_loop()
        stop, ready = asyncio.Event(), threading.Event()
        front = Front(upstream.url.removesuffix("/v1"), slots=2, queue=8)
        serving = threading.Thread(target=lambda: loop.run_until_complete(
            front.serve("127.0.0.1", port, on_ready=ready.set, stop=stop)))
        serving.start()
        assert ready.wait(30)
        try:
            verdicts = [evaluate(dialogues, Vista.from_program(None), Threads(ModelConfig(
                model="openai/fake", api_base=url, num_retries=0, cache=False).build(), threads=2)).verdicts
                for url in (upstream.url, f"http://127.0.0.1:{port}/v1")]
        finally:
            loop.call_soon_threadsafe(stop.set)
            serving.join(30)
            loop.close()
    direct, through = ([v.model_dump(exclude={"usage"}) for v in vs] for vs in verdicts)
    assert through == direct and front.stats["answered"] == upstream.requests // 2 > 0

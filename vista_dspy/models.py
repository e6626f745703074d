"""Building the judge LM from a model name, with decoding defaults that make verdicts reproducible.

Any DSPy/litellm model string works (``openai/gpt-4o``, ``deepseek/deepseek-chat``, ``hosted_vllm/...``,
``ollama_chat/...``). Nothing here touches global DSPy settings except ``use_cache_for``, which the CLI calls once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import heapq
import itertools
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

DEFAULT_MAX_TOKENS = 1024


def cache_root() -> Path:
    """Where vista-dspy keeps its caches (LM answers, the local model): $VISTA_CACHE_DIR or ~/.cache/vista-dspy."""
    return Path(os.environ.get("VISTA_CACHE_DIR") or Path.home() / ".cache" / "vista-dspy")


@dataclass(frozen=True)
class ModelConfig:
    """Everything needed to rebuild the judge LM in any process (no secrets: keys come from the environment)."""

    model: str
    api_base: str | None = None
    temperature: float = 0.0
    max_tokens: int = DEFAULT_MAX_TOKENS
    num_retries: int = 3
    # Seconds before one request is abandoned (and retried): None keeps litellm's default.
    timeout: float | None = None
    cache: bool = True
    adapter: str = "json"
    # What makes cached answers valid; defaults to model + endpoint (see cache_dir_for).
    cache_identity: str | None = None
    # Further request arguments for dspy.LM (reasoning_effort, extra_body ...), as a tuple of pairs (hashable).
    extra: tuple[tuple[str, Any], ...] = ()

    def build(self) -> dspy.LM:
        kwargs: dict = {}
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        if self.api_base:
            # Self-hosted OpenAI-compatible servers usually need no key, but the client insists on one.
            api_key = os.environ.get("VISTA_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
            if self.model.startswith(f"{SELF_HOSTED_PREFIX}/") and not self.extra:
                kwargs.pop("timeout", None)
                kwargs.update(_endpoint_engines(self.api_base, api_key, self.timeout))
            else:
                kwargs.update(api_base=self.api_base, api_key=api_key)
            if self.model.startswith("openai/"):
                # DSPy's own HTTP engine speaks OpenAI's dialect here and sends `max_completion_tokens`, which
                # llama.cpp and older vLLM ignore; litellm sends `max_tokens` (as does `hosted_vllm/`).
                kwargs["engine"] = "litellm"
        return dspy.LM(
            self.model,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            num_retries=self.num_retries,
            cache=self.cache,
            **dict(self.extra),
            **kwargs,
        )

    def build_adapter(self) -> dspy.Adapter:
        return build_adapter(self.adapter)

    def run_settings(self) -> dict[str, Any]:
        """What a run records about its LM (a resumed run must match). A local backend's port is not part of it."""
        return {
            "model": self.model,
            "api_base": None if self.cache_identity else self.api_base,
            "backend": self.cache_identity,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "adapter": self.adapter,
            **({"extra": {k: v for k, v in self.extra}} if self.extra else {}),
        }


class RequestSlots:
    """At most ``limit`` LM requests in flight (an asyncio semaphore), handed out by priority: a waiting request
    with a lower ``PRIORITY`` goes first, ties in arrival order. The runner gives the calls of longer dialogues
    priority, since their chains of dependent calls set the wall time of a run."""

    def __init__(self, limit: int) -> None:
        self._free = max(1, limit)
        self._waiting: list[tuple[float, int, asyncio.Future]] = []
        self._arrivals = itertools.count()
        self.most_in_flight = 0  # for tests and benchmarks
        self._limit = self._free

    async def __aenter__(self) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
        else:
            slot = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (PRIORITY.get(), next(self._arrivals), slot))
            try:
                await slot
            except asyncio.CancelledError:
                if slot.done() and not slot.cancelled():
                    self._release()  # granted just as it was cancelled: pass the slot on
                raise
        self.most_in_flight = max(self.most_in_flight, self._limit - self._free)

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        while self._waiting:
            _, _, slot = heapq.heappop(self._waiting)
            if not slot.done():  # skip waiters cancelled while queued
                slot.set_result(None)  # the slot passes straight to the next waiter
                return
        self._free += 1


# A bound on LM requests in flight for the async driver (set by the runner's --concurrency); None = unbounded.
IN_FLIGHT: contextvars.ContextVar[RequestSlots | None] = contextvars.ContextVar("vista_in_flight", default=None)
# The priority of the current dialogue's requests for a slot (lower first).
PRIORITY: contextvars.ContextVar[float] = contextvars.ContextVar("vista_priority", default=0.0)


# Set while this task holds a slot, so that a nested request_slot (engine inside predictor) does not take a second.
_HOLDS_SLOT: contextvars.ContextVar[bool] = contextvars.ContextVar("vista_holds_slot", default=False)


@contextlib.asynccontextmanager
async def request_slot(lm: Any = None):
    """Holds one of the run's request slots (``IN_FLIGHT``) around an LM call, if the run bounds them.

    Given the LM a predictor is about to call: nothing is held here when that LM's own engine takes a slot around
    each HTTP request (``_endpoint_engines``), so that prompt formatting, parsing and DSPy's bookkeeping run outside
    the slots and a retry's backoff does not hold one. A task never holds two slots.
    """
    slots = IN_FLIGHT.get()
    if slots is None or _HOLDS_SLOT.get() or getattr(_async_engine_of(lm), "takes_request_slots", False):
        yield
        return
    token = _HOLDS_SLOT.set(True)
    try:
        async with slots:
            yield
    finally:
        _HOLDS_SLOT.reset(token)


async def aclose_client(lm: Any) -> None:
    """Closes the connections the LM's async engine opened on the running event loop, if it is one of ours (an
    engine given by the caller stays the caller's to close)."""
    engine = _async_engine_of(lm)
    if getattr(engine, "connections_per_loop", False):
        await engine.aclose()


def _async_engine_of(lm: Any) -> Any:
    return getattr(lm, "_async_engine_spec", None)  # dspy.LM's async engine object, if one was given


# litellm's spelling of "a self-hosted OpenAI-compatible server" (vLLM, llama.cpp, Ollama, SGLang ...).
SELF_HOSTED_PREFIX = "hosted_vllm"


def _endpoint_engines(api_base: str, api_key: str, timeout: float | None) -> dict[str, Any]:
    """DSPy's own native (lm15) engine for one self-hosted endpoint, built once and handed to ``dspy.LM`` as its
    engine, in the server dialect that sends ``max_tokens``.

    With ``engine="auto"`` DSPy selects the backend again on every call: it builds and plans a fresh router per
    request, about half the client CPU of a call (2.0 vs 4.4 ms measured; it bounds requests per second at high
    concurrency). Given as the engine, the same native client is used directly; retries, errors, caching and
    usage stay DSPy's. Async connection pools belong to one event loop, so there is one async engine per loop.
    """
    import weakref

    from dspy.clients.engines import AsyncLM15Engine, LM15Engine
    from dspy.clients.engines.lm15_engine import timeouts_for
    from dspy.lm15 import RouterConfig

    config = RouterConfig(api_keys={"vllm": api_key}, base_urls={"vllm": api_base}, timeouts=timeouts_for(timeout))

    class Shared:
        """A client is shared, not copied, when its LM is copied (as DSPy does with its own clients)."""

        def __deepcopy__(self, memo):
            return self

    class Sync(Shared):
        def __init__(self) -> None:
            self.engine = LM15Engine(config)

        def complete(self, request):
            return self.engine.complete(request)

    class PerLoop(Shared):
        takes_request_slots = True  # a request slot is held around the HTTP request only (see request_slot)
        connections_per_loop = True  # closed by aclose_client when the runner's loop ends

        def __init__(self) -> None:
            self.engines: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

        async def complete(self, request):
            loop = asyncio.get_running_loop()
            engine = self.engines.get(loop)
            if engine is None:
                engine = self.engines[loop] = AsyncLM15Engine(config)
            async with request_slot():
                return await engine.complete(request)

        async def aclose(self) -> None:
            """Closes this event loop's connections (the runner calls it before its loop ends)."""
            engine = self.engines.pop(asyncio.get_running_loop(), None)
            if engine is not None:
                await engine.aclose()

    return {"engine": Sync(), "async_engine": PerLoop()}


class _PromptPartsMemo:
    """Formats the parts of a prompt that repeat on every call of a predictor -- the system message and the
    few-shot demos -- once per (signature, demos) content, instead of once per call.

    DSPy rebuilds them for every call (pydantic schemas, JSON serialisation of every demo field): about a fifth of
    the client CPU of a call (5.1 -> 4.2 ms measured), which bounds throughput at high concurrency. The memo is keyed
    on content, not identity (batched judging rebuilds equal signatures and demo lists per turn), and its output is
    the stock adapter's, byte for byte, so LM cache keys and answers do not change (tests/test_adapters.py compares
    them).
    """

    MEMO_SIZE = 512  # distinct (signature, demos) parts kept; a run uses a few dozen

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._memo: dict[tuple, Any] = {}
        self._memo_lock = threading.Lock()

    def _memoized(self, key: tuple | None, make):
        if key is None:
            return make()
        with self._memo_lock:
            if key in self._memo:
                return self._memo[key]
        value = make()
        with self._memo_lock:
            if len(self._memo) >= self.MEMO_SIZE:
                self._memo.clear()
            self._memo[key] = value
        return value

    def format_system_message(self, signature) -> str:
        key = _signature_key(signature)
        return self._memoized(key and ("system", key), lambda: super(_PromptPartsMemo, self)
                              .format_system_message(signature))

    def format_demos(self, signature, demos) -> list[dict[str, Any]]:
        key = _signature_key(signature)
        key = key and ("demos", key, tuple(_demo_key(signature, demo) for demo in demos))
        messages = self._memoized(key, lambda: super(_PromptPartsMemo, self).format_demos(signature, demos))
        return [dict(message) for message in messages]  # callers may mutate the messages they get


def _signature_key(signature) -> tuple | None:
    """What a signature's prompt text depends on: instructions, and each field's name, kind, prefix, description
    and type. None (no memo) when a type is unhashable."""
    try:
        key = (signature.instructions, tuple(
            (name, field.annotation, tuple(sorted((k, repr(v)) for k, v in (field.json_schema_extra or {}).items())))
            for name, field in signature.fields.items()))
        hash(key)
    except TypeError:
        return None
    return key


def _demo_key(signature, demo) -> tuple:
    """A demo's content as far as formatting reads it: the signature's fields, present or not."""
    return tuple((name, type(demo[name]).__qualname__, repr(demo[name])) if name in demo else (name,)
                 for name in signature.fields)


class JSONAdapter(_PromptPartsMemo, dspy.JSONAdapter):
    """dspy.JSONAdapter with the system message and demos formatted once per predictor (see _PromptPartsMemo)."""


class ChatAdapter(_PromptPartsMemo, dspy.ChatAdapter):
    """dspy.ChatAdapter with the system message and demos formatted once per predictor (see _PromptPartsMemo)."""


ADAPTERS = {"json": JSONAdapter, "chat": ChatAdapter}


def build_adapter(name: str) -> dspy.Adapter:
    if name not in ADAPTERS:
        raise ValueError(f"unknown adapter {name!r}; choose one of {', '.join(ADAPTERS)}")
    return ADAPTERS[name]()


def cache_dir_for(config: ModelConfig, root: Path | None = None) -> Path:
    """One disk cache per (model, endpoint): DSPy's cache key ignores api_base, so two servers exposing the
    same model name would otherwise share answers."""
    identity = config.cache_identity or f"{config.model}\n{config.api_base or ''}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return (root or cache_root()) / "lm-cache" / key


def use_cache_for(config: ModelConfig, root: Path | None = None) -> Path | None:
    """Point DSPy's process-wide cache at this endpoint's own directory (or turn it off)."""
    if not config.cache:
        dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
        return None
    directory = cache_dir_for(config, root)
    directory.mkdir(parents=True, exist_ok=True)
    dspy.configure_cache(enable_disk_cache=True, enable_memory_cache=True, disk_cache_dir=str(directory))
    return directory


# ---- the paper's models ----------------------------------------------------------------------------------------

OPEN_WEIGHTS_NOTE = "serve it with vLLM, llama.cpp or Ollama and set VISTA_API_BASE (e.g. http://gpu-box:8000/v1)"
NO_THINKING = (("extra_body", {"chat_template_kwargs": {"enable_thinking": False}}),)


@dataclass(frozen=True)
class ModelSpec:
    """A model of the paper by short name: its DSPy/litellm string, decoding defaults, and what it needs."""

    name: str
    model: str
    description: str
    needs: tuple[str, ...] = ()  # environment variables that must be set
    temperature: float = 0.0
    max_tokens: int = DEFAULT_MAX_TOKENS
    extra: tuple[tuple[str, Any], ...] = ()
    open_weights: bool = False  # served on an OpenAI-compatible endpoint given by VISTA_API_BASE

    def config(self, *, api_base: str | None = None, temperature: float | None = None,
               max_tokens: int | None = None, cache: bool = True, adapter: str = "json") -> ModelConfig:
        if self.open_weights and not (api_base or os.environ.get("VISTA_API_BASE")):
            raise ValueError(f"{self.name} has open weights: {OPEN_WEIGHTS_NOTE}, or pass --api-base")
        return ModelConfig(model=self.model, api_base=api_base or (os.environ.get("VISTA_API_BASE")
                                                                    if self.open_weights else None),
                           temperature=self.temperature if temperature is None else temperature,
                           max_tokens=max(self.max_tokens, max_tokens or 0), cache=cache, adapter=adapter,
                           extra=self.extra)

    def missing(self) -> list[str]:
        return [name for name in self.needs if not os.environ.get(name)]


MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec("gpt-4o", "openai/gpt-4o", "OpenAI GPT-4o", needs=("OPENAI_API_KEY",)),
    # DSPy requires temperature 1.0 and at least 16k output tokens for OpenAI's reasoning models.
    ModelSpec("gpt-5", "openai/gpt-5", "OpenAI GPT-5, low reasoning effort", needs=("OPENAI_API_KEY",),
              temperature=1.0, max_tokens=16000, extra=(("reasoning_effort", "low"),)),
    ModelSpec("deepseek-v3", "deepseek/deepseek-chat", "DeepSeek-V3 (deepseek-chat)", needs=("DEEPSEEK_API_KEY",)),
    ModelSpec("llama-3.1-8b", "hosted_vllm/meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B-Instruct",
              needs=("VISTA_API_BASE",), open_weights=True),
    ModelSpec("llama-3.1-70b", "hosted_vllm/meta-llama/Llama-3.1-70B-Instruct", "Llama-3.1-70B-Instruct",
              needs=("VISTA_API_BASE",), open_weights=True),
    ModelSpec("mistral-7b", "hosted_vllm/mistralai/Mistral-7B-Instruct-v0.3", "Mistral-7B-Instruct-v0.3",
              needs=("VISTA_API_BASE",), open_weights=True),
    ModelSpec("qwen3-8b", "hosted_vllm/Qwen/Qwen3-8B", "Qwen3-8B, thinking off", needs=("VISTA_API_BASE",),
              extra=NO_THINKING, open_weights=True),
    ModelSpec("qwen3-32b", "hosted_vllm/Qwen/Qwen3-32B", "Qwen3-32B, thinking off", needs=("VISTA_API_BASE",),
              extra=NO_THINKING, open_weights=True),
)}
LOCAL = "local"


def program_name_for(model: str | None) -> str:
    """The compiled program's name for a model: its short name, or a slug of the model string."""
    import re

    if model in (None, LOCAL):
        return LOCAL
    for spec in MODELS.values():
        if model in (spec.name, spec.model):
            return spec.name
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_")

"""The models a judge can run on: the paper's eight by short name, and the configuration that builds any DSPy/litellm
LM (``openai/gpt-4o``, ``deepseek/deepseek-chat``, ``hosted_vllm/...``, ``ollama_chat/...``) with decoding defaults
that make verdicts reproducible. How an LM reaches its endpoint (engines, adapters, caches) is ``clients``'.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import dspy

from .clients.adapters import build_adapter
from .clients.engines import SELF_HOSTED_PREFIX, endpoint_engines
from .clients.timings import TimedLM
from .offline import offline_litellm

DEFAULT_MAX_TOKENS = 1024


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
    # Whether the endpoint returns token log-probabilities: judges ask it for label probabilities (what a calibrated
    # program decides with) only then.
    logprobs: bool = True

    def build(self) -> dspy.LM:
        offline_litellm()  # should this LM's calls go through litellm, its import reads the price table it ships
        kwargs: dict = {}
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        if self.api_base:
            # Self-hosted OpenAI-compatible servers usually need no key, but the client insists on one.
            api_key = os.environ.get("VISTA_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
            if self.model.startswith(f"{SELF_HOSTED_PREFIX}/") and not self.extra:
                kwargs.pop("timeout", None)
                kwargs.update(endpoint_engines(self.api_base, api_key, self.timeout))
            else:
                kwargs.update(api_base=self.api_base, api_key=api_key)
            if self.model.startswith("openai/"):
                # DSPy's own HTTP engine speaks OpenAI's dialect here and sends `max_completion_tokens`, which
                # llama.cpp and older vLLM ignore; litellm sends `max_tokens` (as does `hosted_vllm/`).
                kwargs["engine"] = "litellm"
        return TimedLM(
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
    logprobs: bool = True  # the endpoint returns token log-probabilities (OpenAI's reasoning models do not)

    def config(self, *, api_base: str | None = None, temperature: float | None = None,
               max_tokens: int | None = None, cache: bool = True, adapter: str = "json") -> ModelConfig:
        if self.open_weights and not (api_base or os.environ.get("VISTA_API_BASE")):
            raise ValueError(f"{self.name} has open weights: {OPEN_WEIGHTS_NOTE}, or pass --api-base")
        return ModelConfig(model=self.model, api_base=api_base or (os.environ.get("VISTA_API_BASE")
                                                                    if self.open_weights else None),
                           temperature=self.temperature if temperature is None else temperature,
                           max_tokens=max(self.max_tokens, max_tokens or 0), cache=cache, adapter=adapter,
                           extra=self.extra, logprobs=self.logprobs)

    def missing(self) -> list[str]:
        return [name for name in self.needs if not os.environ.get(name)]

    @property
    def endpoint_variable(self) -> str:
        """The environment variable naming this open-weights model's own endpoint (e.g. VISTA_API_BASE_QWEN3_8B),
        for commands that address several models at once."""
        return "VISTA_API_BASE_" + re.sub(r"[^A-Z0-9]+", "_", self.name.upper())


def configured_models() -> tuple[list[tuple[str, str | None]], list[tuple[str, str]]]:
    """The paper's models this machine can reach, as (name, endpoint or None), and the others as (name, what is
    missing). A hosted model needs its key; an open-weights model its own endpoint (``endpoint_variable``)."""
    ready: list[tuple[str, str | None]] = []
    skipped: list[tuple[str, str]] = []
    for spec in MODELS.values():
        if spec.open_weights:
            endpoint = os.environ.get(spec.endpoint_variable)
            if endpoint:
                ready.append((spec.name, endpoint))
            else:
                skipped.append((spec.name, f"set {spec.endpoint_variable} to its OpenAI-compatible endpoint"))
        elif spec.missing():
            skipped.append((spec.name, "set " + ", ".join(spec.missing())))
        else:
            ready.append((spec.name, None))
    return ready, skipped


MODELS: dict[str, ModelSpec] = {spec.name: spec for spec in (
    ModelSpec("gpt-4o", "openai/gpt-4o", "OpenAI GPT-4o", needs=("OPENAI_API_KEY",)),
    # DSPy requires temperature 1.0 and at least 16k output tokens for OpenAI's reasoning models.
    ModelSpec("gpt-5", "openai/gpt-5", "OpenAI GPT-5, low reasoning effort", needs=("OPENAI_API_KEY",),
              temperature=1.0, max_tokens=16000, extra=(("reasoning_effort", "low"),), logprobs=False),
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


# Model strings whose endpoints return no token log-probabilities (Anthropic's API; OpenAI's reasoning models).
NO_LOGPROBS = re.compile(r"^(anthropic/|bedrock/|vertex_ai/claude|claude)|(^|/)(o1|o3|o4|gpt-5)")


def gives_logprobs(model: str) -> bool:
    """Whether a model string's endpoint is known to return token log-probabilities (assumed, unless known not)."""
    return NO_LOGPROBS.search(model) is None


def program_name_for(model: str | None) -> str:
    """The compiled program's name for a model: its short name, or a slug of the model string."""
    if model in (None, LOCAL, "local-0.5b"):
        return model or LOCAL
    for spec in MODELS.values():
        if model in (spec.name, spec.model):
            return spec.name
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("_")


def program_for_model(model: str | None) -> str:
    """The program `vista evaluate --model M` uses by default: <M>.json among the user's programs, else among the
    shipped ones, else the seed."""
    from ..compiled.files import SEED_PROGRAM, find_program

    name = program_name_for(model)
    return name if find_program(name) is not None else SEED_PROGRAM

"""Building the judge LM from a model name, with decoding defaults that make verdicts reproducible.

Any DSPy/litellm model string works (``openai/gpt-4o``, ``deepseek/deepseek-chat``, ``hosted_vllm/...``,
``ollama_chat/...``). Nothing here touches global DSPy settings except ``use_cache_for``, which the CLI calls once.
"""

from __future__ import annotations

import hashlib
import os
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
    cache: bool = True
    adapter: str = "json"
    # What makes cached answers valid; defaults to model + endpoint (see cache_dir_for).
    cache_identity: str | None = None

    def build(self) -> dspy.LM:
        kwargs: dict = {}
        if self.api_base:
            kwargs["api_base"] = self.api_base
            # Self-hosted OpenAI-compatible servers usually need no key, but the client insists on one.
            kwargs["api_key"] = os.environ.get("VISTA_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
            # litellm sends `max_tokens`, which llama.cpp and older vLLM read (DSPy's own engine sends
            # `max_completion_tokens`, which they ignore).
            kwargs["engine"] = "litellm"
        return dspy.LM(
            self.model,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            num_retries=self.num_retries,
            cache=self.cache,
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
        }


ADAPTERS = {"json": dspy.JSONAdapter, "chat": dspy.ChatAdapter}


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

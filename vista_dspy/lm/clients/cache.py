"""Where LM answers are cached: one disk cache per model and endpoint, under $VISTA_CACHE_DIR."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import dspy

if TYPE_CHECKING:
    from ..models import ModelConfig


def cache_root() -> Path:
    """Where vista-dspy keeps its caches (LM answers, the local model): $VISTA_CACHE_DIR or ~/.cache/vista-dspy."""
    return Path(os.environ.get("VISTA_CACHE_DIR") or Path.home() / ".cache" / "vista-dspy")


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

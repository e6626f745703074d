"""The loaders by format name: each loader module registers itself here (``load_dialogues`` looks names up)."""

from __future__ import annotations

from collections.abc import Callable

from ..schema import Dialogue

# A loader takes the path and, for whole-file JSON formats, the already parsed content (or None).
Loader = Callable[..., list[Dialogue]]
LOADERS: dict[str, Loader] = {}


def register(name: str) -> Callable[[Loader], Loader]:
    def add(loader: Loader) -> Loader:
        LOADERS[name] = loader
        return loader

    return add

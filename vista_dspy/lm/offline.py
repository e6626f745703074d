"""litellm without the network: its price table read from the copy it ships instead of fetched (three attempts with
5 s time-outs each on a closed network), and no environment variable left changed.

litellm (1.110.2) decides once, while ``import litellm`` runs (``get_model_cost_map``), by reading
``LITELLM_LOCAL_MODEL_COST_MAP``; only its proxy's reload reads it again. DSPy imports litellm late, at an LM's first
call through litellm, in whatever thread makes it, and a self-hosted endpoint on DSPy's own HTTP client never imports
it at all. So ``offline_litellm()`` does not import it: it makes that import, whenever it comes, run with the variable
set, and restores the variable as soon as the import is done. A value the user set is left alone.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

VARIABLE, VALUE = "LITELLM_LOCAL_MODEL_COST_MAP", "True"
_HOOK = threading.Lock()  # LMs are built in several threads at once


def offline_litellm() -> None:
    """Have litellm's import (now or on first use) read its own price table; nothing to do once it is imported.
    Called where the package builds an LM and where the ``vista`` command starts."""
    with _HOOK:
        if "litellm" not in sys.modules and _FINDER not in sys.meta_path:
            sys.meta_path.insert(0, _FINDER)


@contextmanager
def local_cost_map() -> Iterator[None]:
    """``LITELLM_LOCAL_MODEL_COST_MAP=True`` inside the block unless it is set already; unset again after."""
    added = VARIABLE not in os.environ
    if added:
        os.environ[VARIABLE] = VALUE
    try:
        yield
    finally:
        if added:
            os.environ.pop(VARIABLE, None)


class _OfflineLoader(importlib.abc.Loader):
    """litellm's own loader, running the module under ``local_cost_map``."""

    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        try:
            with local_cost_map():
                self.loader.exec_module(module)
        finally:
            with _HOOK:  # asked once: litellm is in sys.modules from now on
                if _FINDER in sys.meta_path:
                    sys.meta_path.remove(_FINDER)

    def __getattr__(self, name: str):  # resource readers, get_source ...: the wrapped loader's
        return getattr(self.loader, name)


class _OfflineFinder(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: finds litellm as the finders after it do, with the loader wrapped."""

    def find_spec(self, name, path=None, target=None):
        if name != "litellm":
            return None
        for finder in sys.meta_path:
            spec = None if finder is self else getattr(finder, "find_spec", lambda *_: None)(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _OfflineLoader(spec.loader)
                return spec
        return None


_FINDER = _OfflineFinder()

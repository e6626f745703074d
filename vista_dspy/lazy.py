"""Package faces that import nothing until a name is used (PEP 562): ``import vista_dspy.schema`` stays free of
DSPy and litellm, and a folder's ``__init__`` re-exports what callers use without loading its modules."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def exports(package: str, names_by_module: dict[str, tuple[str, ...]]
            ) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """``__getattr__``, ``__dir__`` and ``__all__`` for ``package``: each name is taken from its module (relative
    to the package, e.g. ``"runner"``) the first time it is asked for, then kept on the package."""
    where = {name: module for module, names in names_by_module.items() for name in names}

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return __getattr__, __dir__, sorted(where)

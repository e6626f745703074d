"""The ``vista`` command: a thin layer over the library (the tests call the same functions), one module per command
group: ``evaluate``; ``benchmark`` and ``report``; ``compile`` and ``study``; ``models`` and ``serve``;
``pairs``; ``data``."""

from __future__ import annotations

import os

from . import benchmark, compile, data, evaluate, models, pairs  # noqa: F401 — each registers its commands on the app
from .app import app

__all__ = ["app", "main"]


def main() -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    app()

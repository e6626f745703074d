"""The ``vista`` command: a thin layer over the library (the tests call the same functions), one module per command
group: ``evaluate``; ``benchmark`` and ``report``; ``gate`` (a candidate against the seed on the instrument); ``compile``; ``study`` and ``study-page``; (their --train / --dev dialogues:
``train_dev``); ``models`` and ``serve``; ``pairs``; ``data`` (fetching the datasets); shared options in ``common``, the app in ``app``. ``main``
keeps litellm off the network (``lm.offline``) before any command runs."""

from __future__ import annotations

from ..lm.offline import offline_litellm
from . import benchmark, compile, data, evaluate, gate, models, pairs, study  # noqa: F401 — each registers its commands on the app
from .app import app

__all__ = ["app", "main"]


def main() -> None:
    offline_litellm()
    app()

"""A VISTA judge set up inside other code: its program, and the LM it judges under, from a judge given by name or as a
``dspy.LM``. ``VistaMetric`` and ``VistaReward`` each judge through one.

The program is built first, from names alone (``lm.server.endpoint_options``): a program that asks no LM -- the
evidence over the turn's sentences, ``system="evidence", units="sentences"`` -- gets none, and no model is resolved
for it (no weights are looked for, no server is started), so that tier judges without the ``[local]`` extra. An
embedded model is started on first use and stopped by ``close``.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import dspy

from ..program import Vista

SYSTEMS = ("vista", "evidence")


class JudgeSetup:
    """A VISTA program with the LM, adapter and embedded server (if any) it judges under.

    Args:
        judge: the judge's LM: "local" (the embedded model), "local-0.5b", a model short name (``vista models``) or
            DSPy/litellm string, or a ``dspy.LM``.
        program: the VISTA program: a path or name (default: the compiled program for ``judge`` when one ships,
            else the seed).
        system: "vista" (the program's method) or "evidence" (its claims decided by its evidence model alone).
        port: the embedded server's port.
        **options: judging options of the program (``JudgeOptions`` names); they win over the endpoint's.

    ``program`` is the judge (a ``Vista``); ``lm`` and ``adapter`` are None when it asks no LM; ``model`` is the
    judge's name.
    """

    def __init__(self, judge: str | dspy.BaseLM = "local", program: str | Path | None = None, *,
                 system: str = "vista", port: int | None = None, **options: Any) -> None:
        from ..lm.models import program_for_model
        from ..lm.server import endpoint_options

        if system not in SYSTEMS:
            raise ValueError(f"unknown system {system!r}: vista or evidence")
        self.model = judge if isinstance(judge, str) else getattr(judge, "model", None)
        endpoint = {} if isinstance(judge, dspy.BaseLM) else endpoint_options(judge)
        build = Vista.evidence_from_program if system == "evidence" else Vista.from_program
        self.program = build(program or program_for_model(self.model), **{**endpoint, **options})
        self.lm: dspy.BaseLM | None = None
        self.adapter: dspy.Adapter | None = None
        self._server = None
        if self.program.needs_lm:
            self.lm, self.adapter, self._server = _judge_lm(judge, port)
        if self._server is not None:
            self._server.program_key = self.program.content_hash()  # its warm start
        self._lock = threading.Lock()
        self._started = False

    @property
    def waiting_to_start(self) -> bool:
        """Whether an embedded server is still to be started (``start`` blocks while it loads)."""
        return self._server is not None and not self._started

    def start(self) -> None:
        """Start the embedded server, if any and not yet started (thread-safe)."""
        if not self.waiting_to_start:
            return
        with self._lock:
            if not self._started:
                self._server.__enter__()
                self._started = True

    def close(self) -> None:
        """Stop the embedded server this judge started (if any)."""
        if self._server is not None and self._started:
            self._server.__exit__(None, None, None)
            self._started = False


def _judge_lm(judge: str | dspy.BaseLM, port: int | None):
    """(LM, adapter, embedded server or None) of a judge given by name or LM."""
    from ..lm.clients.adapters import build_adapter
    from ..lm.models import MODELS, ModelConfig, gives_logprobs
    from ..lm.server import DEFAULT_PORT, LocalServer, embedded_settings, local_model_config
    from ..lm.weights import EMBEDDED

    if isinstance(judge, dspy.BaseLM):
        return judge, build_adapter("json"), None
    if judge in EMBEDDED:
        settings = embedded_settings(judge, port=port or DEFAULT_PORT)
        config = local_model_config(settings)
        return config.build(), config.build_adapter(), LocalServer(settings, warm_start=True)
    config = MODELS[judge].config() if judge in MODELS else ModelConfig(model=judge, logprobs=gives_logprobs(judge))
    return config.build(), config.build_adapter(), None

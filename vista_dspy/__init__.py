"""vista-dspy: VISTA (Verification In Sequential Turn-based Assessment) as a compiled DSPy program.

The method is at the package root, readable top to bottom as the paper's algorithm (``schema``, ``options``,
``signatures``, ``program``, ``stages``, ``batching``, ``prompts``, ``grounding``, ``evidence``, ``decision``,
``scoring``, ``metrics``, ``seed``, ``baselines``); the folders hold the rest: ``data/`` (loaders), ``compiled/``
(program files), ``lm/`` (models, clients, the embedded server), ``optimize/`` (choosing a program), ``run/``
(batch runs, VISTA as a metric, a reward or a test assertion), ``experiments/`` (benchmarks, tables, reports) and
``cli/``.
Names below load their module on first use, so the typed records import without DSPy.
"""

import os

from .lazy import exports

# litellm otherwise fetches a price table from the network on first use (5 s time-outs offline).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__getattr__, __dir__, __all__ = exports(__name__, {
    "decision": ("DecisionRule",),
    "options": ("JudgeOptions",),
    "program": ("Vista",),
    "run.judge_metric": ("VistaMetric",),
    "run.reward": ("VistaReward",),
    "schema": ("Category", "ClaimVerdict", "Dialogue", "DialogueVerdict", "GoldClaim", "Grounding", "Turn",
               "TurnGold", "TurnVerdict"),
})
__version__ = "0.1.0"

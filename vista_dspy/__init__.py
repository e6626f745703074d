"""vista-dspy: VISTA (Verification In Sequential Turn-based Assessment) as a compiled DSPy program.

The method is at the package root, readable top to bottom as the paper's algorithm (``schema``, ``options``,
``signatures``, ``program``, ``stages``, ``batching``, ``prompts``, ``grounding``, ``evidence``, ``decision``,
``label_probabilities``, ``claim_verdicts``, ``spans``, ``scoring``, ``baselines``); the folders hold the rest:
``data/`` (loaders), ``compiled/`` (program files, and a judge loaded from and saved to one), ``lm/`` (models,
clients, the embedded server, a fake LM for tests), ``optimize/`` (choosing a program, the seed program's demos, and
the statistics it chooses by), ``run/`` (batch runs, VISTA as a metric, a reward or a test assertion),
``experiments/`` (benchmarks, tables, reports), ``integrations/`` (scorers for MLflow, Inspect AI, Langfuse) and
``cli/``.
Names below load their module on first use (``lazy``), so the typed records import without DSPy. Importing the
package changes no environment variable (``lm.offline``: how litellm is kept off the network).
"""

from typing import TYPE_CHECKING

from .lazy import exports

if TYPE_CHECKING:  # what an editor and a type checker see; at run time each name loads on first use
    from .decision import DecisionRule
    from .options import JudgeOptions
    from .program import Vista
    from .run.judge_metric import VistaMetric
    from .run.reward import VistaReward
    from .schema import (
        Category,
        ClaimVerdict,
        Dialogue,
        DialogueVerdict,
        GoldClaim,
        Grounding,
        Turn,
        TurnGold,
        TurnVerdict,
    )

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

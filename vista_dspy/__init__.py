"""vista-dspy: VISTA (Verification In Sequential Turn-based Assessment) as a compiled DSPy program."""

import os

# litellm otherwise fetches a price table from the network on first use (5 s time-outs offline).
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from .decision import DecisionRule  # noqa: E402
from .judge_metric import VistaMetric  # noqa: E402
from .options import JudgeOptions  # noqa: E402
from .program import Vista  # noqa: E402
from .schema import (  # noqa: E402
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

__all__ = [
    "Category",
    "ClaimVerdict",
    "DecisionRule",
    "Dialogue",
    "DialogueVerdict",
    "GoldClaim",
    "Grounding",
    "JudgeOptions",
    "Turn",
    "TurnGold",
    "TurnVerdict",
    "Vista",
    "VistaMetric",
]
__version__ = "0.1.0"

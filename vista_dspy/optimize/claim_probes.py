"""Human-labelled claims as a model judged them with both stages (``ClaimProbe``), and the label space they are
scored in: what the ``claims`` optimizer chooses on (``probing``) and wave 3's calibration was fitted on.
Records only: importing them loads neither DSPy nor an LM client.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

CATEGORIES: tuple[str, ...] = ("LACKING EVIDENCE", "OUT-OF-SCOPE", "ABSTENTION", "CONTRADICTED")
# The decision space, in this order: VERIFIED, then the four categories.
LABELS: tuple[str, ...] = ("VERIFIED", *CATEGORIES)
UNSAFE: frozenset[str] = frozenset({"LACKING EVIDENCE", "CONTRADICTED"})


class ClaimProbe(BaseModel):
    """One human-labelled claim as a model judged it with both stages (``JudgeOptions.categorize_all``): what claim
    decisions are scored with (``probing.claim_scores``, ``probing.turn_accuracy``) and calibration is fitted on."""

    model_config = ConfigDict(frozen=True)

    dialogue_id: str
    turn_index: int
    position: int = 0  # the claim's place in its turn
    claim: str
    gold: str  # one of LABELS
    raw: str  # the model's own decision: one of LABELS, or ERROR
    verify: dict[str, float] | None = None
    categorize: dict[str, float] | None = None

    @property
    def calibratable(self) -> bool:
        """Both distributions were read and the model answered (a calibration can decide it)."""
        return self.verify is not None and self.categorize is not None and self.raw != "ERROR"

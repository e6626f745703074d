"""The priced study: ``run`` (the choices, the objective data, what a trial measured, the optuna study), ``plan``
(the designs a new study measures first, and requeuing), ``result`` (the committed result: the front, a pick
within a budget, its gate against the seed). The face re-exports ``run``'s names and the plan's designs."""

from ...lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "run": ("INSTRUCTIONS", "LABEL_LETTERS", "NO_CASCADE", "OBJECTIVES", "SELECTION_SEEDS", "STAGES", "UNSAFE",
            "Choice", "Judge", "ObjectiveData", "Outcome", "band_label", "band_named", "base_params", "candidate",
            "claim_key", "measure", "program_judge", "reads_pool", "run_study", "search_space", "suggest"),
    "plan": ("DESIGNS", "LATER_CHOICES", "NARROW_BANDS", "NO_LM_BAND", "START_DESIGNS"),
    "result": ("SEED_MARK", "SHIPPED_MARK", "StudyResult", "StudyStore"),
})

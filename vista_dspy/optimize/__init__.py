"""Everything that chooses a program for a model, by concern.

- ``compile``: the one compile's parts (the estimate before any call, the test part read once, what a program was
  fitted on, saving); ``gate``: the one gate, anchored to the seed (non-inferior within 1 point of balanced
  accuracy, paired bootstrap over dialogues, McNemar beside it), the paired tests and the meta record; ``metrics``:
  the statistics that compare judges (accuracy, F1, McNemar, Krippendorff's alpha, claim matching) and what a judged
  turn costs (server time or litellm's prices).
- ``study/``: the priced optuna study (accuracy against cost per judged turn), its plan and its committed result.
- ``rules/``: a program's decision rule, fitted with no LM on judged turns or a recorded probe.
- ``demos``: human-labelled claims judged with label probabilities, the claim-level scores, demo pools (built when a
  trial first reads one) and budgets.
- ``seed_program``: the seed program's hand-written demos (the paper's method, the base of every gate) and the script
  that writes ``compiled/seed.json`` from them.
"""

from ..lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "compile": ("CompileResult", "Estimate", "check_fitted_on", "data_record", "estimate", "save_compiled"),
    "demos": ("DEFAULT_DEMOS", "parse_demos"),
    "gate": ("PairedTest", "ProgramMeta", "SeedGate", "anchored_gate", "seed_gate"),
    "study": ("run_study", "StudyResult"),
})

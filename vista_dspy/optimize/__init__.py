"""Everything that chooses a program for a model.

- ``compile``: the one compile's parts (the estimate before any call, the test part read once, what a program was
  fitted on, saving); ``gate``: the one gate, anchored to the seed (non-inferior within 1 point of balanced
  accuracy, paired bootstrap over dialogues, McNemar beside it), the paired tests and the meta record; ``metrics``:
  the statistics that compare judges (accuracy, F1, McNemar, Krippendorff's alpha, claim matching).
- The optimizers: ``rule_fitting`` (the default ``rule``: a decision rule fitted on judged turns, scored on them,
  chosen cross-fitted); ``rule_gate`` (the claim threshold with a turn model, or issue 35's two thresholds, chosen two-fold and
  gated on a recorded probe, no LM); ``turn_fitting`` (a rule's turn model, chosen by held-out log-likelihood);
  ``probe_compile`` (the program a live probe recorded, with that rule); ``study`` (the priced optuna study: accuracy against cost per judged turn),
  ``study_result`` (its committed result: the Pareto front, a pick within a budget, its gate against the seed),
  ``pricing`` (server time or litellm's prices).
- Their shared parts: ``judged_turns`` (judged turns and claims as a rule sees them, labelled through the human
  claims); ``probe_records`` (a real-model probe's turns saved and read back); ``probing`` (judging human claims
  with label probabilities, claim-level scores); ``claim_probes`` (those claims' records and label space);
  ``cross_fitting`` (folds by dialogue, and fitting on the other folds); ``demos`` (pools and budgets).
- ``seed_program``: the seed program's hand-written demos (the paper's method, the base of every gate) and the script
  that writes ``compiled/seed.json`` from them.
"""

from ..lazy import exports

__getattr__, __dir__, __all__ = exports(__name__, {
    "compile": ("CompileResult", "Estimate", "check_fitted_on", "data_record", "estimate", "save_compiled"),
    "demos": ("DEFAULT_DEMOS", "parse_demos"),
    "gate": ("PairedTest", "ProgramMeta", "SeedGate", "anchored_gate", "seed_gate"),
    "study": ("run_study",),
    "study_result": ("StudyResult",),
})

"""A program's decision rule, fitted with no LM on what a judge answered: ``judged_turns`` (judged turns and claims as
a rule sees them, labelled through the human claims), ``cross_fitting`` (folds by dialogue), ``rule_fitting`` (the
rule's weights, thresholds and cascade, chosen cross-fitted), ``turn_fitting`` (its turn model, chosen by held-out
log-likelihood), ``probe_records`` (a real-model probe's turns saved and read back), ``rule_gate`` (recipes chosen
two-fold on a probe, and their paired check) and ``probe_compile`` (`vista compile --probe`: the program a probe
recorded, with its rule)."""

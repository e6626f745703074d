"""A program's decision rule, fitted with no LM on what a judge answered: ``judged_turns`` (judged turns and claims as
a rule sees them, labelled through the human claims), ``cross_fitting`` (folds by dialogue), ``rule_fitting`` (the
rule's weights, thresholds and cascade, chosen cross-fitted), ``turn_fitting`` (its turn model, chosen by held-out
log-likelihood), ``probe_records`` (a real-model probe's turns saved and read back), ``recipes`` (rules chosen
on judged turns, two-fold over a probe's halves, and gated against the seed's own decisions with the one gate)."""

"""Calibration on saved probabilities, no LM call: a probe run of the seed (every human claim judged with both stages
and label probabilities, `vista evaluate --judge-given-claims` with ``categorize_all``) read back, a calibration
fitted on the claims of one part and scored on another.

    python benchmarks/calibration_offline.py benchmarks/runs/probe-1.5b-seed [--fit train --score dev]

Printed, for the model's own labels and each calibration objective: the claim decision accuracy (safe/unsafe as the
annotators), five-way accuracy and macro-F1 on the fitting part (cross-fitted over two folds of dialogues) and on the
scored part (fitted on the whole fitting part), the turn accuracy of the labels these decisions give the turns
(hallucinated iff a claim is unsafe, against the annotators' claims), the predicted shares beside the annotators',
and the exact McNemar test against the model's own labels on the scored claims. The knowledge store each claim was
judged against is the one the model's own decisions built; a calibrated judge may build another, which only an
end-to-end run shows.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compiled_table import DEFAULT_DATA

from vista_dspy.data import PARTS, load_dialogues, part_of
from vista_dspy.optimize.calibration import OBJECTIVES, cross_fitted, decisions, fit
from vista_dspy.optimize.claim_probes import LABELS, UNSAFE
from vista_dspy.optimize.cross_fitting import folds
from vista_dspy.optimize.gate import PairedTest
from vista_dspy.optimize.probing import claim_scores, decision_right, probes_of, turn_accuracy
from vista_dspy.run.runner import VERDICTS, read_verdicts


def unsafe_auc(probes) -> float:
    from sklearn.metrics import roc_auc_score

    usable = [p for p in probes if p.calibratable]
    unsafe = [(1 - p.verify["VERIFIED"]) * (p.categorize["LACKING EVIDENCE"] + p.categorize["CONTRADICTED"])
              / sum(p.categorize.values()) for p in usable]
    return float(roc_auc_score([p.gold in UNSAFE for p in usable], unsafe))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="an output directory of a probe run (verdicts.jsonl)")
    parser.add_argument("--fit", choices=PARTS, default="train")
    parser.add_argument("--score", choices=PARTS, default="dev")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = parser.parse_args()

    dialogues = load_dialogues(args.data)
    verdicts = {v.dialogue_id: v for v in read_verdicts(args.run / VERDICTS)}
    parts = {}
    for name in (args.fit, args.score):
        chosen = [d for d in part_of(dialogues, name) if d.id in verdicts and d.judged_turns]
        parts[name] = (chosen, [p for d in chosen for p in probes_of(verdicts[d.id])])
    fit_dialogues, fit_probes = parts[args.fit]
    score_dialogues, score_probes = parts[args.score]
    fold_of = {d.id: f for f, fold in enumerate(folds(fit_dialogues, 2)) for d in fold}
    print(f"{args.run}: fitting on {args.fit} ({len(fit_dialogues)} dialogues, {len(fit_probes)} claims), scoring on "
          f"{args.score} ({len(score_dialogues)} dialogues, {len(score_probes)} claims); claims with probabilities: "
          f"{sum(p.calibratable for p in fit_probes)} and {sum(p.calibratable for p in score_probes)}\n")
    gold_fit, gold_score = [p.gold for p in fit_probes], [p.gold for p in score_probes]
    raw_right = decision_right([p.raw for p in score_probes], gold_score)
    print(f"| decisions | {args.fit}, cross-fitted: turn acc | decision acc | accuracy | macro-F1 | {args.score}: turn "
          f"acc | decision acc | accuracy | macro-F1 | vs own labels on {args.score} | calibration (fitted on all of "
          f"{args.fit}) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    shares = {}
    for objective in ("none", *OBJECTIVES):
        if objective == "none":
            train_decided, calibration = [p.raw for p in fit_probes], None
        else:
            train_decided = cross_fitted(fit_probes, fold_of, objective)[0]
            calibration = fit(fit_probes, objective)
        scored = decisions(score_probes, calibration)
        on_fit, on_score = claim_scores(train_decided, gold_fit), claim_scores(scored, gold_score)
        test = PairedTest.of(decision_right(scored, gold_score), raw_right)
        shares[objective] = on_score["shares"]
        print(f"| {objective} | {turn_accuracy(fit_probes, train_decided):.3f} | {on_fit['decision_accuracy']:.3f} | "
              f"{on_fit['accuracy']:.3f} | {on_fit['macro_f1']:.3f} | {turn_accuracy(score_probes, scored):.3f} | "
              f"{on_score['decision_accuracy']:.3f} | {on_score['accuracy']:.3f} | {on_score['macro_f1']:.3f} | "
              f"+{test.candidate_only} / −{test.base_only}, p = {test.pvalue:.3f} | "
              f"{calibration.describe() if calibration else '—'} |")
    for name, probes in ((args.fit, fit_probes), (args.score, score_probes)):
        print(f"\n{name}: area under the ROC curve of the model's probability of an unsafe label (1 - P(VERIFIED), "
              f"times the unsafe categories' share) for the claims the annotators call unsafe: "
              f"{unsafe_auc(probes):.3f}")
    print(f"\n| predicted share on {args.score} | " + " | ".join(LABELS) + " |")
    print("|" + "---|" * (len(LABELS) + 1))
    gold_shares = claim_scores(gold_score, gold_score)["shares"]
    print("| annotators | " + " | ".join(f"{gold_shares[k]:.3f}" for k in LABELS) + " |")
    for objective, found in shares.items():
        print(f"| {objective} | " + " | ".join(f"{found[k]:.3f}" for k in LABELS) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

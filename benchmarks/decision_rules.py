"""Decision rules on a real model's saved answers, no LM call: the probe of ``decision_probe.py`` read back, rules
fitted and scored offline, every number cross-fitted by dialogue.

    python benchmarks/decision_rules.py --model local [--json out.json]

Two protocols, both printed:
- ``train -> dev``: everything chosen on vista-human:train (feature set, thresholds, cascade band: cross-fitted over
  two folds of its dialogues), the rule fitted on all of train, scored on the vista-human:dev turns no choice saw;
- ``2-fold``: the same recipe run on each half and scored on the other; every judged turn of the file is then
  decided by a rule that never saw its dialogue (twice the turns of one half).

Rows: the seed (the judge's own labels, the paper's method); the seed with a calibration of its label probabilities
(wave 3's mechanism, fitted on the same claims with the turn objective); the evidence alone (no Verify or
Categorize answer: the `vista benchmark --system evidence` baseline); the seed's answers decided by the chosen rule;
the rule with its cascade. Columns: turn accuracy, P/R/F1 of the hallucinated class, claim decision accuracy and
five-way accuracy / macro-F1 on the claims with an annotators' judgement (the human claims of the ``human`` pass
where it exists, else the decomposed claims matched to a human claim), predicted shares beside the annotators', LM
calls per judged turn, the exact McNemar test on turns against the seed.

Replays keep the seed's knowledge store (the deployed rule accumulates its own decisions); calls per turn for the
cascade are those the program would make on the same claims.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from decision_probe import DEFAULT_DATA, probe_dir

from vista_dspy.data import load_dialogues, part_of
from vista_dspy.evidence import CUES
from vista_dspy.lm.weights import EMBEDDED
from vista_dspy.optimize.calibration import decisions, fit
from vista_dspy.optimize.claim_probes import ClaimProbe
from vista_dspy.optimize.cross_fitting import folds
from vista_dspy.optimize.gate import PairedTest
from vista_dspy.optimize.judged_turns import TurnRows, turns_of
from vista_dspy.optimize.rule_fitting import (
    TurnDecision,
    choose_rule,
    claim_decisions,
    fit_rule,
    replay,
    scores,
    turn_rights,
    with_cascade,
)
from vista_dspy.run.runner import VERDICTS, read_verdicts
from vista_dspy.schema import Category
from vista_dspy.scoring import turn_label


def calibrated(turns: list[TurnRows], fitted_on: list[TurnRows]) -> list[TurnDecision]:
    """The seed's answers decided by a wave-3 calibration fitted on ``fitted_on`` (objective: turns)."""
    def probes(part: list[TurnRows], *, known: bool) -> list[ClaimProbe]:
        return [ClaimProbe(dialogue_id=t.dialogue_id, turn_index=t.turn_index, position=i, claim=r.claim,
                           gold=r.gold or "VERIFIED", raw=r.judge, verify=r.verify, categorize=r.categorize_all)
                for t in part for i, r in enumerate(t.rows) if r.gold is not None or not known]

    calibration = fit(probes(fitted_on, known=True), "turns")
    out = []
    for t in turns:
        categories = decisions(probes([t], known=False), calibration)
        out.append(TurnDecision(t, categories, [None] * len(categories), [False] * len(categories),
                                turn_label([Category(c) for c in categories], failed=t.failed)))
    return out


def recipe(train: list[TurnRows], score: list[TurnRows], fold_of: dict[str, int]) -> dict[str, list[TurnDecision]]:
    """Every row's decisions of ``score`` with everything chosen on ``train``."""
    rule, record = choose_rule(train, fold_of)
    evidence = fit_rule(train, CUES)
    no_cascade = with_cascade(rule, None)
    return {
        "seed": replay(score, None),
        "seed + calibration": calibrated(score, train),
        "evidence only": replay(score, evidence, judge=False),
        f"seed + rule ({record['chosen']})": replay(score, no_cascade),
        f"rule + cascade ({record.get('cascade_chosen')})": replay(score, rule),
    }, rule, record


def table(rows: dict[str, list[TurnDecision]], human: dict[str, list[TurnDecision]] | None) -> list[str]:
    lines = ["| decisions | turns | turn acc. | P / R / F1 (hallucinated) | claim decisions | five-way acc. / "
             "macro-F1 | LM calls / turn | vs seed (turns) |", "|---|---|---|---|---|---|---|---|"]
    seed_right = turn_rights(rows["seed"])
    for name, decided in rows.items():
        s = scores(decided)
        claims = scores(human[name])["claims"] if human and name in human else s["claims"]
        test = PairedTest.of(turn_rights(decided), seed_right)
        lines.append(f"| {name} | {s['turns']} | {s['accuracy']:.3f} | {s['precision']:.2f} / {s['recall']:.2f} / "
                     f"{s['f1']:.2f} | {claims.get('decision_accuracy', 0):.3f} | {claims.get('accuracy', 0):.3f} / "
                     f"{claims.get('macro_f1', 0):.3f} | {s['calls_per_turn']:.2f} | "
                     f"+{test.candidate_only} / −{test.base_only}, p = {test.pvalue:.3f} |")
    return lines


def shares(rows: dict[str, list[TurnDecision]]) -> list[str]:
    labels = ("VERIFIED", "OUT-OF-SCOPE", "ABSTENTION", "LACKING EVIDENCE", "CONTRADICTED")
    lines = ["| decisions | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    first = next(iter(rows.values()))
    _, gold = claim_decisions(first)
    lines.append("| annotators | " + " | ".join(f"{gold.count(x) / max(len(gold), 1):.2f}" for x in labels) + " |")
    for name, decided in rows.items():
        categories, _ = claim_decisions(decided)
        lines.append(f"| {name} | " + " | ".join(f"{categories.count(x) / max(len(categories), 1):.2f}"
                                                 for x in labels) + " |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(EMBEDDED), default="local")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--json", type=Path, default=None, help="also write every number here")
    args = parser.parse_args()

    dialogues = {d.id: d for d in load_dialogues(args.data)}
    found = {}
    for name in ("decomposed", "human"):
        path = probe_dir(args.model, name) / VERDICTS
        if path.is_file():
            found[name] = {v.dialogue_id: v for v in read_verdicts(path)}
    if "decomposed" not in found:
        print(f"no probe at {probe_dir(args.model, 'decomposed')}: run decision_probe.py first", file=sys.stderr)
        return 2
    ordered = list(dialogues.values())
    halves = {part: [d for d in part_of(ordered, part) if d.id in found["decomposed"] and d.judged_turns]
              for part in ("train", "dev")}
    out: dict = {"model": args.model, "dialogues": {p: len(v) for p, v in halves.items()}}

    def turns(name: str, part: str) -> list[TurnRows]:
        verdicts = found.get(name, {})
        return turns_of([verdicts[d.id] for d in halves[part] if d.id in verdicts], dialogues)

    print(f"# {args.model}: probe of {sum(map(len, halves.values()))} dialogues "
          f"({', '.join(f'{p} {len(v)}' for p, v in halves.items())}); human pass: {'human' in found}\n")
    every = turns("decomposed", "train") + turns("decomposed", "dev")
    empty = [t for t in every if not t.rows and not t.failed]
    matched = sum(r.gold is not None for t in every for r in t.rows)
    print(f"{len(every)} judged turns, {sum(len(t.rows) for t in every)} decomposed claims ({matched} matched to a "
          f"human claim); {len(empty)} turns without a claim, {sum(t.gold_label == 'hallucinated' for t in empty)} "
          "of them hallucinated by their gold label\n")
    out["empty_turns"] = {"turns": len(empty), "hallucinated": sum(t.gold_label == "hallucinated" for t in empty)}
    for protocol, pairs in (("train -> dev", [("train", "dev")]), ("2-fold", [("train", "dev"), ("dev", "train")])):
        merged: dict[str, list[TurnDecision]] = {}
        merged_human: dict[str, list[TurnDecision]] = {}
        records = []
        for fit_part, score_part in pairs:
            fold_of = {d.id: f for f, fold in enumerate(folds(halves[fit_part], 2)) for d in fold}
            rows, rule, record = recipe(turns("decomposed", fit_part), turns("decomposed", score_part), fold_of)
            records.append({"fitted_on": fit_part, "rule": rule.model_dump(mode="json"), "choice": record})
            for key, decided in rows.items():
                merged.setdefault(key.split(" (")[0], []).extend(decided)
            if "human" in found:
                human_rows = turns("human", score_part)
                evidence = fit_rule(turns("decomposed", fit_part), CUES)
                no_cascade = with_cascade(rule, None)
                for key, decided in (("seed", replay(human_rows, None)),
                                     ("evidence only", replay(human_rows, evidence, judge=False)),
                                     ("seed + rule", replay(human_rows, no_cascade)),
                                     ("rule + cascade", replay(human_rows, rule))):
                    merged_human.setdefault(key, []).extend(decided)
        print(f"## {protocol}\n")
        print("\n".join(table(merged, merged_human or None)))
        print("\nPredicted shares of the claims with an annotators' judgement (decomposed, matched):\n")
        print("\n".join(shares(merged)))
        for r in records:
            print(f"\nchosen on {r['fitted_on']}: {r['choice']['chosen']}, cascade {r['choice'].get('cascade_chosen')}")
        print()
        out[protocol] = {"rows": {k: scores(v) for k, v in merged.items()},
                         "human_claims": {k: scores(v)["claims"] for k, v in merged_human.items()},
                         "records": records}
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

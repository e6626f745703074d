"""The shipped evidence rule (``vista_dspy/compiled/evidence.json``): the cues of the human claims of
vista-human:train fitted to the annotators' judgements, no LM call. `vista benchmark --systems evidence` (and
`vista evaluate --system evidence`) decide with it when the program has no rule of its own.

    python benchmarks/fit_evidence_rule.py [--data ../shared/data/vista_human_eval/dev.json] [--check]

Each turn's knowledge store is built as the method builds it, from the annotators' own judgements: the human
claims of the earlier judged turns that they found verifiable or out of scope, and the texts of the background
turns. The threshold is the one that gives the most train turns their gold label. Printed: the train numbers
(cross-fitted over two folds of dialogues) and, on the human claims of vista-human:dev, the numbers of the shipped
rule. ``--check`` writes nothing and fails if the shipped file differs from what this fit gives.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from decision_probe import DEFAULT_DATA

from vista_dspy import Vista
from vista_dspy.compiled.files import EVIDENCE_PROGRAM, compiled_dir, read_program, write_program
from vista_dspy.data import load_dialogues, part_of
from vista_dspy.evidence import CUES, evidence_of
from vista_dspy.optimize.compile import data_record
from vista_dspy.optimize.gate import ProgramMeta
from vista_dspy.optimize.rules.cross_fitting import folds
from vista_dspy.optimize.rules.judged_turns import ClaimRow, TurnRows
from vista_dspy.optimize.rules.rule_fitting import cross_fitted, fit_rule, replay, scores

SAFE = ("VERIFIED", "OUT-OF-SCOPE")


def human_turns(dialogues) -> list[TurnRows]:
    turns = []
    for dialogue in dialogues:
        knowledge: list[str] = []
        for index, turn in enumerate(dialogue.turns):
            if turn.role != "assistant":
                continue
            if not turn.judged:
                knowledge.append(turn.text)
                continue
            gold = turn.gold
            if gold is None or not gold.claims:
                continue
            evidence = evidence_of(dialogue, index, knowledge)
            rows = [ClaimRow(c.text, evidence.cues(c.text), None, None, "VERIFIED", c.category.value)
                    for c in gold.claims]
            turns.append(TurnRows(dialogue.id, index, gold.label, rows))
            knowledge.extend(c.text for c in gold.claims if c.category.value in SAFE)
    return turns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--check", action="store_true", help="fail if the shipped rule differs; write nothing")
    args = parser.parse_args()

    dialogues = load_dialogues(args.data)
    train, dev = part_of(dialogues, "train"), part_of(dialogues, "dev")
    train_turns, dev_turns = human_turns(train), human_turns(dev)
    fold_of = {d.id: f for f, fold in enumerate(folds([d for d in train if d.judged_turns], 2)) for d in fold}
    crossed = cross_fitted(train_turns, fold_of, lambda part: fit_rule(part, CUES))[0]
    rule = fit_rule(train_turns, CUES, fitted={"claims": sum(len(t.rows) for t in train_turns),
                                               "turns": len(train_turns), "source": "human claims",
                                               "data": "vista-human:train", "features": "evidence"})
    measured = {}
    for name, decided in (("train, cross-fitted", crossed), ("dev, the shipped rule", replay(dev_turns, rule))):
        s = measured[name] = scores(decided)
        c = s["claims"]
        print(f"{name}: {s['turns']} turns, turn accuracy {s['accuracy']:.3f} (F1 {s['f1']:.3f}); "
              f"{c['claims']} claims: decisions {c['decision_accuracy']:.3f}, five-way {c['accuracy']:.3f}, "
              f"macro-F1 {c['macro_f1']:.3f}")
    program = Vista.from_program(None)
    program.rule = rule
    file = program.program_file(EVIDENCE_PROGRAM)
    path = compiled_dir() / f"{EVIDENCE_PROGRAM}.json"
    meta = ProgramMeta(program=EVIDENCE_PROGRAM, program_sha256=file.content_hash,
                       optimizer="evidence cues on human claims (benchmarks/fit_evidence_rule.py)",
                       train=data_record(train, {"part": "train"}), dev=data_record(dev, {"part": "dev"}),
                       scores={"compiled": {"turn_accuracy": measured["dev, the shipped rule"]["accuracy"],
                                            **measured["dev, the shipped rule"]},
                               "train_cross_fitted": measured["train, cross-fitted"]},
                       rule=file.rule, note="judged on the annotators' claims, not end to end: no LM call")
    if args.check:
        shipped = read_program(path)
        same = shipped.rule == file.rule
        print(f"{path}: {'the same rule' if same else 'DIFFERS from this fit'}")
        return 0 if same else 1
    write_program(file, path)
    path.with_name(f"{EVIDENCE_PROGRAM}.meta.json").write_text(json.dumps(meta.model_dump(), indent=2) + "\n")
    print(f"wrote {path} and its meta: {rule.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

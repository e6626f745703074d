"""Refit the shipped rules on the instrument's compile part only, with today's (passage-local) evidence cues
(issue 60): no dialogue of the suite's test part is fitted on, and each fitted artifact's meta lists the dialogues it
saw (``fitted_on``, per dataset).

    python benchmarks/refit_compile_part.py            # print what the fits give
    python benchmarks/refit_compile_part.py --write    # and write the shipped files

1. ``compiled/evidence.json`` (the rule `--system evidence` decides with when a program has none of its own): the
   annotators' claims of the compile part's vista-human dialogues, fitted to their judgements, cues read against
   each turn's store of the annotators' own safe claims (``human_turns``).
2. The default's rule (``compiled/local.json``, trial 21 of the 1.5B's study: the turn's sentences, one demo per
   stage, terse instructions, cascade band 0.35-0.65): refitted on the live probe of the 1.5B's answers over the dev
   half's sentences (``benchmarks/probes/local-1.5b-sentences-live``), restricted to the compile part's dialogues,
   its cues recomputed with today's evidence (each turn's store: the earlier units the probed program accepted, as it
   judged them). Recipe ``turn-model`` (a claim threshold and a turn model, ``recipes.choose_turn_model_rule``);
   the study's cascade band is kept. The recomputed probe is written as
   ``benchmarks/probes/local-1.5b-sentences-compile/`` so that the fit replays from committed data. Printed beside
   it: two-fold numbers over the probe's halves within the compile part, and the one gate (``recipes.probe_gate``:
   non-inferior to the seed within 1 point of balanced accuracy, paired bootstrap over dialogues) of those two-fold
   decisions against the seed's own on the same turns, from the seed's live probe
   (``benchmarks/probes/local-1.5b-seed-live``). What ships is gated again on the instrument's suite runs
   (``benchmarks/instrument_table.py --meta``).
The programs' options, demos and instructions are unchanged: only the numbers of their rules.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vista_dspy import Vista
from vista_dspy.compiled.files import EVIDENCE_PROGRAM, compiled_dir, read_program, write_program
from vista_dspy.data.location import data_dir
from vista_dspy.data.suite import load_suite
from vista_dspy.decision import DecisionRule
from vista_dspy.evidence import CUES, evidence_of
from vista_dspy.experiments.bench import suite_paths
from vista_dspy.grounding import sentence_units
from vista_dspy.optimize.rules.cross_fitting import folds
from vista_dspy.optimize.rules.judged_turns import ClaimRow, TurnRows
from vista_dspy.optimize.rules.probe_records import read_probe, write_probe
from vista_dspy.optimize.rules.recipes import choose_turn_model_rule, probe_gate, two_fold
from vista_dspy.optimize.rules.rule_fitting import cross_fitted, fit_rule, replay, scores, with_cascade

PROBES = Path(__file__).parent / "probes"
LIVE = PROBES / "local-1.5b-sentences-live"  # the 1.5B's answers over the dev half's sentences
SEED_LIVE = PROBES / "local-1.5b-seed-live"  # the seed's (decomposed claims) over the same turns: the gate's anchor
RECOMPUTED = PROBES / "local-1.5b-sentences-compile"
ACCEPTED = ("VERIFIED", "OUT-OF-SCOPE")


def human_turns(dialogues) -> list[TurnRows]:
    """The annotated turns as rule inputs: each annotated claim with its cues and the annotators' judgement, each
    turn's store built as the method builds it (the background turns' texts, then the earlier annotated claims the
    annotators found verifiable or out of scope)."""
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
            knowledge.extend(c.text for c in gold.claims if c.category.value in ACCEPTED)
    return turns


def fitted_on(dialogues) -> dict[str, list[str]]:
    return {"vista-human": sorted(d.id for d in dialogues)}


def _line(name: str, s: dict) -> str:
    c = s["claims"]
    return (f"{name}: {s['turns']} turns, turn accuracy {s['accuracy']:.3f} (F1 {s['f1']:.3f}); {c['claims']} "
            f"claims: decisions {c['decision_accuracy']:.3f}")


def refit_evidence(compile_dialogues, write: bool) -> None:
    turns = human_turns(compile_dialogues)
    fold_of = {d.id: f for f, fold in enumerate(folds([d for d in compile_dialogues if d.judged_turns], 2))
               for d in fold}
    crossed = cross_fitted(turns, fold_of, lambda part: fit_rule(part, CUES))[0]
    print(_line("evidence rule, compile part's annotated claims, cross-fitted over two folds", scores(crossed)))
    seen = fitted_on(compile_dialogues)
    rule = fit_rule(turns, CUES, fitted={"claims": sum(len(t.rows) for t in turns), "turns": len(turns),
                                         "source": "human claims", "data": "suite:compile (vista-human)",
                                         "features": "evidence", "fitted_on": seen})
    crossed_scores = scores(crossed)
    _write(EVIDENCE_PROGRAM, None, rule, write, lambda file: {
                 "optimizer": "evidence cues on human claims (benchmarks/refit_compile_part.py)",
                 "train": {"part": "suite:compile", "dataset": "vista-human", "dialogues": len(compile_dialogues),
                           "turns": len(turns), "claims": sum(len(t.rows) for t in turns)},
                 "dev": {}, "fitted_on": seen,
                 "scores": {"compiled": {"turn_accuracy": crossed_scores["accuracy"], **crossed_scores,
                                         "how": "cross-fitted over two folds of the compile part's annotated "
                                                "dialogues, on the annotators' claims"}}, "rule": file.rule,
                 "note": "fitted on the annotators' claims of the instrument's compile part only (issue 60), cues "
                         "read against each claim's own passages; judged on the instrument by "
                         "benchmarks/instrument_table.py"})


def _write(name: str, base: str | None, rule: DecisionRule, write: bool, meta_of) -> None:
    """Program ``name`` (program ``base``'s demos and options, None: the seed's) with ``rule``, and its meta updated
    with its content hash and ``meta_of(file)``; written only with ``write``."""
    program = Vista.from_program(base)
    program.rule = rule
    file = program.program_file(name)
    path = compiled_dir() / f"{name}.json"
    meta_path = path.with_name(f"{name}.meta.json")
    meta = json.loads(meta_path.read_text())
    meta.update({"program_sha256": file.content_hash, **meta_of(file)})
    if write:
        write_program(file, path)
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        print(f"wrote {path}: {rule.describe()}")


def recompute_probe(compile_dialogues, write: bool) -> tuple[list[TurnRows], dict[str, str]]:
    """The live sentences probe on the compile part's dialogues, each unit's cues read with today's evidence (the
    probe keeps no text: its units are the turn's sentences again)."""
    turns, half_of, meta = read_probe(LIVE)
    by_id = {d.id: d for d in compile_dialogues}
    out: list[TurnRows] = []
    stores: dict[str, list[str]] = {}
    for turn in turns:
        dialogue = by_id.get(turn.dialogue_id)
        if dialogue is None:
            continue
        store = stores.setdefault(turn.dialogue_id, [])
        units = sentence_units(dialogue.turns[turn.turn_index].text)
        if len(units) != len(turn.rows):
            raise SystemExit(f"{LIVE}: {turn.dialogue_id} turn {turn.turn_index}: {len(turn.rows)} units recorded, "
                             f"{len(units)} sentences today")
        knowledge = [*dialogue.background, *store]
        evidence = evidence_of(dialogue, turn.turn_index, knowledge)
        rows = [ClaimRow(u, evidence.cues(u), r.verify, r.categorize, r.judge, r.gold, r.categorize_all)
                for u, r in zip(units, turn.rows)]
        store.extend(u for u, r in zip(units, turn.rows) if r.judge in ACCEPTED)
        out.append(TurnRows(turn.dialogue_id, turn.turn_index, turn.gold_label, rows, failed=turn.failed,
                            empty=turn.empty, decompose_calls=turn.decompose_calls))
    halves = {t.dialogue_id: half_of[t.dialogue_id] for t in out}
    if write:
        write_probe(RECOMPUTED, out, halves, {
            **{k: v for k, v in meta.items() if k not in ("counts", "record_version")},
            "derived_from": str(LIVE.relative_to(PROBES.parent.parent)),
            "note": "the live probe's answers on the suite's compile part only, each unit's cues recomputed with "
                    "passage-local evidence (benchmarks/refit_compile_part.py); the store of each turn: the earlier "
                    "units the probed program accepted"})
    return out, halves


def refit_default(compile_dialogues, write: bool) -> None:
    name = "local"
    turns, halves = recompute_probe(compile_dialogues, write)
    decided, _ = two_fold(turns, halves, lambda part: choose_turn_model_rule(part)[0])
    print(_line(f"{name}'s rule, two-fold over the probe's halves within the compile part ({len(turns)} turns)",
                scores(decided)))
    seed_turns, _, _ = read_probe(SEED_LIVE)
    for line in probe_gate(decided, replay(seed_turns, None), name=f"{name}'s rule (two-fold)").describe():
        print(f"  {line}")
    rule, record = choose_turn_model_rule(turns)
    band = DecisionRule.model_validate(read_program(name).rule).cascade
    seen = fitted_on([d for d in compile_dialogues if d.id in halves])
    rule = with_cascade(rule, band).model_copy(update={"fitted": {**rule.fitted, "fitted_on": seen,
                                                                   "data": "suite:compile (vista-human)"}})
    settings = json.loads((compiled_dir() / f"{name}.meta.json").read_text())["settings"]
    _write(name, name, rule, write, lambda file: {
        "fitted_on": seen,
        "settings": {**settings, "rule_compiled": {
            "program": name, "probe": str(RECOMPUTED.relative_to(PROBES.parent.parent)), "recipe": "turn-model",
            "features": record.get("features"), "cascade": band.model_dump() if band else None,
            "command": "python benchmarks/refit_compile_part.py --write",
            "split": "fitted on every turn of the probe within the suite's compile part; two-fold numbers over the "
                     "probe's halves printed beside it"}},
        "anchored_gate": None,  # measured anew on the instrument (benchmarks/instrument_table.py --meta)
        "note": "trial 21 of the study's design with its rule refitted on the compile part's dialogues only, cues "
                "read against each unit's own passages (issue 60)"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write the shipped files and the recomputed probe")
    args = parser.parse_args()
    compile_dialogues = load_suite(suite_paths(data_dir(), ["vista-human"]), "compile")["vista-human"]
    refit_evidence(compile_dialogues, args.write)
    refit_default(compile_dialogues, args.write)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The shipped rule programs on their committed live probes, decided as the program decides today (no LM): a rule's
turn decision acting through the turn's most doubtful claim, categories that mean VISTA's, and the figure and name
checks, whose values the probes recorded before them lack and this script computes from the annotated file's text
(``--data``; ``--no-checks`` leaves them out). Beside them, what the program's meta recorded when it was compiled
(turn labels beside the claims, no checks).

    python benchmarks/coherence_replay.py [--data ../shared/data/vista_human_eval/dev.json] [--json out.json]

Rows: the shipped rule replayed on every turn (in sample: it was fitted on them) and its evidence model alone (the
tier with no LM, ``--system evidence``); the program's recipe two-fold over the probe's halves (each turn decided by
the rule the recipe chose on the other half, with the cascade band the program ships), as ``vista compile --probe``
scores a program, and the recipe's evidence model two-fold. Claim columns: the decomposed claims (or sentences) matched
to an annotators' claim. "coherent" counts the turns whose label is what their claims say (hallucinated iff one is
CONTRADICTED or LACKING EVIDENCE): all of them, by construction, since wave 7. The checks are computed against the
turn's reference, the background and the dialogue before it (the store the judge saw holds the claims of those turns,
so its figures and names are among theirs).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from decision_probe import DEFAULT_DATA

from vista_dspy.compiled.files import compiled_dir, read_program
from vista_dspy.data import load_dialogues
from vista_dspy.decision import DecisionRule
from vista_dspy.evidence import CHECKS, CUES, TurnEvidence
from vista_dspy.experiments.paired_table import matched_claim_scores
from vista_dspy.grounding import sentence_units, uncovered_sentences
from vista_dspy.optimize.rules.probe_records import read_probe
from vista_dspy.optimize.rules.rule_fitting import fit_rule, replay, scores, with_cascade
from vista_dspy.optimize.rules.rule_gate import choose_turn_model_rule, choose_two_threshold_rule, two_fold
from vista_dspy.schema import UNSAFE_CATEGORIES

REPO = Path(__file__).resolve().parents[1]
PROGRAMS = ("local", "local-claims")
RECIPES = {"turn-model": choose_turn_model_rule, "two-threshold": choose_two_threshold_rule}


def with_checks(turns, dialogues, units: str):
    """The probe's turns with each claim's checks (``evidence.CHECKS``) computed from its text: a unit of a
    sentences probe is the turn's sentence at its position; a claim coverage added is the turn's sentence that no
    claim covered, at its position among them."""
    by_id = {d.id: d for d in dialogues}
    out = []
    for turn in turns:
        dialogue = by_id[turn.dialogue_id]
        said = dialogue.turns[turn.turn_index]
        evidence = TurnEvidence.of(said.grounding.document if said.grounding else None, list(dialogue.background),
                                   [t.text for t in dialogue.turns[:turn.turn_index]])
        texts = [r.claim for r in turn.rows]
        if units == "sentences":
            texts = sentence_units(said.text)
        else:
            decomposed = [r.claim for r in turn.rows if r.cues.get("coverage", 0.0) == 0.0]
            added = iter(uncovered_sentences(said.text, decomposed))
            texts = [r.claim if r.cues.get("coverage", 0.0) == 0.0 else next(added) for r in turn.rows]
        if len(texts) != len(turn.rows):
            raise ValueError(f"{turn.dialogue_id} turn {turn.turn_index}: {len(texts)} texts for {len(turn.rows)} "
                             "recorded claims")
        rows = [replace(r, cues={**r.cues, **{k: v for k, v in evidence.cues(text).items() if k in CHECKS}})
                for r, text in zip(turn.rows, texts)]
        out.append(replace(turn, rows=rows))
    return out


def row(decided) -> dict:
    s = scores(decided)
    m = matched_claim_scores(decided)
    coherent = sum((d.label == "hallucinated") == any(c in UNSAFE_CATEGORIES for c in d.categories)
                   for d in decided if d.label != "unknown")
    return {"turns": s["turns"], "turn_accuracy": round(s["accuracy"], 4), "false_alarms": s["false_alarms"],
            "misses": s["misses"], "claims": m.get("claims"), "claim_decisions": m.get("decision_accuracy"),
            "five_way": m.get("accuracy"), "calls_per_turn": s["calls_per_turn"],
            "coherent": f"{coherent}/{sum(d.label != 'unknown' for d in decided)}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the annotated file the probes judged")
    parser.add_argument("--no-checks", action="store_true", help="leave the probes' cues as recorded")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    dialogues = None if args.no_checks else load_dialogues(args.data)
    out = {}
    for name in PROGRAMS:
        meta = json.loads((compiled_dir() / f"{name}.meta.json").read_text())
        rule = DecisionRule.model_validate(read_program(name).rule)
        turns, half_of, probe = read_probe(REPO / meta["settings"]["probe"])
        if dialogues is not None:
            turns = with_checks(turns, dialogues, (probe.get("options") or {}).get("units", "claims"))
        choose = RECIPES[meta["settings"].get("recipe", "two-threshold")]

        def recipe(part, choose=choose):
            return choose(part)[0]

        two_folds, _ = two_fold(turns, half_of, lambda part, band=rule.cascade: with_cascade(recipe(part), band))
        no_lm, _ = two_fold(turns, half_of, lambda part: fit_rule(part, CUES).evidence_only(), judge=False)
        recorded = meta["scores"]["compiled"]
        out[name] = {"probe": meta["settings"]["probe"], "checks": not args.no_checks,
                     "the shipped rule, replayed": row(replay(turns, rule)),
                     "its evidence model alone (no LM), replayed": row(replay(turns, rule.evidence_only(), judge=False)),
                     "the recipe, two-fold": row(two_folds), "the recipe's evidence model (no LM), two-fold": row(no_lm),
                     "two-fold, recorded at compile time": {
                         "turn_accuracy": round(recorded["turn_accuracy"], 4),
                         "false_alarms": recorded["false_alarms"], "misses": recorded["misses"],
                         "claims": recorded["given_claims"]["claims"],
                         "claim_decisions": recorded["given_claims"]["claim_decision_accuracy"],
                         "five_way": recorded["given_claims"]["claim_accuracy"],
                         "calls_per_turn": recorded["calls_per_turn"]}}
    print(f"# The shipped rule programs on their probes (checks {'off' if args.no_checks else 'on'}); \"replayed\": "
          "the shipped rule on every turn (in sample: it was fitted on these turns)\n")
    print("| program | row | turns right | false alarms / misses | claim decisions (matched) | five-way | "
          "calls / turn | coherent turns |")
    print("|---|---|---|---|---|---|---|---|")
    for name, rows in out.items():
        for label, r in rows.items():
            if not isinstance(r, dict):
                continue
            claims = "-" if r["claim_decisions"] is None else f"{r['claim_decisions']:.3f} ({r['claims']})"
            five = "-" if r["five_way"] is None else f"{r['five_way']:.3f}"
            print(f"| {name} | {label} | {r['turn_accuracy']:.3f} | {r['false_alarms']} / {r['misses']} | {claims} | "
                  f"{five} | {r['calls_per_turn']} | {r.get('coherent', '-')} |")
    if dialogues is not None:
        out["annotators' claims"] = human_claims(dialogues)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")
    return 0


def human_claims(dialogues) -> dict:
    """The checks on the annotators' own claims (each against its turn's reference, the background and the
    dialogue before it, and the store of the earlier human claims the annotators found safe), and the shipped
    evidence rule (``compiled/evidence.json``, fitted on the train half's claims) decided as today, by half."""
    from collections import Counter

    from fit_evidence_rule import human_turns

    from vista_dspy import Vista
    from vista_dspy.data import part_of
    from vista_dspy.decision import lacks_a_source, opinion_or_remark, unsafe_by_its_figures

    turns = human_turns(dialogues)
    kinds = {"factual, a figure or name no source holds (made unsafe)": unsafe_by_its_figures,
             "a remark or opinion with one (kept off VERIFIED)": lambda c: lacks_a_source(c) and not
             unsafe_by_its_figures(c),
             "an opinion or a speaker's own remark (never VERIFIED)": opinion_or_remark}
    counts = {name: Counter(r.gold for t in turns for r in t.rows if test(r.cues)) for name, test in kinds.items()}
    print(f"\n# The checks on the annotators' {sum(len(t.rows) for t in turns)} claims: their judgement\n")
    for name, counter in counts.items():
        print(f"- {name}: {sum(counter.values())} ({', '.join(f'{k} {v}' for k, v in counter.most_common())})")
    rule = Vista.from_program("evidence").rule
    halves = {}
    print("\nthe shipped evidence rule decided as today, on the annotators' claims:")
    for half in ("train", "dev"):
        decided = replay(human_turns(part_of(dialogues, half)), rule)
        halves[half] = r = row(decided)
        print(f"- {half} ({'fitted on' if half == 'train' else 'held out'}): turns {r['turn_accuracy']:.3f} "
              f"({r['false_alarms']} false alarms, {r['misses']} misses), claim decisions {r['claim_decisions']:.3f}, "
              f"five-way {r['five_way']:.3f} ({r['claims']} claims)")
    return {"checks": {k: dict(v) for k, v in counts.items()}, "evidence rule": halves}


if __name__ == "__main__":
    sys.exit(main())

"""Does a cheaper program keep what the current default decides? The gate of issue 41, on live probes and a
side-by-side cost measurement:

    python benchmarks/cost_gate.py \
        --candidate benchmarks/probes/local-1.5b-sentences-live --default benchmarks/probes/local-1.5b-seed-live \
        --cost benchmarks/turn_cost/turn_cost.json --candidate-variant sentences --default-variant default

Each probe is decided two-fold over its halves (``vista_dspy.data.part_of``), as `vista compile --probe` decides it:
the rule (``--recipe``) chosen on one half decides the other, the cascade chosen the same way. Printed:

- turns: the candidate's turn accuracy against the default's on the turns both decided (exact McNemar, and the
  bootstrap interval of the difference over dialogues); the candidate passes at no more than 2 points below;
- claim decisions on the annotators' claims: each human claim takes the decision of the unit matched to it one to
  one (``metrics.match_claims``: content-word F1 >= 0.5, Hungarian assignment) in each program -- a decomposed claim,
  or a sentence of the turn (a sentence probe keeps no text: ``grounding.sentence_units`` rebuilds it from the
  annotated file) -- and the two are compared on the human claims both matched; the candidate passes unless it is
  significantly worse (exact McNemar, alpha 0.05);
- model time per judged turn (the server's own milliseconds, ``turn_cost.py``): the candidate passes at no more
  than half the default's.

Beside the gate: the candidate's turns against its own evidence models deciding alone (the tier with no LM).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from compiled_table import DEFAULT_DATA

from vista_dspy.data import load_dialogues
from vista_dspy.decision import UNSAFE_CATEGORIES
from vista_dspy.grounding import sentence_units
from vista_dspy.optimize.gate import PairedTest
from vista_dspy.optimize.metrics import match_claims
from vista_dspy.optimize.rules.judged_turns import UNSAFE_GOLD
from vista_dspy.optimize.rules.probe_compile import RECIPES, recipe_of
from vista_dspy.optimize.rules.probe_records import read_probe
from vista_dspy.optimize.rules.rule_fitting import TurnDecision, replay
from vista_dspy.optimize.rules.rule_gate import (
    cascade_choice,
    paired_turns,
    seed_decisions,
    summary,
    turn_difference_interval,
    two_fold,
)

TURN_MARGIN = 0.02
TIME_SHARE = 0.5


def shipped_two_fold(probe: Path, recipe_name: str) -> tuple[list[TurnDecision], list[TurnDecision]]:
    """The probe's turns decided two-fold by the recipe with its cascade, as `vista compile --probe` ships it; and
    by the same rules' evidence models alone (the tier with no LM, its turn model included)."""
    turns, half_of, _ = read_probe(probe)
    recipe = recipe_of(recipe_name)
    decided, rules = two_fold(turns, half_of, recipe)
    band, cascaded, _ = cascade_choice(turns, half_of, recipe, decided, seed_decisions(turns))
    # The same rules, their evidence models alone (no refitting).
    no_lm = [replay([t], rules[half_of[t.dialogue_id]], judge=False)[0] for t in turns]
    return (cascaded if band is not None else decided), no_lm


def human_claim_rights(decided: Sequence[TurnDecision], dialogues: dict) -> dict[tuple, bool]:
    """{(dialogue, turn, human claim index): the program's decision of the unit matched to it is right}."""
    rights = {}
    for d in decided:
        turn = dialogues[d.turn.dialogue_id].turns[d.turn.turn_index]
        if turn.gold is None or not turn.gold.claims:
            continue
        texts = [r.claim for r in d.turn.rows]
        if d.turn.rows and not any(texts):
            texts = sentence_units(turn.text)
            if len(texts) != len(d.turn.rows):
                raise SystemExit(f"{d.turn.dialogue_id} turn {d.turn.turn_index}: the probe has {len(d.turn.rows)} "
                                 f"units, the turn {len(texts)} sentences: not a probe of this file's sentences")
        human = turn.gold.claims
        for e, g, _ in match_claims(texts, [c.text for c in human]).pairs:
            rights[(d.turn.dialogue_id, d.turn.turn_index, g)] = (
                (d.categories[e] in UNSAFE_CATEGORIES) == (human[g].category.value in UNSAFE_GOLD))
    return rights


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidate", type=Path, required=True, help="the candidate's live probe")
    parser.add_argument("--default", type=Path, required=True, help="the current default's live probe")
    parser.add_argument("--recipe", choices=RECIPES, default="turn-model")
    parser.add_argument("--cost", type=Path, required=True, help="turn_cost.py's turn_cost.json")
    parser.add_argument("--candidate-variant", required=True)
    parser.add_argument("--default-variant", required=True)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()

    dialogues = {d.id: d for d in load_dialogues(args.data)}
    candidate, no_lm = shipped_two_fold(args.candidate, args.recipe)
    default, _ = shipped_two_fold(args.default, args.recipe)
    against_no_lm = PairedTest.of(*paired_turns(candidate, no_lm))
    turns = PairedTest.of(*paired_turns(candidate, default))
    interval = turn_difference_interval(candidate, default)
    mine, theirs = human_claim_rights(candidate, dialogues), human_claim_rights(default, dialogues)
    common = sorted(set(mine) & set(theirs))
    claims = PairedTest.of([mine[k] for k in common], [theirs[k] for k in common])
    cost = json.loads(args.cost.read_text())["variants"]
    seconds = {name: cost[name]["total"]["model_seconds"] for name in (args.candidate_variant, args.default_variant)}
    share = seconds[args.candidate_variant] / seconds[args.default_variant]
    checks = {
        "turns": (turns.candidate_right - turns.base_right) / turns.items >= -TURN_MARGIN,
        "claims": not (claims.base_only > claims.candidate_only and claims.pvalue < args.alpha),
        "model_time": share <= TIME_SHARE,
    }
    print(turns.describe("turns", "candidate", "default"))
    print(f"  difference {interval['difference']:+.3f} (95 % bootstrap over {interval['dialogues']} dialogues: "
          f"{interval['low']:+.3f} to {interval['high']:+.3f}); pass at >= -{TURN_MARGIN:.2f}: {checks['turns']}")
    print(claims.describe("claim decisions on the human claims both matched", "candidate", "default"))
    print(f"  pass unless significantly worse: {checks['claims']}")
    print(f"model seconds per judged turn: candidate {seconds[args.candidate_variant]}, default "
          f"{seconds[args.default_variant]} ({share:.2f} of it); pass at <= {TIME_SHARE}: {checks['model_time']}")
    print(f"gate: {'passed' if all(checks.values()) else 'failed'}")
    print(against_no_lm.describe("turns against the no-LM tier (the candidate's evidence models alone, two-fold)",
                                 "candidate", "no-LM"))
    if args.json:
        args.json.write_text(json.dumps({
            "turns": turns.model_dump(), "turn_difference": interval, "claims": claims.model_dump(),
            "model_seconds": seconds, "time_share": round(share, 3), "checks": checks,
            "passed": all(checks.values()), "candidate": summary(candidate), "default": summary(default),
            "no_lm": summary(no_lm), "turns_against_no_lm": against_no_lm.model_dump()},
            indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

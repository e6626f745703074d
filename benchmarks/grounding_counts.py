"""How often Decompose's claims do not come from their turn, and how often a turn with content got no claim, in a
finished run (no LM calls).

    python benchmarks/grounding_counts.py benchmarks/runs/local-default-118/end-to-end [--data DEV_FILE]

Reads the run's verdicts and its input dialogues. Prints three things:
- what the run recorded: claims dropped as ungrounded (judged turns and background turns), and turns flagged
  `empty_decomposition`, with the gold labels of the flagged turns;
- a recount with the current rule (`vista_dspy.grounding`) over every decomposed claim, judged or dropped: the
  figures of a run without the check (`--no-check-grounding`) are "decomposed claims", and its copied claims the
  ones the rule flags;
- every flagged claim, so a person can check it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vista_dspy.data import data_dir, load_dialogues
from vista_dspy.grounding import split_grounded
from vista_dspy.run.runner import VERDICTS, read_verdicts

DEFAULT_DATA = data_dir(Path(__file__).resolve().parents[1]) / "vista_human_eval" / "dev.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="a `vista evaluate` output directory")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    options = parser.parse_args()
    dialogues = {d.id: d for d in load_dialogues(options.data)}
    verdicts = read_verdicts(options.run / VERDICTS)
    turns = [(v, t) for v in verdicts for t in v.turns if t.claims_source == "decomposed"]
    recorded = sum(len(t.ungrounded) for _, t in turns)
    background = sum(len(v.ungrounded_background) for v in verdicts)
    flagged = [(v, t) for v, t in turns if t.empty_decomposition]
    print(f"{len(verdicts)} dialogues, {len(turns)} judged turns, "
          f"{sum(len(t.claims) for _, t in turns)} judged claims")
    print(f"recorded by the run: {recorded} ungrounded claims dropped from judged turns, {background} from "
          f"background turns; {len(flagged)} judged turns with content but no claim (gold: "
          f"{', '.join(str(t.gold_label) for _, t in flagged) or '-'})")

    decomposed = dropped = 0
    shown = []
    for verdict, turn in turns:
        dialogue = dialogues[verdict.dialogue_id]
        sources = " ".join([*dialogue.background, *(x.text for x in dialogue.turns[: turn.turn_index + 1])])
        claims = [c.claim for c in turn.claims] + list(turn.ungrounded)
        _, ungrounded = split_grounded(claims, sources)
        decomposed += len(claims)
        dropped += len(ungrounded)
        shown += [f"  {verdict.dialogue_id} turn {turn.turn_index}: {claim}" for claim in ungrounded]
    print(f"recount with the current rule: {dropped} of {decomposed} decomposed claims of judged turns are "
          f"ungrounded ({dropped / decomposed:.1%})" if decomposed else "no decomposed claims")
    print("\n".join(shown))
    for verdict in verdicts:
        for claim in verdict.ungrounded_background:
            print(f"  {verdict.dialogue_id} (background): {claim}")
    for verdict, turn in flagged:
        print(f"  empty: {verdict.dialogue_id} turn {turn.turn_index} (gold {turn.gold_label}): {turn.text[:120]}")


if __name__ == "__main__":
    main()

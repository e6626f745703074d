"""How much of a recorded probe a later live run reproduces: for the turns both hold, the share of the probe's
claims the run decomposed word for word, and how many of the run's claims carry the same label as the probe's
(a rule fitted on the probe changes labels, not claims; a run with the rule accumulates its own decisions, so a
later turn's store may differ).

    python benchmarks/probe_agreement.py RUN_DIR --probe local-1.5b-seed-live

RUN_DIR is a ``vista evaluate`` output folder (verdicts.jsonl), e.g. six short dev dialogues judged with no flag:

    python benchmarks/probe_agreement.py --write-short 6 /tmp/short.json    # the dev file's six shortest dialogues
    vista evaluate /tmp/short.json --out /tmp/short-run
    python benchmarks/probe_agreement.py /tmp/short-run
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vista_dspy.optimize.rules.probe_records import read_probe
from vista_dspy.run.runner import VERDICTS, read_verdicts

PROBES = Path(__file__).parent / "probes"


def write_short(count: int, data: Path, out: Path) -> None:
    """The ``count`` dev dialogues with the fewest judged turns, then the fewest turns (ties: file order), in the
    annotated file's own format."""
    conversations = json.loads(data.read_text())
    judged = [(sum(1 for t in c if t.get("gold_label")), len(c), i) for i, c in enumerate(conversations)]
    chosen = sorted(i for _, _, i in sorted(j for j in judged if j[0] > 0)[:count])
    out.write_text(json.dumps([conversations[i] for i in chosen], indent=2))
    print(f"{out}: {len(chosen)} dialogues of {data}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, nargs="?", help="a vista evaluate output folder")
    parser.add_argument("--probe", default="local-1.5b-seed-live", help="a probe under benchmarks/probes/")
    parser.add_argument("--write-short", type=int, default=None, metavar="N",
                        help="write the N shortest dev dialogues to the path given as RUN and stop")
    parser.add_argument("--data", type=Path, default=None, help="the annotated dev file (for --write-short)")
    args = parser.parse_args()
    if args.run is None:
        parser.error("give RUN_DIR (or, with --write-short, the file to write)")
    if args.write_short is not None:
        from vista_dspy.data.location import data_dir
        from vista_dspy.experiments.bench import dataset_path

        write_short(args.write_short, args.data or dataset_path("vista-human", data_dir()), args.run)
        return 0

    turns, _, meta = read_probe(PROBES / args.probe)
    probe = {(t.dialogue_id, t.turn_index): t for t in turns}
    verdicts = read_verdicts(args.run / VERDICTS)
    same_claims = probe_claims = same_labels = run_claims = compared_turns = 0
    for verdict in verdicts:
        for turn in verdict.turns:
            recorded = probe.get((verdict.dialogue_id, turn.turn_index))
            if recorded is None:
                continue
            compared_turns += 1
            theirs = {r.claim: r.judge for r in recorded.rows if r.claim}
            ours = {c.claim: c.category.value for c in turn.claims if c.added_by != "coverage"}
            probe_claims += len(theirs)
            run_claims += len(ours)
            same_claims += sum(claim in ours for claim in theirs)
            same_labels += sum(ours[claim] == label for claim, label in theirs.items() if claim in ours)
    if not compared_turns:
        print(f"{args.run}: no turn of the probe {args.probe}", file=sys.stderr)
        return 2
    print(f"{compared_turns} turns of {len(verdicts)} dialogues; probe {args.probe} (program "
          f"{(meta.get('program_sha256') or '?')[:12]}), run program {verdicts[0].program}")
    print(f"the probe's claims reproduced word for word: {same_claims}/{probe_claims} "
          f"({same_claims / max(probe_claims, 1):.1%}); the run's claims: {run_claims}")
    print(f"of those, the same label as the judge's in the probe: {same_labels}/{same_claims}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What asking for label probabilities costs: the human claims of a few dialogues judged with and without token
log-probabilities (``label_probabilities``), uncached, dialogue by dialogue in alternation (A B, then B A) so that
both see the same server state, with an embedded model.

    python benchmarks/logprobs_cost.py --model local --dialogues 6

Prints the seconds of each pass, their ratio, and whether the labels agree (asking for log-probabilities must not
change an answer).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from vista_dspy import Vista
from vista_dspy.data import load_dialogues
from vista_dspy.data.location import data_dir
from vista_dspy.lm.server import LOCAL_SHORT_ANSWER_TOKENS, LocalServer, embedded_settings, local_model_config
from vista_dspy.lm.weights import EMBEDDED
from vista_dspy.run.runner import Threads, evaluate

DEFAULT_DATA = data_dir(Path(__file__).resolve().parents[1]) / "vista_human_eval" / "dev.json"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(EMBEDDED), default="local")
    parser.add_argument("--dialogues", type=int, default=6)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--port", type=int, default=8799)
    args = parser.parse_args()

    dialogues = [d for d in load_dialogues(args.data) if d.judged_turns][: args.dialogues]
    settings = embedded_settings(args.model, port=args.port)
    config = dataclasses.replace(local_model_config(settings), cache=False)
    judges = {flag: Vista.from_program(None, given_claims=True, label_probabilities=flag,
                                       short_answer_tokens=LOCAL_SHORT_ANSWER_TOKENS) for flag in (True, False)}
    seconds = {True: 0.0, False: 0.0}
    labels = {True: [], False: []}
    with LocalServer(settings):
        for i, dialogue in enumerate(dialogues):
            for flag in ((True, False) if i % 2 == 0 else (False, True)):
                started = time.perf_counter()
                [verdict] = evaluate([dialogue], judges[flag], Threads(config.build(), config.build_adapter())).verdicts
                seconds[flag] += time.perf_counter() - started
                labels[flag] += [c.category for t in verdict.turns for c in t.claims]
    claims = len(labels[True])
    print(f"\n{args.model}, {len(dialogues)} dialogues, {claims} human claims, uncached, alternating")
    print("| pass | seconds | s / claim |\n|---|---|---|")
    for flag, name in ((True, "with log-probabilities"), (False, "without")):
        print(f"| {name} | {seconds[flag]:.1f} | {seconds[flag] / claims:.2f} |")
    print(f"\nratio with / without: {seconds[True] / seconds[False]:.3f}; labels identical: "
          f"{labels[True] == labels[False]} ({sum(a == b for a, b in zip(labels[True], labels[False]))} of {claims})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

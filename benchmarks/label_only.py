"""Does Verify need to explain itself? The seed program's claim decisions with and without Verify's explanation
(``explain_verified``), on every human-labelled claim of a part, with an embedded model.

    python benchmarks/label_only.py --model local --part train

Both passes judge the human claims with both stages and label probabilities (``categorize_all``; Categorize's
prompt is the same in both, so its answers come from the cache the second time). Printed: the safe/unsafe claim
decision accuracy of each pass, with the model's own labels and with a calibration cross-fitted over two folds of
dialogues, the exact McNemar test between the passes, and the seconds and tokens Verify spent per claim. The
verdicts are kept under --out (resumable).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from compiled_table import DEFAULT_DATA

from vista_dspy import Vista
from vista_dspy.data import PARTS, load_dialogues, part_of
from vista_dspy.lm.clients.cache import use_cache_for
from vista_dspy.lm.server import LOCAL_SHORT_ANSWER_TOKENS, LocalServer, embedded_settings, local_model_config
from vista_dspy.lm.weights import EMBEDDED
from vista_dspy.optimize.calibration import OBJECTIVES, cross_fitted
from vista_dspy.optimize.cross_fitting import folds
from vista_dspy.optimize.gate import PairedTest
from vista_dspy.optimize.probing import claim_scores, decision_right, probes_of
from vista_dspy.run.runner import Threads, evaluate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(EMBEDDED), default="local")
    parser.add_argument("--part", choices=PARTS, default="train")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--port", type=int, default=8799)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    dialogues = [d for d in part_of(load_dialogues(args.data), args.part) if d.judged_turns]
    settings = embedded_settings(args.model, port=args.port)
    config = local_model_config(settings)
    use_cache_for(config)
    out = args.out or Path(__file__).parent / "runs" / f"label-only-{args.model}-{args.part}"
    fold_of = {d.id: f for f, fold in enumerate(folds(dialogues, 2)) for d in fold}
    order = {d.id: i for i, d in enumerate(dialogues)}
    passes = {}
    with LocalServer(settings):
        for name, explain in (("explained", True), ("label only", False)):
            judge = Vista.from_program(None, explain_verified=explain, given_claims=True, categorize_all=True,
                                       short_answer_tokens=LOCAL_SHORT_ANSWER_TOKENS)
            started = time.perf_counter()
            result = evaluate(dialogues, judge, Threads(config.build(), config.build_adapter()),
                              out_dir=out / name.replace(" ", "-"))
            seconds = time.perf_counter() - started if result.resumed == 0 else None
            probes = sorted((p for v in result.verdicts for p in probes_of(v)),
                            key=lambda p: (order[p.dialogue_id], p.turn_index, p.position))
            verify = [v.usage.by_stage.get("verify") for v in result.verdicts]
            passes[name] = (probes, seconds, sum(u.calls for u in verify if u),
                            sum(u.completion_tokens for u in verify if u))
            print(f"{name}: {len(probes)} claims judged", flush=True)
    gold = [p.gold for p in passes["explained"][0]]
    print(f"\n{args.model}, part {args.part}: {len(dialogues)} dialogues, {len(gold)} human claims\n")
    print("| decisions | explained | label only | label only vs explained |")
    print("|---|---|---|---|")
    for objective in ("none", *OBJECTIVES):
        rights = {}
        for name, (probes, *_rest) in passes.items():
            decided = [p.raw for p in probes] if objective == "none" else cross_fitted(probes, fold_of, objective)[0]
            rights[name] = (claim_scores(decided, gold)["decision_accuracy"], decision_right(decided, gold))
        test = PairedTest.of(rights["label only"][1], rights["explained"][1])
        print(f"| {objective} | {rights['explained'][0]:.3f} | {rights['label only'][0]:.3f} | "
              f"+{test.candidate_only} / −{test.base_only}, p = {test.pvalue:.3f} |")
    print("\n| pass | Verify calls | Verify completion tokens / call | wall s |")
    print("|---|---|---|---|")
    for name, (_, seconds, calls, tokens) in passes.items():
        print(f"| {name} | {calls} | {tokens / calls if calls else 0:.1f} | "
              f"{f'{seconds:.0f}' if seconds else '— (resumed)'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

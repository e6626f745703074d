"""The real-model probe that decision rules are fitted and scored on: the seed program run over every judged turn of
the annotated dev file with an embedded model, with label probabilities: exactly the seed's calls, and the
answers a decision rule is fitted on.

    python benchmarks/decision_probe.py --model local                  # both passes, the 1.5B
    python benchmarks/decision_probe.py --model local-0.5b --passes decomposed

Passes: ``decomposed`` (end to end: the seed's own claims, as evaluation sees them), ``coverage`` (the same with
the sentences no claim covers judged as claims of their own) and ``human`` (the annotators' claims,
``given_claims``). Verdicts go to benchmarks/runs/decision-probe-<model>/<pass>/ (resumable: rerunning the
same command judges only what is missing, its answers served by the LM cache). Its figures in RESULTS.md were
read by ``benchmarks/decision_rules.py`` (removed with the calibration in issue 61); nothing here decides anything.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from vista_dspy import Vista
from vista_dspy.data import data_dir, load_dialogues
from vista_dspy.lm.clients.cache import use_cache_for
from vista_dspy.lm.server import LOCAL_SHORT_ANSWER_TOKENS, LocalServer, embedded_settings, local_model_config
from vista_dspy.lm.weights import EMBEDDED
from vista_dspy.run.runner import Threads, evaluate

DEFAULT_DATA = data_dir(Path(__file__).resolve().parents[1]) / "vista_human_eval" / "dev.json"
# Both passes ask Categorize only about the claims Verify did not verify, as the seed and a program with a rule ask
# it (the first five dialogues of the 1.5B's decomposed pass were asked about every claim, categorize_all).
PASSES = {"decomposed": {}, "human": {"given_claims": True}, "coverage": {"coverage": True}}


def probe_dir(model: str, name: str) -> Path:
    return Path(__file__).parent / "runs" / f"decision-probe-{model}" / name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=sorted(EMBEDDED), default="local")
    parser.add_argument("--passes", default="decomposed,human", help="comma-separated: decomposed, coverage, human")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--port", type=int, default=8799)
    args = parser.parse_args()

    dialogues = [d for d in load_dialogues(args.data) if d.judged_turns]
    settings = embedded_settings(args.model, port=args.port)
    config = local_model_config(settings)
    use_cache_for(config)
    with LocalServer(settings):
        for name in args.passes.split(","):
            judge = Vista.from_program(None, short_answer_tokens=LOCAL_SHORT_ANSWER_TOKENS, **PASSES[name])
            started = time.perf_counter()
            done = 0

            def progress(verdict, name=name) -> None:
                nonlocal done
                done += 1
                print(f"[{args.model} {name}] {done} dialogues ({verdict.dialogue_id}) "
                      f"{time.perf_counter() - started:.0f} s", flush=True)  # noqa: B023 (called within this pass)

            result = evaluate(dialogues, judge, Threads(config.build(), config.build_adapter()),
                              out_dir=probe_dir(args.model, name), on_done=progress)
            print(f"[{args.model} {name}] finished: {len(result.verdicts)} dialogues, {result.resumed} resumed, "
                  f"{time.perf_counter() - started:.0f} s", flush=True)
            if result.interrupted:
                return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())

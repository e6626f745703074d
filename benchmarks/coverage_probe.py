"""The real-model probe of coverage on top of a recorded probe of the seed: for every judged turn, the sentences that
none of the seed's claims covers (``grounding.uncovered_sentences``) judged by the seed's Verify and Categorize
against the knowledge store the seed's own run judged that turn against; written as the seed's verdicts with those
claims appended (``added_by: "coverage"``), which ``record_probe.py`` records like any probe.

    python benchmarks/coverage_probe.py ../shared/data/probes/local-seed-dev-decomposed/verdicts.jsonl

Cheaper than judging every dialogue again end to end (the decomposed claims' answers are the seed probe's, which
the same prompts would reproduce), at one approximation: a later turn sees the seed's store, without the added
claims that a live run with coverage would have accepted into it. Resumable: a rerun judges the missing dialogues.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import dspy
from decision_probe import DEFAULT_DATA, probe_dir

from vista_dspy import Vista
from vista_dspy.data import load_dialogues
from vista_dspy.grounding import uncovered_sentences
from vista_dspy.lm.clients.cache import use_cache_for
from vista_dspy.lm.server import LOCAL_SHORT_ANSWER_TOKENS, LocalServer, embedded_settings, local_model_config
from vista_dspy.lm.weights import EMBEDDED
from vista_dspy.run.runner import VERDICTS, read_verdicts
from vista_dspy.scoring import turn_verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("seed_verdicts", type=Path, help="the seed probe's verdicts.jsonl")
    parser.add_argument("--model", choices=sorted(EMBEDDED), default="local")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--port", type=int, default=8799)
    args = parser.parse_args()

    dialogues = {d.id: d for d in load_dialogues(args.data)}
    out = probe_dir(args.model, "coverage-added") / VERDICTS
    out.parent.mkdir(parents=True, exist_ok=True)
    done = {v.dialogue_id for v in read_verdicts(out)} if out.is_file() else set()
    todo = [v for v in read_verdicts(args.seed_verdicts) if v.dialogue_id not in done]
    settings = embedded_settings(args.model, port=args.port)
    config = local_model_config(settings)
    use_cache_for(config)
    judge = Vista.from_program(None, coverage=True, short_answer_tokens=LOCAL_SHORT_ANSWER_TOKENS)
    started = time.perf_counter()
    added_claims = 0
    with LocalServer(settings), dspy.context(lm=config.build(), adapter=config.build_adapter()):
        for number, verdict in enumerate(todo, 1):
            dialogue = dialogues[verdict.dialogue_id]
            turns = []
            for turn in verdict.turns:
                sentences = uncovered_sentences(dialogue.turns[turn.turn_index].text, [c.claim for c in turn.claims])
                if sentences:
                    judged, usage = judge.judge_turn(dialogue, turn.turn_index, sentences, turn.knowledge,
                                                     added=len(sentences))
                    verdict.usage.merge(usage)
                    added_claims += len(sentences)
                    turn = turn_verdict(turn.turn_index, dialogue.turns[turn.turn_index], turn.claims + judged.claims,
                                        error=turn.error, claims_source=turn.claims_source, knowledge=turn.knowledge,
                                        duplicates_removed=turn.duplicates_removed, ungrounded=turn.ungrounded,
                                        empty_decomposition=turn.empty_decomposition)
                turns.append(turn)
            verdict = verdict.model_copy(update={"turns": turns, "options": {**verdict.options, "coverage": True}})
            with out.open("a") as f:
                f.write(verdict.model_dump_json() + "\n")
            print(f"[{args.model} coverage-added] {number}/{len(todo)} dialogues ({verdict.dialogue_id}), "
                  f"{added_claims} added claims, {time.perf_counter() - started:.0f} s", flush=True)
    print(f"finished: {len(todo)} dialogues, {added_claims} added claims judged, {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

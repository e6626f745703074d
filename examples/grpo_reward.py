"""VISTA as the reward of a GRPO run: the reward built as a trainer gets it, and called on one batch shaped exactly as
TRL's GRPOTrainer shapes its call (no TRL, torch or transformers needed here).

In a real run the reward goes to the trainer as it is::

    from trl import GRPOConfig, GRPOTrainer
    reward = VistaReward("gpt-4o-mini", concurrency=16)        # or "local", or a dspy.LM
    trainer = GRPOTrainer(model=..., reward_funcs=[reward], train_dataset=dataset,
                          args=GRPOConfig(num_generations=8, ...))

where ``dataset`` rows hold ``prompt`` (chat messages) and ``document`` (the reference the answer must keep to). For
each batch the trainer repeats every row ``num_generations`` times, samples that many completions per prompt, and
calls ``reward(prompts=..., completions=..., completion_ids=..., trainer_state=..., **other_columns)``; each
completion is one assistant message. Here the prompts are assistant turns of VISTA's annotated dev file (the
dialogue before the turn as messages, the turn's document), and the "sampled" completions of each are four kinds a
policy produces: the annotated answer, a refusal, an opinion, and the answer with an invented sentence.

    python examples/grpo_reward.py                                   # the embedded model judges
    python examples/grpo_reward.py --judge gpt-4o-mini --prompts 8 --system evidence
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

from vista_dspy import VistaReward
from vista_dspy.data import InputError, load_dialogues


def annotated_file(given: Path | None) -> Path:
    """``--data``, else the annotated development half through the project's one lookup: the cache after
    `vista data get vista-human`, else the data directory (``$VISTA_DATA_DIR``); neither: ``InputError`` saying to
    run `vista data get vista-human`."""
    from vista_dspy.data.location import data_dir
    from vista_dspy.experiments.bench import dataset_path

    return given or dataset_path("vista-human", data_dir())
INVENTED = " It was founded in 1850 by a Dutch sea captain named Willem Gorter."


def dataset_rows(data: Path, prompts: int) -> list[dict]:
    """Rows as a GRPO dataset holds them: ``prompt`` (the dialogue before an assistant turn, as chat messages),
    ``document`` (its reference), and the annotated answer (a column the reward does not read)."""
    rows = []
    for dialogue in load_dialogues(data):
        for index in dialogue.judged_turns:
            turn = dialogue.turns[index]
            if turn.grounding.document and len(rows) < prompts:
                rows.append({"prompt": [{"role": t.role, "content": t.text} for t in dialogue.turns[:index]],
                             "document": turn.grounding.document, "reference_answer": turn.text})
    return rows


def sampled(row: dict) -> list[str]:
    """Four completions of one prompt, standing in for the policy's samples."""
    return [row["reference_answer"], "I'm sorry, I don't know.", "I think that is a lovely topic!",
            row["reference_answer"] + INVENTED]


def grpo_call(rows: list[dict], generations: int) -> dict:
    """The keyword arguments of GRPOTrainer's reward call for these rows (conversational format)."""
    repeated = [row for row in rows for _ in range(generations)]
    completions = [text for row in rows for text in sampled(row)[:generations]]
    columns = {key: [row[key] for row in repeated] for key in repeated[0] if key != "prompt"}
    return {"prompts": [row["prompt"] for row in repeated],
            "completions": [[{"role": "assistant", "content": text}] for text in completions],
            "completion_ids": [[0] * len(text.split()) for text in completions],
            "trainer_state": None, **columns}


def advantages(rewards: list[float | None], generations: int) -> list[float]:
    """GRPO's group-relative advantages, as TRL computes them (a None is NaN, and stays NaN)."""
    values = [math.nan if r is None else r for r in rewards]
    out = []
    for start in range(0, len(values), generations):
        group = [v for v in values[start:start + generations] if not math.isnan(v)]
        mean = statistics.fmean(group) if group else math.nan
        std = statistics.stdev(group) if len(group) > 1 else 0.0
        out += [(v - mean) / (std + 1e-4) for v in values[start:start + generations]]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--judge", default="local", help="the judge's model (default: the embedded one)")
    parser.add_argument("--api-base", default=None, help="an OpenAI-compatible endpoint serving --judge")
    parser.add_argument("--prompts", type=int, default=2, help="prompts in the batch")
    parser.add_argument("--system", choices=("vista", "evidence"), default="vista")
    parser.add_argument("--shape", default="informative")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--data", type=Path, default=None,
                        help="VISTA's annotated file (default: vista-human, as `vista data get` keeps it)")
    args = parser.parse_args(argv)

    try:
        rows = dataset_rows(annotated_file(args.data), args.prompts)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    generations = len(sampled(rows[0]))
    judge = args.judge
    if args.api_base:
        from vista_dspy.lm.models import ModelConfig

        judge = ModelConfig(model=args.judge, api_base=args.api_base).build()
    started = time.perf_counter()
    with VistaReward(judge, system=args.system, shape=args.shape, concurrency=args.concurrency) as reward:
        rewards = reward(**grpo_call(rows, generations))
    seconds = time.perf_counter() - started

    kinds = ("annotated answer", "refusal", "opinion", "answer + invented")
    for n, (reward_value, advantage) in enumerate(zip(rewards, advantages(rewards, generations))):
        shown = "None (not judged)" if reward_value is None else f"{reward_value:+.3f}"
        print(f"prompt {n // generations} {kinds[n % generations]:<18} reward {shown:<18} advantage {advantage:+.2f}")
    worst = min((v for v in reward.last_batch if v.reward is not None), key=lambda v: v.reward, default=None)
    if worst is not None:
        print(f"\nclaims of completion {worst.index} ({worst.label}, reward {worst.reward:+.3f}):")
        for claim in worst.to_dict()["claims"]:
            print(f"  {claim['category']:<16} {claim['claim']}")
    stats = reward.stats
    print(f"\n{stats.completions} completions of {len(rows)} prompts in {seconds:.1f} s: {stats.unjudged} not judged; "
          f"{stats.prompt_calls + stats.completion_calls} LM calls "
          f"({stats.calls_per_completion() or 0:.2f} per completion), {stats.calls_saved} saved by decomposing each "
          "prompt's history once")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`vista pairs`: N responses per prompt judged by VISTA, written as DPO preference pairs (``run.pairs``)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from ..lm.server import DEFAULT_PORT
from ..stages import PARSE_RETRIES, STOP_AFTER
from .app import app
from .common import (
    ApiBaseOption,
    CacheOption,
    GgufOption,
    MaxTokensOption,
    ModelOption,
    ParseRetriesOption,
    PortOption,
    StopAfterOption,
    TemperatureOption,
    err,
    fail,
    model_setup,
    run_errors,
    without_call_history,
)


class Tier(str, Enum):
    vista = "vista"
    evidence = "evidence"


Shape = Enum("Shape", {name: name for name in ("informative", "score", "faithful", "penalty")}, type=str)
Pairing = Enum("Pairing", {name.replace("-", "_"): name for name in ("best-worst", "all")}, type=str)


@app.command()
def pairs(
    input: Annotated[Path, typer.Argument(help="JSON Lines, one prompt a line: prompt, responses (at least two), "
                                               "document (or retrieved_context, retrieved_contexts, context), "
                                               "optional id and background (or persona).", show_default=False)],
    out: Annotated[Path, typer.Option("--out", "-o", help="Where the pairs go (JSON Lines: prompt, chosen, "
                                                          "rejected, margin, both rewards and verdicts).",
                                      show_default=False)],
    model: ModelOption = None,
    api_base: ApiBaseOption = None,
    gguf: GgufOption = None,
    port: PortOption = DEFAULT_PORT,
    program: Annotated[Optional[str], typer.Option(help="A program file or a name in vista_dspy/compiled/ "
                                                        "(default: the model's compiled program, else the seed).")
                       ] = None,
    system: Annotated[Tier, typer.Option(help="vista (the program's method) or evidence (claims decided by the "
                                              "evidence model: Decompose is the only LM call).")] = Tier.vista,
    shape: Annotated[Shape, typer.Option(help="The reward pairs are ranked by (see VistaReward): informative "
                                              "(default; saying nothing or refusing never ranks above a faithful "
                                              "informative answer), score, faithful or penalty.")
                     ] = Shape.informative,
    pairing: Annotated[Pairing, typer.Option(help="best-worst: one pair per prompt (its highest- and lowest-"
                                                  "rewarded responses); all: every two responses whose rewards "
                                                  "differ.")] = Pairing.best_worst,
    min_margin: Annotated[float, typer.Option(min=0.0, help="Pair only responses whose rewards differ by more "
                                                            "than this (0: any difference; ties never).")] = 0.0,
    concurrency: Annotated[int, typer.Option(min=1, help="LM requests in flight.")] = 8,
    batch_prompts: Annotated[int, typer.Option(min=1, help="Prompts judged per batch (their responses "
                                                           "concurrently).")] = 32,
    temperature: TemperatureOption = None,
    max_tokens: MaxTokensOption = 1024,
    cache: CacheOption = True,
    parse_retries: ParseRetriesOption = PARSE_RETRIES,
    stop_after: StopAfterOption = STOP_AFTER,
) -> None:
    """Judge N responses per prompt in INPUT and write chosen / rejected pairs for DPO (unjudged responses and ties
    are not paired)."""
    from ..data import InputError
    from ..lm.clients.cache import use_cache_for
    from ..lm.models import program_for_model
    from ..run.pairs import read_groups, write_pairs
    from ..run.reward import VistaReward

    console = Console(stderr=True)
    try:
        groups = read_groups(input)
    except InputError as exc:
        raise fail(str(exc)) from None
    lm_setup = model_setup(console, model, api_base=api_base, gguf=gguf, port=port, temperature=temperature,
                           max_tokens=max_tokens, cache=cache)
    config = lm_setup.config
    try:
        reward = VistaReward(config.build(), program or program_for_model(model), shape=shape.value,
                             system=system.value, concurrency=concurrency, adapter=config.build_adapter(),
                             parse_retries=parse_retries, stop_after=stop_after,
                             short_answer_tokens=lm_setup.short_answer_tokens,
                             label_probabilities=lm_setup.label_probabilities)
    except (FileNotFoundError, KeyError, ValueError) as exc:
        raise fail(f"cannot load program {program or 'seed'}: {exc}") from None
    lm_setup.judging_with(reward.program)
    responses = sum(len(g.responses) for g in groups)
    console.print(f"judging {responses} responses to {len(groups)} prompts with [bold]{config.model}[/], program "
                  f"{reward.program.program_name} ({system.value}), shape {shape.value}", highlight=False)
    use_cache_for(config)
    without_call_history()
    with run_errors(), lm_setup.server:
        summary = write_pairs(groups, reward, out, pairing=pairing.value, min_margin=min_margin,
                              batch_prompts=batch_prompts)
    stats = reward.stats
    calls = stats.prompt_calls + stats.completion_calls
    console.print(f"{summary.pairs} pairs from {summary.prompts} prompts written to {out}; {summary.unjudged} of "
                  f"{summary.responses} responses could not be judged (not paired); {summary.unpaired_prompts} "
                  f"prompts without a pair (ties, or fewer than two judged); {calls} LM calls, {stats.calls_saved} "
                  "saved by judging each prompt's history once", highlight=False)
    if summary.unjudged:
        err.print(f"[bold yellow]warning:[/] {summary.unjudged} responses were not judged; the log above says why",
                  highlight=False)

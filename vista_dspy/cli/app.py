"""The `vista` Typer application and its global options; the commands register themselves on it."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(
    help="VISTA: claim-level factuality judging of multi-turn, retrieval-grounded dialogue, as a DSPy program.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


DISTRIBUTION = "vista-dspy"


def version_line() -> str:
    """The installed package's name and version, as its metadata says (the wheel's, or an editable install's)."""
    from importlib import metadata

    try:
        return f"{DISTRIBUTION} {metadata.version(DISTRIBUTION)}"
    except metadata.PackageNotFoundError:
        return f"{DISTRIBUTION}: no version (run from a source tree that is not installed)"


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def _root(
    cache_dir: Annotated[Optional[Path], typer.Option("--cache-dir", envvar="VISTA_CACHE_DIR",
                         help="Where LM answers (one cache per model and endpoint) and the joined local model "
                              "file are kept. Default: ~/.cache/vista-dspy.")] = None,
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print the installed package's version and exit.")] = False,
) -> None:
    """VISTA: claim-level factuality judging of multi-turn, retrieval-grounded dialogue, as a DSPy program."""
    # SIGTERM (a service manager, `kill`, a CI runner's cancel) stops a command as Ctrl-C does: finished verdicts
    # kept, the embedded server stopped, exit 130.
    signal.signal(signal.SIGTERM, _as_interrupt)
    if cache_dir is not None:
        os.environ["VISTA_CACHE_DIR"] = str(cache_dir.expanduser().resolve())


def _as_interrupt(signum, frame) -> None:
    """What Ctrl-C does at this moment (Python's KeyboardInterrupt, asyncio's cancelling, a deferral), also where
    Ctrl-C is ignored (a background job)."""
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler):
        raise KeyboardInterrupt
    handler(signal.SIGINT, frame)

"""`vista data`: the datasets, where each comes from and whether it is here (`list`), fetching and verifying them into
the cache (`get`), and where one is read from (`path`)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from .app import app
from .common import DataDirOption, fail


class Origin(str, Enum):
    repository = "repository"
    hub = "hub"


data_app = typer.Typer(help="The datasets: list them, fetch and verify them into the cache, find them.",
                       no_args_is_help=True)
app.add_typer(data_app, name="data")


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.0f} kB"


@data_app.command(name="list")
def list_datasets() -> None:
    """Each dataset: name, source (repository@commit), licence, size, where it is in the cache, and whether it is
    present and verified (sha256 of every file)."""
    from rich.table import Table

    from ..data.fetch import data_cache_dir, expected, hub_record, status
    from ..data.sources import DATASETS

    root = data_cache_dir()
    table = Table(title=f"datasets (cache: {root})", title_justify="left")
    for column in ("name", "source", "licence", "size", "where", "status"):
        table.add_column(column, overflow="fold")
    for name, ds in DATASETS.items():
        state = status(name, root)
        for file in (f for f in ds.files if f.sha256 is None):
            pinned = expected(root, file)[0]
            state += (f" ({Path(file.path).name}: hash not pinned; " + (
                f"recorded at its first fetch, sha256 {pinned[:12]}…, a different one is refused)" if pinned else
                "recorded at its first fetch)"))
        source = ds.source if not ds.hub or ds.hub in ds.source else f"{ds.source}; hub {ds.hub} (--source hub)"
        if ds.kept and hub_record(name, root):
            state += "; hub copy fetched"
        where = str(root / ds.path) if ds.kept else ds.note
        table.add_row(name, source, ds.licence, _size(ds.size) if ds.kept else "-", where, state)
    Console(width=max(160, Console().width)).print(table)


class _RichProgress:
    """One bar per file on stderr (rich)."""

    def __init__(self, bar) -> None:
        self.bar, self.task = bar, None

    def start(self, label: str, total: int | None, done: int) -> None:
        if self.task is None:
            self.task = self.bar.add_task(label, total=total, completed=done)
        else:
            self.bar.reset(self.task, total=total, completed=done, description=label)

    def advance(self, n: int) -> None:
        self.bar.advance(self.task, n)


@data_app.command()
def get(
    names: Annotated[list[str], typer.Argument(help="Dataset names (see `vista data list`), or all.")],
    source: Annotated[str | None, typer.Option(
        "--from", help="A mirror base URL, or a directory holding the same relative paths as the cache (an "
                       "air-gapped copy); the same sha256 are checked.")] = None,
    origin: Annotated[Origin, typer.Option(
        "--source", help="repository: the authors' files at the pinned commit (sha256-checked); hub: the dataset's "
                         "Hugging Face hub id through `datasets` (faithdial, coconot; no hash to check), kept in "
                         "the cache for the loaders to read offline.")] = Origin.repository,
) -> None:
    """Fetch datasets from their authors' repositories at the pinned commits (or --from a mirror or a copy), check
    every file's sha256, and keep them in the cache (`vista --cache-dir DIR`, default ~/.cache/vista-dspy/data)."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    from ..data.errors import InputError
    from ..data.fetch import FetchError
    from ..data.fetch import get as fetch

    err = Console(stderr=True)
    columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    if origin is Origin.hub and source is not None:
        raise fail("--from applies to the repository files, not to --source hub")
    try:
        with Progress(*columns, console=err, transient=True) as bar:
            paths = fetch(names, source=source, progress=_RichProgress(bar), hub=origin is Origin.hub)
    except (FetchError, InputError) as exc:
        raise fail(str(exc)) from None
    for name, where in paths.items():
        typer.echo(f"{name}: {where}")


@data_app.command()
def path(
    name: Annotated[str, typer.Argument(help="A dataset name (see `vista data list`).")],
    data_dir: DataDirOption = None,
) -> None:
    """Where NAME is read from: the cache when fetched and verified, else --data-dir / $VISTA_DATA_DIR."""
    from ..data.errors import InputError
    from ..data.fetch import dataset_file

    try:
        typer.echo(str(dataset_file(name, data_dir)))
    except InputError as exc:
        raise fail(str(exc)) from None

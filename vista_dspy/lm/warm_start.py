"""Warm start: the embedded server's slots saved to disk after a command and restored by the next one.

Every command that starts the embedded llama.cpp server would first read each stage's few-shot prefix (instructions
and demos, ~1,300-1,700 tokens per stage; tens of seconds on 2 cores) before its first answer. llama.cpp can write a
slot's KV cache to a file and read it back (the server's ``slot_save_path`` and its ``/slots/{id}?action=save`` /
``restore`` requests); the next request then reuses the longest prefix it shares with a restored slot, exactly as it
reuses a prefix cached earlier in the same run.

Where the files live says what made them: ``<cache>/kv-slots/<server key>/<program key>-slot<i>.bin``. The server
key covers everything that changes the arithmetic of a cached state (the GGUF's sha256, the llama.cpp build, threads,
slots, context, KV layout, speculative decoding); the program key is the judging program's content hash (its demos,
instructions and options make the prefixes). A saved slot holds its own token list, and llama.cpp reuses only the
tokens a new prompt shares with it: a stale file can cost time, never change an answer. A file that cannot be restored
(damaged, another build's) is deleted and read afresh; the directory is kept under a size bound, oldest files first.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from .clients.cache import cache_root

logger = logging.getLogger(__name__)

# Default bound of the whole kv-slots directory; VISTA_WARM_START_MB sets another (0 turns warm starts off).
DEFAULT_MAX_MB = 2048
ANY_PROGRAM = "any"


def max_bytes() -> int:
    """The size bound of the saved slots: $VISTA_WARM_START_MB megabytes (default 2048; 0 turns warm starts off)."""
    raw = os.environ.get("VISTA_WARM_START_MB", "").strip()
    try:
        megabytes = float(raw) if raw else DEFAULT_MAX_MB
    except ValueError:
        raise ValueError(f"VISTA_WARM_START_MB must be a number of megabytes, not {raw!r}") from None
    return max(0, int(megabytes * 1024 * 1024))


def llama_build() -> str:
    """The llama.cpp build the server runs (xllamacpp's version pins it)."""
    try:
        return f"xllamacpp {metadata.version('xllamacpp')}"
    except metadata.PackageNotFoundError:
        return "xllamacpp (not installed)"


def server_key(*, gguf_sha256: str, build: str, arithmetic: dict[str, Any]) -> str:
    """What a saved slot state is valid for: the weights, the build and the settings that change its arithmetic."""
    identity = json.dumps({"gguf": gguf_sha256, "build": build, **arithmetic}, sort_keys=True)
    return hashlib.sha256(identity.encode()).hexdigest()[:20]


def slot_file(program_key: str, slot: int) -> str:
    """A slot's file name (llama.cpp takes a bare file name inside its ``slot_save_path``)."""
    return f"{program_key[:20]}-slot{slot}.bin"


@dataclass
class WarmStart:
    """The saved slots of one server configuration (``directory``) for one program (``program_key``)."""

    directory: Path
    program_key: str = ANY_PROGRAM
    limit: int = DEFAULT_MAX_MB * 1024 * 1024

    @classmethod
    def under(cls, key: str, program_key: str = ANY_PROGRAM, root: Path | None = None) -> WarmStart | None:
        """The warm start of server ``key`` for ``program_key`` in the cache (None when the size bound is 0:
        turned off)."""
        limit = max_bytes()
        if limit == 0:
            return None
        return cls((root or cache_root()) / "kv-slots" / key, program_key, limit)

    def restore(self, port: int, slots: int) -> list[int]:
        """Load every saved slot of this program into the server on ``port``; the slots restored. A file the server
        cannot restore is deleted (it would fail again); nothing here raises."""
        restored, failed = [], []
        for slot in range(slots):
            path = self.directory / slot_file(self.program_key, slot)
            if not path.is_file():
                continue
            ok = _slot_action(port, slot, "restore", path.name)
            if not ok:
                failed.append(slot)
            with contextlib.suppress(OSError):  # a read-only cache: restore anyway, keep the file
                if ok:
                    path.touch()  # recently used: pruned last
                else:
                    path.unlink(missing_ok=True)
            if ok:
                restored.append(slot)
        if failed:
            logger.warning("warm start: %d saved slots could not be restored from %s (deleted; their prompts are "
                           "read afresh)", len(failed), self.directory)
        return restored

    def save(self, port: int) -> list[int]:
        """Write the slots this server used to disk (a slot restored and never used keeps its file), then keep the
        whole kv-slots directory under the bound; the slots saved."""
        self.directory.mkdir(parents=True, exist_ok=True)
        used = used_slots(port)
        saved = [slot for slot in used if _slot_action(port, slot, "save", slot_file(self.program_key, slot))]
        if len(saved) < len(used):
            logger.warning("warm start: %d of %d used slots could not be saved to %s (the next command reads their "
                           "prompts afresh)", len(used) - len(saved), len(used), self.directory)
        prune(self.directory.parent, self.limit)
        return saved


def used_slots(port: int) -> list[int]:
    """The slots of the server on ``port`` that processed a request since it started (llama.cpp's /slots)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/slots", timeout=5) as response:
            slots = json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return []
    return [s["id"] for s in slots if isinstance(s, dict) and "id_task" in s]


def _slot_action(port: int, slot: int, action: str, filename: str) -> bool:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/slots/{slot}?action={action}",
                                     data=json.dumps({"filename": filename}).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def prune(root: Path, limit: int) -> list[Path]:
    """Delete the least recently used files under ``root`` until they add up to at most ``limit`` bytes; the files
    deleted. (Emptied directories go too.)"""
    files = sorted((p for p in root.rglob("*") if p.is_file()), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in files)
    removed = []
    for path in files:
        if total <= limit:
            break
        total -= path.stat().st_size
        path.unlink(missing_ok=True)
        removed.append(path)
    for directory in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            directory.rmdir()  # only if empty
    return removed

"""A run's output folder: held by one run at a time (a file lock), verdicts appended and fsynced, damaged lines set
aside, the file compacted by an atomic rename, and a full disk or a read-only folder said in one line.

Files of the folder that this module owns:
    verdicts.jsonl          one DialogueVerdict per line (``runner`` says in which order and when it is compacted)
    verdicts.damaged.jsonl  lines of verdicts.jsonl that were not a verdict, moved here byte for byte
    run.lock                locked (``fcntl.flock``) by the run that holds the folder, with its process id inside;
                            the kernel releases the lock when that process ends, even by kill -9
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ..schema import DialogueVerdict

VERDICTS = "verdicts.jsonl"
DAMAGED = "verdicts.damaged.jsonl"
LOCK = "run.lock"
# What a folder that cannot take more bytes says: no space, over quota, over the file size limit, read-only, denied.
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM)


class FolderBusy(RuntimeError):
    """Another live process holds the output folder."""


class OutputUnwritable(RuntimeError):
    """The output folder takes no more bytes (full disk, quota, read-only): what was written before is intact."""


@contextlib.contextmanager
def writing(folder: Path) -> Iterator[None]:
    """Turn a full disk, a quota, a file size limit or a read-only folder into ``OutputUnwritable`` naming
    ``folder``."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in NO_ROOM:
            raise
        raise OutputUnwritable(f"cannot write in {folder}: {exc.strerror}. The verdicts written before are kept; "
                               "free space (or make the folder writable) and rerun the same command to resume."
                               ) from None


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C (SIGINT) and SIGTERM arriving in the block take effect when it ends, so that a write and the
    bookkeeping that goes with it happen whole. Only the main thread can set handlers: elsewhere, a plain block."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: caught.append(signum))
                for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, signal.SIG_DFL if handler is None else handler)
        for number in dict.fromkeys(caught):
            signal.raise_signal(number)


def _fsync_directory(path: Path) -> None:
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def replace_lines(path: Path, lines: Iterator[bytes] | Sequence[bytes]) -> None:
    """Replace ``path`` by ``lines``, atomically: a new file, synced, renamed over the old one (a failed write
    leaves the old file as it was and removes the new one)."""
    partial = path.with_name(path.name + ".partial")
    try:
        with partial.open("wb") as handle:
            handle.writelines(lines)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    _fsync_directory(path.parent)


def write_verdicts(path: Path, verdicts: Sequence[DialogueVerdict]) -> None:
    """Replace ``path`` by one line per verdict, atomically (``replace_lines``)."""
    replace_lines(path, [(v.model_dump_json() + "\n").encode() for v in verdicts])


def read_verdicts(path: Path) -> list[DialogueVerdict]:
    """Verdicts already written, one per dialogue in order of first appearance; a later line for the same dialogue
    (a repair) replaces the earlier one. Lines that are not a verdict are skipped (``OutputFolder.read`` sets them
    aside); a torn last line (the process died mid-write) is skipped too. Reads, never writes."""
    return list(_parse(path).verdicts.values())


@dataclass
class _Contents:
    verdicts: dict[str, DialogueVerdict] = field(default_factory=dict)  # by dialogue id, the last line winning
    good: list[bytes] = field(default_factory=list)  # the lines holding a verdict, as they are (newline-ended)
    damaged: list[bytes] = field(default_factory=list)  # whole lines that are not a verdict
    untidy: bool = False  # a torn last line, or a last verdict without its newline: the file needs rewriting


def _parse(path: Path) -> _Contents:
    contents = _Contents()
    if not path.exists():
        return contents
    with path.open("rb") as handle:
        for raw in handle:
            if not raw.strip():
                contents.untidy = True  # a blank line: dropped
                continue
            try:
                verdict = DialogueVerdict.model_validate_json(raw)
            except ValidationError:
                if raw.endswith(b"\n"):
                    contents.damaged.append(raw)
                else:
                    contents.untidy = True  # torn tail: the process died mid-write
                continue
            contents.verdicts[verdict.dialogue_id] = verdict
            if not raw.endswith(b"\n"):
                raw, contents.untidy = raw + b"\n", True
            contents.good.append(raw)
    return contents


class OutputFolder:
    """A run's output folder, held for the run (``with``): its verdicts as written so far (``written``, ``lines``),
    appended one by one (``append``), compacted to one line per dialogue (``compact``). Entering it when another
    live process holds it raises ``FolderBusy``; every write that finds no room raises ``OutputUnwritable``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.verdicts = path / VERDICTS
        self.written: dict[str, DialogueVerdict] = {}  # the file's verdicts by dialogue, the last line winning
        self.lines = 0  # lines of the file holding a verdict (more than ``written``: a repair left two)
        self.set_aside = 0  # damaged lines moved to DAMAGED when the folder was read
        self._lock: int | None = None
        self._append: int | None = None

    def __enter__(self) -> OutputFolder:
        with writing(self.path):
            self.path.mkdir(parents=True, exist_ok=True)
            lock = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(lock, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(lock)
            raise FolderBusy(f"{self.path} is in use by another run (process {holder}{_command_of(holder)}): one "
                             "run per output folder at a time. Wait for it to end, or use another --out.") from None
        self._lock = lock
        os.ftruncate(lock, 0)
        os.pwrite(lock, f"{os.getpid()}\n".encode(), 0)
        return self

    def __exit__(self, *exc) -> None:
        if self._append is not None:
            os.close(self._append)
            self._append = None
        if self._lock is not None:
            os.close(self._lock)  # releases the lock
            self._lock = None

    def read(self) -> dict[str, DialogueVerdict]:
        """The verdicts written by earlier runs. Damaged lines are moved to ``DAMAGED`` (appended, synced) and
        dropped from verdicts.jsonl, whose other lines stay byte for byte; a torn last line is cut."""
        contents = _parse(self.verdicts)
        with writing(self.path), signals_deferred():
            if contents.damaged:
                with (self.path / DAMAGED).open("ab") as side:
                    side.writelines(contents.damaged)
                    side.flush()
                    os.fsync(side.fileno())
            if contents.damaged or contents.untidy:
                replace_lines(self.verdicts, contents.good)
            self._append = os.open(self.verdicts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.written, self.lines = contents.verdicts, len(contents.good)
        self.set_aside = len(contents.damaged)
        return dict(contents.verdicts)

    def append(self, verdict: DialogueVerdict) -> None:
        """Append one verdict's line and sync it. A write that fails (no room) is undone: the file ends as it was."""
        data = (verdict.model_dump_json() + "\n").encode()
        with writing(self.path), signals_deferred():
            end = os.fstat(self._append).st_size
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._append, view):]
                os.fsync(self._append)
            except OSError:
                with contextlib.suppress(OSError):
                    os.ftruncate(self._append, end)
                raise
            self.written[verdict.dialogue_id] = verdict
            self.lines += 1

    def compact(self) -> None:
        """One line per dialogue, when a repair left some on two (atomic; a Ctrl-C waits until it is done)."""
        if self.lines == len(self.written):
            return
        with writing(self.path), signals_deferred():
            write_verdicts(self.verdicts, list(self.written.values()))
            self.lines = len(self.written)

    def discard(self, *names: str) -> None:
        """Remove these files of the folder (an earlier run given up)."""
        with writing(self.path):
            for name in names:
                (self.path / name).unlink(missing_ok=True)

    def write_text(self, name: str, text: str) -> None:
        """A small file of the folder (run.json, summary.json), replaced atomically."""
        with writing(self.path):
            replace_lines(self.path / name, [text.encode()])


def _command_of(pid: str) -> str:
    """", COMMAND" for a process id, read from Linux's /proc (nothing where it cannot be read)."""
    try:
        argv = Path(f"/proc/{int(pid)}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return ""
    command = " ".join(a.decode(errors="replace") for a in argv if a)
    return f", {command[:160]}" if command else ""

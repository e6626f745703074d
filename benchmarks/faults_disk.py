"""The faults of the disk under an output folder, for ``faults.py``: a file size limit and a full disk while verdicts
are appended, a full disk while the file is compacted, a read-only folder (the last three mount a small tmpfs: root
only; without the right to mount, their rows say "not run")."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
from pathlib import Path

from fault_harness import ROWS, first_ids, lines, row, run, vista  # (benchmarks/, the script's own folder)

from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.run.outdir import VERDICTS


def file_size_limit(data: Path, work: Path) -> None:
    out, expected = work / "fsize", first_ids(data, 6)
    limit = 9000  # bytes: two or three verdicts of the dev file

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    with FakeOpenAIServer() as server:
        code, errors, _ = run(vista(data, out, server.url, limit=6), preexec_fn=small_files)
        kept, whole = len(lines(out)), (out / VERDICTS).read_bytes() == b"".join(lines(out))
        again, _, _ = run(vista(data, out, server.url, limit=6))
    row("file size limit while appending", f"RLIMIT_FSIZE {limit} B, then rerun without it", f"{code}, then {again}",
        out, expected, f"{kept} verdicts kept, no torn line: {whole}; said: {errors[errors.find('cannot'):][:60]}")


@contextlib.contextmanager
def tmpfs(path: Path, size: str, fault: str):
    """A tmpfs of ``size`` mounted on ``path``, yielding True; without the right to mount, a "not run" row for
    ``fault`` and False."""
    path.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True).returncode == 0
    if not mounted:
        ROWS.append({"fault": fault, "done": "not run: mounting a tmpfs needs root"})
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", str(path)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """A file that leaves ``leave`` bytes free on ``disk``."""
    stats = os.statvfs(disk)
    filler = disk / "filler"
    with filler.open("wb") as handle:
        handle.write(b"\0" * max(0, stats.f_bavail * stats.f_frsize - leave))
    return filler


def full_disk(data: Path, work: Path) -> None:
    expected = first_ids(data, 6)
    with tmpfs(work / "disk", "16k", "full disk while appending") as mounted, FakeOpenAIServer() as server:
        out = work / "disk" / "out"
        if not mounted:
            return
        code, errors, _ = run(vista(data, out, server.url, limit=6))
        kept, whole = len(lines(out)), (out / VERDICTS).read_bytes() == b"".join(lines(out))
        subprocess.run(["mount", "-o", "remount,size=8m", str(work / "disk")], check=True)  # space freed
        again, _, _ = run(vista(data, out, server.url, limit=6))
        row("full disk while appending", "a 16 KiB tmpfs as --out's disk, then remounted at 8 MiB",
            f"{code}, then {again}", out, expected,
            f"{kept} verdicts kept, no torn line: {whole}; said: {errors[errors.find('cannot'):][:60]}")

    expected = first_ids(data, 20)
    with tmpfs(work / "disk2", "4m", "full disk while compacting") as mounted:
        out = work / "disk2" / "out"
        if not mounted:
            return
        with FakeOpenAIServer(faults={"malformed": 0.1}, seed=3) as server:
            run(vista(data, out, server.url, "--parse-retries", "0", limit=20))
            port = server.port  # the same address again: a run's settings include its endpoint
        failed = [x for x in lines(out) if b'"category":"ERROR"' in x or b'"label":"unknown"' in x]
        total = sum(map(len, lines(out)))
        leave = int(1.5 * sum(map(len, failed))) + 16384  # room for the repairs' lines, not for a second copy
        filler = fill(work / "disk2", leave)
        with FakeOpenAIServer(port=port) as server:
            code, errors, _ = run(vista(data, out, server.url, limit=20))
            before = len(lines(out))
            filler.unlink()
            again, _, _ = run(vista(data, out, server.url, limit=20))
        row("full disk while compacting", f"{len(failed)} failed verdicts of 20 repaired on a disk with {leave} B "
            f"free (file {total} B), then the filler removed", f"{code}, then {again}", out, expected,
            f"{before} lines for 20 dialogues after the stop (repairs appended, not compacted); said: "
            f"{errors[errors.find('cannot'):][:50]}")


def read_only(data: Path, work: Path) -> None:
    expected = first_ids(data, 6)
    with tmpfs(work / "ro", "1m", "read-only folder") as mounted, FakeOpenAIServer() as server:
        out = work / "ro" / "out"
        if not mounted:
            return
        run(vista(data, out, server.url, limit=3))
        subprocess.run(["mount", "-o", "remount,ro", str(work / "ro")], check=True)
        code, errors, _ = run(vista(data, out, server.url, limit=6))
        subprocess.run(["mount", "-o", "remount,rw", str(work / "ro")], check=True)
        again, _, _ = run(vista(data, out, server.url, limit=6))
        row("read-only folder", "3 judged, the disk remounted read-only, 6 asked; then writable again",
            f"{code}, then {again}", out, expected, f"said: {errors[errors.find('cannot'):][:60]}")

"""The harness of ``faults.py``: ``vista evaluate`` run in its own process against a fake server, and what its output
folder holds afterwards (dialogues present, duplicated and lost, processes left behind), one table row per fault."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from vista_dspy.run.outdir import VERDICTS

ROWS: list[dict] = []


def vista(data: Path, out: Path, url: str, *extra: str, limit: int | None = None) -> list[str]:
    return [sys.executable, "-m", "vista_dspy.cli", "evaluate", str(data), "--model", "openai/fake", "--api-base", url,
            "--out", str(out), "--no-cache", *(["--limit", str(limit)] if limit else []), *extra]


def run(command: list[str], **popen) -> tuple[int, str, dict]:
    """(exit code, stderr as one line, the command's peak memory in MB and seconds)."""
    start = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **popen)
    errors = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, " ".join(errors.split()), {"rss_mb": usage.ru_maxrss / 1024,
                                                           "seconds": time.monotonic() - start}


def lines(out: Path) -> list[bytes]:
    path = out / VERDICTS
    return [x for x in path.read_bytes().splitlines(keepends=True) if x.endswith(b"\n")] if path.exists() else []


def ids_in(out: Path) -> list[str]:
    found = []
    for line in lines(out):
        with contextlib.suppress(ValueError, KeyError):
            found.append(json.loads(line)["dialogue_id"])
    return found


def leftovers(out: Path) -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if str(out).encode() in (entry / "cmdline").read_bytes():
                    count += 1
    return count


def row(fault: str, done: str, returned: str, out: Path, expected: set[str], note: str = "") -> None:
    time.sleep(0.5)  # a process still stopping is counted as left behind only if it outlives this
    ids = ids_in(out)
    present = expected & set(ids)
    ROWS.append({"fault": fault, "done": done, "returned": returned, "expected": len(expected),
                 "present": len(present), "duplicated": len(ids) - len(set(ids)), "lost": len(expected - present),
                 "leftover": leftovers(out), "note": note})


def wait_for(predicate, seconds: float = 300, every: float = 0.05) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False


def first_ids(data: Path, limit: int) -> set[str]:
    from vista_dspy.data import load_dialogues

    return {d.id for d in load_dialogues(data)[:limit]}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")

"""Faults beyond outages (benchmarks/outages.py), each tried as a user would: the `vista evaluate` command, run in
its own process against the fake OpenAI server (tests/fakes.py; no real model is started), one output folder per
fault. For each: what was done, what the commands returned, and the dialogues expected / present (in
verdicts.jsonl) / duplicated (lines beyond one per dialogue) / lost, and the processes left behind (any process whose
command line names the fault's folder).

Faults: two commands on one --out; its holder killed (kill -9); a damaged middle line; a file size limit
(RLIMIT_FSIZE) and a full disk (a small tmpfs, root only) while verdicts are appended; a full disk while the file
is compacted; a read-only folder (root only); SIGTERM and Ctrl-C while judging, SIGTERM while repairing and while
compacting; a document longer than the model's context; 32 concurrent clients on one server; an input of 20,000
dialogues killed half way and resumed.

    python benchmarks/faults.py [--data dev.json] [--scale 20000]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fakes import FakeOpenAIServer  # noqa: E402

from vista_dspy.run.outdir import DAMAGED, VERDICTS  # noqa: E402

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


# ---- the faults ---------------------------------------------------------------------------------------------
def two_commands(data: Path, work: Path) -> None:
    out, expected = work / "two", first_ids(data, 6)
    with FakeOpenAIServer(latency=0.3) as server:
        first = subprocess.Popen(vista(data, out, server.url, "--threads", "1", limit=6), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        wait_for(lambda: lines(out))
        code, errors, _ = run(vista(data, out, server.url, "--threads", "1", limit=6))
        first.wait()
    said = "names the holder's pid" if f"process {first.pid}" in errors else f"said: {errors[:80]}"
    row("two commands on one --out", "a second command started while the first judges",
        f"first {first.returncode}, second {code}", out, expected, f"second refused at once, {said}")

    out = work / "killed"
    with FakeOpenAIServer(latency=0.1) as server:
        holder = subprocess.Popen(vista(data, out, server.url, limit=6), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        wait_for(lambda: lines(out))
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        kept = len(lines(out))
        code, _, _ = run(vista(data, out, server.url, limit=6))
    row("holder killed (kill -9)", f"kill -9 after {kept} verdicts, then the same command", f"-9, then {code}", out,
        expected, "the next command was not blocked" if code == 0 else "")


def damaged_line(data: Path, work: Path) -> None:
    out, expected = work / "damaged", first_ids(data, 6)
    with FakeOpenAIServer() as server:
        run(vista(data, out, server.url, limit=6))
        good = lines(out)
        (out / VERDICTS).write_bytes(b"".join(good[:2]) + good[2][:50] + b"<garbage>\n" + b"".join(good[3:]))
        code, errors, _ = run(vista(data, out, server.url, limit=6))
    kept = sum(line in lines(out) for line in good[:2] + good[3:])
    said = f"said: set aside 1 line in {DAMAGED}" if "set aside: 1 damaged lines" in errors else errors[:60]
    row("damaged middle line", "line 3 of 6 overwritten with garbage, then the same command", str(code), out, expected,
        f"{said}; {kept}/5 readable lines kept byte for byte")


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


def signals(data: Path, work: Path) -> None:
    expected = first_ids(data, 12)
    for name, number in (("SIGTERM", signal.SIGTERM), ("Ctrl-C (SIGINT)", signal.SIGINT)):
        out = work / f"signal-{number}"
        with FakeOpenAIServer(latency=0.05) as server:
            process = subprocess.Popen(vista(data, out, server.url, limit=12), stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
            wait_for(lambda: len(lines(out)) >= 3)  # noqa: B023 (called within this iteration)
            process.send_signal(number)
            process.wait()
            whole = (out / VERDICTS).read_bytes() == b"".join(lines(out))
            kept = len(lines(out))
            again, _, _ = run(vista(data, out, server.url, limit=12))
        row(f"{name} while judging", f"{name} after 3 verdicts, then the same command",
            f"{process.returncode}, then {again}", out, expected, f"{kept} kept, file whole: {whole}")

    out = work / "signal-repair"
    with FakeOpenAIServer(faults={"malformed": 0.1}, seed=4) as server:
        run(vista(data, out, server.url, "--parse-retries", "0", "--threads", "1", limit=12))
        port = server.port
    before = len(lines(out))
    with FakeOpenAIServer(latency=0.1, port=port) as server:
        process = subprocess.Popen(vista(data, out, server.url, "--threads", "1", limit=12), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        wait_for(lambda: len(lines(out)) > before)
        process.send_signal(signal.SIGTERM)
        process.wait()
        repaired = len(lines(out)) - before
        again, _, _ = run(vista(data, out, server.url, "--threads", "1", limit=12))
    row("SIGTERM while repairing", f"a rerun repairing failed verdicts, SIGTERM after {repaired} repaired",
        f"{process.returncode}, then {again}", out, expected, f"{before + repaired} lines for 12 dialogues after the "
        "signal (the later line wins), one each after the rerun")


def compaction_signal(scaled: Path, data: Path, expected: set[str], port: int, *, work: Path) -> None:
    """SIGTERM the moment the compaction's new file appears (a repaired verdict of a large file)."""
    out = work / "signal-compaction"
    shutil.copytree(scaled, out)
    good = lines(out)
    first = json.loads(good[0])
    first["errors"] = ["turn 1: decompose failed: injected"]
    (out / VERDICTS).write_bytes(json.dumps(first).encode() + b"\n" + b"".join(good[1:]))
    partial = out / (VERDICTS + ".partial")
    with FakeOpenAIServer(port=port) as server:  # the scale run's address: a run's settings include its endpoint
        process = subprocess.Popen(vista(data, out, server.url, "--threads", "8"), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        caught = wait_for(partial.exists, every=0.001)
        process.send_signal(signal.SIGTERM)
        process.wait()
        after = len(lines(out))
        again, _, _ = run(vista(data, out, server.url, "--threads", "8"))
    row("SIGTERM while compacting", f"{len(expected)} dialogues, one repaired; SIGTERM as the new file appeared "
        f"(caught in the act: {caught})", f"{process.returncode}, then {again}", out, expected,
        f"{after} lines after the signal ({len(expected) + 1} before the compaction)")


def long_document(work: Path) -> None:
    data, out = work / "long.jsonl", work / "long"
    document = "The museum opened in 1901 and has a garden. " * 1500  # ~17,000 tokens at 4 characters a token
    records = [{"id": f"long-{i}", "turns": [
        {"role": "user", "text": "When did it open?"},
        {"role": "assistant", "text": "The museum opened in 1901.",
         "grounding": {"kind": "document", "document": document if i == 1 else "The museum opened in 1901."}}]}
        for i in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    with FakeOpenAIServer(context_tokens=4096) as server:
        code, _, _ = run(vista(data, out, server.url))
    turns = [t for line in lines(out) for t in json.loads(line)["turns"]]
    said = [c["error"] for t in turns for c in t["claims"] if c["error"]]
    row("document longer than the context", "one of 3 dialogues with a 67,000-character document, a 4,096-token "
        "server", str(code), out, {r["id"] for r in records},
        f"{sum(t['label'] == 'unknown' for t in turns)} turn unknown, {len(said)} claim ERROR: "
        f"{said[0][:45] if said else 'none'}...")


def busy_server(data: Path, work: Path) -> None:
    """32 client threads, 25 requests each, on one fake server in its own process (no GIL shared with the
    clients); then a run with 32 requests in flight."""
    fake = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fakes.py"), "--latency", "0.05"],
                            stdout=subprocess.PIPE, text=True)
    url = fake.stdout.readline().strip()
    statuses: collections.Counter = collections.Counter()
    body = json.dumps({"model": "fake", "messages": [{"role": "system", "content": "Your output fields are: 1. "
                                                      "`response`"}, {"role": "user", "content": "hello"}]}).encode()

    def client() -> None:
        for _ in range(25):
            request = urllib.request.Request(f"{url}/chat/completions", body, {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    statuses[response.status] += 1
            except urllib.error.HTTPError as exc:
                statuses[exc.code] += 1
            except OSError as exc:
                statuses[type(exc).__name__] += 1

    start = time.monotonic()
    clients = [threading.Thread(target=client) for _ in range(32)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    seconds = time.monotonic() - start
    rss = _rss_mb(fake.pid)
    out, expected = work / "busy", first_ids(data, 64)
    code, _, usage = run(vista(data, out, url, "--concurrency", "32", limit=64))
    fake.send_signal(signal.SIGTERM)
    fake.wait()
    ROWS.append({"fault": "32 concurrent clients", "done": "32 threads x 25 requests on one fake server process",
                 "returned": " ".join(f"{k}: {v}" for k, v in sorted(statuses.items(), key=str)), "expected": 800,
                 "present": statuses[200], "duplicated": 0, "lost": 800 - sum(statuses.values()), "leftover": 0,
                 "note": f"requests, {seconds:.1f} s; server {rss:.0f} MB after"})
    row("32 requests in flight", "64 dialogues, --concurrency 32, same server", str(code), out, expected,
        f"client peak {usage['rss_mb']:.0f} MB")


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def scale(work: Path, size: int) -> tuple[Path, Path, set[str], int]:
    data, out = work / f"scale-{size}.jsonl", work / "scale"
    with data.open("w") as handle:
        for i in range(size):
            handle.write(json.dumps({"id": f"s{i}", "turns": [
                {"role": "user", "text": f"Tell me about town {i}."},
                {"role": "assistant", "text": f"Town {i} has a river. It is old.",
                 "grounding": {"kind": "document", "document": f"Town {i} has a river."}}]}) + "\n")
    expected = {f"s{i}" for i in range(size)}
    fake = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fakes.py")], stdout=subprocess.PIPE, text=True)
    url = fake.stdout.readline().strip()
    started = time.monotonic()
    process = subprocess.Popen(vista(data, out, url, "--threads", "8"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    wait_for(lambda: (out / VERDICTS).exists() and (out / VERDICTS).stat().st_size > 0, every=0.01)
    first_verdict = time.monotonic() - started
    wait_for(lambda: (out / VERDICTS).read_bytes().count(b"\n") >= size // 2, seconds=3600, every=0.5)
    process.send_signal(signal.SIGKILL)
    _, _, usage = os.wait4(process.pid, 0)
    before = lines(out)
    code, _, again = run(vista(data, out, url, "--threads", "8"))
    fake.send_signal(signal.SIGTERM)
    fake.wait()
    exact = lines(out)[: len(before)] == before
    row(f"{size:,} dialogues, kill -9 half way", f"kill -9 after {len(before):,} verdicts, then the same command",
        f"-9, then {code}", out, expected,
        f"first verdict {first_verdict:.1f} s after start; peak {usage.ru_maxrss / 1024:.0f} MB, resumed "
        f"{again['rss_mb']:.0f} MB; earlier lines kept byte for byte: {exact}")
    return out, data, expected, int(url.rsplit(":", 1)[1].split("/")[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared/data/vista_human_eval/dev.json")
    parser.add_argument("--scale", type=int, default=20000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vista-faults-") as work:
        work = Path(work)
        os.environ["VISTA_CACHE_DIR"] = str(work / "cache")
        two_commands(options.data, work)
        damaged_line(options.data, work)
        file_size_limit(options.data, work)
        full_disk(options.data, work)
        read_only(options.data, work)
        signals(options.data, work)
        long_document(work)
        busy_server(options.data, work)
        compaction_signal(*scale(work, options.scale), work=work)
    ROWS.append({"fault": "SIGTERM while the embedded server starts", "done": "not run: it would start the real "
                 "model (LocalServer stops its child on any exception, Ctrl-C included; PR_SET_PDEATHSIG on kill -9)"})
    header = ["fault", "what was done", "returned", "expected", "present", "duplicated", "lost", "leftover", "notes"]
    keys = ["fault", "done", "returned", "expected", "present", "duplicated", "lost", "leftover", "note"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for entry in ROWS:
        print("| " + " | ".join(str(entry.get(k, "")) for k in keys) + " |")


if __name__ == "__main__":
    main()

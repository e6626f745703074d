"""Faults beyond outages (benchmarks/outages.py), each tried as a user would: the `vista evaluate` command, run in
its own process against the fake OpenAI server (``vista_dspy.lm.fake``; no real model is started), one output folder per
fault. For each: what was done, what the commands returned, and the dialogues expected / present (in
verdicts.jsonl) / duplicated (lines beyond one per dialogue) / lost, and the processes left behind (any process whose
command line names the fault's folder).

Faults: two commands on one --out; its holder killed (kill -9); a damaged middle line; a file size limit
(RLIMIT_FSIZE) and a full disk (a small tmpfs, root only) while verdicts are appended; a full disk while the file
is compacted; a read-only folder (root only); SIGTERM and Ctrl-C while judging, SIGTERM while repairing and while
compacting; a document longer than the model's context; 32 concurrent clients on one server; an input of 20,000
dialogues killed half way and resumed. The disk faults are in ``faults_disk.py``, the harness (running the command,
counting what its folder holds) in ``fault_harness.py``.

    python benchmarks/faults.py [--data dev.json] [--scale 20000]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
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

# (benchmarks/, the script's own folder)
from fault_harness import ROWS, first_ids, lines, row, rss_mb, run, vista, wait_for
from faults_disk import file_size_limit, full_disk, read_only

from vista_dspy.data import data_dir
from vista_dspy.lm.fake import FakeOpenAIServer
from vista_dspy.run.outdir import DAMAGED, VERDICTS

ROOT = Path(__file__).resolve().parents[1]
FAKE_SERVER = [sys.executable, "-m", "vista_dspy.lm.fake.server"]  # a fake server in its own process


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
    fake = subprocess.Popen([*FAKE_SERVER, "--latency", "0.05"], stdout=subprocess.PIPE, text=True)
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
    rss = rss_mb(fake.pid)
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


def scale(work: Path, size: int) -> tuple[Path, Path, set[str], int]:
    data, out = work / f"scale-{size}.jsonl", work / "scale"
    with data.open("w") as handle:
        for i in range(size):
            handle.write(json.dumps({"id": f"s{i}", "turns": [
                {"role": "user", "text": f"Tell me about town {i}."},
                {"role": "assistant", "text": f"Town {i} has a river. It is old.",
                 "grounding": {"kind": "document", "document": f"Town {i} has a river."}}]}) + "\n")
    expected = {f"s{i}" for i in range(size)}
    fake = subprocess.Popen(FAKE_SERVER, stdout=subprocess.PIPE, text=True)
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
    parser.add_argument("--data", type=Path, default=data_dir(ROOT) / "vista_human_eval" / "dev.json")
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

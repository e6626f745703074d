"""Warm start of the embedded server, measured: the same small input judged by two commands in a row, each starting
its own server, with a fresh cache directory (the first command reads every stage's few-shot prefix, the second
restores the slots the first saved). LM answers are not cached between the two (the answer cache is emptied in
between), so both ask the model the same questions; the verdicts are compared.

    python benchmarks/warm_start.py                     # examples/quickstart.json, the embedded 1.5B
    python benchmarks/warm_start.py --input FILE --limit 2

Prints, per command: seconds to the first verdict written and in total, and whether the verdicts are identical.
Run it alone: a second model server on the same cores stalls both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(command: list[str], env: dict[str, str], verdicts: Path) -> tuple[float, float]:
    """(seconds to the first verdict line, seconds in all) of one command."""
    started = time.perf_counter()
    first = None
    with subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as process:
        while process.poll() is None:
            if first is None and verdicts.is_file() and verdicts.read_text().strip():
                first = time.perf_counter() - started
            time.sleep(0.2)
        error = process.stderr.read()
    total = time.perf_counter() - started
    if process.returncode != 0:
        sys.exit(f"command failed ({process.returncode}): {' '.join(command)}\n{error[-2000:]}")
    return (first if first is not None else total), total


def judged(verdicts: Path) -> list:
    """What was decided, per turn and claim (timings and usage left out)."""
    found = []
    for line in verdicts.read_text().splitlines():
        record = json.loads(line)
        for turn in record["turns"]:
            found.append((record["dialogue_id"], turn["label"],
                          [(c["claim"], c["category"], c.get("probabilities")) for c in turn["claims"]]))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=Path, default=REPO / "examples" / "quickstart.json")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--model", default="local")
    args = parser.parse_args()

    from vista_dspy.lm.weights import models_dir

    cache = Path(tempfile.mkdtemp(prefix="vista-warm-"))
    env = {**os.environ, "VISTA_CACHE_DIR": str(cache), "VISTA_MODELS_DIR": str(models_dir())}
    rows = []
    try:
        for name in ("first command (cold)", "second command (warm)"):
            shutil.rmtree(cache / "lm-cache", ignore_errors=True)  # both commands ask the model everything
            out = cache / name.split()[0]
            command = [sys.executable, "-m", "vista_dspy.cli", "evaluate", str(args.input), "--model", args.model,
                       "--port", str(free_port()), "--out", str(out), "--json"]
            command += ["--limit", str(args.limit)] if args.limit else []
            first, total = run(command, env, out / "verdicts.jsonl")
            rows.append((name, first, total, judged(out / "verdicts.jsonl")))
            print(f"{name:24s} first verdict {first:6.1f} s   in all {total:6.1f} s", flush=True)
        saved = sum(p.stat().st_size for p in (cache / "kv-slots").rglob("*.bin"))
        print(f"saved slot states: {saved / 2**20:.0f} MiB")
        (_, cold_first, cold_total, cold), (_, warm_first, warm_total, warm) = rows
        print(f"ratio cold / warm: first verdict {cold_first / warm_first:.2f}x, in all {cold_total / warm_total:.2f}x")
        print("verdicts identical" if cold == warm else "VERDICTS DIFFER:\n" + json.dumps([cold, warm], indent=1))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`vista serve` under load: concurrent clients against the embedded server on loopback, bounded in time and count.

Each client sends judge requests (the prompts the seed program sends judging examples/quickstart.json, as the
embedded model is asked: model "local", answers capped at 200 tokens), one after another on a kept-alive
connection; a refusal (503) is retried after its Retry-After. Then the server is sent SIGTERM while every client is
busy. Printed: every request's outcome -- answered, refused with a status and a retry hint, anything else (another
status, a connection dropped, an answer cut short, no answer within --timeout: a hang) --, p50/p95 latency of the
answers, the server's memory (RSS) before the load, at its peak, and after it, and what SIGTERM did to the requests
in flight (finished whole or refused; none cut) and how long the server took to exit.

    python benchmarks/serve_load.py                          # the embedded model (`vista serve`; minutes)
    python benchmarks/serve_load.py --fake-latency 0.5       # the front before the fake server (no model)

The embedded model's numbers need its weights and, to mean anything, cores no one else is using. ``--fake-latency``
puts `vista serve`'s front door (``vista_dspy.lm.front``) before the fake OpenAI-compatible server with that latency
and as many slots: the queue, the refusals, the memory of the front and the clean stop, without a model.
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def judge_requests() -> list[str]:
    """The request bodies a judge sends for the quick-start example (recorded against the fake server), as the
    embedded model is asked."""
    from vista_dspy.data import load_dialogues
    from vista_dspy.lm.fake import FakeOpenAIServer
    from vista_dspy.lm.models import ModelConfig
    from vista_dspy.program import Vista
    from vista_dspy.run.runner import Threads, evaluate

    with FakeOpenAIServer() as server:
        lm = ModelConfig(model="openai/fake", api_base=server.url, num_retries=0, cache=False).build()
        evaluate(load_dialogues(ROOT / "examples" / "quickstart.json"), Vista.from_program(None), Threads(lm))
    return [json.dumps({"model": "local", "messages": call["messages"], "max_tokens": 200, "temperature": 0.0})
            for call in lm.history]


def rss_mb(pid: int) -> float:
    """Resident memory of a process and its children (MB), from Linux's /proc."""
    total = 0
    for p in [pid, *children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def children(pid: int) -> list[int]:
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [int(c) for c in found] + [g for c in found for g in children(int(c))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(port: int, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited with code {process.returncode}: {process.stderr.read()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"nothing listens on port {port} after {timeout:.0f} s")


class Client(threading.Thread):
    """Sends requests until ``stop_at`` (or the shared budget is spent), recording every outcome."""

    def __init__(self, port: int, bodies: list[str], index: int, outcomes: list, budget: list, stop_at: float,
                 timeout: float) -> None:
        super().__init__(daemon=True)
        self.port, self.bodies, self.index, self.outcomes = port, bodies, index, outcomes
        self.budget, self.stop_at, self.timeout = budget, stop_at, timeout
        self.connection: http.client.HTTPConnection | None = None

    def run(self) -> None:
        n = self.index
        while time.monotonic() < self.stop_at:
            with LOCK:
                if self.budget[0] <= 0:
                    return
                self.budget[0] -= 1
            outcome, wait = self.one(self.bodies[n % len(self.bodies)])
            self.outcomes.append(outcome)
            if outcome[0] == "closed":  # the server is gone (after SIGTERM): this client is done
                return
            n += 1
            if wait:
                time.sleep(min(wait, max(0.0, self.stop_at - time.monotonic())))

    def one(self, body: str) -> tuple[tuple, float]:
        started = time.monotonic()
        fresh = self.connection is None
        try:
            if self.connection is None:
                self.connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            self.connection.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
            response = self.connection.getresponse()
            data = response.read()
            seconds = time.monotonic() - started
            if response.getheader("Connection", "").lower() == "close":
                self.drop()
            try:
                parsed = json.loads(data)
            except ValueError:
                return ("cut", response.status, seconds), 0.0  # a body that is not whole JSON: half-written
            if response.status == 200 and parsed.get("choices"):
                return ("answered", 200, seconds), 0.0
            retry = response.getheader("Retry-After")
            if response.status == 503 and retry and retry.isdigit() and parsed.get("error"):
                return ("refused", 503, seconds), float(retry)
            return ("other", response.status, seconds), 1.0
        except TimeoutError:
            self.drop()
            return ("hung", None, time.monotonic() - started), 0.0
        except ConnectionRefusedError:
            self.drop()
            return ("closed", None, time.monotonic() - started), 0.0
        except (OSError, http.client.HTTPException) as exc:
            self.drop()
            how = f"{type(exc).__name__} on a {'new' if fresh else 'kept-alive'} connection"
            return ("dropped", how, time.monotonic() - started), 0.0

    def drop(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


LOCK = threading.Lock()


def load(port: int, bodies: list[str], clients: int, seconds: float, budget: int, timeout: float, pid: int,
         on_midway=None) -> tuple[list, float]:
    """``clients`` clients for ``seconds`` (or ``budget`` requests): their outcomes and the peak RSS (sampled every
    0.5 s). ``on_midway``: called once after half the time, while the clients are busy (the SIGTERM)."""
    outcomes: list = []
    stop_at = time.monotonic() + seconds
    shared = [budget]
    threads = [Client(port, bodies, i, outcomes, shared, stop_at, timeout) for i in range(clients)]
    for thread in threads:
        thread.start()
    peak, midway = 0.0, time.monotonic() + seconds / 2
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_mb(pid))
        if on_midway is not None and time.monotonic() >= midway:
            on_midway()
            on_midway = None
        time.sleep(0.5)
    return outcomes, peak


def summary(outcomes: list) -> str:
    kinds = ("answered", "refused", "other", "dropped", "cut", "hung", "closed")
    counts = {k: sum(o[0] == k for o in outcomes) for k in kinds}
    answered = sorted(o[2] for o in outcomes if o[0] == "answered")
    dropped = Counter(o[1] for o in outcomes if o[0] == "dropped")
    p50 = statistics.median(answered) if answered else float("nan")
    p95 = answered[min(len(answered) - 1, int(0.95 * len(answered)))] if answered else float("nan")
    return (f"{len(outcomes)} requests: {counts['answered']} answered, {counts['refused']} refused (503 + Retry-After), "
            f"{counts['other']} another status, {counts['dropped']} dropped, {counts['cut']} cut short, "
            f"{counts['hung']} hung, {counts['closed']} refused a connection after the stop; answer latency p50 "
            f"{p50:.2f} s, p95 {p95:.2f} s" + (f" (dropped: {dict(dropped)})" if dropped else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of load (default 180)")
    parser.add_argument("--stop-duration", type=float, default=20.0,
                        help="seconds of the second load, SIGTERM halfway through (default 20)")
    parser.add_argument("--max-requests", type=int, default=20000, help="at most this many requests in all")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--queue", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=600.0, help="a request unanswered this long is a hang")
    parser.add_argument("--fake-latency", type=float, default=None,
                        help="the front before the fake server with this latency, instead of the model")
    args = parser.parse_args()

    bodies = judge_requests()
    port = free_port()
    upstream = None
    if args.fake_latency is None:
        what = "the embedded model (`vista serve`)"
        server = subprocess.Popen([sys.executable, "-m", "vista_dspy.cli", "serve", "--port", str(port), "--slots",
                                   str(args.slots), "--queue", str(args.queue)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_listening(port, server, 900)
    else:
        what = f"the front before the fake server ({args.fake_latency:.2f} s a request, {args.slots} slots)"
        upstream = subprocess.Popen([sys.executable, "-m", "vista_dspy.lm.fake.server", "--latency",
                                     str(args.fake_latency), "--slots", str(args.slots)],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        upstream_url = upstream.stdout.readline().strip().removesuffix("/v1")
        server = subprocess.Popen([sys.executable, "-m", "vista_dspy.lm.front", "--upstream", upstream_url, "--port",
                                   str(port), "--slots", str(args.slots), "--queue", str(args.queue)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_listening(port, server, 60)
    try:
        before = rss_mb(server.pid)
        print(f"{what} on 127.0.0.1:{port}: {args.slots} slots, {args.queue} queued; {args.clients} clients; "
              f"{len(bodies)} judge requests in rotation; RSS {before:.0f} MB", flush=True)
        outcomes, peak = load(port, bodies, args.clients, args.duration, args.max_requests, args.timeout, server.pid)
        time.sleep(2)
        after = rss_mb(server.pid)
        print(f"\nload, {args.duration:.0f} s: {summary(outcomes)}; {sum(o[0] == 'answered' for o in outcomes) / args.duration:.2f} "
              f"answers/s", flush=True)
        print(f"memory (RSS of the server and its children): {before:.0f} MB before, {peak:.0f} MB at the peak, "
              f"{after:.0f} MB after", flush=True)

        signalled: list[float] = []

        def sigterm() -> None:
            signalled.append(time.monotonic())
            server.send_signal(signal.SIGTERM)

        stop_outcomes, _ = load(port, bodies, args.clients, args.stop_duration,
                                max(0, args.max_requests - len(outcomes)), args.timeout, server.pid,
                                on_midway=sigterm)
        code = server.wait(timeout=args.timeout)
        exited = time.monotonic() - signalled[0]
        print(f"\nSIGTERM under load, after {args.stop_duration / 2:.0f} s of a second load: {summary(stop_outcomes)}; "
              f"the server exited with code {code} {exited:.1f} s after the signal", flush=True)
        bad = sum(o[0] in ("dropped", "cut", "hung", "other") for o in outcomes + stop_outcomes)
        print(f"\nrequests neither answered nor refused with a status and a retry hint: {bad}")
    finally:
        for process in (server, upstream):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())

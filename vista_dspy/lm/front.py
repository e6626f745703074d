"""The embedded server's front door (``vista serve``): an OpenAI-compatible server's requests pass through a bounded
queue before its parallel slots. When the queue is full a request is refused at once -- HTTP 503 with a
``Retry-After`` (seconds, from the recent answer times) and an OpenAI-style error body -- so that many clients
(a CI farm, a trainer's reward workers) get an answer or a clear refusal, never a hang, and the server's memory stays
bounded whatever the load. On SIGTERM or SIGINT it stops taking connections, refuses what is still queued, lets the
requests in the slots finish (up to ``grace`` seconds) and returns: nothing is half-written.

Only generation requests are queued (``QUEUED_PATHS``); the rest (health, model list, properties, slot save and
restore) pass straight through.

    python -m vista_dspy.lm.front --upstream http://127.0.0.1:8080 --port 8765 [--slots 4] [--queue 32]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import signal
from collections.abc import Callable
from dataclasses import dataclass, field

QUEUED_PATHS = frozenset({"/v1/chat/completions", "/chat/completions", "/v1/completions", "/completions",
                          "/completion"})
DEFAULT_QUEUE = 32  # requests waiting for a slot: 8 per slot of the default 4
MAX_BODY = 8 * 1024 * 1024  # a request larger than this is refused (413): a prompt of a full context is ~100 KB
GRACE = 120.0  # seconds the requests in the slots get to finish on SIGTERM (a long answer of the 1.5B takes ~30 s)
# Headers that describe one hop's connection, not the message (RFC 9110 7.6.1), and those aiohttp sets itself.
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
                  "host", "content-length"})


@dataclass
class Front:
    """Admission control before ``upstream`` (a base URL, ``http://127.0.0.1:PORT``): ``slots`` requests forwarded at
    once, ``queue`` more waiting in arrival order, the rest refused; ``stats`` counts what happened."""

    upstream: str
    slots: int = 4
    queue: int = DEFAULT_QUEUE
    grace: float = GRACE
    max_body: int = MAX_BODY
    stats: dict[str, int] = field(default_factory=lambda: {"answered": 0, "refused_full": 0, "refused_stopping": 0,
                                                           "upstream_failed": 0})

    def __post_init__(self) -> None:
        if self.slots < 1 or self.queue < 0:
            raise ValueError(f"slots must be at least 1 and queue at least 0, not {self.slots} and {self.queue}")
        self.upstream = self.upstream.rstrip("/")
        self.busy = 0  # requests in the slots
        self.waiting = 0
        self.stopping = False
        self.answer_seconds = 1.0  # a running mean of answer times, for Retry-After
        self._turn: asyncio.Condition | None = None
        self._session = None

    # ---- serving --------------------------------------------------------------------------------------------
    async def serve(self, host: str, port: int, on_ready: Callable[[], None] | None = None,
                    stop: asyncio.Event | None = None) -> None:
        """Serve on ``host:port`` until ``stop`` is set (default: SIGTERM or SIGINT), then stop cleanly."""
        from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

        self._turn = asyncio.Condition()
        app = web.Application(client_max_size=self.max_body)
        app.router.add_route("*", "/{path:.*}", self.handle)
        runner = web.AppRunner(app, shutdown_timeout=self.grace, access_log=None)
        await runner.setup()
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread
                loop.add_signal_handler(signum, stop.set)
        # One connection per slot and a few for the unqueued paths; no time limit (a long answer is no failure).
        async with ClientSession(connector=TCPConnector(limit=self.slots + 8),
                                 timeout=ClientTimeout(total=None)) as self._session:
            await web.TCPSite(runner, host, port, backlog=1024).start()
            if on_ready is not None:
                on_ready()
            await stop.wait()
            await self._stop()
            await runner.cleanup()  # stops listening; waits (up to grace) for the requests in the slots

    async def _stop(self) -> None:
        """Refuse what is queued and what comes on open connections; what is in the slots goes on."""
        self.stopping = True
        async with self._turn:
            self._turn.notify_all()

    async def handle(self, request):
        if request.path not in QUEUED_PATHS:
            return await self._forward(request, await request.read())
        if self.stopping:
            return self._refusal("the server is stopping", "refused_stopping")
        if self.waiting >= self.queue and self.busy >= self.slots:
            return self._refusal(f"the server is busy: {self.busy} requests in its {self.slots} slots and "
                                 f"{self.waiting} waiting, the most it queues", "refused_full")
        self.waiting += 1  # counted before its body is read: requests arriving together cannot overfill the queue
        try:
            body = await request.read()  # (one over max_body: 413)
            async with self._turn:
                await self._turn.wait_for(lambda: self.busy < self.slots or self.stopping)
                if self.stopping:
                    return self._refusal("the server is stopping", "refused_stopping")
                self.busy += 1
        finally:
            self.waiting -= 1
        started = asyncio.get_running_loop().time()
        try:
            response = await self._forward(request, body)
            self.stats["answered"] += 1
            if self.stopping:  # answered while draining: the client asks nothing more on this connection
                response.force_close()
            return response
        finally:
            self.answer_seconds += 0.2 * (asyncio.get_running_loop().time() - started - self.answer_seconds)
            async with self._turn:
                self.busy -= 1
                self._turn.notify()

    async def _forward(self, request, body: bytes):
        """The upstream's answer, whole (a streamed answer is passed on as it comes)."""
        from aiohttp import ClientError, web

        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        try:
            async with self._session.request(request.method, self.upstream + request.path_qs, data=body,
                                             headers=headers) as upstream:
                # (The client library undid any compression of the body: its encoding header goes too.)
                out_headers = {k: v for k, v in upstream.headers.items()
                               if k.lower() not in _HOP and k.lower() != "content-encoding"}
                if upstream.content_type != "text/event-stream":
                    return web.Response(status=upstream.status, body=await upstream.read(), headers=out_headers)
                streamed = web.StreamResponse(status=upstream.status, headers=out_headers)
                await streamed.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await streamed.write(chunk)
                await streamed.write_eof()
                return streamed
        except (ClientError, asyncio.TimeoutError, OSError) as exc:
            self.stats["upstream_failed"] += 1
            return _error(502, f"the model server did not answer: {type(exc).__name__}: {exc}", "upstream_error")

    def _refusal(self, message: str, counter: str):
        self.stats[counter] += 1
        wait = self.retry_after()
        response = _error(503, f"{message}; retry after {wait} s", "server_busy")
        response.headers["Retry-After"] = str(wait)
        # A refused client waits before it asks again: its connection is not kept open meanwhile (a server that
        # stops closes idle connections, and a request sent on one as it closes would be lost).
        response.force_close()
        return response

    def retry_after(self) -> int:
        """Seconds until a slot is likely free for one more request: the queue ahead of it, at the recent answer
        time, shared by the slots (at least 1)."""
        return max(1, math.ceil(self.answer_seconds * (self.waiting + 1) / self.slots))


def _error(status: int, message: str, kind: str):
    from aiohttp import web

    return web.Response(status=status, content_type="application/json",
                        text=json.dumps({"error": {"message": message, "type": kind, "code": status}}))


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream", required=True, help="the OpenAI-compatible server's base URL")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--queue", type=int, default=DEFAULT_QUEUE)
    parser.add_argument("--grace", type=float, default=GRACE)
    args = parser.parse_args(argv)
    front = Front(args.upstream, slots=args.slots, queue=args.queue, grace=args.grace)
    asyncio.run(front.serve(args.host, args.port, on_ready=lambda: print(
        f"http://{args.host}:{args.port}/v1", flush=True)))
    print(json.dumps(front.stats), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

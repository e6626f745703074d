"""Request slots: a bound on LM requests in flight for one asyncio run, handed out by priority.

The runner sets ``IN_FLIGHT`` (``--concurrency``) and each dialogue's ``PRIORITY``; ``request_slot`` is held around
an LM call by whoever makes it: the judge's async driver (given it by the runner) or an endpoint engine that takes
a slot around each HTTP request itself (``clients.engines``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import itertools
from typing import Any


class RequestSlots:
    """At most ``limit`` LM requests in flight (an asyncio semaphore), handed out by priority: a waiting request
    with a lower ``PRIORITY`` goes first, ties in arrival order. The runner gives the calls of longer dialogues
    priority, since their chains of dependent calls set the wall time of a run."""

    def __init__(self, limit: int) -> None:
        self._free = max(1, limit)
        self._waiting: list[tuple[float, int, asyncio.Future]] = []
        self._arrivals = itertools.count()
        self.most_in_flight = 0  # for tests and benchmarks
        self._limit = self._free

    async def __aenter__(self) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
        else:
            slot = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (PRIORITY.get(), next(self._arrivals), slot))
            try:
                await slot
            except asyncio.CancelledError:
                if slot.done() and not slot.cancelled():
                    self._release()  # granted just as it was cancelled: pass the slot on
                raise
        self.most_in_flight = max(self.most_in_flight, self._limit - self._free)

    async def __aexit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        while self._waiting:
            _, _, slot = heapq.heappop(self._waiting)
            if not slot.done():  # skip waiters cancelled while queued
                slot.set_result(None)  # the slot passes straight to the next waiter
                return
        self._free += 1


# A bound on LM requests in flight for the async driver (set by the runner's --concurrency); None = unbounded.
IN_FLIGHT: contextvars.ContextVar[RequestSlots | None] = contextvars.ContextVar("vista_in_flight", default=None)
# The priority of the current dialogue's requests for a slot (lower first).
PRIORITY: contextvars.ContextVar[float] = contextvars.ContextVar("vista_priority", default=0.0)


# Set while this task holds a slot, so that a nested request_slot (engine inside predictor) does not take a second.
_HOLDS_SLOT: contextvars.ContextVar[bool] = contextvars.ContextVar("vista_holds_slot", default=False)


@contextlib.asynccontextmanager
async def request_slot(lm: Any = None):
    """Holds one of the run's request slots (``IN_FLIGHT``) around an LM call, if the run bounds them.

    Given the LM a predictor is about to call: nothing is held here when that LM's own engine takes a slot around
    each HTTP request (``engines.endpoint_engines``), so that prompt formatting, parsing and DSPy's bookkeeping
    run outside the slots and a retry's backoff does not hold one. A task never holds two slots.
    """
    slots = IN_FLIGHT.get()
    if slots is None or _HOLDS_SLOT.get() or getattr(async_engine_of(lm), "takes_request_slots", False):
        yield
        return
    token = _HOLDS_SLOT.set(True)
    try:
        async with slots:
            yield
    finally:
        _HOLDS_SLOT.reset(token)


def async_engine_of(lm: Any) -> Any:
    return getattr(lm, "_async_engine_spec", None)  # dspy.LM's async engine object, if one was given
